"""Double-DQN targets and the Huber loss, checked against hand computations."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from examples.atari_dqn.losses import double_dqn_targets, dqn_loss


def test_double_dqn_uses_online_argmax_and_target_value():
    q_online_next = torch.tensor([[1.0, 5.0, 2.0], [0.0, -1.0, 3.0]])
    q_target_next = torch.tensor([[9.0, 4.0, 7.0], [1.0, 8.0, 6.0]])
    rewards = torch.tensor([1.0, -1.0])
    terminated = torch.tensor([0.0, 0.0])
    y = double_dqn_targets(q_online_next, q_target_next, rewards, terminated, gamma=0.5)
    # Online picks action 1 (row 0) and 2 (row 1); the target network values them 4 and 6.
    # Plain DQN would have used the target's max (9 and 8) instead.
    torch.testing.assert_close(y, torch.tensor([1.0 + 0.5 * 4.0, -1.0 + 0.5 * 6.0]))


def test_terminal_transitions_do_not_bootstrap():
    q = torch.tensor([[3.0, 1.0], [3.0, 1.0]])
    y = double_dqn_targets(q, q * 10, torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0]), 0.9)
    torch.testing.assert_close(y, torch.tensor([0.5, 0.5 + 0.9 * 30.0]))


class _Table(nn.Module):
    """Q(s, .) = table[s]: a 'network' whose values are easy to reason about."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = nn.Parameter(table.clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.table[obs.long().flatten()]


def _two_rows(**extra: torch.Tensor) -> tuple[_Table, _Table, dict[str, torch.Tensor]]:
    """Online and target tables and a batch of two transitions (targets 0 and 0)."""
    online = _Table(torch.tensor([[0.0, 2.0], [1.0, 3.0], [10.0, 0.0]]))
    target = _Table(torch.tensor([[5.0, 5.0], [4.0, -2.0], [0.0, 7.0]]))
    target.requires_grad_(False)
    batch = {
        "obs": torch.tensor([0, 1]),
        "action": torch.tensor([1, 0]),
        "reward": torch.tensor([1.0, 0.0]),
        "next_obs": torch.tensor([1, 2]),
        "terminated": torch.tensor([0.0, 1.0]),
        **extra,
    }
    return online, target, batch


def test_loss_is_huber_between_taken_q_and_targets_and_only_trains_online_net():
    online, target, batch = _two_rows()
    loss, q_taken, td = dqn_loss(online, target, batch, gamma=0.5)
    # Row 0: Q=2, next state 1: online argmax 1 -> target value -2 -> y = 1 - 1 = 0.
    # Row 1: Q=1, terminal -> y = 0.
    torch.testing.assert_close(q_taken, torch.tensor([2.0, 1.0]))
    expected = F.smooth_l1_loss(torch.tensor([2.0, 1.0]), torch.tensor([0.0, 0.0]))
    torch.testing.assert_close(loss, expected)
    assert loss.item() == pytest.approx((1.5 + 0.5) / 2)  # |2| -> 1.5, |1| -> 0.5
    torch.testing.assert_close(td, torch.tensor([2.0, 1.0]))  # |y - Q|
    loss.backward()
    assert online.table.grad is not None and online.table.grad.abs().sum() > 0
    assert target.table.grad is None


def test_n_step_samples_bootstrap_with_their_own_discount():
    table = torch.tensor([[1.0, 2.0], [4.0, 3.0]])
    batch = {
        "obs": torch.tensor([0, 0]),
        "action": torch.tensor([1, 0]),
        "reward": torch.tensor([0.5, 0.25]),
        "next_obs": torch.tensor([1, 1]),
        "terminated": torch.tensor([0.0, 0.0]),
        "discount": torch.tensor([0.9**3, 0.9]),  # three steps taken, then one
    }
    q, target = _Table(table), _Table(table)
    loss, q_taken, _ = dqn_loss(q, target, batch, gamma=0.9)
    targets = torch.tensor([0.5 + 0.9**3 * 4.0, 0.25 + 0.9 * 4.0])  # not gamma for both
    torch.testing.assert_close(loss, F.smooth_l1_loss(torch.tensor([2.0, 1.0]), targets))
    torch.testing.assert_close(q_taken, torch.tensor([2.0, 1.0]))


def test_importance_weights_scale_each_samples_loss():
    online, target, batch = _two_rows(weight=torch.tensor([1.0, 0.25]))
    loss, _, td = dqn_loss(online, target, batch, gamma=0.5)
    # Huber 1.5 and 0.5 as above, weighted 1 and 0.25: (1.5 + 0.125) / 2.
    assert loss.item() == pytest.approx((1.5 + 0.125) / 2)
    torch.testing.assert_close(td, torch.tensor([2.0, 1.0]))  # the errors are unweighted
