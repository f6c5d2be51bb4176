"""Collectors: step environments with an epsilon-greedy local policy, stream records out.

Three layers, so the same loop runs with and without actorrt:

* :class:`CollectorCore` - environments, local policy copy, record building. No I/O.
* :func:`run_collect_loop` - the loop: collect, push with bounded in-flight pushes,
  refresh weights every K steps. Talks to the learner through a :class:`LearnerLink`.
* :class:`Collector` - the actor: builds a core and an :class:`ActorLink` over the
  learner's handle and runs the loop. ``examples.atari_dqn.bench_support`` runs the same
  loop against an in-process learner.

The actor runs unchanged on actorrt and on Ray: its only runtime calls (``wait``, ``get``
on its pushes) go through the backend seam (:mod:`examples.atari_dqn.backend`), whose
name it is given.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Protocol

import numpy as np
import torch

import actorrt
from examples.atari_dqn.backend import backend
from examples.atari_dqn.config import DQNConfig
from examples.atari_dqn.envs import AleVectorPool, EnvPool, make_pool, newest_frame
from examples.atari_dqn.exploration import apex_epsilons, epsilon_greedy, linear_epsilon
from examples.atari_dqn.networks import build_q_network
from examples.atari_dqn.replay import PREV_EARLIER_PUSH, PREV_NONE

__all__ = [
    "ActorLink",
    "Collector",
    "CollectorCore",
    "LearnerLink",
    "TimedLink",
    "run_collect_loop",
]

# Stream ids: collector id in the high bits, env index in the low ones; stable and unique
# across the cluster, which is all the replay needs.
_STREAM_SHIFT = 16

# What a push carries on the GPU with the cuda transport: what the replay stores there.
_DEVICE_KEYS = ("frame", "action", "reward", "terminated")


class CollectorCore:
    """Environments plus a local policy copy; turns env steps into replay records.

    Args:
        cfg: Experiment configuration.
        collector_id: 0-based index of this collector (seeds, stream ids).
        num_collectors: How many collectors run; the epsilon schedule uses
            ``frame_offset + own frames * num_collectors`` as its estimate of global frames.
        device: Where the local policy runs and where pushed tensors are put.
        frame_offset: Global frames already done before this run (``--resume``).
        pool: Use this environment pool instead of building one from ``cfg`` (tests).
    """

    def __init__(
        self,
        cfg: DQNConfig,
        collector_id: int = 0,
        num_collectors: int = 1,
        device: str | torch.device = "cpu",
        frame_offset: int = 0,
        pool: EnvPool | AleVectorPool | None = None,
    ) -> None:
        self.cfg = cfg
        self.collector_id = collector_id
        self.num_collectors = max(1, num_collectors)
        self.device = torch.device(device)
        self.frame_offset = frame_offset
        seed = cfg.seed + 1000 * (collector_id + 1)
        self.rng = np.random.default_rng(seed)
        self.pool = pool if pool is not None else make_pool(cfg, cfg.num_envs_per_collector, seed)
        obs_shape = self.pool.obs.shape[1:]
        self.n_actions = self.pool.n_actions
        self.q_net = build_q_network(cfg, obs_shape, self.n_actions).to(self.device).eval()
        self.weight_version = -1  # nothing from the learner yet
        self.weight_refreshes = 0
        self.frames = 0  # emulator frames this collector produced
        self.agent_steps = 0
        self.episodes = 0
        self.act_seconds = 0.0  # choosing actions (the policy's forward pass)
        self.env_seconds = 0.0  # stepping the emulators
        self._streams = [(collector_id << _STREAM_SHIFT) + j for j in range(len(self.pool))]
        # Ape-X: each env's own fixed epsilon, by its index among all the run's envs.
        envs = len(self.pool)
        self._fixed_epsilons = (
            apex_epsilons(collector_id * envs, envs, self.num_collectors * envs)
            if cfg.exploration == "ape-x"
            else None
        )
        self.new_push_order()
        self._new_push()
        # The first observation of every env starts an episode: it goes out in the first
        # push, so the learner can build that episode's first stacks.
        for j in range(len(self.pool)):
            self._add_record(j, self.pool.obs[j], PREV_NONE, 0, 0.0, False)

    # ----------------------------------------------------------------- records
    def new_push_order(self) -> None:
        """Numbers the next pushes from 0 again, under a new nonce (a new learner).

        A learner may run two pushes of one collector at once (``max_concurrency`` > 1)
        and adds them in this order, which the back pointers of their records need.
        """
        self._nonce = int.from_bytes(os.urandom(7), "little")
        self._push_seq = 0

    def _new_push(self) -> None:
        self._frames: list[np.ndarray] = []
        self._stream: list[int] = []
        self._prev: list[int] = []
        self._action: list[int] = []
        self._reward: list[float] = []
        self._term: list[bool] = []
        self._ep_return: list[float] = []
        self._ep_length: list[int] = []
        # Index in this push of each env's newest record; earlier pushes are named by
        # PREV_EARLIER_PUSH and resolved by the learner.
        self._last_index = [PREV_EARLIER_PUSH] * len(self.pool)

    def _add_record(
        self, j: int, obs: np.ndarray, prev: int, action: int, reward: float, term: bool
    ) -> None:
        self._frames.append(newest_frame(obs, self.cfg.frame_stack))
        self._stream.append(self._streams[j])
        self._prev.append(prev)
        self._action.append(action)
        self._reward.append(reward)
        self._term.append(term)
        self._last_index[j] = len(self._frames) - 1

    def _take_push(self) -> dict[str, torch.Tensor]:
        batch = {
            "frame": torch.from_numpy(np.stack(self._frames)),
            "stream": torch.tensor(self._stream, dtype=torch.int64),
            "prev": torch.tensor(self._prev, dtype=torch.int64),
            "action": torch.tensor(self._action, dtype=torch.int64),
            "reward": torch.tensor(self._reward, dtype=torch.float32),
            "terminated": torch.tensor(self._term, dtype=torch.bool),
            "ep_return": torch.tensor(self._ep_return, dtype=torch.float32),
            "ep_length": torch.tensor(self._ep_length, dtype=torch.int64),
            "order": torch.tensor([self.collector_id, self._nonce, self._push_seq]),
        }
        self._push_seq += 1
        self._new_push()
        if self.device.type != "cpu":
            # CUDA transport: the push leaves from this GPU and the device map lands it on
            # the learner's GPU without a trip through host memory. The bookkeeping the
            # learner reads on the host (stream ids, back pointers, episode ends, order)
            # stays on the CPU: reading it from a GPU would wait for the learner's queue
            # of training kernels.
            batch.update({k: batch[k].to(self.device, non_blocking=True) for k in _DEVICE_KEYS})
        return batch

    # ----------------------------------------------------------------- acting
    def epsilon(self) -> float:
        """Current exploration epsilon: the linear schedule's over estimated global
        frames, or the mean of this collector's fixed Ape-X epsilons."""
        if self._fixed_epsilons is not None:
            return float(self._fixed_epsilons.mean())
        global_frames = self.frame_offset + self.frames * self.num_collectors
        cfg = self.cfg
        return linear_epsilon(global_frames, cfg.eps_start, cfg.eps_end, cfg.eps_decay_frames)

    def epsilons(self) -> float | np.ndarray:
        """What the next step explores with: one epsilon for all envs (linear), or one
        per env (Ape-X)."""
        return self._fixed_epsilons if self._fixed_epsilons is not None else self.epsilon()

    def collect(self, steps: int) -> dict[str, torch.Tensor]:
        """Steps every env ``steps`` times and returns the push payload.

        Returns:
            Records (see :meth:`FrameReplay.add`) plus ``ep_return`` / ``ep_length`` of
            the episodes that ended (raw game scores, before reward clipping).
        """
        pool = self.pool
        clock = time.perf_counter
        for _ in range(steps):
            t0 = clock()
            actions = epsilon_greedy(
                self.q_net, pool.obs, self.epsilons(), self.n_actions, self.rng, self.device
            )
            t1 = clock()
            next_obs, rewards, term, trunc, reset_obs, infos = pool.step(actions)
            self.env_seconds += clock() - t1
            self.act_seconds += t1 - t0
            for j in range(len(pool)):
                self._add_record(
                    j,
                    next_obs[j],
                    self._last_index[j],
                    int(actions[j]),
                    float(rewards[j]),
                    bool(term[j]),
                )
                if term[j] or trunc[j]:
                    episode = infos[j].get("episode")
                    if episode is not None:
                        self._ep_return.append(float(episode["r"]))
                        self._ep_length.append(int(episode["l"]))
                    self.episodes += 1
                    self._add_record(j, reset_obs[j], PREV_NONE, 0, 0.0, False)
            self.agent_steps += len(pool)
            self.frames += len(pool) * self.cfg.frame_skip
        return self._take_push()

    def load_weights(self, reply: tuple[int, dict[str, torch.Tensor]] | None) -> bool:
        """Applies a ``Learner.get_weights`` reply; returns whether weights changed."""
        if reply is None:
            return False
        version, state = reply
        self.q_net.load_state_dict(state)
        self.weight_version = version
        self.weight_refreshes += 1
        return True

    def close(self) -> None:
        self.pool.close()


