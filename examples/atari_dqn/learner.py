"""The DQN learner: replay on its device, double DQN with a target network, Adam.

A plain class. The driver turns it into an actor with
``actorrt.actor(label="learner", num_gpus=..., max_concurrency=...)(Learner)``, and tests
and benchmarks use it in-process unchanged.

Every ``train_every`` transitions received buy one gradient step, which fixes the replay
ratio (``batch_size / train_every`` samples per transition) whatever the speeds of
collectors and learner. Where the steps run:

* ``background=False`` (in-process use, tests): inside :meth:`Learner.push`, which
  returns when the steps its transitions paid for are done.
* ``background=True`` (the actor): in a training thread of the learner's own. A push
  adds its records to replay and returns at once, unless training trails the data by
  more than ``max_train_lag`` transitions; then it waits for the thread to catch up.
  That wait is the backpressure: collectors, which keep at most ``max_in_flight``
  pushes outstanding, slow down to the learner's pace instead of piling up data. The
  thread wakes the held pushes only once training trails by ``max_train_lag`` or less,
  not after every step: in the 12-collector run 48 of them may be held. Ingest
  never waits behind a gradient step, and with ``max_concurrency`` above one neither do
  ``stats`` and ``get_weights``. Pushes of one collector can then run on two threads
  at once: each carries its collector's sequence number (``order``), and the learner
  adds them to replay in that order, as the ring's back pointers require.

With ``max_replay_ratio`` the replay ratio becomes a floor: the training thread also takes
spare steps while nothing is owed, until its steps reach that ratio of the transitions
received, and those steps count against the pushes that follow.

A step reads nothing back from the device (no ``.item()``, sampling without rejection
loop): on a GPU the training thread only queues kernels, and the losses are summed on
the device and read when :meth:`Learner.stats` is called.
"""

from __future__ import annotations

import copy
import math
import os
import threading
import time
import weakref
from typing import Any

import numpy as np
import torch

import actorrt
from examples.atari_dqn.backend import backend
from examples.atari_dqn.config import DQNConfig
from examples.atari_dqn.envs import obs_spec
from examples.atari_dqn.graphed import GraphedStep
from examples.atari_dqn.losses import dqn_loss
from examples.atari_dqn.networks import NatureQNetwork, build_q_network
from examples.atari_dqn.replay import FrameReplay

__all__ = ["ORDER_WAIT_S", "Learner", "learner_concurrency", "to_cpu"]

#: Longest wait of a push for the pushes its collector made before it (seconds). They
#: are on the learner's threads already, so this only bounds the wait for one that was
#: lost (its collector died mid-call): the push is then added out of order.
ORDER_WAIT_S = 10.0


