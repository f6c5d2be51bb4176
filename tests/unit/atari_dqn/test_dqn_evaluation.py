"""Evaluation: episodes side by side in one pool, one batched forward per step, bounded."""

from __future__ import annotations

import dataclasses

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
