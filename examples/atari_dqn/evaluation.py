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

__all__ = ["episode_step_cap", "eval_pool", "evaluate"]


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


def eval_pool(
    cfg: DQNConfig, episodes: int, seed: int, num_threads: int | None = None
) -> EnvPool | AleVectorPool:
    """The pool an evaluation of ``episodes`` episodes plays in: built, reset, ready.

    Building and resetting the emulators takes longer than one might think (on the 2-core
    VM about 0.2 s per Atari env and 0.3 s for the reset, docs/performance.md), so the
    driver builds the next evaluation's pool ahead, while training runs.

    Args:
        cfg: Configuration (env and the caps of :func:`episode_step_cap`).
        episodes: Episodes, one env each.
        seed: Seed of the first episode; episode ``i`` uses ``seed + i``.
        num_threads: Emulator threads of an Atari pool (default: one per episode, at
            most the cores of this machine).
    """
    cap = episode_step_cap(cfg, episodes)
    if cfg.atari and cfg.ale_vector_env:
        threads = num_threads or min(episodes, os.cpu_count() or 1)
        return AleVectorPool(cfg, episodes, seed, num_threads=threads, max_episode_steps=cap)
    envs = [
        make_env_for(cfg, seed + i, clip_rewards=False, max_episode_steps=cap)
        for i in range(episodes)
    ]
    return EnvPool(cfg, episodes, seed, envs=envs)


def evaluate(
    q_net: nn.Module,
    cfg: DQNConfig,
    episodes: int | None = None,
    *,
    seed: int = 12345,
    device: str | torch.device = "cpu",
    num_threads: int | None = None,
    pool: EnvPool | AleVectorPool | None = None,
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
        pool: A pool from :func:`eval_pool` for these episodes and seed, fresh (built
            ahead); default: one is built here. Closed at the end either way.

    Returns:
        One return per episode, in episode order.

    Raises:
        ValueError: ``pool`` has another number of envs than ``episodes``.
    """
    episodes = cfg.eval_episodes if episodes is None else episodes
    if pool is not None and len(pool) != episodes:
        pool.close()
        raise ValueError(f"the pool has {len(pool)} envs for {episodes} episodes")
    if episodes < 1:
        return []
    if pool is None:
        pool = eval_pool(cfg, episodes, seed, num_threads)
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
