"""The DQN learner's channels-last layout (``--channels-last``) on a GPU, in-process.

Apart from test_gpu_dqn_learner.py on purpose: gpu_check.sh's graph gate reads that
file's failures to decide whether the Pong run keeps its CUDA graph, and the Pong recipe
does not use this layout.
"""

from __future__ import annotations

import dataclasses
import math
import sys

import numpy as np
import pytest
import torch
from gpu_testlib import ROOT, requires_cuda

pytestmark = [requires_cuda, pytest.mark.timeout(240)]

if str(ROOT) not in sys.path:  # `examples` and `benchmarks` are repository folders
    sys.path.insert(0, str(ROOT))


def _pong_cfg(**overrides):
    from examples.atari_dqn.config import config_for_env

    base = {"replay_capacity": 4096, "learning_starts": 1 << 62, "batch_size": 64}
    return config_for_env("ALE/Pong-v5", **{**base, **overrides})


def _filled(learner) -> None:
    from benchmarks.dqn_learner import _push

    rng = np.random.default_rng(0)
    for j in range(8):  # 512 frames of 4 streams, the same for every learner
        learner.push(_push(rng, 4, 16, j == 0, (84, 84), learner.n_actions))


def test_a_channels_last_learner_on_the_gpu_steps_as_a_plain_one():
    from examples.atari_dqn.learner import Learner

    cfg = _pong_cfg()
    plain = Learner(cfg, device="cuda")
    nhwc = Learner(dataclasses.replace(cfg, channels_last=True), device="cuda")
    assert nhwc.q_net.features[0].weight.is_contiguous(memory_format=torch.channels_last)
    for learner in (plain, nhwc):
        _filled(learner)
    for _ in range(3):  # the same samples (one replay seed); cuDNN's kernels differ
        got, want = nhwc.train_step(), plain.train_step()
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-5)
    _, served = nhwc.get_weights(cpu=True)
    _, want_weights = plain.get_weights(cpu=True)
    assert all(t.is_contiguous() for t in served.values())  # NCHW for the collectors
    for k, v in want_weights.items():
        torch.testing.assert_close(served[k], v, rtol=1e-3, atol=1e-4)


def test_a_channels_last_learner_captures_and_replays_its_step():
    from examples.atari_dqn.learner import Learner

    cfg = _pong_cfg(channels_last=True, cuda_graph=True, lr_final_fraction=1.0)
    learner = Learner(cfg, device="cuda")
    _filled(learner)
    before = {k: v.clone() for k, v in learner.q_net.state_dict().items()}
    losses = [float(learner.train_step()) for _ in range(8)]  # 3 eager, then replays
    assert learner._graphed is not None and learner._graphed.captured
    assert all(math.isfinite(x) for x in losses)
    after = learner.q_net.state_dict()
    assert after["features.0.weight"].is_contiguous(memory_format=torch.channels_last)
    assert any(not torch.equal(after[k], before[k]) for k in before), "no step changed it"