class LearnerLink(Protocol):
    """How the collect loop reaches a learner: asynchronously (actors) or directly."""

    def push(self, batch: dict[str, torch.Tensor]) -> Any:
        """Starts a push; returns a pending handle."""

    def request_weights(self, known_version: int) -> Any:
        """Starts a ``get_weights`` call; returns a pending handle."""

    def wait(self, pending: list[Any], num_returns: int, timeout: float) -> tuple[list, list]:
        """Like ``actorrt.wait``: ``(ready, not_ready)``."""

    def ready(self, handle: Any) -> bool:
        """Whether a pending handle has its result."""

    def result(self, handle: Any, timeout: float) -> Any:
        """The handle's result; raises the remote error if the call failed."""


class ActorLink:
    """:class:`LearnerLink` over a handle of the learner actor, on either backend.

    Args:
        learner: The learner's handle.
        backend_name: ``"actorrt"`` or ``"ray"`` (:func:`~examples.atari_dqn.backend.backend`).
    """

    def __init__(self, learner: Any, backend_name: str = "actorrt") -> None:
        self._rt = backend(backend_name)
        self._learner = learner

    def push(self, batch: dict[str, torch.Tensor]) -> Any:
        return self._learner.push.remote(batch)

    def request_weights(self, known_version: int) -> Any:
        return self._learner.get_weights.remote(known_version)

    def wait(self, pending: list[Any], num_returns: int, timeout: float) -> tuple[list, list]:
        return self._rt.wait(pending, num_returns, timeout)

    def ready(self, handle: Any) -> bool:
        return bool(self._rt.wait([handle], 1, 0)[0])

    def result(self, handle: Any, timeout: float) -> Any:
        reply = self._rt.get(handle, timeout)
        if isinstance(reply, tuple) and len(reply) == 2 and not isinstance(reply[1], dict):
            # (version, ref) of weights the learner published: fetched from its process
            try:
                return reply[0], self._rt.get(reply[1], timeout)
            except Exception as exc:
                if not self._rt.object_lost(exc):
                    raise
                # The weights live in the learner's process, so this most likely means the
                # learner died after it answered. Asking it says so as a failed push does
                # (the learner's ActorDiedError, which the driver recovers from); a learner
                # that answers leaves the object's own error.
                self._rt.get(self._learner.stats.remote(), timeout)
                raise
        return reply


