"""``Runtime``: the one object holding a process's actorrt state.

Only this module calls ``init_rpc`` and ``rpc.shutdown``. The driver (rank 0) and every
worker have one ``Runtime``; a call travels ``ActorMethod.remote`` -> ``Runtime.submit``
-> ``rpc_async(worker, host.rpc_call)`` -> mailbox -> method -> reply -> ``ObjectRef``.
"""

from __future__ import annotations

import itertools
import threading
import uuid
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import torch
import torch.distributed.rpc as rpc

from actorrt.actor_class import ActorClass, ActorHandle
from actorrt.errors import ActorDiedError
from actorrt.options import ActorOptions
from actorrt.placement.clusterfile import ClusterSpec
from actorrt.placement.plan import Plan
from actorrt.refs import ObjectRef
from actorrt.runtime import host as host_mod
from actorrt.runtime import shm
from actorrt.runtime.batches import CallBatches, ReplyBatches
from actorrt.runtime.context import current, is_initialized
from actorrt.runtime.context import install as _install
from actorrt.runtime.directory import (
    ActorInfo,
    ClusterDirectory,
    NodeInfo,
    Placement,
    rpc_actors,
    rpc_lookup,
    rpc_nodes,
    rpc_place,
    rpc_register_name,
    rpc_released,
)
from actorrt.runtime.host import ActorHost
from actorrt.runtime.outbox import Answered, coalescing_enabled
from actorrt.runtime.payload import Wire, pack
from actorrt.runtime.protocol import rpc_failure, unsendable_argument
from actorrt.runtime.roads import Road, tensor_road

__all__ = ["Runtime", "current", "is_initialized"]

R = TypeVar("R")


