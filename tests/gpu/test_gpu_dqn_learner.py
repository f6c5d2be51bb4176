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


def test_the_learner_trains_in_its_thread_on_the_gpu():
    from examples.atari_dqn.collector import CollectorCore
    from examples.atari_dqn.config import config_for_env
    from examples.atari_dqn.learner import Learner

    cfg = config_for_env(
        "CartPole-v1",
        learning_starts=200,
        batch_size=128,
        train_every=2,
        replay_capacity=5_000,
        num_envs_per_collector=4,
        steps_per_push=8,
        max_train_lag=64,
    )
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