class TimedLink:
    """A :class:`LearnerLink` that adds up the time its calls take: the collector's
    communication.

    ``send_seconds``: in ``push`` and ``request_weights`` (packing a call and handing it to
    the runtime). ``wait_seconds``: in ``wait``, ``ready`` and ``result`` (blocked on the
    learner's replies: backpressure when it is slower, weights replies).
    """

    def __init__(self, link: LearnerLink) -> None:
        self.link = link
        self.send_seconds = 0.0
        self.wait_seconds = 0.0

    def _timed(self, sending: bool, call: Any, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return call(*args)
        finally:
            spent = time.perf_counter() - t0
            if sending:
                self.send_seconds += spent
            else:
                self.wait_seconds += spent

    def push(self, batch: dict[str, torch.Tensor]) -> Any:
        return self._timed(True, self.link.push, batch)

    def request_weights(self, known_version: int) -> Any:
        return self._timed(True, self.link.request_weights, known_version)

    def wait(self, pending: list[Any], num_returns: int, timeout: float) -> tuple[list, list]:
        return self._timed(False, self.link.wait, pending, num_returns, timeout)

    def ready(self, handle: Any) -> bool:
        return self._timed(False, self.link.ready, handle)

    def result(self, handle: Any, timeout: float) -> Any:
        return self._timed(False, self.link.result, handle, timeout)


def run_collect_loop(
    core: CollectorCore,
    link: LearnerLink,
    max_frames: int,
    *,
    timeout: float = 300.0,
    seconds: float | None = None,
) -> dict[str, Any]:
    """Collects until ``core`` has produced ``max_frames`` frames, streaming to ``link``.

    Backpressure: at most ``cfg.max_in_flight`` pushes are outstanding; the loop waits on
    the oldest before sending more, so a slow learner bounds the memory held in flight.
    Weights: every ``cfg.weight_refresh_every`` vector steps a ``get_weights`` request is
    started; it is applied when its reply is there, while collection goes on.

    Args:
        core: The collector core.
        link: Connection to the learner.
        max_frames: Frame budget of this collector.
        timeout: Longest wait for one learner reply before giving up (seconds).
        seconds: Stop sending pushes after this long, frames left or not (the run's
            ``train_seconds``); the pushes in flight are still waited for. None: no
            time bound.

    Returns:
        ``frames``, ``agent_steps``, ``episodes``, ``pushes``, ``weight_refreshes``,
        ``weight_version``, ``max_in_flight_seen``, ``seconds``, ``fps``, and the time
        spent talking to the learner (:class:`TimedLink`): ``send_seconds``,
        ``wait_seconds`` and ``comm_share`` (their sum over ``seconds``); the time spent
        choosing actions (``act_seconds``) and stepping the emulators (``env_seconds``).

    On actorrt's timeline (``--trace``) each push's collection is a ``collect`` span and
    each wait for the learner's replies a ``wait for learner`` span.

    Raises:
        TimeoutError: The learner did not answer within ``timeout``.
    """
    cfg = core.cfg
    link = timed = TimedLink(link)
    in_flight: list[Any] = []
    weights_req: Any = None
    # Start "due", so the first request goes out with the first push.
    steps_since_refresh = cfg.weight_refresh_every
    pushes = 0
    max_seen = 0
    start_frames = core.frames
    act0, env0 = core.act_seconds, core.env_seconds
    t0 = time.perf_counter()
    end = math.inf if seconds is None else t0 + seconds

    def apply_weights_if_ready(block: bool) -> None:
        nonlocal weights_req
        if weights_req is not None and (block or link.ready(weights_req)):
            core.load_weights(link.result(weights_req, timeout))
            weights_req = None

    while core.frames - start_frames < max_frames and time.perf_counter() < end:
        with actorrt.profile("collect", steps=cfg.steps_per_push):
            batch = core.collect(cfg.steps_per_push)
        while len(in_flight) >= cfg.max_in_flight:
            with actorrt.profile("wait for learner"):
                ready, in_flight = link.wait(in_flight, 1, timeout)
            if not ready:
                raise TimeoutError(
                    f"collector {core.collector_id}: the learner answered no push in {timeout}s"
                )
            for ref in ready:
                link.result(ref, timeout)  # raises the learner's error, if any
        in_flight.append(link.push(batch))
        pushes += 1
        max_seen = max(max_seen, len(in_flight))
        steps_since_refresh += cfg.steps_per_push
        apply_weights_if_ready(block=False)
        if weights_req is None and steps_since_refresh >= cfg.weight_refresh_every:
            weights_req = link.request_weights(core.weight_version)
            steps_since_refresh = 0
    for ref in in_flight:
        link.result(ref, timeout)
    apply_weights_if_ready(block=True)
    seconds = time.perf_counter() - t0
    frames = core.frames - start_frames
    return {
        "collector_id": core.collector_id,
        "frames": frames,
        "agent_steps": core.agent_steps,
        "episodes": core.episodes,
        "pushes": pushes,
        "weight_refreshes": core.weight_refreshes,
        "weight_version": core.weight_version,
        "max_in_flight_seen": max_seen,
        "seconds": seconds,
        "fps": frames / seconds if seconds > 0 else 0.0,
        "send_seconds": timed.send_seconds,
        "wait_seconds": timed.wait_seconds,
        "comm_share": (timed.send_seconds + timed.wait_seconds) / seconds if seconds > 0 else 0.0,
        "act_seconds": core.act_seconds - act0,
        "env_seconds": core.env_seconds - env0,
    }


class Collector:
    """The collector actor (label ``collector``): runs the loop against the learner actor.

    Args:
        cfg: Experiment configuration (DQNConfig or dict).
        learner: The learner's actor handle.
        collector_id: 0-based index.
        num_collectors: Number of collectors in the run (epsilon schedule estimate).
        transport: ``"cuda"`` puts the policy and the pushed tensors on this process's GPU
            (when it has one); ``"cpu"`` keeps everything on the host.
        frame_offset: Global frames done before this run (``--resume``).
        backend: The runtime this actor runs on, ``"actorrt"`` or ``"ray"``: its waits on
            the learner's replies go through that backend.
    """

    def __init__(
        self,
        cfg: DQNConfig | dict[str, Any],
        learner: Any,
        collector_id: int = 0,
        num_collectors: int = 1,
        *,
        transport: str = "cpu",
        frame_offset: int = 0,
        backend: str = "actorrt",
    ) -> None:
        if isinstance(cfg, dict):
            cfg = DQNConfig.from_dict(cfg)
        # Acting is batch-of-a-few inference: one thread each leaves the cores to the
        # environments, the other collectors and the learner.
        torch.set_num_threads(1)
        if transport == "cuda" and torch.cuda.is_available():
            device = torch.device("cuda", torch.cuda.current_device())
        else:
            device = torch.device("cpu")
        self.core = CollectorCore(cfg, collector_id, num_collectors, device, frame_offset)
        self.backend = backend
        self.link = ActorLink(learner, backend)
        self.last_result: dict[str, Any] = {}

    def set_learner(self, learner: Any) -> None:
        """Pushes to ``learner`` from now on: the driver's replacement of a learner that died.

        The weights version held is forgotten, so the next refresh fetches the new learner's
        weights whatever version it counts from. The new learner has not seen this
        collector's streams: it takes each one's next frame as an episode start
        (:meth:`FrameReplay.add`), so no transition is made up from a frame it never saw.
        """
        self.link = ActorLink(learner, self.backend)
        self.core.weight_version = -1
        self.core.new_push_order()

    def run(
        self, max_frames: int, timeout: float = 300.0, seconds: float | None = None
    ) -> dict[str, Any]:
        """Collects ``max_frames`` frames, or for ``seconds`` (if given) when that ends
        first; returns the loop's counters (:func:`run_collect_loop`)."""
        self.last_result = run_collect_loop(
            self.core, self.link, max_frames, timeout=timeout, seconds=seconds
        )
        return self.last_result

    def stats(self) -> dict[str, Any]:
        """Counters of the collector so far (and of its last finished run)."""
        core = self.core
        return {
            "collector_id": core.collector_id,
            "pid": os.getpid(),
            "frames": core.frames,
            "episodes": core.episodes,
            "weight_refreshes": core.weight_refreshes,
            "weight_version": core.weight_version,
            "epsilon": core.epsilon(),
            "device": str(core.device),
            "last_run": dict(self.last_result),
        }
