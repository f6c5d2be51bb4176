"""Evaluation: episodes side by side in one pool, one batched forward per step, bounded."""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch
from torch import nn

from examples.atari_dqn import evaluation
from examples.atari_dqn.config import config_for_env
from examples.atari_dqn.envs import obs_spec


class CountingNet(nn.Module):
    """A Q-network that always picks action 0 and counts its forward passes and rows."""

    def __init__(self, n_actions: int) -> None:
        super().__init__()
        self.n_actions = n_actions
        self.calls: list[int] = []

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        self.calls.append(obs.shape[0])
        q = torch.zeros(obs.shape[0], self.n_actions)
        q[:, 0] = 1.0
        return q


def test_step_cap_is_the_tighter_of_the_per_episode_and_per_evaluation_caps():
    cfg = config_for_env("ALE/Pong-v5", eval_max_steps=27_000, eval_max_frames=50_000)
    assert evaluation.episode_step_cap(cfg, 2) == 50_000 // (2 * 4)  # 6,250 agent steps
    assert evaluation.episode_step_cap(cfg, 1) == 12_500
    assert evaluation.episode_step_cap(dataclasses.replace(cfg, eval_max_frames=None), 2) == 27_000
    loose = dataclasses.replace(cfg, eval_max_frames=10_000_000)
    assert evaluation.episode_step_cap(loose, 2) == 27_000
    assert evaluation.episode_step_cap(config_for_env("CartPole-v1"), 20) is None


def test_cartpole_episodes_run_side_by_side_in_one_batch():
    cfg = config_for_env("CartPole-v1", eval_epsilon=0.0)
    net = CountingNet(2)
    returns = evaluation.evaluate(net, cfg, 5, seed=3)
    assert len(returns) == 5 and all(r >= 1 for r in returns)
    # one forward per step for every episode still running: the first has all five rows
    assert net.calls[0] == 5
    # always pushing left ends CartPole within a few dozen steps: the longest episode
    assert len(net.calls) == max(returns)


def test_a_frame_cap_cuts_pong_episodes_and_keeps_their_scores():
    pytest.importorskip("ale_py")
    cfg = config_for_env("ALE/Pong-v5", eval_epsilon=0.0, eval_max_frames=2 * 4 * 50)
    _, _, n_actions = obs_spec(cfg)
    net = CountingNet(n_actions)
    returns = evaluation.evaluate(net, cfg, 2, seed=7, num_threads=1)
    # 400 frames for two episodes: 50 agent steps each, far shorter than a game of Pong
    assert len(net.calls) == 50 and net.calls[0] == 2
    assert len(returns) == 2 and all(-21 <= r <= 21 for r in returns)


class RecordingNet(nn.Module):
    """Wraps the real network: records each forward's batch and the thread that ran it."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.calls: list[tuple[int, str]] = []

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        import threading

        self.calls.append((obs.shape[0], threading.current_thread().name))
        return self.inner(obs)


def test_the_driver_evaluator_does_its_set_up_ahead_on_its_own_thread(monkeypatch):
    import threading

    from examples.atari_dqn import monitor

    real_net, real_pool = monitor.build_q_network, evaluation.eval_pool
    nets: list[RecordingNet] = []
    pools: list[tuple[str, int]] = []  # (who built one, its episodes)
    monkeypatch.setattr(
        monitor, "build_q_network", lambda *a: nets.append(RecordingNet(real_net(*a))) or nets[-1]
    )

    def pool_ahead(cfg, episodes, seed, num_threads=None):
        pools.append((threading.current_thread().name, episodes))
        return real_pool(cfg, episodes, seed, num_threads)

    monkeypatch.setattr(monitor, "eval_pool", pool_ahead)
    monkeypatch.setattr(evaluation, "eval_pool", pool_ahead)  # one built in evaluate()
    cfg = config_for_env("CartPole-v1", eval_episodes=3)

    class Rt:  # the backend's get: the learner's weights reply
        def get(self, ref, timeout):
            return ref

    class Learner:
        class get_weights:  # noqa: N801 - stands in for an actor method
            @staticmethod
            def remote(version, cpu):
                return 1, {k: v.clone() for k, v in net.state_dict().items()}

    evaluator = monitor.Evaluator(cfg, Rt())
    (net,) = nets
    evaluator._next_pool.result(30)
    # the network's first pass and the first pool, on the evaluator's thread, at once
    assert [(n, who.startswith("evaluator-ahead")) for n, who in net.calls] == [(3, True)]
    assert [(who.startswith("evaluator-ahead"), n) for who, n in pools] == [(True, 3)]
    first = evaluator(Learner())
    assert len(first) == 3 and len(evaluator.seconds) == 1
    assert len(pools) == 1 or pools[1][0].startswith("evaluator-ahead")  # none built inline
    evaluator._next_pool.result(30)  # the next one, built after the first evaluation
    assert len(pools) == 2 and all(w.startswith("evaluator-ahead") for w, _ in pools)
    assert evaluator(Learner()) == first  # the same seeds, the same greedy policy
    assert evaluator(Learner(), episodes=2, last=True) and evaluator._next_pool is None
    assert pools[-1] == ("MainThread", 2)  # another number of episodes: built there
    # the third pool (3 envs, built after the second evaluation) was dropped for it, and
    # none was built after the last
    assert len(pools) == 4
    evaluator.close()
    assert len(net.calls) > 1 and all(
        not who.startswith("evaluator-ahead") for _, who in net.calls[1:]
    )


def test_closing_the_evaluator_closes_the_pool_built_ahead_without_waiting(monkeypatch):
    import threading

    from examples.atari_dqn import monitor

    gate, started, closed = threading.Event(), threading.Event(), []

    class Pool:
        def __len__(self):
            return 3

        def close(self):
            closed.append(True)

    def slow_pool(cfg, episodes, seed, num_threads=None):
        started.set()
        gate.wait(10)  # still being built when the evaluator is closed
        return Pool()

    monkeypatch.setattr(monitor, "eval_pool", slow_pool)
    evaluator = monitor.Evaluator(config_for_env("CartPole-v1", eval_episodes=3), None)
    pending = evaluator._next_pool
    assert started.wait(10)  # after the warm-up, on the evaluator's thread
    evaluator.close()  # returns at once
    assert closed == [] and not pending.done()
    gate.set()
    pending.result(10)
    deadline = time.monotonic() + 10
    while not closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert closed == [True]
