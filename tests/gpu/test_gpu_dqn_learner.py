"""The DQN learner's GPU paths, in-process: what the 2-core VM cannot run.

The replay's pinned host-to-device copies, its sampling without a device sync, the
training thread on the GPU (its own current device), fused Adam, weights copied under
the parameter lock and moved to the host outside it. One process, no cluster; every wait
on the training thread is bounded.
"""

from __future__ import annotations

import math
import sys

import pytest
import torch
from gpu_testlib import ROOT, requires_cuda

pytestmark = [requires_cuda, pytest.mark.timeout(240)]

if str(ROOT) not in sys.path:  # `examples` is a repository folder, not a package
    sys.path.insert(0, str(ROOT))
# The DQN unit tests' helpers (the eager update a graphed step must equal).
sys.path.insert(0, str(ROOT / "tests" / "unit" / "atari_dqn"))

_BOUND_S = 60.0


def _counting_push(streams: int, steps: int, start: int, device: str) -> dict:
    """Frames that count: stream s's k-th frame holds ``start + k`` (shape (1,))."""
    from examples.atari_dqn.replay import PREV_EARLIER_PUSH, PREV_NONE

    n = streams * steps
    first = PREV_NONE if start == 0 else PREV_EARLIER_PUSH
    values = [float(start + i // streams) for i in range(n)]
    batch = {
        "frame": torch.tensor(values).reshape(n, 1),
        "stream": torch.arange(n) % streams,
        "prev": torch.tensor([first if i < streams else i - streams for i in range(n)]),
        "action": torch.arange(n) % 3,
        "reward": torch.ones(n),
        "terminated": torch.zeros(n, dtype=torch.bool),
    }
    if device != "cpu":  # as a --transport cuda collector sends them
        for k in ("frame", "action", "reward", "terminated"):
            batch[k] = batch[k].to(device)
    return batch


@pytest.mark.parametrize("pushed_from", ["cpu", "cuda"])
def test_the_ring_on_the_gpu_samples_true_transitions_without_a_sync(pushed_from):
    from examples.atari_dqn.replay import FrameReplay

    replay = FrameReplay(1_000, (1,), torch.float32, stack=1, device="cuda")
    for k in range(10):
        replay.add(_counting_push(4, 8, 8 * k, pushed_from))
    for check in (True, False):
        s = replay.sample(512, check=check)
        assert s["obs"].is_cuda and s["next_obs"].is_cuda
        # every sample is one step of one stream: the next frame counts one more
        assert torch.equal(s["next_obs"] - s["obs"], torch.ones_like(s["obs"]))


@pytest.mark.parametrize("pushed_from", ["cpu", "cuda"])
def test_n_step_samples_on_the_gpu_sum_their_rewards_without_a_sync(pushed_from):
    from examples.atari_dqn.replay import FrameReplay

    replay = FrameReplay(1_000, (1,), torch.float32, stack=1, device="cuda")
    for k in range(10):
        replay.add(_counting_push(4, 8, 8 * k, pushed_from))
    gamma, n = 0.5, 3
    for check in (True, False):
        s = replay.sample(512, check=check, n_step=n, gamma=gamma)
        assert s["discount"].is_cuda and s["reward"].is_cuda
        # frames count one per step, so next_obs - obs is the steps each sample took
        steps = (s["next_obs"] - s["obs"]).flatten().cpu()
        assert steps.min() >= 1 and steps.max() <= n
        assert (steps == n).any(), "no sample spans the full n steps"
        m = steps.to(torch.float64)
        reward = (1 - gamma**m) / (1 - gamma)  # every reward is 1
        assert torch.allclose(s["reward"].cpu().double(), reward, atol=1e-6)
        assert torch.allclose(s["discount"].cpu().double(), gamma**m, atol=1e-6)
        # a sample is cut short only at its stream's newest frame (no terminals here)
        newest = float(8 * 10 - 1)
        cut = steps < n
        assert torch.all(s["next_obs"].flatten().cpu()[cut] == newest)


def _cartpole_cfg(**overrides):
    """CartPole small enough to train in seconds; pushes of 4 envs x 8 steps."""
    from examples.atari_dqn.config import config_for_env

    base = dict(
        learning_starts=200,
        batch_size=128,
        train_every=2,
        replay_capacity=5_000,
        num_envs_per_collector=4,
        steps_per_push=8,
        max_train_lag=64,
    )
    return config_for_env("CartPole-v1", **{**base, **overrides})


# A captured step keeps the learning rate it was captured with: CartPole's preset anneals.
_GRAPHED = {"cuda_graph": True, "lr_final_fraction": 1.0}


def test_the_learner_trains_in_its_thread_on_the_gpu():
    from examples.atari_dqn.collector import CollectorCore
    from examples.atari_dqn.learner import Learner

    cfg = _cartpole_cfg()
    learner = Learner(cfg, transport="cuda", background=True)
    assert learner.device.type == "cuda" and learner.replay.frames.is_cuda
    core = CollectorCore(cfg, device="cuda")  # pushes carry CUDA tensors, as with cuda
    try:
        while learner.transitions < 2_000:
            learner.push(core.collect(cfg.steps_per_push))
        updates = learner.drain(_BOUND_S)
        assert updates == (learner.transitions - 192) // cfg.train_every > 0
        stats = learner.stats()
        assert math.isfinite(stats["loss_mean"]) and math.isfinite(stats["last_loss"])
        assert stats["device"].startswith("cuda") and stats["train_lag"] < cfg.train_every
        version, on_gpu = learner.get_weights()
        assert version == updates and all(t.is_cuda for t in on_gpu.values())
        _, on_host = learner.get_weights(cpu=True)
        assert all(t.device.type == "cpu" for t in on_host.values())
        assert all(torch.equal(on_gpu[k].cpu(), on_host[k]) for k in on_gpu)
    finally:
        learner.close()
        core.close()


# gpu_check.sh's graph gate reads the ids: a failed "prioritized" case alone keeps the
# graph for runs that sample uniformly
@pytest.mark.parametrize(
    ("n_step", "priority_exponent"),
    [
        pytest.param(1, 0.0, id="one-step"),
        pytest.param(3, 0.0, id="three-step"),
        pytest.param(1, 0.6, id="prioritized"),
    ],
)
def test_a_graphed_step_updates_the_weights_as_an_eager_step_on_its_batch(
    n_step, priority_exponent
):
    from dqn_reference import eager_update, priorities_after, snapshot

    from examples.atari_dqn.collector import CollectorCore
    from examples.atari_dqn.learner import Learner

    cfg = _cartpole_cfg(
        n_step=n_step,
        priority_exponent=priority_exponent,
        target_update_every=10_000,
        **_GRAPHED,
    )
    learner = Learner(cfg, transport="cuda")  # inline: each push trains what it paid for
    core = CollectorCore(cfg, device="cuda")
    try:
        while learner.updates < 8:  # 3 eager warm-up steps, then the capture and replays
            learner.push(core.collect(cfg.steps_per_push))
        assert learner._graphed is not None and learner._graphed.captured
        torch.cuda.synchronize()
        before = snapshot(learner)
        index_before = learner.graph_batch["index"].clone()
        loss = learner.train_step()  # one replay
        torch.cuda.synchronize()
        batch = {k: v.clone() for k, v in learner.graph_batch.items()}
        assert not torch.equal(batch["index"], index_before), "the replay drew the same batch"
        assert int(batch["index"].min()) >= learner.replay.oldest
        assert ("weight" in batch) == (priority_exponent > 0)
        want_loss, want, td_error = eager_update(learner, before, batch, capturable=True)
        assert torch.allclose(loss, want_loss, rtol=1e-5, atol=1e-6)
        got = learner.q_net.state_dict()
        for k, v in want.items():
            assert not torch.equal(got[k], before["q_net"][k]), f"{k} did not change"
            assert torch.allclose(got[k], v, rtol=1e-4, atol=1e-6), k
        if priority_exponent > 0:  # the replay set the batch's priorities on the GPU
            slots = batch["index"] % learner.replay.capacity
            got_priority = learner.replay.priority[slots]
            want_priority = priorities_after(learner, td_error)
            assert torch.allclose(got_priority, want_priority, rtol=1e-3, atol=1e-3)
    finally:
        learner.close()
        core.close()


def test_the_graphed_learner_trains_in_its_thread_while_cuda_pushes_arrive():
    from examples.atari_dqn.collector import CollectorCore
    from examples.atari_dqn.learner import Learner

    cfg = _cartpole_cfg(**_GRAPHED)
    learner = Learner(cfg, transport="cuda", background=True)
    core = CollectorCore(cfg, device="cuda")
    try:
        while learner.transitions < 3_000:
            learner.push(core.collect(cfg.steps_per_push))
        updates = learner.drain(_BOUND_S)
        assert learner._graphed is not None and learner._graphed.captured
        assert updates == (learner.transitions - 192) // cfg.train_every > 0
        stats = learner.stats()
        assert math.isfinite(stats["loss_mean"]) and math.isfinite(stats["q_mean"])
        version, weights = learner.get_weights()
        assert version == updates and all(torch.isfinite(t).all() for t in weights.values())
    finally:
        learner.close()
        core.close()
