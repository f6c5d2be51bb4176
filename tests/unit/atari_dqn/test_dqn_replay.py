"""FrameReplay: stacks rebuilt from single frames must equal what the policy saw."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from dqn_fakes import counter_stack, make_counter_envs

from examples.atari_dqn.collector import CollectorCore
from examples.atari_dqn.config import config_for_env
from examples.atari_dqn.envs import EnvPool
from examples.atari_dqn.replay import PREV_EARLIER_PUSH, PREV_NONE, FrameReplay


def _core(num_envs: int, seed: int = 0, max_len: int = 9) -> CollectorCore:
    # epsilon 1: random actions, so the Q-network is never run on the fake frames.
    cfg = config_for_env("ALE/Pong-v5", eps_start=1.0, eps_end=1.0, seed=seed)
    pool = EnvPool(cfg, num_envs, seed, envs=make_counter_envs(num_envs, seed, max_len))
    return CollectorCore(cfg, collector_id=0, num_collectors=1, pool=pool)


def _check_samples(sample: dict[str, torch.Tensor]) -> None:
    """Every sampled transition must match the counter env's ground truth exactly."""
    obs = sample["obs"].numpy()
    nxt = sample["next_obs"].numpy()
    assert obs.shape[1:] == (4, 84, 84) and nxt.shape == obs.shape
    for i in range(obs.shape[0]):
        env_id, episode, t, action, terminal = (int(x) for x in nxt[i, -1, 0, :5])
        assert t >= 1, "a transition never ends on an episode's first frame"
        np.testing.assert_array_equal(nxt[i, :, 0, :3], counter_stack(env_id, episode, t))
        np.testing.assert_array_equal(obs[i, :, 0, :3], counter_stack(env_id, episode, t - 1))
        assert int(sample["action"][i]) == action
        assert float(sample["terminated"][i]) == terminal
        assert float(sample["reward"][i]) == (episode + t) % 5 - 2


def test_stacks_match_frame_stack_wrapper_across_episodes_and_pushes():
    core = _core(num_envs=3)
    replay = FrameReplay(10_000, (84, 84), torch.uint8, stack=4)
    for _ in range(12):  # many pushes: episodes straddle push boundaries
        replay.add(core.collect(5))
    assert core.episodes > 10  # episode starts (reset padding) are well covered
    _check_samples(replay.sample(400))
    _check_samples(replay.sample(400, check=False))  # the learner's way: no device sync


def _wrapped_replay() -> FrameReplay:
    """A small ring that has wrapped over four times, episodes across pushes."""
    core = _core(num_envs=2, seed=3, max_len=20)
    replay = FrameReplay(37, (84, 84), torch.uint8, stack=4)
    for _ in range(30):
        replay.add(core.collect(3))
    assert replay.total > 4 * replay.capacity
    return replay


def test_ring_wraps_without_mixing_overwritten_frames():
    replay = _wrapped_replay()
    assert len(replay) == replay.capacity
    for check in (True, False):
        sample = replay.sample(300, check=check)
        assert int(sample["index"].min()) >= replay.oldest
        _check_samples(sample)


def test_one_uint8_frame_stored_per_env_step():
    core = _core(num_envs=2)
    replay = FrameReplay(1_000, (84, 84), torch.uint8, stack=4)
    pushes = [core.collect(4) for _ in range(10)]
    for p in pushes:
        replay.add(p)
    # Records = env steps + one reset frame per episode start: no stack is stored twice.
    assert replay.total == core.agent_steps + core.episodes + len(core.pool)
    assert replay.transitions_added == core.agent_steps
    assert replay.frames.dtype == torch.uint8
    assert replay.frames.shape == (1_000, 84, 84)
    assert replay.nbytes == 1_000 * 84 * 84
    # On the wire too: one 84x84 frame per record, never a (4, 84, 84) stack.
    assert all(p["frame"].shape[1:] == (84, 84) and p["frame"].dtype == torch.uint8 for p in pushes)


def _push(frames, streams, prevs, actions=None):
    n = len(frames)
    return {
        "frame": torch.tensor(frames, dtype=torch.float32).reshape(n, 1),
        "stream": torch.tensor(streams),
        "prev": torch.tensor(prevs),
        "action": torch.tensor(actions if actions is not None else [0] * n),
        "reward": torch.arange(n, dtype=torch.float32),
        "terminated": torch.zeros(n, dtype=torch.bool),
    }


def test_stack_one_and_links_across_pushes():
    replay = FrameReplay(16, (1,), torch.float32, stack=1)
    # Stream 7: frames 10 -> 11 (push 1) -> 12 (push 2). Stream 9: 20 -> 21 across pushes.
    assert replay.add(_push([10, 20, 11], [7, 9, 7], [PREV_NONE, PREV_NONE, 0])) == 1
    assert replay.add(_push([12, 21], [7, 9], [PREV_EARLIER_PUSH, PREV_EARLIER_PUSH])) == 2
    for check in (True, False):
        # Without the check, 400 candidates for 200 samples with 3 valid transitions in 5
        # records: the valid ones, reused in turn if too few were drawn; never another.
        s = replay.sample(200, check=check)
        obs, nxt = s["obs"][:, 0], s["next_obs"][:, 0]
        pairs = {(float(o), float(n)) for o, n in zip(obs, nxt, strict=True)}
        assert pairs == {(10.0, 11.0), (11.0, 12.0), (20.0, 21.0)}
        assert s["obs"].shape == (200, 1)


