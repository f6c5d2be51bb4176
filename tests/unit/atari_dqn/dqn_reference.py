"""The learner's update made again by hand, eagerly: what a graphed step must equal."""

from __future__ import annotations

import copy
from typing import Any

import torch

from examples.atari_dqn.learner import Learner, _adam
from examples.atari_dqn.losses import dqn_loss


def snapshot(learner: Learner) -> dict[str, Any]:
    """Copies of the weights, the target network and the optimizer state, before a step."""
    return {
        "q_net": {k: v.clone() for k, v in learner.q_net.state_dict().items()},
        "target_net": {k: v.clone() for k, v in learner.target_net.state_dict().items()},
        "optimizer": copy.deepcopy(learner.optimizer.state_dict()),
    }


def eager_update(
    learner: Learner, before: dict[str, Any], batch: dict[str, torch.Tensor], capturable: bool
) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    """The loss, the weights and the absolute TD errors one eager step from ``before`` on
    ``batch`` gives."""
    net = copy.deepcopy(learner.q_net)
    net.load_state_dict(before["q_net"])
    target = copy.deepcopy(learner.target_net)
    target.load_state_dict(before["target_net"])
    opt = _adam(net.parameters(), learner.cfg, capturable=capturable)
    opt.load_state_dict(before["optimizer"])
    loss, _, td_error = dqn_loss(net, target, batch, learner.cfg.gamma)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if learner.cfg.max_grad_norm:
        torch.nn.utils.clip_grad_norm_(net.parameters(), learner.cfg.max_grad_norm)
    opt.step()
    return loss.detach(), net.state_dict(), td_error


def priorities_after(learner: Learner, td_error: torch.Tensor) -> torch.Tensor:
    """The priorities a prioritized replay must hold after training on ``td_error``."""
    replay = learner.replay
    return (td_error.float() + replay.PRIORITY_FLOOR).pow(replay.priority_exponent)
