"""Evaluation episodes with a (nearly) greedy policy on unclipped rewards."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from examples.atari_dqn.config import DQNConfig
from examples.atari_dqn.envs import make_env_for
from examples.atari_dqn.exploration import epsilon_greedy

__all__ = ["evaluate"]


def evaluate(
    q_net: nn.Module,
    cfg: DQNConfig,
    episodes: int | None = None,
    *,
    seed: int = 12345,
    device: str | torch.device = "cpu",
) -> list[float]:
    """Plays ``episodes`` episodes and returns their game scores.

    Rewards are not clipped here (the score is what we report), and episodes are capped
    at ``cfg.eval_max_steps`` agent steps so a stalling policy cannot hang the run.

    Args:
        q_net: Q-network to act with (not modified).
        cfg: Configuration (env, ``eval_epsilon``, ``eval_episodes``, ``eval_max_steps``).
        episodes: Number of episodes (default ``cfg.eval_episodes``).
        seed: Seed of the first episode; episode ``i`` uses ``seed + i``.
        device: Where ``q_net`` lives.

    Returns:
        One return per episode.
    """
    episodes = cfg.eval_episodes if episodes is None else episodes
    env = make_env_for(cfg, seed, clip_rewards=False, max_episode_steps=cfg.eval_max_steps)
    rng = np.random.default_rng(seed)
    n_actions = int(env.action_space.n)
    was_training = q_net.training
    q_net.eval()
    returns: list[float] = []
    try:
        for i in range(episodes):
            obs, _ = env.reset(seed=seed + i)
            total, done = 0.0, False
            while not done:
                action = epsilon_greedy(q_net, obs[None], cfg.eval_epsilon, n_actions, rng, device)
                obs, reward, term, trunc, _ = env.step(int(action[0]))
                total += float(reward)
                done = term or trunc
            returns.append(total)
    finally:
        env.close()
        q_net.train(was_training)
    return returns
