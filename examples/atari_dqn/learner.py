"""The DQN learner: replay on its device, double DQN with a target network, Adam.

A plain class. The driver turns it into an actor with
``actorrt.actor(label="learner", num_gpus=..., max_concurrency=1)(Learner)``, and tests and
benchmarks use it in-process unchanged.

Training happens inside :meth:`Learner.push`: every ``train_every`` transitions received
buy one gradient step. That fixes the replay ratio (samples per transition) whatever the
speeds of collectors and learner, and gives natural backpressure: a slow learner answers
pushes slowly, and collectors, which keep at most ``max_in_flight`` pushes outstanding,
slow down with it instead of piling up data.
"""

from __future__ import annotations

import copy
import math
import os
import time
from typing import Any

import numpy as np
import torch

from examples.atari_dqn.backend import backend
from examples.atari_dqn.config import DQNConfig
from examples.atari_dqn.envs import obs_spec
from examples.atari_dqn.losses import dqn_loss
from examples.atari_dqn.networks import build_q_network
from examples.atari_dqn.replay import FrameReplay

__all__ = ["Learner", "to_cpu"]


def to_cpu(obj: Any) -> Any:
    """Copies every tensor in a nested dict/list structure to the CPU (detached)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def _default_device() -> torch.device:
    # On a worker the runtime makes the actor's GPU the current device.
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class Learner:
    """Owns the Q-network, the target network, the optimizer and the replay memory.

    Args:
        cfg: Experiment configuration (a DQNConfig or its ``to_dict()``).
        transport: ``"cuda"``: weights are returned as device tensors (collectors on GPUs
            with device maps receive them GPU-to-GPU); ``"cpu"``: as CPU tensors.
        device: Override the device (default: the current CUDA device, else CPU).
        num_threads: ``torch.set_num_threads`` for this process (None: leave as is).
        publish: The backend's name (``"actorrt"``, ``"ray"``): each weight version is
            put once as an object and collectors fetch it from the learner's process
            (one copy per version, however many collectors); None: every
            ``get_weights`` reply carries the weights (a learner called directly).
    """

    def __init__(
        self,
        cfg: DQNConfig | dict[str, Any],
        *,
        transport: str = "cpu",
        device: str | torch.device | None = None,
        num_threads: int | None = None,
        publish: str | None = None,
    ) -> None:
        if isinstance(cfg, dict):
            cfg = DQNConfig.from_dict(cfg)
        if transport not in ("cpu", "cuda"):
            raise ValueError(f"transport={transport!r} must be 'cpu' or 'cuda'")
        if num_threads:
            torch.set_num_threads(num_threads)
        self.cfg = cfg
        self.transport = transport
        self.device = torch.device(device) if device is not None else _default_device()
        torch.manual_seed(cfg.seed)

        obs_shape, obs_dtype, n_actions = obs_spec(cfg)
        self.obs_shape = obs_shape
        self.n_actions = n_actions
        self.q_net = build_q_network(cfg, obs_shape, n_actions).to(self.device)
        self.target_net = copy.deepcopy(self.q_net).requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.q_net.parameters(), lr=cfg.lr, eps=cfg.adam_eps)

        frame_shape = obs_shape[1:] if cfg.frame_stack > 1 else obs_shape
        torch_dtype = torch.from_numpy(np.zeros(0, dtype=obs_dtype)).dtype
        self.replay = FrameReplay(
            cfg.replay_capacity,
            frame_shape,
            torch_dtype,
            cfg.frame_stack,
            self.device,
            seed=cfg.seed,
        )

        self.updates = 0
        self._restored_transitions = 0  # transitions counted before a checkpoint was loaded
        self.weight_version = 0  # bumped by every gradient step
        self.pushes = 0
        self.weights_served = 0
        self.weights_published = 0  # versions put as objects (see publish)
        self._publish = publish
        self._published: tuple[int, Any] | None = None  # (version, ref) of the last put
        self._credit = 0  # transitions not yet paid for with a gradient step
        self._losses: list[float] = []  # since the last stats() call
        self._q_means: list[float] = []
        self.last_loss = math.nan
        self.episodes: list[tuple[int, float, int]] = []  # (frame, return, length)
        self._started = time.monotonic()
        self.train_seconds = 0.0

    # ----------------------------------------------------------------- data in
    @property
    def transitions(self) -> int:
        """Transitions received so far."""
        return self.replay.transitions_added + self._restored_transitions

    @property
    def frames(self) -> int:
        """Emulator frames behind the transitions received (transitions x frame skip)."""
        return self.transitions * self.cfg.frame_skip

    def push(self, batch: dict[str, torch.Tensor]) -> int:
        """Adds a collector's records to replay and pays for them with gradient steps.

        Args:
            batch: Records as built by ``CollectorCore.collect`` (see
                :meth:`FrameReplay.add`), plus ``ep_return`` / ``ep_length`` of the
                episodes that ended in this push.

        Returns:
            Transitions received so far (all collectors).
        """
        self.pushes += 1
        added = self.replay.add(batch)
        frames = self.frames
        returns = batch.get("ep_return")
        if returns is not None and returns.numel():
            lengths = batch["ep_length"].tolist()
            for r, n in zip(returns.tolist(), lengths, strict=True):
                self.episodes.append((frames, float(r), int(n)))
        if self.replay.transitions_added < self.cfg.learning_starts:
            return self.transitions
        self._credit += added
        n_updates, self._credit = divmod(self._credit, self.cfg.train_every)
        t0 = time.perf_counter()
        for _ in range(n_updates):
            self.train_step()
        self.train_seconds += time.perf_counter() - t0
        return self.transitions

    # ----------------------------------------------------------------- training
    def train_step(self) -> float:
        """One gradient step on a uniformly sampled batch; returns the loss."""
        cfg = self.cfg
        if cfg.lr_final_fraction != 1.0:
            progress = min(1.0, self.frames / max(1, cfg.total_frames))
            scale = 1.0 + progress * (cfg.lr_final_fraction - 1.0)
            for group in self.optimizer.param_groups:
                group["lr"] = cfg.lr * scale
        batch = self.replay.sample(self.cfg.batch_size)
        loss, q_taken = dqn_loss(self.q_net, self.target_net, batch, self.cfg.gamma)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.q_net.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        self.weight_version += 1
        if self.updates % self.cfg.target_update_every == 0:
            self.target_net.load_state_dict(self.q_net.state_dict())
        value = float(loss.detach())
        self.last_loss = value
        self._losses.append(value)
        self._q_means.append(float(q_taken.mean()))
        return value

    # ----------------------------------------------------------------- data out
    def get_weights(self, known_version: int = -1, cpu: bool = False) -> tuple[int, Any] | None:
        """The online network's weights, unless the caller already has this version.

        Args:
            known_version: Version the caller holds; None comes back when it is current,
                so idle refreshes cost a tiny reply instead of the whole network.
            cpu: Always answer with CPU tensors inline (the driver, which evaluates and
                may have no GPU).

        Returns:
            ``(version, state_dict)``, ``(version, ref of the state_dict)`` when the
            learner publishes (see ``publish``: the caller gets the ref), or None. Tensors
            are copies (training goes on while they are read): on the learner's GPU with
            ``transport="cuda"``, on the CPU otherwise.
        """
        if known_version == self.weight_version:
            return None
        self.weights_served += 1
        state = self.q_net.state_dict()
        if cpu:
            return self.weight_version, to_cpu(state)
        if self.transport == "cuda" and self.device.type == "cuda":
            copy_ = {k: v.detach().clone() for k, v in state.items()}
        else:
            copy_ = to_cpu(state)
        if self._publish is None:
            return self.weight_version, copy_
        if self._published is None or self._published[0] != self.weight_version:
            # Once per version: the collectors that ask for it fetch this one object.
            self._published = (self.weight_version, backend(self._publish).put(copy_))
            self.weights_published += 1
        return self._published

    def stats(self, episodes_since: int = 0) -> dict[str, Any]:
        """Counters for progress bars, logs and tests.

        Args:
            episodes_since: Return only episodes with index >= this (the caller passes the
                ``episodes_total`` it saw last time to receive each episode once).

        Returns:
            A dict: ``transitions``, ``frames``, ``updates``, ``weight_version``,
            ``weights_served``, ``pushes``, ``replay_size``, ``replay_bytes``,
            ``last_loss``, ``loss_mean`` and ``q_mean`` (means over the gradient steps
            since the previous ``stats()`` call; NaN when none), ``episodes_total``,
            ``episodes`` (list of ``(frame, return, length)``), ``train_seconds``,
            ``uptime_s``, ``device``, ``pid`` (of the learner's process).
        """
        losses, qs = self._losses, self._q_means
        self._losses, self._q_means = [], []
        return {
            "transitions": self.transitions,
            "frames": self.frames,
            "updates": self.updates,
            "weight_version": self.weight_version,
            "weights_served": self.weights_served,
            "weights_published": self.weights_published,
            "pushes": self.pushes,
            "replay_size": len(self.replay),
            "replay_bytes": self.replay.nbytes,
            "last_loss": self.last_loss,
            "loss_mean": float(np.mean(losses)) if losses else math.nan,
            "q_mean": float(np.mean(qs)) if qs else math.nan,
            "episodes_total": len(self.episodes),
            "episodes": self.episodes[episodes_since:],
            "train_seconds": self.train_seconds,
            "uptime_s": time.monotonic() - self._started,
            "device": str(self.device),
            "pid": os.getpid(),
        }

    # ----------------------------------------------------------------- checkpoints
    def checkpoint_state(self) -> dict[str, Any]:
        """Everything needed to resume training except the replay memory, on the CPU.

        The replay is left out on purpose: it is hundreds of MB to GB, and refilling
        ``learning_starts`` transitions costs seconds.
        """
        return {
            "q_net": to_cpu(self.q_net.state_dict()),
            "target_net": to_cpu(self.target_net.state_dict()),
            "optimizer": to_cpu(self.optimizer.state_dict()),
            "updates": self.updates,
            "weight_version": self.weight_version,
            "transitions": self.transitions,
            "episodes": list(self.episodes),
            "config": self.cfg.to_dict(),
        }

    def load_checkpoint_state(self, state: dict[str, Any]) -> int:
        """Restores :meth:`checkpoint_state`; returns the restored weight version."""
        self.q_net.load_state_dict(state["q_net"])
        self.target_net.load_state_dict(state["target_net"])
        self.optimizer.load_state_dict(state["optimizer"])  # moves state to param devices
        self.updates = int(state["updates"])
        # A new version number, so collectors holding the old one fetch these weights.
        self.weight_version = int(state["weight_version"]) + 1
        self._restored_transitions = int(state["transitions"]) - self.replay.transitions_added
        self.episodes = [tuple(e) for e in state.get("episodes", [])]
        return self.weight_version
