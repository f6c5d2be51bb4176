"""Epsilon schedule and epsilon-greedy action selection."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from examples.atari_dqn.config import config_for_env
from examples.atari_dqn.exploration import (
    apex_epsilons,
    epsilon_greedy,
    linear_epsilon,
    run_epsilon,
)


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


def test_a_row_of_epsilons_explores_each_row_with_its_own():
    net = _Fixed(best=3)
    eps = np.tile([1.0, 0.0], 4000)  # even rows always random, odd rows always greedy
    actions = epsilon_greedy(net, np.zeros((8000, 3)), eps, 4, np.random.default_rng(2))
    assert (actions[1::2] == 3).all()
    assert np.bincount(actions[0::2], minlength=4).min() > 800


def test_ape_x_epsilons_spread_from_0_4_to_0_4_to_the_8th_across_all_envs():
    every = apex_epsilons(0, 48, 48)  # 12 collectors of 4 envs
    assert every[0] == pytest.approx(0.4) and every[-1] == pytest.approx(0.4**8)
    assert np.all(np.diff(every) < 0)
    # a collector's share is its slice of the whole run's curve
    np.testing.assert_allclose(apex_epsilons(8, 4, 48), every[8:12])
    assert apex_epsilons(0, 1, 1).tolist() == [pytest.approx(0.4)]  # one env: Ape-X's base
    assert apex_epsilons(48, 2, 48).max() < every[-1]  # past the run's envs: on down
    with pytest.raises(ValueError, match="must be >= 0"):
        apex_epsilons(0, 4, 0)
    # the metrics' epsilon: the mean over the run's envs, whatever the frame
    assert run_epsilon("ape-x", 10**9, 1.0, 0.01, 10, 48) == pytest.approx(every.mean())
    assert run_epsilon("linear", 500, 1.0, 0.0, 1_000, 48) == pytest.approx(0.5)


def test_an_ape_x_collector_acts_with_its_envs_own_epsilons(monkeypatch):
    from dqn_fakes import make_counter_envs

    from examples.atari_dqn import collector
    from examples.atari_dqn.collector import CollectorCore
    from examples.atari_dqn.envs import EnvPool

    used = []

    def recorded(q_net, obs, epsilon, *args):
        used.append(np.copy(epsilon))
        return epsilon_greedy(q_net, obs, epsilon, *args)

    monkeypatch.setattr(collector, "epsilon_greedy", recorded)

    cfg = config_for_env("ALE/Pong-v5", exploration="ape-x")
    pool = EnvPool(cfg, 4, 0, envs=make_counter_envs(4, 0, 9))
    core = CollectorCore(cfg, collector_id=2, num_collectors=3, pool=pool)
    np.testing.assert_allclose(core.epsilons(), apex_epsilons(8, 4, 12))
    assert core.epsilon() == pytest.approx(apex_epsilons(8, 4, 12).mean())
    core.collect(2)  # acts with them, every step
    assert len(used) == 2 and core.agent_steps == 8
    for eps in used:
        np.testing.assert_allclose(eps, apex_epsilons(8, 4, 12))
    linear = CollectorCore(config_for_env("ALE/Pong-v5"), pool=EnvPool(
        cfg, 4, 0, envs=make_counter_envs(4, 0, 9)))  # fmt: skip
    assert linear.epsilons() == linear.epsilon() == 1.0  # the schedule's start
    with pytest.raises(ValueError, match="exploration='boltzmann' must be one of"):
        config_for_env("ALE/Pong-v5", exploration="boltzmann")
