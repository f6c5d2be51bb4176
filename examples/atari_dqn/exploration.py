"""Epsilon schedules and epsilon-greedy action choice.

Two ways to explore (``DQNConfig.exploration``): ``"linear"``, one epsilon for every
environment, decayed over the run's frames (the Nature DQN's); ``"ape-x"``, a fixed
epsilon per environment spread from 0.4 down to 0.4 ** 8 across all the run's
environments (Horgan et al. 2018), so some always explore and most mostly exploit.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

__all__ = [
    "APEX_ALPHA",
    "APEX_BASE",
    "apex_epsilons",
    "epsilon_greedy",
    "linear_epsilon",
    "run_epsilon",
]

#: Ape-X's epsilon of environment ``i`` of ``N``: ``APEX_BASE ** (1 + APEX_ALPHA * i / (N - 1))``.
APEX_BASE = 0.4
APEX_ALPHA = 7.0


def apex_epsilons(first: int, count: int, total: int) -> np.ndarray:
    """The fixed epsilons of environments ``first .. first + count - 1`` of ``total``.

    Environment ``i`` explores with ``0.4 ** (1 + 7 * i / (total - 1))``: 0.4 for the
    first, 0.4 ** 8 (about 0.00066) for the last (one environment alone: 0.4). An
    index past ``total - 1`` (a collector recreated under a new id) continues the curve
    below the last.

    Args:
        first: Global index of the first environment (``collector_id * envs``).
        count: Environments wanted.
        total: Environments in the whole run (``collectors * envs``).
    """
    if count < 0 or first < 0 or total < 1:
        raise ValueError(
            f"apex_epsilons({first}, {count}, {total}): first and count must be >= 0, total >= 1"
        )
    spread = np.arange(first, first + count, dtype=np.float64) / max(total - 1, 1)
    return APEX_BASE ** (1.0 + APEX_ALPHA * spread)


def run_epsilon(
    exploration: str, frame: int, start: float, end: float, decay_frames: int, total_envs: int
) -> float:
    """The run's epsilon for its metrics: the linear schedule's value at ``frame``, or
    the mean of Ape-X's fixed epsilons over ``total_envs`` environments."""
    if exploration == "ape-x":
        return float(apex_epsilons(0, total_envs, total_envs).mean())
    return linear_epsilon(frame, start, end, decay_frames)


def linear_epsilon(frame: int, start: float, end: float, decay_frames: int) -> float:
    """Epsilon decayed linearly from ``start`` to ``end`` over ``decay_frames``, then flat.

    Args:
        frame: Frames seen so far (summed over all collectors).
        start: Value at frame 0.
        end: Value from ``decay_frames`` on.
        decay_frames: Length of the decay; 0 means ``end`` from the start.
    """
    if decay_frames <= 0 or frame >= decay_frames:
        return end
    frac = max(frame, 0) / decay_frames
    return start + frac * (end - start)


def epsilon_greedy(
    q_net: nn.Module,
    obs: np.ndarray,
    epsilon: float | np.ndarray,
    n_actions: int,
    rng: np.random.Generator,
    device: torch.device | str = "cpu",
) -> np.ndarray:
    """One action per row of ``obs``: random with probability ``epsilon``, else greedy.

    The network is only run when at least one row acts greedily, so the fully random
    warm-up phase costs no inference.

    Args:
        q_net: Q-network (in eval mode or without dropout/batch norm).
        obs: (N, *obs_shape) observations.
        epsilon: Exploration probability, one for all rows or (N,) one per row.
        n_actions: Number of discrete actions.
        rng: Random generator (per collector, seeded).
        device: Where ``q_net`` lives.

    Returns:
        (N,) int64 actions.
    """
    n = obs.shape[0]
    actions = rng.integers(0, n_actions, size=n, dtype=np.int64)
    greedy = rng.random(n) >= epsilon
    if greedy.any():
        with torch.no_grad():
            q = q_net(torch.as_tensor(obs[greedy], device=device))
        actions[greedy] = q.argmax(dim=1).cpu().numpy()
    return actions
