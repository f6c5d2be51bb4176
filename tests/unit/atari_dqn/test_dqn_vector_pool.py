"""ale-py's vector env behind the collector's pool interface: the same records as EnvPool."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ale_py.vector_env", reason="needs ale-py >= 0.11 (AtariVectorEnv)")

import gymnasium as gym  # noqa: E402

from examples.atari_dqn.config import config_for_env  # noqa: E402
from examples.atari_dqn.envs import AleVectorPool, ale_game, make_env  # noqa: E402


def test_rom_names_come_from_env_ids():
    assert ale_game("ALE/Pong-v5") == "pong"
    assert ale_game("ALE/MsPacman-v5") == "ms_pacman"
    assert ale_game("ALE/SpaceInvaders-v5") == "space_invaders"


def test_steps_shift_one_frame_in_and_episode_ends_give_two_records():
    cfg = config_for_env("ALE/SpaceInvaders-v5")
    pool = AleVectorPool(cfg, 2, base_seed=0, max_episode_steps=100)
    rng = np.random.default_rng(0)
    try:
        assert pool.obs.shape == (2, 4, 84, 84) and pool.obs.dtype == np.uint8
        assert all(
            np.array_equal(pool.obs[j, 0], pool.obs[j, k]) for j in (0, 1) for k in (1, 2, 3)
        )
        assert pool.n_actions == 6
        ends, clipped, returns = 0, np.zeros(2), []
        for _ in range(210):
            before = pool.obs.copy()
            next_obs, rewards, term, trunc, reset_obs, infos = pool.step(rng.integers(0, 6, 2))
            # One new frame per step, behind the three previous ones.
            np.testing.assert_array_equal(next_obs[:, :3], before[:, 1:])
            assert set(np.unique(rewards)) <= {-1.0, 0.0, 1.0}
            clipped += rewards
            for j in range(2):
                if term[j] or trunc[j]:
                    ends += 1
                    assert trunc[j] and infos[j]["episode"]["l"] == 100
                    # The new episode's stack is its first frame four times, and it is
                    # not the last frame of the episode that ended.
                    assert all(np.array_equal(reset_obs[j, 0], reset_obs[j, k]) for k in (1, 2, 3))
                    assert not np.array_equal(reset_obs[j, 3], next_obs[j, 3])
                    returns.append((infos[j]["episode"]["r"], clipped[j]))
                    clipped[j] = 0.0
                else:
                    np.testing.assert_array_equal(reset_obs[j], next_obs[j])
                    assert infos[j] == {}
            np.testing.assert_array_equal(pool.obs, reset_obs)
        assert ends == 4  # 100-step episodes, 210 steps, 2 envs
        # SpaceInvaders pays 5-30 points an alien: an episode's return is the raw score,
        # above the sum of the clipped rewards the learner gets.
        assert all(raw >= sum_clipped >= 0 for raw, sum_clipped in returns)
        assert any(raw > sum_clipped > 0 for raw, sum_clipped in returns)
    finally:
        pool.close()


def test_frames_are_gymnasiums_atari_preprocessing_pixel_for_pixel():
    # Without sticky actions and no-op resets both games are the same: the C++ frame skip,
    # max-pool, grayscale and resize must give exactly make_env's frames.
    cfg = config_for_env("ALE/Pong-v5")
    pool = AleVectorPool(cfg, 1, base_seed=3, sticky_actions=0.0, noop_max=0)
    make_env("ALE/Pong-v5")  # registers the ALE namespace
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=0, scale_obs=False)
    env = gym.wrappers.FrameStackObservation(env, 4, padding_type="reset")
    rng = np.random.default_rng(0)
    try:
        obs, _ = env.reset(seed=3)
        np.testing.assert_array_equal(pool.obs[0], obs)
        for _ in range(60):
            action = int(rng.integers(0, 6))
            obs, *_ = env.step(action)
            next_obs, *_ = pool.step(np.array([action]))
            np.testing.assert_array_equal(next_obs[0], obs)
        assert obs.max() > obs.min()
    finally:
        env.close()
        pool.close()


_TWO_THREADS = """
import importlib.abc, sys, threading, time
from examples.atari_dqn import envs
from examples.atari_dqn.config import config_for_env

