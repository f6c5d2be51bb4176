"""Evaluation episodes with a (nearly) greedy policy on unclipped rewards, all at once.

Every episode of an evaluation runs at the same time, one environment each, in one
vectorised pool (ale-py's C++ ``AtariVectorEnv`` for Atari, a list of gymnasium envs
otherwise): one batched forward pass per step for all of them instead of one per
episode and step, and the emulators on several threads. An evaluation is bounded in
emulator frames (``cfg.eval_max_frames``), shared equally by its episodes: an episode
that reaches its share is cut there and counts with the score it has (as one cut by
``cfg.eval_max_steps`` always did), so a policy that stalls cannot make the evaluation
dominate the run.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch
from torch import nn

from examples.atari_dqn.config import DQNConfig
from examples.atari_dqn.envs import AleVectorPool, EnvPool, make_env_for
from examples.atari_dqn.exploration import epsilon_greedy

__all__ = ["episode_step_cap", "evaluate"]


def episode_step_cap(cfg: DQNConfig, episodes: int) -> int | None:
    """Agent steps one evaluation episode may take: the tighter of the two caps.

    Args:
        cfg: ``eval_max_steps`` (per episode) and ``eval_max_frames`` (per evaluation,
            emulator frames, shared by its ``episodes``), ``frame_skip``.
        episodes: Episodes of the evaluation.

    Returns:
        The cap in agent steps, or None when neither cap is set.
    """
    caps = []
    if cfg.eval_max_steps is not None:
        caps.append(cfg.eval_max_steps)
    if cfg.eval_max_frames is not None:
        caps.append(max(1, cfg.eval_max_frames // (max(1, episodes) * cfg.frame_skip)))
    return min(caps) if caps else None


def evaluate(
    q_net: nn.Module,
    cfg: DQNConfig,
    episodes: int | None = None,
    *,
    seed: int = 12345,
    device: str | torch.device = "cpu",
    num_threads: int | None = None,
) -> list[float]:
    """Plays ``episodes`` episodes side by side and returns their game scores.

    Rewards are not clipped here (the score is what we report). Each episode is capped
    at :func:`episode_step_cap` agent steps.

    Args:
        q_net: Q-network to act with (not modified).
        cfg: Configuration (env, ``eval_epsilon``, ``eval_episodes``, the caps).
        episodes: Number of episodes (default ``cfg.eval_episodes``).
        seed: Seed of the first episode; episode ``i`` uses ``seed + i``.
        device: Where ``q_net`` lives.
        num_threads: Emulator threads of an Atari pool (default: one per episode, at
            most the cores of this machine).

    Returns:
        One return per episode, in episode order.
    """
    episodes = cfg.eval_episodes if episodes is None else episodes
    if episodes < 1:
        return []
    cap = episode_step_cap(cfg, episodes)
    pool: EnvPool | AleVectorPool
    if cfg.atari and cfg.ale_vector_env:
        threads = num_threads or min(episodes, os.cpu_count() or 1)
        pool = AleVectorPool(cfg, episodes, seed, num_threads=threads, max_episode_steps=cap)
    else:
        envs = [
            make_env_for(cfg, seed + i, clip_rewards=False, max_episode_steps=cap)
            for i in range(episodes)
        ]
        pool = EnvPool(cfg, episodes, seed, envs=envs)
    rng = np.random.default_rng(seed)
    returns = [math.nan] * episodes
    left = episodes
    was_training = q_net.training
    q_net.eval()
    try:
        while left:
            actions = epsilon_greedy(q_net, pool.obs, cfg.eval_epsilon, pool.n_actions, rng, device)
            _, _, _, _, _, infos = pool.step(actions)
            for i, info in enumerate(infos):
                # An env keeps playing after its episode (the pool resets it); only its
                # first episode counts.
                if "episode" in info and math.isnan(returns[i]):
                    returns[i] = float(np.asarray(info["episode"]["r"]).item())
                    left -= 1
    finally:
        pool.close()
        q_net.train(was_training)
    return returns
