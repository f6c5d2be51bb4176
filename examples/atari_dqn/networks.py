"""Q-networks: the Nature-DQN CNN for Atari and a small MLP for vector observations,
each with a plain or a dueling head (``DQNConfig.dueling``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from examples.atari_dqn.config import DQNConfig

__all__ = ["DuelingHead", "MLPQNetwork", "NatureQNetwork", "build_q_network"]


class DuelingHead(nn.Module):
    """``Q = V + A - mean(A)`` from a value stream and an advantage stream (Wang et al.
    2016, as Ape-X's and Rainbow's networks): the value of a state is learned from every
    action's update, not only the taken one's, and subtracting the mean advantage makes
    the split identifiable.

    Args:
        value: Maps features to ``(B, 1)`` state values.
        advantage: Maps the same features to ``(B, A)`` advantages.
    """

    def __init__(self, value: nn.Module, advantage: nn.Module) -> None:
        super().__init__()
        self.value = value
        self.advantage = advantage

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        advantage = self.advantage(features)
        return self.value(features) + advantage - advantage.mean(dim=1, keepdim=True)


class NatureQNetwork(nn.Module):
    """The convolutional Q-network of Mnih et al. (2015), "Human-level control...".

    Takes uint8 frame stacks ``(B, C, 84, 84)`` and scales them to [0, 1] itself, so
    observations stay uint8 everywhere outside the network (replay, wire, env).

    Attributes:
        channels_last: Whether the network works in the channels-last (NHWC) layout
            (:meth:`use_channels_last`): its inputs are laid out so too.
    """

    channels_last = False

    def __init__(self, in_channels: int, n_actions: int, dueling: bool = False) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        self.head: nn.Module = (
            DuelingHead(_hidden_then(1), _hidden_then(n_actions))  # a 512 layer in each
            if dueling
            else _hidden_then(n_actions)
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float() / 255.0
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return self.head(self.features(x))

    def use_channels_last(self) -> NatureQNetwork:
        """Moves the convolutions' weights, and from now on each input, to the NHWC
        layout (``DQNConfig.channels_last``); the Q-values stay the same. Returns self."""
        self.channels_last = True
        return self.to(memory_format=torch.channels_last)


def _hidden_then(outputs: int) -> nn.Module:
    """The Nature CNN's fully connected part: 3,136 features, 512 ReLUs, ``outputs``."""
    return nn.Sequential(nn.Linear(64 * 7 * 7, 512), nn.ReLU(), nn.Linear(512, outputs))


class MLPQNetwork(nn.Module):
    """A ReLU MLP over flat float observations (CartPole and friends)."""

    def __init__(
        self, obs_dim: int, n_actions: int, hidden_sizes: Sequence[int], dueling: bool = False
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        last = obs_dim
        for h in hidden_sizes:
            layers += [nn.Linear(last, h), nn.ReLU()]
            last = h
        if dueling:
            layers.append(DuelingHead(nn.Linear(last, 1), nn.Linear(last, n_actions)))
        else:
            layers.append(nn.Linear(last, n_actions))
        self.net = nn.Sequential(*layers)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.float().flatten(1))


def build_q_network(cfg: DQNConfig, obs_shape: Sequence[int], n_actions: int) -> nn.Module:
    """The Q-network ``cfg`` asks for: Nature CNN on Atari, MLP otherwise.

    Args:
        cfg: Experiment configuration.
        obs_shape: Shape of one observation (``(4, 84, 84)`` on Atari).
        n_actions: Size of the discrete action space.
    """
    if cfg.atari:
        if tuple(obs_shape[1:]) != (84, 84):
            raise ValueError(f"the Nature CNN expects (C, 84, 84) observations, got {obs_shape}")
        return NatureQNetwork(obs_shape[0], n_actions, cfg.dueling)
    obs_dim = 1
    for d in obs_shape:
        obs_dim *= int(d)
    return MLPQNetwork(obs_dim, n_actions, cfg.hidden_sizes, cfg.dueling)