class Runtime:
    """Process-wide actorrt state: the RPC agent, actor host, sequence numbers, directory.

    Args:
        name: This process's RPC name (``"driver"`` for rank 0).
        rank: This process's rank.
        driver_name: RPC name of rank 0, which keeps the cluster directory.
        directory: The cluster directory (rank 0 only).
        device_maps: This process's device map to each peer it has one to; CUDA tensors
            going anywhere else are staged through host memory.
        guard_tiny_cuda: CUDA tensors may go over cuda_gdr, which can crash on tensors
            under 32 bytes (pytorch issue 57136): stage those through host memory.
        on_shutdown: Called by :meth:`shutdown` after the RPC agent is down (rank 0 stops
            its local workers and store there).
    """

    def __init__(
        self,
        *,
        name: str,
        rank: int,
        driver_name: str = "driver",
        directory: ClusterDirectory | None = None,
        device_maps: Mapping[str, Mapping[str, str]] | None = None,
        guard_tiny_cuda: bool = False,
        on_shutdown: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.rank = rank
        self.driver_name = driver_name
        self.directory = directory
        self._device_maps = dict(device_maps or {})
        self._guard_tiny = guard_tiny_cuda
        self._cuda = torch.cuda.is_available()
        self._shm = shm.enabled()  # same-host zero-copy road for large CPU tensors
        self._roads: dict[tuple[str, bool], Road | None] = {}
        self.host = ActorHost(self._pack_reply, on_actor_end=self._actor_ended)
        # Bursts of calls, and of replies, travel in batches (see runtime/batches.py).
        self.calls = CallBatches(name)
        self.replies = ReplyBatches(name, self.host.deliver)
        self._coalesce = coalescing_enabled()
        self._seqs: dict[str, itertools.count[int]] = {}
        self._dead_workers: set[str] = set()
        self.local_worker_pids: list[int] = []  # pids of a local cluster's workers (driver)
        self.pids: dict[int, int] = {}  # rank -> pid, as each process reported it (driver)
        self.plan: Plan | None = None  # the cluster's placement plan (every process)
        self.spec: ClusterSpec | None = None  # what the plan was made from (driver)
        self.descriptions: list[dict[str, Any]] = []  # node descriptions by rank (driver)
        self._on_shutdown = on_shutdown
        self.stopped = threading.Event()  # set once this runtime is shutting down
        self.stop_requested = threading.Event()  # a worker's cue (from the driver) to stop

    # -- context manager: `with actorrt.start(): ...` -----------------------------
    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Shuts this runtime down and clears the process's runtime slot (driver side)."""
        try:
            self.shutdown()
        finally:
            _install(None)

    # -- actors ----------------------------------------------------------------
    def create_actor(
        self,
        actor_class: ActorClass[Any],
        options: ActorOptions,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> ActorHandle:
        """Places the actor, ships its class and constructor arguments, returns its handle.

        With ``options.get_if_exists``, returns the actor already named ``options.name``
        (of the same class) when there is one.
        """
        class_name = actor_class.__name__
        class_path = f"{actor_class.__module__}.{class_name}"  # the same on every process
        actor_id = uuid.uuid4().hex
        args, kwargs = _resolve_now(args, kwargs)
        if options.get_if_exists:
            # Finding the actor reserves nothing: a full slot must not fail the lookup.
            found = self._directory_call(rpc_lookup, options.name, class_path)
            if found is not None:
                return found
        placement = self._place(actor_id, options, class_name)
        handle = ActorHandle(actor_id, placement.worker, class_name, actor_class._table, None)
        try:
            if options.name is not None:
                # Registering is one step in the directory: of concurrent get_if_exists
                # creators one registers; the others get its actor and give back their place.
                found = self._directory_call(
                    rpc_register_name, options.name, handle, options.get_if_exists, class_path
                )
                if found is not None:
                    self._directory_call(rpc_released, actor_id)
                    return found
            key, blob = actor_class.shipment()
            meta = {
                "class_name": class_name,
                "max_concurrency": options.max_concurrency,
                "gpu_ids": placement.gpu_ids,
                "pinned": options.name is not None,
            }
            try:
                wire = self.pack(placement.worker, (args, kwargs))
            except Exception as exc:
                raise unsendable_argument(class_name, exc) from exc
            rref = rpc.remote(
                placement.worker, host_mod.rpc_create, args=(actor_id, key, blob, wire, meta)
            )
        except BaseException:
            self._directory_call(rpc_released, actor_id)
            raise
        if options.name is None:
            handle._rref = rref  # the RRef keeps an unnamed actor alive (Ray's semantics)
        return handle

    def _place(self, actor_id: str, options: ActorOptions, class_name: str) -> Placement:
        return self._directory_call(rpc_place, actor_id, options, class_name)

    def _directory_call(self, fn: Callable[..., R], *args: Any) -> R:
        if self.directory is not None:
            return fn(*args)
        result: R = rpc.rpc_sync(self.driver_name, fn, args=args)
        return result

    def submit(
        self, handle: ActorHandle, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> ObjectRef:
        """Sends one method call; returns its ``ObjectRef`` at once."""
        actor_id = handle.actor_id
        try:
            seq = next(self._seqs[actor_id])
        except KeyError:
            seq = next(self._seqs.setdefault(actor_id, itertools.count()))
        ref = ObjectRef(f"{handle.class_name}.{method}", actor_id)
        deps = [a for a in args if type(a) is ObjectRef]
        deps += [v for v in kwargs.values() if type(v) is ObjectRef]
        if not deps:
            self._send(handle, seq, method, args, kwargs, ref, raise_now=True)
            return ref
        # As in Ray, ObjectRef arguments are resolved before the call is sent; the seq was
        # taken now, so the call still runs in the order it was made.
        remaining = [len(deps)]
        lock = threading.Lock()

        def on_dep_done(_: object) -> None:
            with lock:
                remaining[0] -= 1
                if remaining[0]:
                    return
            errors = (d.future().exception() for d in deps)
            error = next((e for e in errors if e is not None), None)
            if error is not None:
                self._skip(handle, seq)
                ref._set_exception(error)
                return
            a = tuple(x.future().result() if type(x) is ObjectRef else x for x in args)
            kw = {k: v.future().result() if type(v) is ObjectRef else v for k, v in kwargs.items()}
            self._send(handle, seq, method, a, kw, ref, raise_now=False)

        for dep in deps:
            dep.future().add_done_callback(on_dep_done)
        return ref

    def _send(
        self,
        handle: ActorHandle,
        seq: int,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        ref: ObjectRef,
        raise_now: bool,
    ) -> None:
        worker = handle.worker
        if worker in self._dead_workers:
            ref._set_exception(
                ActorDiedError(
                    f"{ref._what}: the actor's process {worker!r} has died; create a new actor.",
                    handle.actor_id,
                ),
            )
            return
        try:
            wire = self.pack(worker, (args, kwargs))
        except Exception as exc:  # only this call fails; the seq it took is skipped
            self._skip(handle, seq)
            err = unsendable_argument(ref._what, exc)
            if raise_now:
                raise err from exc
            ref._set_exception(err)
            return
        if self._coalesce and self.calls.outbox.busy(worker):
            queued = self.calls.queue(handle, seq, method, wire)
            if queued is not None:
                ref._attach(queued, worker)
                return
        try:
            fut = rpc.rpc_async(
                worker,
                host_mod.rpc_call,
                args=(handle.actor_id, self.name, seq, method, wire),
                timeout=0,  # actor methods may run for long; `get(timeout=)` bounds waits
            )
        except Exception as exc:  # the agent could not even queue the call
            ref._set_exception(rpc_failure(ref._what, worker, exc))
            return

        # The handle lives until the reply, so the actor outlives calls in flight even when
        # the caller drops every handle at once (see Answered: no callback per call).
        answered = Answered(fut, keep=handle)
        ref._attach(fut, worker)
        ref._answered = answered
        self.calls.outbox.sent(worker, answered)

    def _skip(self, handle: ActorHandle, seq: int) -> None:
        # The seq was taken but its call cannot be sent: tell the mailbox to move past it,
        # or every later call from this process would wait for it forever.
        try:
            rpc.rpc_async(
                handle.worker,
                host_mod.rpc_call,
                args=(handle.actor_id, self.name, seq, None, None),
                timeout=0,
            )
        except Exception:  # the worker is gone: nothing waits for the seq any more
            pass

    def pack(self, peer: str, value: Any) -> Wire:
        """The payload pipeline: packs ``value`` (arguments or a reply) for ``peer``.

        Raises:
            Exception: ``value`` cannot be pickled (see :mod:`actorrt.runtime.payload`).
        """
        return pack(value, self._road(peer))

    def _pack_reply(self, peer: str, reply: tuple[int, Any]) -> Wire:
        return pack(reply, self._road(peer))

    def _road(self, peer: str) -> Road | None:
        """What each tensor sent to ``peer`` goes through (:mod:`actorrt.runtime.roads`)."""
        to_shm = self._shm and shm.peer_ok(peer)  # turns True once the peer's probe passed
        key = (peer, to_shm)
        if key not in self._roads:
            self._roads[key] = tensor_road(
                self._device_maps.get(peer),
                cuda=self._cuda,
                guard_tiny=self._guard_tiny,
                to_shm=to_shm,
            )
        return self._roads[key]

    def kill(self, handle: ActorHandle, timeout: float = 10.0) -> None:
        """Ends the actor now (``actorrt.kill``); its pending calls get ``ActorDiedError``."""
        reason = f"{handle.class_name} actor {handle.actor_id} was killed by actorrt.kill()"
        if handle.worker not in self._dead_workers:
            try:
                rpc.rpc_sync(
                    handle.worker,
                    host_mod.rpc_kill,
                    args=(handle.actor_id, reason),
                    timeout=timeout,
                )
            except Exception as exc:
                if not isinstance(rpc_failure("kill", handle.worker, exc), ActorDiedError):
                    raise
        self._directory_call(rpc_released, handle.actor_id)

    def get_actor(self, name: str) -> ActorHandle:
        """The handle of the actor registered as ``name`` (``actorrt.get_actor``)."""
        handle = self._directory_call(rpc_lookup, name)
        if handle is None:
            raise ValueError(
                f"no actor named {name!r} is alive; create it with "
                f"Cls.options(name={name!r}).remote()."
            )
        return handle

    def actors(self) -> list[ActorInfo]:
        """One record per actor the cluster holds (see :class:`ActorInfo`)."""
        return list(self._directory_call(rpc_actors))

    def nodes(self) -> list[NodeInfo]:
        """One record per process of the cluster, the driver included."""
        return list(self._directory_call(rpc_nodes))

    def status(self, max_actors: int = 50) -> str:
        """The cluster as a readable table: processes, hosts, labels, GPUs, actors, calls.

        Args:
            max_actors: Actor rows shown at most (the rest are counted).

        Returns:
            The text (see :func:`actorrt.status`).
        """
        from actorrt.runtime.status import cluster_status

        return cluster_status(self, max_actors=max_actors)

    def _actor_ended(self, actor_id: str) -> None:
        if self.stopped.is_set():
            return
        if self.directory is not None:
            rpc_released(actor_id)
            return
        try:
            rpc.rpc_async(self.driver_name, rpc_released, args=(actor_id,))
        except Exception:  # the driver is gone or shutting down: nothing to release
            pass

    def mark_worker_dead(self, worker: str) -> None:
        """Calls to actors on ``worker`` fail at once from now on."""
        self._dead_workers.add(worker)
        if self.directory is not None:
            self.directory.mark_dead(worker)

    @property
    def dead_workers(self) -> frozenset[str]:
        """Names of the processes known to have died."""
        return frozenset(self._dead_workers)

    def shutdown(self) -> None:
        """Stops the actors here; the caller (api.shutdown / worker main) ends RPC."""
        self.stopped.set()
        self.host.kill_all("the cluster is shutting down")
        self.calls.close("the cluster is shutting down")
        self.replies.close()
        if self._on_shutdown is not None:
            self._on_shutdown()


def _resolve_now(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if not any(type(a) is ObjectRef for a in args) and not any(
        type(v) is ObjectRef for v in kwargs.values()
    ):
        return args, kwargs
    from actorrt.refs import get

    args = tuple(get(a) if type(a) is ObjectRef else a for a in args)
    kwargs = {k: get(v) if type(v) is ObjectRef else v for k, v in kwargs.items()}
    return args, kwargs


def rpc_stop() -> None:
    """Sent by the driver to each worker at shutdown."""
    current().stop_requested.set()


# -- the only calls of init_rpc / rpc.shutdown ----------------------------------------


def init_rpc(
    name: str,
    rank: int,
    world_size: int,
    init_method: str,
    backend_kwargs: dict[str, Any],
    *,
    num_worker_threads: int = 16,
    rpc_timeout: float = 60.0,
) -> None:
    """Starts this process's TensorPipe agent with the options the plan gave it."""
    options = rpc.TensorPipeRpcBackendOptions(
        num_worker_threads=num_worker_threads,
        rpc_timeout=rpc_timeout,
        init_method=init_method,
        **backend_kwargs,
    )
    with warnings.catch_warnings():
        # torch's own RPC start-up trips its deprecation warning about Gloo process groups;
        # it is not about anything the user wrote.
        warnings.filterwarnings("ignore", message="You are using a Backend")
        rpc.init_rpc(name, rank=rank, world_size=world_size, rpc_backend_options=options)


def shutdown_rpc(timeout: float, graceful: bool = True) -> bool:
    """Ends the RPC agent within about ``timeout`` seconds; True if it went gracefully.

    A graceful shutdown waits for every peer, so it hangs when one is dead; it runs in a
    thread with a bound, and a local (non-graceful) shutdown follows when it fails. Pass
    ``graceful=False`` when a peer is known dead, to skip the wait.
    """
    if graceful and _run_bounded(
        lambda: rpc.shutdown(graceful=True, timeout=timeout), timeout + 2.0
    ):
        return True
    _run_bounded(lambda: rpc.shutdown(graceful=False), 5.0)
    return False


def _run_bounded(fn: Callable[[], None], timeout: float) -> bool:
    outcome: list[bool] = []

    def target() -> None:
        try:
            fn()
            outcome.append(True)
        except Exception:
            outcome.append(False)

    thread = threading.Thread(target=target, name="actorrt-shutdown", daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(outcome and outcome[0])
