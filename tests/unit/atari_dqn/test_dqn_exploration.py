"""Epsilon schedule and epsilon-greedy action selection."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from examples.atari_dqn.exploration import epsilon_greedy, linear_epsilon


@pytest.mark.parametrize(
    ("frame", "expected"),
    [(0, 1.0), (250, 0.75), (500, 0.5), (1_000, 0.0), (5_000, 0.0), (-10, 1.0)],
)
def test_linear_schedule(frame, expected):
    assert linear_epsilon(frame, 1.0, 0.0, 1_000) == pytest.approx(expected)


def test_schedule_without_decay_is_flat():
    assert linear_epsilon(0, 1.0, 0.05, 0) == 0.05


class _Fixed(nn.Module):
    def __init__(self, best: int, n: int = 4) -> None:
        super().__init__()
        self.best, self.n, self.calls = best, n, 0

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        q = torch.zeros(obs.shape[0], self.n)
        q[:, self.best] = 1.0
        return q


def test_greedy_when_epsilon_zero():
    net = _Fixed(best=2)
    actions = epsilon_greedy(net, np.zeros((16, 3)), 0.0, 4, np.random.default_rng(0))
    assert actions.dtype == np.int64 and (actions == 2).all()


def test_random_phase_never_runs_the_network():
    net = _Fixed(best=2)
    actions = epsilon_greedy(net, np.zeros((4000, 3)), 1.0, 4, np.random.default_rng(0))
    assert net.calls == 0
    counts = np.bincount(actions, minlength=4)
    assert counts.min() > 800  # roughly uniform over the 4 actions


def test_mixed_epsilon_fraction():
    net = _Fixed(best=3)
    actions = epsilon_greedy(net, np.zeros((8000, 3)), 0.2, 4, np.random.default_rng(1))
    # Greedy 80% + random picks of action 3 in the other 20% / 4.
    assert (actions == 3).mean() == pytest.approx(0.8 + 0.2 / 4, abs=0.02)