def test_unknown_stream_is_an_episode_start_not_a_transition():
    replay = FrameReplay(16, (1,), torch.float32, stack=1)
    assert replay.add(_push([5.0], [42], [PREV_EARLIER_PUSH])) == 0
    with pytest.raises(RuntimeError, match="too few valid transitions"):
        replay.sample(4)


def test_rejects_bad_pushes():
    replay = FrameReplay(4, (1,), torch.float32, stack=1)
    with pytest.raises(ValueError, match="does not fit"):
        replay.add(_push([1, 2, 3, 4, 5], [0] * 5, [PREV_NONE, 0, 1, 2, 3]))
    with pytest.raises(ValueError, match="frame shape"):
        replay.add({**_push([1], [0], [PREV_NONE]), "frame": torch.zeros(1, 2)})
    with pytest.raises(RuntimeError, match="empty"):
        replay.sample(1)


def _check_n_step(replay: FrameReplay, s: dict[str, torch.Tensor], n: int, gamma: float) -> int:
    """Every n-step sample against the counter env's ground truth; returns how many took
    fewer than ``n`` steps."""
    obs, nxt = s["obs"].numpy(), s["next_obs"].numpy()
    short = 0
    for i in range(obs.shape[0]):
        env_id, episode, t_end, _, terminal = (int(x) for x in nxt[i, -1, 0, :5])
        t0 = int(obs[i, -1, 0, 2])
        m = t_end - t0
        assert 1 <= m <= n, (t0, t_end)
        np.testing.assert_array_equal(obs[i, :, 0, :3], counter_stack(env_id, episode, t0))
        np.testing.assert_array_equal(nxt[i, :, 0, :3], counter_stack(env_id, episode, t_end))
        want = sum(gamma**k * ((episode + t0 + 1 + k) % 5 - 2) for k in range(m))
        assert float(s["reward"][i]) == pytest.approx(want, abs=1e-5)
        assert float(s["discount"][i]) == pytest.approx(gamma**m)
        assert float(s["terminated"][i]) == terminal
        # the action is the first step's: the one that led to the frame after obs
        first = replay.frames[int(s["index"][i]) % replay.capacity]
        assert int(s["action"][i]) == int(first[0, 3]) and int(first[0, 2]) == t0 + 1
        if m < n:  # cut short only at an episode's end or the stream's newest frame
            short += 1
            assert terminal or int(replay.next[int(s["last"][i]) % replay.capacity]) == -1
    return short


@pytest.mark.parametrize("check", [True, False])
def test_n_step_samples_sum_the_rewards_on_their_way_and_stop_at_episode_ends(check):
    core = _core(num_envs=3, seed=5, max_len=12)
    replay = FrameReplay(10_000, (84, 84), torch.uint8, stack=4)
    for _ in range(12):  # episodes straddle pushes, so the links cross them
        replay.add(core.collect(5))
    s = replay.sample(600, check=check, n_step=3, gamma=0.9)
    short = _check_n_step(replay, s, 3, 0.9)
    assert 0 < short < 600  # both kinds are covered: full windows and cut ones
    one = replay.sample(50, check=check)  # n_step 1: the one-step sample, as before
    assert "discount" not in one
    _check_samples(one)


def test_n_step_links_survive_the_ring_wrapping():
    replay = _wrapped_replay()
    for check in (True, False):
        s = replay.sample(300, check=check, n_step=4, gamma=0.5)
        assert int(s["index"].min()) >= replay.oldest
        _check_n_step(replay, s, 4, 0.5)


def test_n_step_must_be_at_least_one():
    replay = FrameReplay(16, (1,), torch.float32, stack=1)
    replay.add(_push([10, 11], [7, 7], [PREV_NONE, 0]))
    with pytest.raises(ValueError, match="n_step=0"):
        replay.sample(2, n_step=0)


def test_graph_safe_samples_read_the_rings_bounds_from_the_device():
    replay = _wrapped_replay()
    assert replay._span is None  # pushes to a ring never sampled so keep no device bounds
    for _ in range(3):
        s = replay.sample(300, graph_safe=True)
        _check_samples(s)
        assert int(s["index"].min()) >= replay.oldest
        _check_n_step(replay, replay.sample(300, graph_safe=True, n_step=4, gamma=0.5), 4, 0.5)
    # what a captured graph replays: the bounds move with each push, no Python number
    assert replay._span.tolist() == [replay.oldest, replay.total]
    core = _core(num_envs=2, seed=4, max_len=20)
    before = replay.total
    replay.add(core.collect(8))
    assert replay._span.tolist() == [replay.oldest, replay.total]
    s = replay.sample(300, graph_safe=True)
    assert int(s["index"].min()) >= replay.oldest and int(s["index"].max()) >= before