def to_cpu(obj: Any) -> Any:
    """Copies every tensor in a nested dict/list structure to the CPU (detached)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def learner_concurrency(num_collectors: int, cfg: DQNConfig) -> int:
    """The learner actor's ``max_concurrency``: room for every call that may wait.

    Each collector may have ``max_in_flight`` pushes (which can wait on the training
    thread) and one weights request at the learner; the driver a few calls more
    (``stats``, weights to evaluate, checkpoints). With fewer threads, a push waiting its
    turn could hold the thread the push before it needs.
    """
    return num_collectors * (cfg.max_in_flight + 1) + 4


def _default_device() -> torch.device:
    # On a worker the runtime makes the actor's GPU the current device.
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _adam(params: Any, cfg: DQNConfig, capturable: bool = False) -> torch.optim.Adam:
    # The fused kernel updates all tensors at once: measured on the 2-core VM, 1.7 ms a
    # step instead of 11.7 ms for the Nature CNN (docs/performance.md); on a GPU it is a
    # few kernels instead of several per parameter tensor. capturable: its step count
    # stays on the device, so a CUDA graph can capture the update (GraphedStep).
    if capturable:
        return torch.optim.Adam(params, lr=cfg.lr, eps=cfg.adam_eps, fused=True, capturable=True)
    try:
        return torch.optim.Adam(params, lr=cfg.lr, eps=cfg.adam_eps, fused=True)
    except (RuntimeError, TypeError):  # a torch or device without the fused kernel
        return torch.optim.Adam(params, lr=cfg.lr, eps=cfg.adam_eps)


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
        background: Train in a thread of the learner's own (see the module docstring);
            False: inside :meth:`push`.
    """

    def __init__(
        self,
        cfg: DQNConfig | dict[str, Any],
        *,
        transport: str = "cpu",
        device: str | torch.device | None = None,
        num_threads: int | None = None,
        publish: str | None = None,
        background: bool = False,
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
        if self.device.type == "cuda":
            # Fixed input shapes: let cuDNN pick the fastest convolution algorithms once.
            torch.backends.cudnn.benchmark = True

        obs_shape, obs_dtype, n_actions = obs_spec(cfg)
        self.obs_shape = obs_shape
        self.n_actions = n_actions
        self.q_net = build_q_network(cfg, obs_shape, n_actions).to(self.device)
        if cfg.channels_last and isinstance(self.q_net, NatureQNetwork):
            self.q_net.use_channels_last()  # before the copy: the target network follows
        self.target_net = copy.deepcopy(self.q_net).requires_grad_(False)
        graphed = cfg.cuda_graph and self.device.type == "cuda"
        if graphed and cfg.lr_final_fraction != 1.0:
            raise ValueError("cuda_graph needs a constant learning rate: set lr_final_fraction=1.0")
        self.optimizer = _adam(self.q_net.parameters(), cfg, capturable=graphed)
        # The step as a CUDA graph (cfg.cuda_graph on a GPU); None: eager steps.
        self._graphed = GraphedStep(self.device) if graphed else None
        self.graph_batch: dict[str, torch.Tensor] | None = None

        frame_shape = obs_shape[1:] if cfg.frame_stack > 1 else obs_shape
        torch_dtype = torch.from_numpy(np.zeros(0, dtype=obs_dtype)).dtype
        self.replay = FrameReplay(
            cfg.replay_capacity,
            frame_shape,
            torch_dtype,
            cfg.frame_stack,
            self.device,
            seed=cfg.seed,
            priority_exponent=cfg.priority_exponent,
            priority_weight=cfg.priority_weight,
        )

        self.updates = 0
        self._restored_transitions = 0  # transitions counted before a checkpoint was loaded
        self.weight_version = 0  # bumped by every gradient step
        self.pushes = 0
        self.weights_served = 0
        self.weights_published = 0  # versions put as objects (see publish)
        self._publish = publish
        self._published: tuple[int, Any] | None = None  # (version, ref) of the last put
        self.episodes: list[tuple[int, float, int]] = []  # (frame, return, length)
        self._started = time.monotonic()
        self.train_seconds = 0.0  # host time in gradient steps (on a GPU: queuing them)
        self.push_wait_seconds = 0.0  # pushes held until training caught up

        # Locks, never held while waiting on another: the ring (a push's add against a
        # step's sample), the parameters (a step's optimizer update against weights and
        # checkpoint reads), the published weights, and the counters below with their
        # conditions.
        self._replay_lock = threading.Lock()
        self._param_lock = threading.Lock()
        self._publish_lock = threading.Lock()  # the last version put (publish)
        self._lock = threading.Lock()
        # One condition per kind of waiter, each notified only when its waiters may go
        # on: a notify_all on one shared condition after every step woke every push held
        # by backpressure (48 in the 12-collector run) to find it must wait on, and the
        # training thread then queued for the GIL behind them (docs/performance.md).
        self._owed_cv = threading.Condition(self._lock)  # the training thread: steps owed
        self._paid_cv = threading.Condition(self._lock)  # pushes held, drain(): steps done
        self._turn_cv = threading.Condition(self._lock)  # pushes awaiting their turn
        self._owed = 0  # transitions past learning_starts not yet paid for with a step
        # With max_replay_ratio, the training thread also steps while nothing is owed,
        # until the steps reach that ratio of the transitions past learning_starts: the
        # learner's spare time spent on learning. _owed then goes below 0 (steps ahead).
        self._steps_paid = 0  # steps taken against the transitions past learning_starts
        if cfg.max_replay_ratio is not None and (
            cfg.max_replay_ratio < cfg.batch_size / cfg.train_every
        ):
            raise ValueError(
                f"max_replay_ratio={cfg.max_replay_ratio:g} is below the replay ratio "
                f"{cfg.batch_size / cfg.train_every:g} (batch_size / train_every)"
            )
        self._spare_every = (
            cfg.batch_size / cfg.max_replay_ratio if cfg.max_replay_ratio is not None else None
        )
        self._order: dict[int, tuple[int, int]] = {}  # collector -> (nonce, next seq)
        zero = torch.zeros((), device=self.device)
        self._loss_sum, self._q_sum = zero, zero  # on the device, since the last stats()
        self._stat_steps = 0
        self._last_loss: torch.Tensor | None = None
        self.last_loss = math.nan  # the latest step's loss as of the last stats() call
        self._error: BaseException | None = None  # what stopped the training thread
        self._stop = False
        self._thread: threading.Thread | None = None
        if background:
            # The thread holds the learner weakly: a learner dropped by its actor host
            # (killed) is collected, and the thread ends within a wait.
            self._thread = threading.Thread(
                target=Learner._train_forever,
                args=(weakref.ref(self), self.device),
                name="learner-train",
                daemon=True,
            )
            self._thread.start()

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
                episodes that ended in this push, and optionally ``order``: int64
                ``(collector, nonce, seq)``, the collector's push sequence number (pushes
                of one ``(collector, nonce)`` are added in ``seq`` order, from 0).

        Returns:
            Transitions received so far (all collectors).

        Raises:
            RuntimeError: The training thread failed (its error is the cause).
        """
        self._raise_if_failed()
        order = batch.get("order")
        turn = self._wait_turn(order) if order is not None else None
        try:
            with self._replay_lock:
                added = self.replay.add(batch)
                frames = self.frames
                returns = batch.get("ep_return")
                if returns is not None and returns.numel():
                    lengths = batch["ep_length"].tolist()
                    for r, n in zip(returns.tolist(), lengths, strict=True):
                        self.episodes.append((frames, float(r), int(n)))
                paying = self.replay.transitions_added >= self.cfg.learning_starts
        finally:
            if turn is not None:
                self._end_turn(turn)
        with self._lock:
            self.pushes += 1
            if paying:
                self._owed += added
                if self._owed >= self.cfg.train_every or self._spare_step():
                    self._owed_cv.notify()  # the training thread, its only waiter
        if self._thread is None:
            self._train_owed()
        else:
            self._wait_for_training()
        return self.transitions

    def _wait_turn(self, order: torch.Tensor) -> tuple[int, int, int]:
        """Waits until the pushes its collector made before this one were added."""
        source, nonce, seq = (int(x) for x in order.tolist())
        deadline = time.monotonic() + ORDER_WAIT_S
        with self._lock:
            while True:
                known = self._order.get(source)
                # A collector unknown here, or a new one in its place (another nonce),
                # starts at 0. A seq below the next one is late: add it now.
                expected = known[1] if known is not None and known[0] == nonce else 0
                left = deadline - time.monotonic()
                if seq <= expected or left <= 0 or self._error is not None:
                    return source, nonce, seq
                self._turn_cv.wait(left)

    def _end_turn(self, turn: tuple[int, int, int]) -> None:
        source, nonce, seq = turn
        with self._lock:
            known = self._order.get(source)
            if known is None or known[0] != nonce or known[1] <= seq:
                self._order[source] = (nonce, seq + 1)
            self._turn_cv.notify_all()

    def _wait_for_training(self) -> None:
        """Background mode: holds the push while training trails by too much."""
        t0 = time.perf_counter()
        with self._lock:
            while self._owed > self.cfg.max_train_lag and self._error is None and not self._stop:
                self._paid_cv.wait(1.0)
            self.push_wait_seconds += time.perf_counter() - t0  # pushes wait side by side
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError("the learner's training thread failed") from self._error

    def _train_owed(self) -> None:
        """Inline mode: the steps owed, now."""
        t0 = time.perf_counter()
        while True:
            with self._lock:
                if self._owed < self.cfg.train_every:
                    break
                self._owed -= self.cfg.train_every
                self._steps_paid += 1
            self.train_step()
        self.train_seconds += time.perf_counter() - t0

    @staticmethod
    def _train_forever(ref: weakref.ref[Learner], device: torch.device) -> None:
        """The training thread: steps while transitions are owed, until stopped or dropped."""
        if device.type == "cuda":
            torch.cuda.set_device(device)
        while True:
            learner = ref()
            if learner is None:
                return
            try:
                if not learner._train_once(wait=0.5):
                    return
            except BaseException as exc:  # handed to the next push, which raises it
                with learner._lock:
                    learner._error = exc
                    learner._wake_all()
                return
            del learner  # between steps the thread must not keep the learner alive

    def _spare_step(self) -> bool:
        """Whether one more step stays within ``max_replay_ratio`` (under ``_lock``)."""
        every = self._spare_every
        if every is None:
            return False
        # the transitions past learning_starts: what is owed plus what the steps paid for
        paying = self._owed + self._steps_paid * self.cfg.train_every
        return (self._steps_paid + 1) * every <= paying

    def _train_once(self, wait: float) -> bool:
        """One step if one is owed (or spare, below ``max_replay_ratio``), else waits up
        to ``wait`` s; False once stopped."""
        with self._lock:
            if self._stop:
                return False
            if self._owed < self.cfg.train_every and not self._spare_step():
                self._owed_cv.wait(wait)
                return not self._stop
        t0 = time.perf_counter()
        self.train_step()
        self.train_seconds += time.perf_counter() - t0
        with self._lock:
            # A spare step pays ahead: the pushes after it owe that much less.
            self._owed -= self.cfg.train_every
            self._steps_paid += 1
            if self._owed <= self.cfg.max_train_lag or self._owed < self.cfg.train_every:
                # Held pushes may go on (and drain() may return): not before, so a step
                # that leaves them waiting wakes nobody.
                self._paid_cv.notify_all()
        return True

    def _wake_all(self) -> None:
        """Wakes every waiter, to see ``_error`` or ``_stop`` (under ``_lock``)."""
        self._owed_cv.notify_all()
        self._paid_cv.notify_all()
        self._turn_cv.notify_all()

    def drain(self, timeout: float = 60.0) -> int:
        """Trains every step owed (the replay ratio made exact); returns ``updates``.

        Raises:
            TimeoutError: Training still owed steps after ``timeout`` seconds.
            RuntimeError: The training thread failed.
        """
        if self._thread is None:
            self._train_owed()
            return self.updates
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._owed >= self.cfg.train_every and self._error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"the learner still owed {self._owed // self.cfg.train_every} "
                        f"step(s) after {timeout} s"
                    )
                self._paid_cv.wait(left)
        self._raise_if_failed()
        return self.updates

    def close(self, timeout: float = 10.0) -> None:
        """Stops the training thread (steps owed are left untrained)."""
        with self._lock:
            self._stop = True
            self._wake_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # ----------------------------------------------------------------- training
    def train_step(self) -> torch.Tensor:
        """One gradient step on a sampled batch (uniformly, or by priority: then the
        batch's TD errors become its transitions' new priorities).

        On actorrt's timeline (``--trace``) each step is a ``train step`` span of the
        training thread, its parts (``sample``, ``loss and backward``, ``optimizer``)
        beneath it; on a GPU its twin on the learner's ``cuda:N`` track shows when the
        GPU ran it and how far it trailed the thread (``lag_ms``).

        Returns:
            The loss, detached, on the learner's device: reading it waits for the step.
        """
        with actorrt.profile(
            "train step", cuda=self.device.type == "cuda", batch=self.cfg.batch_size
        ):
            return self._train_step()

    def _train_step(self) -> torch.Tensor:
        cfg = self.cfg
        if self._graphed is not None:
            loss, q_mean = self._graphed_step()
        else:
            if cfg.lr_final_fraction != 1.0:
                progress = min(1.0, self.frames / max(1, cfg.total_frames))
                scale = 1.0 + progress * (cfg.lr_final_fraction - 1.0)
                for group in self.optimizer.param_groups:
                    group["lr"] = cfg.lr * scale
            with actorrt.profile("sample"), self._replay_lock:
                # The gathers copy the batch out of the ring, so pushes may write to it
                # as soon as the lock is free (on a GPU: kernels queued after these).
                batch = self.replay.sample(
                    cfg.batch_size, check=False, n_step=cfg.n_step, gamma=cfg.gamma
                )
            with actorrt.profile("loss and backward"):
                loss, q_taken, td_error = self._loss_and_backward(batch)
            if self.replay.prioritized:
                with actorrt.profile("priorities"), self._replay_lock:
                    self.replay.update_priorities(batch["index"], td_error)
            with actorrt.profile("optimizer"):
                self._clip_gradients()
                with self._param_lock:
                    self.optimizer.step()
                    self._count_step()
            loss, q_mean = loss.detach(), q_taken.mean()
        with self._lock:
            # Summed on the device; stats() reads them back (one wait per call, not per
            # step). Out of place, so stats() may read the tensors it took meanwhile.
            self._loss_sum = self._loss_sum + loss
            self._q_sum = self._q_sum + q_mean
            self._stat_steps += 1
            self._last_loss = loss
        return loss

    def _loss_and_backward(
        self, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        loss, q_taken, td_error = dqn_loss(self.q_net, self.target_net, batch, self.cfg.gamma)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        return loss, q_taken, td_error

    def _clip_gradients(self) -> None:
        if self.cfg.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.q_net.parameters(), self.cfg.max_grad_norm)

    def _count_step(self) -> None:
        """After an optimizer update, under the parameter lock."""
        self.updates += 1
        self.weight_version += 1
        if self.updates % self.cfg.target_update_every == 0:
            # In place: a captured step keeps reading the target network's tensors.
            self.target_net.load_state_dict(self.q_net.state_dict())

    def _graphed_step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One step through the CUDA graph: its loss and mean Q, copied out of it."""
        graphed = self._graphed
        assert graphed is not None
        graphed.throttle()  # outside the locks: pushes go on while it waits for the GPU
        # Under both locks, as the eager step's sample and update are: the replay (one
        # launch) reads the ring and writes the parameters.
        with self._replay_lock, self._param_lock:
            loss, q_mean = graphed(self._graph_body)
            self._count_step()
        return loss.clone(), q_mean.clone()  # the next replay overwrites the graph's

    def _graph_body(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole step as :class:`GraphedStep` runs and captures it: no host sync."""
        cfg = self.cfg
        batch = self.replay.sample(
            cfg.batch_size, n_step=cfg.n_step, gamma=cfg.gamma, graph_safe=True
        )
        self.graph_batch = batch  # after capture: the last replay's batch (for tests)
        loss, q_taken, td_error = self._loss_and_backward(batch)
        if self.replay.prioritized:
            self.replay.update_priorities(batch["index"], td_error)
        self._clip_gradients()
        self.optimizer.step()
        return loss.detach(), q_taken.mean()

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
        with self._param_lock:
            version = self.weight_version
            if known_version == version:
                return None
            self.weights_served += 1
            published = self._published
            if not cpu and published is not None and published[0] == version:
                return published
            # A copy of one version, never half an optimizer step. On a GPU it is a
            # device-to-device copy queued between two steps: nothing here waits for it.
            # NCHW copies whatever the learner's layout (channels_last): what collectors
            # and checkpoints read never depends on it.
            snapshot = {
                k: v.detach().clone(memory_format=torch.contiguous_format)
                for k, v in self.q_net.state_dict().items()
            }
        on_gpu = self.device.type == "cuda"
        if on_gpu and (cpu or self.transport != "cuda"):
            # Outside the lock: this waits for the device, the training thread does not.
            snapshot = to_cpu(snapshot)
        if cpu or self._publish is None:
            return version, snapshot
        with self._publish_lock:
            # Once per version: the collectors that ask for it fetch this one object. A
            # newer one put meanwhile by another call is as good.
            if self._published is None or self._published[0] < version:
                self._published = (version, backend(self._publish).put(snapshot))
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
            ``train_lag`` (transitions received and not yet trained on; 0 when spare
            steps, below ``max_replay_ratio``, are ahead),
            ``push_wait_seconds`` (summed over pushes: held until training caught up),
            ``batch_size``, ``uptime_s``, ``device``, ``pid`` (of the learner's process).
        """
        zero = torch.zeros((), device=self.device)
        with self._lock:
            loss_sum, q_sum, steps = self._loss_sum, self._q_sum, self._stat_steps
            self._loss_sum, self._q_sum, self._stat_steps = zero, zero, 0
            last, lag = self._last_loss, max(0, self._owed)
        # Read back here, outside the lock: the one wait for the device per call.
        if last is not None:
            self.last_loss = float(last)
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
            "loss_mean": float(loss_sum) / steps if steps else math.nan,
            "q_mean": float(q_sum) / steps if steps else math.nan,
            "episodes_total": len(self.episodes),
            "episodes": self.episodes[episodes_since:],
            "train_seconds": self.train_seconds,
            "train_lag": lag,
            "push_wait_seconds": self.push_wait_seconds,
            "batch_size": self.cfg.batch_size,
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
        with self._param_lock:  # one step's weights, optimizer state and counters
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
        with self._param_lock:
            self.q_net.load_state_dict(state["q_net"])
            self.target_net.load_state_dict(state["target_net"])
            self.optimizer.load_state_dict(state["optimizer"])  # moves state to param devices
            if self._graphed is not None:
                # New optimizer tensors (and a checkpoint's own flags): capture anew.
                for group in self.optimizer.param_groups:
                    group["capturable"] = True
                self._graphed = GraphedStep(self.device)
            self.updates = int(state["updates"])
            # A new version number, so collectors holding the old one fetch these weights.
            self.weight_version = int(state["weight_version"]) + 1
        with self._replay_lock:
            added = self.replay.transitions_added
            self._restored_transitions = int(state["transitions"]) - added
            self.episodes = [tuple(e) for e in state.get("episodes", [])]
        return self.weight_version
