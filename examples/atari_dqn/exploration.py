"""Epsilon schedule and epsilon-greedy action choice."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

__all__ = ["epsilon_greedy", "linear_epsilon"]


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
    epsilon: float,
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
        epsilon: Exploration probability.
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