class SlowRegistration(importlib.abc.MetaPathFinder):
    # Holds ale_py's package import between its `vector_env` import and the
    # `ALEVectorInterface` it sets later: the window a second thread could meet.
    def find_spec(self, name, path=None, target=None):
        if name == "ale_py.registration":
            time.sleep(1.0)
        return None

sys.meta_path.insert(0, SlowRegistration())
cfg = config_for_env("ALE/Pong-v5")
errors = []

def make():
    try:
        envs.ale_vector_env(cfg, 1).close()
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")

first = threading.Thread(target=make)
first.start()
time.sleep(0.5)  # the first is in the window now
make()
first.join(60)
print("ERRORS", errors)
"""


def test_two_actors_making_ale_envs_at_once_in_a_fresh_process_both_get_one():
    """Actors in one process are constructed on threads of their own. Was: the second
    collector to import ale-py got its half-made package and failed in ``__init__``
    ("partially initialized module 'ale_py' has no attribute 'ALEVectorInterface'"),
    seen in a full test run. A fresh interpreter: this one has ale-py imported already."""
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        [sys.executable, "-c", _TWO_THREADS],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert "ERRORS []" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]


def test_n_step_samples_of_real_pong_frames_match_their_one_step_walk():
    """3-step samples of a collector's real pushes (episodes cut every 100 steps): each
    stack overlaps the next by the steps taken, its reward is the discounted sum along
    the forward links, and it stops short only where the stream has no next frame yet
    or at an episode's end."""
    import torch

    from examples.atari_dqn.collector import CollectorCore
    from examples.atari_dqn.replay import FrameReplay

    cfg = config_for_env("ALE/Pong-v5", eps_start=1.0, eps_end=1.0)
    pool = AleVectorPool(cfg, 4, base_seed=7, max_episode_steps=100)
    core = CollectorCore(cfg, collector_id=0, num_collectors=1, pool=pool)
    replay = FrameReplay(3_000, (84, 84), torch.uint8, stack=4)
    try:
        for _ in range(60):  # 3,840 steps: the ring wraps, episodes straddle pushes
            replay.add(core.collect(16))
    finally:
        core.close()
    assert core.episodes >= 30
    gamma, n = 0.99, 3
    s = replay.sample(2_048, check=False, n_step=n, gamma=gamma)
    m = torch.round(torch.log(s["discount"].double()) / np.log(gamma)).long()
    assert int(m.min()) >= 1 and int(m.max()) == n and int((m < n).sum()) > 0
    for i in range(len(m)):
        k = int(m[i])
        assert torch.equal(s["next_obs"][i, : 4 - k], s["obs"][i, k:]), i
    cur = s["index"].clone()
    want = torch.zeros(len(m), dtype=torch.float64)
    for step in range(n):
        live = step < m
        want += torch.where(live, gamma**step * replay.rewards[cur % replay.capacity], 0.0)
        if step + 1 < n:
            cur = torch.where(live & (step + 1 < m), replay.next[cur % replay.capacity], cur)
    assert torch.equal(cur, s["last"])
    assert torch.allclose(want, s["reward"].double(), atol=1e-6)
    assert int((s["reward"] != 0).sum()) > 0, "no sample holds a point"
    short = m < n
    at_end = (replay.next[s["last"] % replay.capacity] == -1) | (s["terminated"] == 1)
    assert bool(at_end[short].all())


def _pong_frames(sticky: float, seed: int) -> np.ndarray:
    """Pong's frames under one fixed action sequence, without no-op resets."""
    pool = AleVectorPool(config_for_env("ALE/Pong-v5", sticky_actions=sticky), 1, seed, noop_max=0)
    try:
        frames = [pool.step(np.array([2 + (t // 8) % 2]))[0][0, -1] for t in range(160)]
        return np.stack(frames)
    finally:
        pool.close()


def test_the_configs_sticky_actions_reach_the_vector_env():
    # Pong is deterministic: without sticky actions the seed changes nothing, with them
    # (drawn from the seed) the paddle moves otherwise. So the config's value is used.
    assert np.array_equal(_pong_frames(0.0, seed=1), _pong_frames(0.0, seed=2))
    assert not np.array_equal(_pong_frames(0.5, seed=1), _pong_frames(0.5, seed=2))
