"""Q-networks: shapes, and the dueling head's Q = V + A - mean(A)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from examples.atari_dqn.config import config_for_env
from examples.atari_dqn.driver import batch_line, build_config, parse_args
from examples.atari_dqn.networks import DuelingHead, MLPQNetwork, NatureQNetwork, build_q_network


class _Const(nn.Module):
    def __init__(self, out: torch.Tensor) -> None:
        super().__init__()
        self.out = out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out.expand(x.shape[0], -1)


def test_the_dueling_head_adds_the_value_to_the_centred_advantages():
    head = DuelingHead(_Const(torch.tensor([[10.0]])), _Const(torch.tensor([[1.0, 2.0, 6.0]])))
    q = head(torch.zeros(2, 5))
    # mean advantage 3: Q = 10 + (1, 2, 6) - 3
    torch.testing.assert_close(q, torch.tensor([[8.0, 9.0, 13.0]] * 2))


@pytest.mark.parametrize("dueling", [False, True])
def test_both_networks_map_observations_to_one_q_per_action(dueling):
    cnn = NatureQNetwork(4, 6, dueling=dueling)
    assert cnn(torch.zeros(3, 4, 84, 84, dtype=torch.uint8)).shape == (3, 6)
    assert isinstance(cnn.head, DuelingHead) == dueling
    mlp = MLPQNetwork(4, 2, (16, 16), dueling=dueling)
    assert mlp(torch.zeros(5, 4)).shape == (5, 2)
    assert isinstance(mlp.net[-1], DuelingHead) == dueling
    # the plain CNN keeps its parameter names (checkpoints from before load unchanged)
    if not dueling:
        assert {"head.0.weight", "head.2.weight"} <= set(cnn.state_dict())


def test_the_config_and_the_flag_choose_the_head():
    pong = config_for_env("ALE/Pong-v5", dueling=True)
    assert isinstance(build_q_network(pong, (4, 84, 84), 6).head, DuelingHead)
    cart = config_for_env("CartPole-v1", dueling=True)
    assert isinstance(build_q_network(cart, (4,), 2).net[-1], DuelingHead)
    cfg = build_config(parse_args(["--dueling", "--exploration", "ape-x"]))
    assert cfg.dueling and cfg.exploration == "ape-x"
    line = batch_line(cfg)
    assert "dueling network" in line and "Ape-X exploration" in line
    plain = batch_line(build_config(parse_args([])))
    assert "dueling" not in plain and "Ape-X" not in plain


def test_a_channels_last_cnn_gives_the_same_q_values():
    torch.manual_seed(0)
    plain = NatureQNetwork(4, 6)
    nhwc = NatureQNetwork(4, 6)
    nhwc.load_state_dict(plain.state_dict())
    assert nhwc.use_channels_last() is nhwc and nhwc.channels_last and not plain.channels_last
    conv = nhwc.features[0]
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert not conv.weight.is_contiguous()  # laid out otherwise, not merely allowed to be
    seen = []
    conv.register_forward_hook(lambda m, inputs, out: seen.append(inputs[0]))
    obs = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    torch.testing.assert_close(nhwc(obs), plain(obs), rtol=1e-4, atol=1e-5)
    assert seen[0].is_contiguous(memory_format=torch.channels_last)  # the input laid out too
    # its weights load into a plain network (checkpoints, the collectors' copies)
    again = NatureQNetwork(4, 6)
    again.load_state_dict(nhwc.state_dict())
    torch.testing.assert_close(again(obs), plain(obs), rtol=1e-4, atol=1e-5)
