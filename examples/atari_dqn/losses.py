"""Double-DQN targets and the Huber TD loss, as pure functions of tensors."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["double_dqn_targets", "dqn_loss"]


def double_dqn_targets(
    q_online_next: torch.Tensor,
    q_target_next: torch.Tensor,
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    gamma: float | torch.Tensor,
) -> torch.Tensor:
    """Double-DQN bootstrap targets (van Hasselt et al. 2016).

    The online network chooses the next action and the target network values it, which
    removes most of the max-operator's overestimation.

    Args:
        q_online_next: Online Q(s', .) of shape (B, A).
        q_target_next: Target Q(s', .) of shape (B, A).
        rewards: (B,) rewards (already clipped on Atari).
        terminated: (B,) 1.0 where s' is terminal. Truncated episodes are *not* terminal:
            their value is bootstrapped like any other step.
        gamma: Discount of the bootstrap: a float, or (B,) per sample (n-step samples
            that took ``m`` steps bootstrap with ``gamma ** m``).

    Returns:
        (B,) targets ``r + gamma * (1 - terminated) * Q_target(s', argmax_a Q_online(s', a))``,
        detached from the graph.
    """
    with torch.no_grad():
        best = q_online_next.argmax(dim=1, keepdim=True)
        next_value = q_target_next.gather(1, best).squeeze(1)
        return rewards + gamma * (1.0 - terminated) * next_value


def dqn_loss(
    q_net: nn.Module,
    target_net: nn.Module,
    batch: dict[str, torch.Tensor],
    gamma: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Huber (smooth L1) loss between Q(s, a) and double-DQN targets.

    Args:
        q_net: Online network (gets the gradient).
        target_net: Target network.
        batch: ``obs``, ``action``, ``reward``, ``next_obs``, ``terminated`` (and, for
            n-step samples, ``discount``; from a prioritized replay, ``weight``, each
            sample's importance-sampling weight) as returned by :meth:`FrameReplay.sample`.
        gamma: Discount (of one step; n-step samples carry their own ``discount``).

    Returns:
        ``(loss, q_taken, td_error)``: the scalar loss (the mean of the samples' Huber
        losses, each times its ``weight`` when the batch has one), the (B,) Q-values of
        the taken actions (detached; logged as a sanity signal) and the (B,) absolute
        TD errors (detached; a prioritized replay's new priorities).
    """
    q_all = q_net(batch["obs"])
    q_taken = q_all.gather(1, batch["action"].long().unsqueeze(1)).squeeze(1)
    with torch.no_grad():
        targets = double_dqn_targets(
            q_net(batch["next_obs"]),
            target_net(batch["next_obs"]),
            batch["reward"],
            batch["terminated"],
            batch.get("discount", gamma),
        )
    # Huber with delta 1: the Nature paper's "error clipping" expressed as a loss.
    per_sample = F.smooth_l1_loss(q_taken, targets, reduction="none")
    weight = batch.get("weight")
    loss = (per_sample * weight).mean() if weight is not None else per_sample.mean()
    q_taken = q_taken.detach()
    return loss, q_taken, (targets - q_taken).abs()
