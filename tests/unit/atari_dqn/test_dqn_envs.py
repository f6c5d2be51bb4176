"""The real ALE environments through gymnasium's Atari preprocessing."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ale_py", reason="needs the atari extra: pip install -e '.[atari]'")
pytest.importorskip("cv2", reason="AtariPreprocessing needs opencv-python-headless")

from examples.atari_dqn.config import config_for_env  # noqa: E402
from examples.atari_dqn.envs import make_env, make_env_for, newest_frame  # noqa: E402


def test_pong_observations_are_uint8_frame_stacks():
    env = make_env("ALE/Pong-v5", seed=0)
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        # Reset padding: the first stack is the reset frame four times.
        assert all(np.array_equal(obs[0], obs[k]) for k in range(4))
        assert env.action_space.n == 6
        prev = obs
        for _ in range(20):
            obs, reward, term, trunc, _ = env.step(env.action_space.sample())
            assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
            # One new frame per step: what the collector sends and the replay stores.
            np.testing.assert_array_equal(obs[:3], prev[1:])
            np.testing.assert_array_equal(newest_frame(obs, 4), obs[3])
            prev = obs
        assert obs.max() > obs.min()  # a real picture, not a blank frame
    finally:
        env.close()


def _rewards(clip: bool, steps: int = 600) -> tuple[list[float], list[float]]:
    # SpaceInvaders pays 5-30 points per alien, so clipping is visible quickly.
    env = make_env("ALE/SpaceInvaders-v5", seed=1, clip_rewards=clip, max_episode_steps=200)
    rng = np.random.default_rng(0)
    rewards, returns = [], []
    try:
        env.reset(seed=1)
        for _ in range(steps):
            _, r, term, trunc, info = env.step(int(rng.integers(env.action_space.n)))
            rewards.append(float(r))
            if term or trunc:
                returns.append(float(info["episode"]["r"]))
                env.reset()
    finally:
        env.close()
    return rewards, returns


def test_rewards_are_clipped_but_episode_returns_are_game_scores():
    raw, _ = _rewards(clip=False)
    clipped, returns = _rewards(clip=True)
    assert max(raw) > 1.0, "SpaceInvaders should have paid a reward above 1 by now"
    # Same seed, same actions: identical games, rewards differ only by the clipping.
    np.testing.assert_array_equal(np.array(clipped), np.sign(np.array(raw)))
    assert set(clipped) <= {-1.0, 0.0, 1.0}
    # Episodes are cut at 200 steps; the reported return is the raw score of the game.
    assert len(returns) >= 2
    assert returns[0] == pytest.approx(sum(raw[:200]))
    assert returns[0] > sum(clipped[:200])


def test_frame_skip_is_four_emulator_frames_per_step():
    env = make_env("ALE/Pong-v5", seed=0)
    try:
        env.reset(seed=0)
        ale = env.unwrapped.ale
        before = ale.getEpisodeFrameNumber()
        env.step(0)
        assert ale.getEpisodeFrameNumber() - before == 4
    finally:
        env.close()


def test_cartpole_has_no_atari_wrappers():
    env = make_env("CartPole-v1", seed=0)
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4,) and obs.dtype == np.float32
        assert newest_frame(obs, 1) is obs
    finally:
        env.close()


@pytest.mark.parametrize("sticky", [0.0, 0.25])
def test_the_configs_sticky_actions_reach_the_emulator(sticky):
    cfg = config_for_env("ALE/Pong-v5", sticky_actions=sticky)
    env = make_env_for(cfg, seed=0)
    try:
        assert env.unwrapped.ale.getFloat("repeat_action_probability") == sticky
    finally:
        env.close()
