"""``Runtime``: the one object holding a process's actorrt state.

The driver (rank 0) and every worker have one ``Runtime``; :mod:`actorrt.runtime.group`
starts and ends the RPC agent under it. A call travels ``ActorMethod.remote`` -> ``Runtime.send``
(packed by the payload pipeline) -> ``rpc_async(worker, host.rpc_call)`` -> mailbox ->
method -> reply -> the caller's ``ObjectRef``.

The caller side (``actor_class``, ``refs``) imports this module, never the other way:
the runtime sees an actor as a :class:`~actorrt.runtime.protocol.Target` and a call's
result as a :class:`~actorrt.runtime.protocol.ReplySlot`, and hands out
:class:`~actorrt.runtime.protocol.ActorRecord` values that the caller side makes handles of.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import torch
import torch.distributed.rpc as rpc

from actorrt.errors import ActorDiedError, NotInitializedError, ObjectLostError, PlacementError
from actorrt.options import ActorOptions
from actorrt.placement.clusterfile import ClusterSpec
from actorrt.placement.functions import FunctionSpot
from actorrt.placement.plan import Plan
from actorrt.runtime import context, group, quick_rpc, rref_keeper, shm
from actorrt.runtime import host as host_mod
from actorrt.runtime import trace as _trace
from actorrt.runtime.backpressure import Senders
from actorrt.runtime.batches import CallBatches, ReplyBatches
from actorrt.runtime.context import is_initialized
from actorrt.runtime.directory import (
    ActorInfo,
    ClusterDirectory,
    NodeInfo,
    Placement,
    rpc_actors,
    rpc_directory,
    rpc_function_spots,
    rpc_lookup,
    rpc_nodes,
    rpc_place,
    rpc_register_name,
    rpc_released,
    rpc_resources,
    rpc_where,
)
from actorrt.runtime.functions import FunctionRoutes, Shape
from actorrt.runtime.generators import Inboxes
from actorrt.runtime.host import ActorHost
from actorrt.runtime.inflight import GRACE_S, InFlight, WorkerMarkedDead
from actorrt.runtime.lives import Lives
from actorrt.runtime.objects import (
    INLINE_BYTES,
    PULL_BYTES,
    ObjectLocation,
    ObjectStore,
    reply_of_call,
    rpc_fetch,
    rpc_fetch_copy,
)
from actorrt.runtime.outbox import KeepAlive, coalescing_enabled
from actorrt.runtime.payload import (
    Wire,
    holds_in_reply,
    pack,
    pack_args,
    pack_for,
    pack_or_measure,
    unpack,
)
from actorrt.runtime.protocol import (
    COPY,
    KEEP,
    LOST,
    MULTI,
    OBJECT,
    OK,
    RELAY,
    ActorRecord,
    ReplySlot,
    Target,
    actor_gone,
    failed_in_pickling,
    rpc_failure,
    unsendable_argument,
)
from actorrt.runtime.raised import RetryOn
from actorrt.runtime.restarts import (
    Restarts,
    rpc_keep_recipe,
    rpc_locate,
    rpc_restart_in_place,
)
from actorrt.runtime.retries import CallRetries
from actorrt.runtime.roads import Road, tensor_road

__all__ = ["Runtime", "current", "current_or_none", "is_initialized"]

R = TypeVar("R")

#: How long rank 0 waits for a joining process to take in the names that died before it.
NEWS_TIMEOUT_S = 10.0

#: How long rank 0 takes a process it found alive (after a call to it failed) for alive,
#: without looking again (``confirm_dead`` looks for up to 0.2 s). Calls that failed
#: against a process since replaced all fail at its new one's name: each looking again
#: made collecting a hundred such refs take 40 s.
FOUND_ALIVE_S = 1.0


_sessions = itertools.count(1)


def _marked_dead(why: str) -> str:
    """How a message to a worker rank 0 marked dead failed (``why``: rank 0's reason)."""
    return f"rank 0 marked it dead: {why}"


def current(what: str = "this call") -> Runtime:
    """The process's running ``Runtime``; raises ``NotInitializedError`` before ``start``."""
    rt = context.installed()
    if rt is None:
        raise NotInitializedError(what)
    return cast(Runtime, rt)


def current_or_none() -> Runtime | None:
    """The process's running ``Runtime``, or None before ``start`` and after ``shutdown``."""
    return context.installed()  # type: ignore[return-value]  # no cast(): a call per call


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
        # Which of this process's clusters this is (start/shutdown/start): a handle made
        # in an ended one names processes and actors that are gone, or names now taken.
        self.session = next(_sessions)
        self._device_maps = dict(device_maps or {})
        self._guard_tiny = guard_tiny_cuda
        self._cuda = torch.cuda.is_available()
        self._shm = shm.enabled()  # same-host zero-copy road for large CPU tensors
        self._roads: dict[tuple[str, bool], Road | None] = {}
        self.host = ActorHost(self._pack_reply, on_actor_end=self._actor_ended)
        # The objects this process owns (large results, puts) and the refs it lent.
        self.objects = ObjectStore(name, self.pack, driver_name, directory is not None)
        self.host.watch_lease = self.objects.forks.watch
        self.objects.node_of = self._node_of
        self.objects.is_current = self._is_current
        self.objects.rpc_id_of = group.rpc_id_of
        # The streaming calls this process made, whose values come as they are yielded.
        self.generators = Inboxes(self.objects.let_go_unread)
        # The streaming calls with backpressure running here, told what their callers took.
        self.senders = Senders()
        self.inline_bytes = INLINE_BYTES
        self.pull_bytes = PULL_BYTES
        # Payload bytes of the replies and fetched objects this process received: shows
        # where a value's bytes went (the driver's stays small when refs pass it by).
        self.payload_bytes_in = 0
        # What this process sent and has no answer to, per worker: failed when the
        # driver marks the worker dead (a hung one holds its connections open).
        # How many new processes took each name: calls are numbered, sent and failed, and
        # actors restarted, per process of a name (see runtime/lives.py).
        self.lives = Lives()
        self.inflight = InFlight(self.lives)
        # Bursts of calls, and of replies, travel in batches (see runtime/batches.py).
        self.calls = CallBatches(name, self.inflight.track)
        self.replies = ReplyBatches(name, self.host.deliver)
        # Rank 0 keeps the recipes of actors with max_restarts and recreates them.
        self.restarts = (
            Restarts(directory, self.pack, self.lives) if directory is not None else None
        )
        if self.restarts is not None:
            self.restarts.on_unreachable = self.worker_unreachable
        # Calls to actors with max_task_retries, kept until answered (runtime/retries.py).
        self.retries = CallRetries(self)
        # Remote functions: which executor runs a call, and their resends (functions.py).
        self.functions = FunctionRoutes(self)
        self._suspects: set[str] = set()  # workers a call could not reach (not rank 0)
        self._dead_lock = threading.Lock()
        self._coalesce = coalescing_enabled()
        # (actor, numbering(process)) -> the numbers of this process's calls to it there
        self._seqs: dict[tuple[str, str], itertools.count[int]] = {}
        self._dead_workers: set[str] = set()
        self._death_reasons: dict[str, str] = {}  # dead worker -> how rank 0 knew
        # Rank 0: worker -> (its process's incarnation, when confirm_dead found it alive)
        self._found_alive: dict[str, tuple[int, float]] = {}
        # Workers whose dead process was replaced: an actor there is asked about at rank 0
        # once (it may have lived on the dead process), then remembered here.
        self._replaced: set[str] = set()
        self._checked: set[str] = set()  # actor ids known to live on a replaced worker
        self.local_worker_pids: list[int] = []  # pids of a local cluster's workers (driver)
        self.pids: dict[int, int] = {}  # rank -> pid, as each process reported it (driver)
        self.plan: Plan | None = None  # the cluster's placement plan (every process)
        # What `actorrt worker --labels` (or a cluster file) offered: without a layout the
        # plan gives this process no labels, and get_runtime_context() reports these.
        self.offered_labels: tuple[str, ...] = ()
        self._rrefless: frozenset[str] = frozenset()  # peers that cannot receive RRefs
        self.spec: ClusterSpec | None = None  # what the plan was made from (driver)
        # node descriptions (driver): by rank, then growers in the order they joined
        self.descriptions: list[dict[str, Any]] = []
        self._on_shutdown = on_shutdown
        # Driver only: whether a worker a call could not reach is gone (see
        # worker_unreachable); set by the launch, which knows how to tell.
        self.confirm_dead: Callable[[str], bool] | None = None
        # Driver of a multi-node cluster: starts judging a worker a call could not reach
        # (it is suspect until then: see worker_unreachable); set by the launch.
        self.probe: Callable[[str], None] | None = None
        self.stopped = threading.Event()  # set once this runtime is shutting down
        self.stop_requested = threading.Event()  # a worker's cue (from the driver) to stop

    # -- context manager: `with actorrt.start(): ...` -----------------------------
    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def install(self) -> None:
        """Makes this the process's runtime: RPC entry points find its parts from now on.

        Raises:
            RuntimeError: Another runtime is installed in this process.
        """
        parts: list[object] = [self.host, self.calls, self.replies, self.objects]
        parts.append(self.objects.forks)  # rpc_lease_forks
        parts += [self.generators, self.senders]
        if self.directory is not None:
            parts.append(self.directory)
        if self.restarts is not None:
            parts.append(self.restarts)
        context.install(self, parts)

    def close(self) -> None:
        """Shuts this runtime down and clears the process's runtime slot (driver side)."""
        try:
            self.shutdown()
        finally:
            context.install(None)

    # -- actors ----------------------------------------------------------------
    def create_actor(
        self,
        class_name: str,
        class_path: str,
        methods: str,
        ship: Callable[[], tuple[str, bytes]],
        options: ActorOptions,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[ActorRecord, Any]:
        """Places the actor, ships its class and constructor arguments.

        With ``options.get_if_exists``, finds the actor already named ``options.name``
        (of the same class) when there is one.

        Args:
            class_name: The class's name.
            class_path: ``module.name``, the same on every process (names are per class).
            methods: The class's method table (``MethodTable`` specs).
            ship: Returns the class's cache key and its cloudpickle bytes.
            options: The actor's options.
            args: Constructor arguments (values, not refs).
            kwargs: Constructor keyword arguments.

        Returns:
            The actor's record, and the RRef that keeps an unnamed actor alive (None for a
            named actor or one with ``max_restarts``, which live until killed).
        """
        actor_id = uuid.uuid4().hex
        if options.get_if_exists:
            # Finding the actor reserves nothing: a full slot must not fail the lookup.
            found = self._directory_call(rpc_lookup, options.name, class_path)
            if found is not None:
                return found, None
        try:
            placement = self._place(actor_id, options, class_name)
        except PlacementError:
            if not options.get_if_exists:
                raise
            # No room, because a concurrent creator of the name took it (rank 0 waited for
            # it to register): that one's actor is the answer.
            found = self._directory_call(rpc_lookup, options.name, class_path)
            if found is None:
                raise
            return found, None
        record = ActorRecord(
            actor_id,
            placement.worker,
            class_name,
            methods,
            options.max_task_retries,
            options.max_pending_calls,
        )
        try:
            if options.name is not None:
                # Registering is one step in the directory: of concurrent get_if_exists
                # creators one registers; the others get its actor and give back their place.
                found = self._directory_call(
                    rpc_register_name, options.name, record, options.get_if_exists, class_path
                )
                if found is not None:
                    self._directory_call(rpc_released, actor_id)
                    return found, None
            key, blob = ship()
            restartable = options.max_restarts != 0
            meta = {
                "class_name": class_name,
                "max_concurrency": options.max_concurrency,
                "concurrency_groups": options.concurrency_groups,
                "gpu_ids": placement.gpu_ids,
                # Named actors and actors with restarts live until killed.
                "pinned": options.name is not None or restartable,
                # For a handle the actor makes of itself (get_runtime_context()).
                "methods": methods,
                "retries": options.max_task_retries,
                "max_pending": options.max_pending_calls,
                "name": options.name,
                "resources": options.assigned_resources(),  # get_assigned_resources()
            }
            try:
                wire = self.pack(placement.worker, (args, kwargs))
            except Exception as exc:
                raise unsendable_argument(class_name, exc) from exc
            if restartable:
                # Before the actor exists, so a death right after its creation is covered.
                recipe_wire = (
                    pack((args, kwargs))  # rank 0 keeps it itself
                    if self.directory is not None
                    else self.pack(self.driver_name, (args, kwargs))
                )
                self._directory_call(rpc_keep_recipe, record, key, blob, recipe_wire, options, meta)
            rref = host_mod.create_remote(placement.worker, actor_id, key, blob, wire, meta)
        except BaseException:
            self._directory_call(rpc_released, actor_id)
            raise
        # The RRef keeps an unnamed actor alive (Ray's semantics); a pinned one lives on,
        # as does one created without an RRef (create_remote: a second cluster's driver).
        return record, (None if meta["pinned"] else rref)

    def _place(self, actor_id: str, options: ActorOptions, class_name: str) -> Placement:
        return self._directory_call(rpc_place, actor_id, options, class_name)

    def function_spots(self, shape: Shape) -> tuple[FunctionSpot, ...]:
        """Asks rank 0 which executors can run remote functions of ``shape``.

        Raises:
            PlacementError: No live process can.
        """
        return self._directory_call(rpc_function_spots, shape.label, shape.resources)

    def _directory_call(self, fn: Callable[..., R], *args: Any) -> R:
        """``fn(*args)`` on rank 0, raising here what it raised there (as it is)."""
        if self.directory is not None:
            return fn(*args)
        ok, result = rpc.rpc_sync(self.driver_name, rpc_directory, args=(fn, *args))
        if not ok:
            raise result
        return cast(R, result)

    def next_seq(self, target: Target) -> int:
        """Takes the next sequence number of this process's calls to ``target``.

        The actor runs a caller's calls in this order; a number taken must be sent
        (:meth:`send`) or given up (:meth:`skip`), or later calls wait for it. Numbers
        are per instance: an actor recreated elsewhere (``max_restarts``) starts again.
        """
        return self.seq_at(target._actor_id, target._worker)

    def seq_at(self, actor_id: str, worker: str) -> int:
        """:meth:`next_seq` of the actor's instance on ``worker``."""
        return self.number(actor_id, worker)[0]

    def number(self, actor_id: str, worker: str) -> tuple[int, str]:
        """:meth:`seq_at`, and what the number is for (:meth:`numbering` of ``worker``)."""
        numbered = self.numbering(worker)
        key = (actor_id, numbered)
        try:
            return next(self._seqs[key]), numbered
        except KeyError:
            return next(self._seqs.setdefault(key, itertools.count())), numbered

    def numbering(self, worker: str) -> str:
        """Which process of the name ``worker`` a number taken now is for.

        The name, and from the first new process that took it (``max_worker_restarts``)
        on, the name and how many did: an actor's instance on each runs its callers'
        calls in an order of its own, so a number taken for one is not sent to another
        (``send``'s ``seq_worker``), where it would wait for ever, or run twice.
        """
        taken = self.lives.of(worker)
        return f"{worker}#{taken}" if taken else worker

    def send(
        self,
        target: Target,
        seq: int,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        slot: ReplySlot,
        *,
        raise_now: bool,
        seq_worker: str | None = None,
        retries: int | None = None,
        on: RetryOn = False,
    ) -> None:
        """Sends call ``seq`` of ``target.method``; its outcome goes to ``slot``.

        Args:
            target: The actor (its handle, kept alive until the reply).
            seq: From :meth:`next_seq` (or :meth:`number`, with ``seq_worker``).
            method: The method's name.
            args: Positional arguments (values: refs were resolved by the caller side).
            kwargs: Keyword arguments.
            slot: Gets the reply's future, or the failure.
            raise_now: Raise an unsendable argument's ``TypeError`` here (a call made
                now) instead of putting it in ``slot`` (a call sent once its refs came).
            seq_worker: What ``seq`` was numbered for (:meth:`number`); if the actor
                has moved since (``target._worker`` differs), or a new process took its
                process's name, the call is numbered afresh for the instance it goes to,
                whose mailbox would otherwise wait for that number for ever.
            retries: The call's own ``max_task_retries`` (its method's or its options');
                None: the actor's. Only an actor with retries takes one (each of its
                calls goes the retries' road, so they keep one order).
            on: The exceptions it raises that send it again (``retry_exceptions``;
                an actor with retries only).
        """
        if target._max_task_retries:  # kept until answered, sent again if its process dies
            self.retries.send(
                target,
                seq,
                method,
                args,
                kwargs,
                slot,
                raise_now=raise_now,
                seq_worker=seq_worker,
                left=retries,
                on=on,
            )
            return
        worker = target._worker
        if seq_worker is not None and self.numbering(worker) != seq_worker:
            seq = self.seq_at(target._actor_id, worker)
        # An actor whose process is down or was replaced is looked for at rank 0; not a
        # function's executor (target._moves False): its own retries pick another process.
        if target._moves and (worker in self._dead_workers or worker in self._suspects):
            was_dead = worker in self._dead_workers
            why = self._relocate(target)
            if why is not None:
                slot.fail(
                    actor_gone(f"{target._class_name}.{method}", target._actor_id, why),
                )
                return
            # Recreated: its own sequence numbers (also on a new process that took the
            # dead one's name: the number taken above was for the dead instance).
            if target._worker != worker or was_dead:
                worker = target._worker
                seq = self.next_seq(target)
        elif target._moves and worker in self._replaced and target._actor_id not in self._checked:
            why = self._check_replaced(target)
            if why is not None:
                self.skip(target, seq)
                slot.fail(
                    actor_gone(f"{target._class_name}.{method}", target._actor_id, why),
                )
                return
            if target._worker != worker:
                # It was recreated elsewhere while the new process joined under its old
                # process's name: the call goes there, numbered for that instance (it went
                # to the new process, where no such actor will ever be: a hang, issue 25).
                worker = target._worker
                seq = self.next_seq(target)
        begin = _trace.clock() if _trace.ON else 0  # the round trip starts before packing
        pins: list[Any] = []
        try:
            wire = self.pack_call(target, worker, seq, method, args, kwargs, pins)
        except TypeError as err:
            if raise_now:
                raise
            slot.fail(err)
            return
        try:
            fut, keep = self.post(target, worker, seq, method, wire, True)
        except Exception as exc:  # the agent could not even queue the call
            self.skip_at(target._actor_id, worker, seq)  # its number never reaches the mailbox
            what = f"{target._class_name}.{method}"
            actor_id = target._actor_id if target._moves else None  # an actor, not a function
            slot.fail(rpc_failure(what, worker, exc, actor_id))
            return
        if pins:  # refs inside the arguments travelled borrowed: held here until the reply
            fut = reply_of_call(fut, worker, pins)
        slot.attach(fut, worker, keep, seq)
        if _trace.ON:
            _trace.sent(
                target._class_name,
                method,
                worker,
                self.name,
                target._actor_id,
                seq,
                begin,
                wire,
                fut,
            )

    def pack_call(
        self,
        target: Target,
        worker: str,
        seq: int,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        pins: list[Any] | None = None,
    ) -> Wire:
        """Packs a call's ``(args, kwargs)`` for ``worker``.

        With ``pins``, the refs inside the arguments travel borrowed for the call, and
        are appended to it: the caller keeps them until the call's reply (see
        ``objects.Borrowing``). Without, they travel leased.

        Raises:
            TypeError: An argument cannot be sent; only this call fails: ``seq`` is
                given up (:meth:`skip`), so later calls do not wait for it.
        """
        try:
            return pack_args(args, kwargs, worker, self._road, pins)
        except Exception as exc:
            self.skip_at(target._actor_id, worker, seq)
            raise unsendable_argument(f"{target._class_name}.{method}", exc) from exc

    def post(
        self, target: Target, worker: str, seq: int, method: str, wire: Wire, may_queue: bool
    ) -> tuple[torch.futures.Future[Wire], KeepAlive | None]:
        """Sends a packed call to ``worker``: queued in a burst, else alone.

        Returns:
            The future of its packed reply, and (a call sent alone) what keeps the handle
            until the reply (see KeepAlive: no callback per call).

        Raises:
            Exception: The RPC agent refused the call (the process is gone, RPC ended).
        """
        if may_queue and self._coalesce and self.calls.outbox.busy(worker):
            queued = self.calls.queue(target, seq, method, wire)
            if queued is not None:
                return queued, None
        fut = host_mod.post_call(worker, target._actor_id, self.name, seq, method, wire)
        self.inflight.track(worker, fut)
        # The handle lives until the reply, so the actor outlives calls in flight even when
        # the caller drops every handle at once.
        keep = KeepAlive(fut, keep=target)
        self.calls.outbox.sent(worker, keep)
        return fut, keep

    def is_down(self, worker: str) -> bool:
        """Whether ``worker`` is known dead here, or a call could not reach it."""
        return worker in self._dead_workers or worker in self._suspects

    def known_failure(self, worker: str, exc: Exception) -> Exception:
        """What a message to ``worker`` that failed with ``exc`` failed of, as known here.

        A worker rank 0 marked dead (a hung one, killed after its heartbeat went silent)
        often fails its calls by its connections' reset, before the death notice fails
        them (``inflight``): the reason rank 0 gave then says more than "ECONNRESET".
        """
        why = self._death_reasons.get(worker)
        if why is None or isinstance(exc, WorkerMarkedDead) or failed_in_pickling(exc):
            return exc
        return WorkerMarkedDead(_marked_dead(why))

    def _relocate(self, target: Target) -> str | None:
        """Asks rank 0 where an actor whose process is dead (or suspect) lives now.

        Points ``target`` at that process (an actor with ``max_restarts`` may have been
        recreated elsewhere) and returns None; or returns why the actor is gone. An
        instance on a new process that took the dead one's name is numbered for apart
        (:meth:`numbering`).
        """
        # A suspect process may be dead and not yet judged: rank 0 waits (bounded) for its
        # verdict, and for the actor's restart, instead of sending it back there.
        away = target._worker if target._worker in self._suspects else None
        try:
            record, why = self._directory_call(rpc_locate, target._actor_id, away)
        except Exception as exc:  # rank 0 is gone or stopping: nowhere to ask
            return f"rank 0 could not say where it is ({exc})"
        if record is None or record.worker in self._dead_workers:
            return why or "its process died"
        self._suspects.discard(target._worker)
        self._left(target._actor_id, target._worker, record.worker)
        target._worker = record.worker
        return None

    def _left(self, actor_id: str, old: str, new: str) -> None:
        """The actor lives on ``new``, not ``old``: this process's numbers for ``old`` go.

        Numbers are per instance, and the instance on ``old`` is gone (or never was: the
        name was taken by a new process). Kept, the counter would go on from a number
        taken for a call that went elsewhere, and an instance recreated on ``old`` later
        (a restart onto the new process of that name) would wait for ever for the
        numbers before it (issue 25).
        """
        if old != new:
            self._seqs.pop((actor_id, self.numbering(old)), None)

    def moved_from_replaced(self, target: Target) -> str | None:
        """Checks (once) an actor whose process name was taken by a replacement process.

        Points ``target`` where the actor lives now; returns why it is gone, or None.
        """
        if target._worker not in self._replaced or target._actor_id in self._checked:
            return None
        return self._check_replaced(target)

    def _check_replaced(self, target: Target) -> str | None:
        """Whether an actor on a worker whose process was replaced lives there now.

        Its handle may predate the replacement: then the actor died with the old process
        (or was recreated elsewhere: ``target`` then points there). None if it lives.
        """
        try:
            process, state = self._directory_call(rpc_where, target._actor_id)
        except Exception as exc:  # rank 0 is gone or stopping: nowhere to ask
            return f"rank 0 could not say where it is ({exc})"
        if state in ("RESTARTING", "DEAD"):
            # Waits for a restart under way; for an actor gone for good, says why as rank
            # 0 knows it (no restarts left, its restart failed, no max_restarts).
            return self._relocate(target)
        if process is None:  # no row (pruned, or never known): nothing more to say
            return "its process died and was replaced by a new one"
        self._left(target._actor_id, target._worker, process)
        target._worker = process
        self._checked.add(target._actor_id)
        return None

    def locate_away(self, actor_id: str, dead: str) -> tuple[str | None, str]:
        """Where an actor lives once it has left ``dead`` (recreated elsewhere).

        Rank 0 waits (bounded) for the actor to be recreated, and, when it had not heard
        that ``dead`` died, judges it first.

        Returns:
            The process it lives on now and ``""``, or None and why it is gone.
        """
        try:
            record, why = self._directory_call(rpc_locate, actor_id, dead)
        except Exception as exc:  # rank 0 is gone or stopping: nowhere to ask
            return None, f"rank 0 could not say where it is ({exc})"
        if record is None:
            return None, why
        # ``dead``'s instance is gone even if the actor is back under that name: a new
        # process took it, whose instance is numbered for apart (numbering).
        return record.worker, ""

    def skip(self, target: Target, seq: int, worker: str | None = None) -> None:
        """Gives up call ``seq`` to ``target``: its mailbox moves past the number.

        Args:
            target: The actor.
            seq: The number given up.
            worker: The instance it was numbered for (default: where the actor is now).
        """
        self.skip_at(target._actor_id, worker or target._worker, seq)

    def skip_at(self, actor_id: str, worker: str, seq: int) -> None:
        """Gives up this process's call ``seq`` to the actor's instance on ``worker``."""
        host_mod.give_up(worker, actor_id, self.name, seq)

    def pack(self, peer: str, value: Any) -> Wire:
        """The payload pipeline: packs ``value`` (arguments or a reply) for ``peer``.

        Raises:
            Exception: ``value`` cannot be pickled (see :mod:`actorrt.runtime.payload`).
        """
        return pack(value, self._road(peer))

    def driver_holds_no_rrefs(self) -> None:
        """The driver is on its second agent (``group.rrefs_work``): it cannot receive RRefs.

        Replies to it then carry actor handles without their RRefs; this process keeps
        them instead, so those actors live until the cluster ends.
        """
        self._rrefless = frozenset({self.driver_name})
        self.objects.leases = False  # rank 0 keeps the leases: none work now

    def _pack_reply(self, peer: str, reply: tuple[int, Any]) -> Wire:
        """Packs a method's reply for ``peer``; a large value stays here as an object.

        The caller gets the object's location, and whoever needs the value fetches it
        from here (:meth:`fetch`), so a result passed on to another actor never crosses
        the caller's link. Under :attr:`pull_bytes` a copy comes along for the caller.
        """
        if peer in self._rrefless:
            with group.rrefs_kept_here():
                return self._pack_result(peer, reply)
        return self._pack_result(peer, reply)

    def _pack_result(self, peer: str, reply: tuple[int, Any]) -> Wire:
        if reply[0] != OK:
            if reply[0] == MULTI:  # num_returns: each value packed (or kept) on its own
                return None, [(MULTI, [self._pack_result(peer, (OK, v)) for v in reply[1]])]
            return pack_for(reply, peer, self._road)
        # Refs inside travel held directly by the caller, with no lease: counted here as
        # the reply goes, or told to their owner from here (ObjectStore.hold_sent).
        with holds_in_reply() as holds:
            packed = pack_or_measure(reply, peer, self._road, self.inline_bytes)
            if type(packed) is not int:
                self.objects.hold_sent(peer, holds)
                return packed  # type: ignore[return-value]  # a Wire
            holds.clear()  # measured, then kept here: those refs did not go
            # Held directly by the caller: no RRef unless its ref travels (ObjectStore.lease).
            object_id = self.objects.keep(reply[1], packed, holder=peer)
            if packed >= self.pull_bytes:
                return None, [(OBJECT, (object_id, packed, self.name))]
            wire = self.pack(peer, (COPY, (object_id, packed, self.name, reply[1])))
            self.objects.hold_sent(peer, holds)
            return wire

    def put(self, value: Any) -> ObjectLocation:
        """Keeps ``value`` here as an object (``actorrt.put``).

        Raises:
            TypeError: ``value`` cannot be sent to another process.
        """
        try:
            # Measured, not sent: refs inside make no lease nor loan, and the holds they
            # ask for are never made (they travel when the value is fetched, packed then
            # as a reply is: ObjectStore.answer_fetch).
            with holds_in_reply(measuring=True):
                packed = pack_or_measure(value, self.name, lambda _: None, 0)
        except Exception as exc:
            raise TypeError(
                f"actorrt.put(): the value cannot be sent to another process "
                f"({type(exc).__name__}: {exc}). Values travel by cloudpickle with tensors "
                "out of band; locks, open files, sockets and ctypes pointers cannot. Put "
                "plain data or tensors, or make such state inside the actor that needs it."
            ) from exc
        nbytes = packed if type(packed) is int else len(packed[0] or b"")  # type: ignore[index]
        if self._shm:  # large CPU tensors: copied once, mapped by this host's processes
            return self.objects.keep_sealed(value, nbytes, holder=self.name)
        return ObjectLocation(self.objects.keep(value, nbytes, holder=self.name), self.name, nbytes)

    def fetch(self, loc: ObjectLocation) -> torch.futures.Future[Wire]:
        """Asks the owner of ``loc`` for its value; the future of the packed reply.

        Raises:
            ObjectLostError: The owner is known to be dead (or this runtime stopped).
        """
        owner = loc.owner
        if owner in self._dead_workers or self.stopped.is_set():
            raise self.lost(loc, "its owner process died" if not self.stopped.is_set() else "")
        if loc.sealed is not None and self._shm:  # on the owner's host: mapped, not asked
            begin = _trace.clock() if _trace.ON else 0
            mapped = shm.open_sealed(loc.sealed)
            if mapped is not None:
                done: torch.futures.Future[Wire] = torch.futures.Future()
                done.set_result((None, [(OK, mapped)]))
                if begin:  # a read with no message: on the timeline as the road "mapped"
                    _trace.fetching(loc.object_id, owner, "mapped", begin, done)
                return done
        under_way = self.objects.fetching.get(loc.object_id)
        if under_way is not None:  # another actor here asked for it: one transfer for both
            return under_way
        begin = _trace.clock() if _trace.ON else 0
        result: torch.futures.Future[Wire] = torch.futures.Future()
        # Registered for this process's other actors, and for the other processes of this
        # host that the owner may send here (rpc_fetch_copy) while it is under way.
        self.objects.fetching[loc.object_id] = result
        result.add_done_callback(lambda _: self.objects.fetched(loc.object_id, result))
        self._ask(loc, owner, True, result)
        if begin:
            _trace.fetching(loc.object_id, owner, self.road_name(owner), begin, result)
        return result

    def _ask(
        self, loc: ObjectLocation, whom: str, relay: bool, result: torch.futures.Future[Wire]
    ) -> None:
        """Asks ``whom`` (the owner, or its host's relay) for ``loc``; the answer to ``result``."""
        try:
            # No timeout, as a call: a large value on a slow link takes what it takes; a
            # death fails it (inflight), and get(timeout=) bounds the caller's wait.
            if whom == loc.owner:
                args = (loc.object_id, self.name, relay)
                fut: torch.futures.Future[Wire] = quick_rpc.rpc_async(whom, rpc_fetch, args)
            else:
                fut = quick_rpc.rpc_async(whom, rpc_fetch_copy, (loc.object_id, self.name))
        except Exception as exc:  # the agent refused at once: that process is gone
            result.set_exception(exc)  # type: ignore[arg-type]  # torch's stub is wrong
            return
        self.inflight.track(whom, fut)  # failed when rank 0 marks that process dead

        # Holds ``fut`` until it is done: InFlight keeps weak references, and nothing else
        # holds this future (a call's is held by its ref), so without it the death notice
        # found nothing to fail, and a fetch whose connection never broke (the owner's
        # sockets held open by a forked child) waited for ever.
        def answered(_: object, held: torch.futures.Future[Wire] = fut) -> None:
            self._answered(loc, whom, result, held)

        fut.add_done_callback(answered)

    def _answered(
        self,
        loc: ObjectLocation,
        whom: str,
        result: torch.futures.Future[Wire],
        fut: torch.futures.Future[Wire],
    ) -> None:
        # On torch's RPC thread: follows a relay, or falls back to the owner, never waiting.
        try:
            wire = fut.value()
            status = unpack(wire)[0]
        except Exception as exc:
            if whom != loc.owner:  # the relay is gone: the owner itself
                self._ask(loc, loc.owner, False, result)
            else:
                result.set_exception(exc)  # type: ignore[arg-type]
            return
        if status == RELAY:
            self._ask(loc, unpack(wire)[1], False, result)
        elif whom != loc.owner and status == LOST:  # the relay kept no copy
            self._ask(loc, loc.owner, False, result)
        else:
            if status == KEEP:
                self.objects.keep_copy(loc.object_id, unpack(wire)[1])
            result.set_result(wire)

    def _is_current(self, process: str, rpc_id: int | None) -> bool:
        """Whether ``rpc_id`` is the live process of the name ``process`` (as known here).

        ``rpc_id`` None: whichever process has the name now (it is not known dead).
        """
        if process in self._dead_workers:
            return False
        return rpc_id is None or group.rpc_id_of(process) in (rpc_id, None)

    def _node_of(self, process: str) -> str | None:
        """The host (node id) the plan puts ``process`` on; None when it is not known."""
        if self.plan is None:
            return None
        try:
            return self.plan.for_name(process).node
        except PlacementError:  # not in the plan (a grower this process has not heard of)
            return None

    def road_name(self, peer: str) -> str:
        """How large tensors travel from ``peer`` to this process (for the timeline)."""
        if self._shm and shm.peer_ok(peer):
            return "shm"
        if self.plan is not None:
            try:
                return self.plan.transport_between(peer, self.name)
            except PlacementError:  # a pair the plan does not list: TensorPipe's default
                pass
        return "tcp"

    def lost(self, loc: ObjectLocation, why: str) -> Exception:
        """The error of a ref to ``loc`` that cannot be fetched (``why``: the cause)."""
        if self.stopped.is_set():
            return ObjectLostError(
                f"object {loc.object_id} (owned by {loc.owner!r}) cannot be read: the "
                "cluster was shut down, and objects do not outlive it. Get the values you "
                "need before actorrt.shutdown()."
            )
        return ObjectLostError(
            f"object {loc.object_id} is lost: {why} (owner {loc.owner!r}). Objects live in "
            "the process that made them; make the value again to go on."
        )

    def _road(self, peer: str) -> Road | None:
        """What each tensor sent to ``peer`` goes through (:mod:`actorrt.runtime.roads`)."""
        to_shm = self._shm and shm.peer_ok(peer)  # turns True once the peer's probe passed
        key = (peer, to_shm)
        try:
            return self._roads[key]
        except KeyError:
            road = self._roads[key] = tensor_road(
                self._device_maps.get(peer),
                cuda=self._cuda,
                guard_tiny=self._guard_tiny,
                to_shm=to_shm,
            )
            return road

    def cancel_call(self, worker: str, actor_id: str, seq: int, recursive: bool) -> None:
        """Asks ``worker`` to cancel this process's call ``seq`` to ``actor_id`` (no wait).

        The call's own reply says what came of it ("cancelled", or its value when it had
        begun). With ``recursive``, the calls it made are cancelled too. Nothing is sent to
        a process known down: its calls fail as they are.
        """
        if self.is_down(worker):
            return
        try:
            host_mod.post_cancel(worker, actor_id, self.name, seq, recursive)
        except Exception:  # the agent refused: the process is gone, and so is the call
            pass

    def kill(self, handle: Target, timeout: float = 2.0) -> None:
        """Ends the actor now (``actorrt.kill``); its pending calls get ``ActorDiedError``.

        Waits at most ``timeout`` for the actor's process to confirm: a hung process
        (which the heartbeat will mark dead) does not hold the caller. The actor's place
        is given back either way.
        """
        reason = f"{handle._class_name} actor {handle._actor_id} was killed by actorrt.kill()"
        if handle._worker in self._dead_workers or handle._worker in self._suspects:
            self._relocate(handle)  # a recreated actor (max_restarts) is killed where it is
        if handle._worker not in self._dead_workers:
            try:
                rpc.rpc_sync(
                    handle._worker,
                    host_mod.rpc_kill,
                    args=(handle._actor_id, reason),
                    timeout=timeout,
                )
            except Exception as exc:
                if not isinstance(rpc_failure("kill", handle._worker, exc), ActorDiedError):
                    raise
        self._directory_call(rpc_released, handle._actor_id, reason)
        # Its calls' numbers here go too: it is gone for good (a later call through an old
        # handle is answered with why), and a process that kills actor after actor would
        # keep one counter per actor it ever called.
        for key in [k for k in list(self._seqs) if k[0] == handle._actor_id]:
            self._seqs.pop(key, None)

    def restart(self, handle: Target) -> str | None:
        """Restarts the actor where it is (``actorrt.kill(handle, no_restart=False)``).

        Returns:
            None once restarted; else why not (the caller then kills it for good).
        """
        reason = (
            f"{handle._class_name} actor {handle._actor_id} was restarted by "
            "actorrt.kill(no_restart=False)"
        )
        # The calls this process numbered before fail as those in flight do, also those
        # still on their way, which the actor's process may take after the restart.
        last = self._last_seq(handle._actor_id, handle._worker)
        numbered = {self.name: last} if last >= 0 else None
        why: str | None = self._directory_call(
            rpc_restart_in_place, handle._actor_id, reason, numbered
        )
        return why

    def _last_seq(self, actor_id: str, worker: str) -> int:
        """The last number this process took for the actor on ``worker``; -1: none."""
        counter = self._seqs.get((actor_id, self.numbering(worker)))
        if counter is None:
            return -1
        # itertools.count shows its next number only in its repr ("count(7)"), and next()
        # would take one, a gap the actor would wait on.
        found = re.fullmatch(r"count\((\d+)\)", repr(counter))
        return int(found.group(1)) - 1 if found else -1

    def get_actor(self, name: str) -> ActorRecord:
        """The record of the actor registered as ``name`` (``actorrt.get_actor``)."""
        record = self._directory_call(rpc_lookup, name)
        if record is None:
            raise ValueError(
                f"no actor named {name!r} is alive; create it with "
                f"Cls.options(name={name!r}).remote()."
            )
        return record

    def actors(self) -> list[ActorInfo]:
        """One record per actor the cluster holds (see :class:`ActorInfo`)."""
        return list(self._directory_call(rpc_actors))

    def nodes(self) -> list[NodeInfo]:
        """One record per process of the cluster, the driver included."""
        return list(self._directory_call(rpc_nodes))

    def resources(self) -> tuple[dict[str, float], dict[str, float]]:
        """The cluster's CPUs and GPUs, and those no actor or layout slot reserves."""
        return self._directory_call(rpc_resources)

    def status(self, max_actors: int = 50) -> str:
        """The cluster as a readable table: processes, hosts, labels, GPUs, actors, calls.

        Args:
            max_actors: Actor rows shown at most (the rest are counted).

        Returns:
            The text (see :func:`actorrt.status`).
        """
        from actorrt.runtime.status import cluster_status

        return cluster_status(
            self.name, self.host, self.nodes(), self.actors(), dict(self.pids), max_actors
        )

    def stacks(self, timeout: float = 5.0, all_threads: bool = False) -> str:
        """Every live process's thread stacks (see :func:`actorrt.stacks`).

        Args:
            timeout: Seconds to wait for the processes' answers.
            all_threads: Also actorrt's own threads.

        Returns:
            One section per process.
        """
        from actorrt.runtime.stacks import cluster_stacks

        return cluster_stacks(self.name, self.nodes(), timeout, all_threads)

    def _actor_ended(self, actor_id: str, why: str) -> None:
        if self.stopped.is_set():
            return
        if self.directory is not None:
            rpc_released(actor_id, why)
            return
        try:
            rpc.rpc_async(self.driver_name, rpc_released, args=(actor_id, why))
        except Exception:  # the driver is gone or shutting down: nothing to release
            pass

    def mark_worker_dead(self, worker: str, why: str = "it died") -> None:
        """Calls to actors on ``worker`` fail at once from now on (once per worker).

        So do the calls it holds, a second later (``inflight.GRACE_S``): its connections
        may stay open (a hung process, a cut link, a forked child holding its sockets), so
        the process that sent them fails them, here and in every other process.
        """
        # Under the lock: the exit report and a failed call may both tell us, and neither
        # may return before the worker is marked (the failed call's caller goes on).
        with self._dead_lock:
            if worker in self._dead_workers:
                return
            # In this order: no placement on it, its actors' restarts under way, and only
            # then dead here, so a call that sees it dead finds the restart at rank 0.
            if self.directory is not None:
                self.directory.mark_dead(worker)
            if self.restarts is not None:
                self.restarts.worker_died(worker)
            self._dead_workers.add(worker)
        self._let_go_of(worker, why)
        if self.directory is not None:
            self._tell_workers(worker, why)

    def _tell_workers(self, dead: str, why: str) -> None:
        # Rank 0 tells every other live process, so that their calls to actors that were
        # on ``dead`` fail at once, or find the recreated actor (max_restarts), instead of
        # first failing against the dead process.
        if self.plan is None or self.stopped.is_set():
            return
        for p in self.plan.processes:
            if p.name not in (self.name, dead) and p.name not in self._dead_workers:
                try:
                    rpc.rpc_async(p.name, rpc_worker_died, args=(dead, why), timeout=5)
                except Exception:  # that one is gone too, or RPC is ending
                    pass

    def worker_unreachable(self, worker: str, failure: BaseException | None = None) -> None:
        """A call to ``worker`` failed at the RPC layer: let the driver judge it now.

        On the driver, :attr:`confirm_dead` (set by the launch) checks whether the process
        is gone and, if so, marks it dead before the caller sees its ``ActorDiedError``,
        so an actor created right after that error is not placed on the dead process. A
        process found alive is not looked at again for :data:`FOUND_ALIVE_S`.

        Args:
            worker: The process the call went to.
            failure: How it failed; one failed because rank 0 marked ``worker`` dead
                (``WorkerMarkedDead``) was judged already.
        """
        confirm = self.confirm_dead
        if worker in self._dead_workers or self.stopped.is_set():
            return
        if isinstance(failure, WorkerMarkedDead):
            return
        if confirm is not None:
            now, life = time.monotonic(), self.lives.of(worker)
            seen = self._found_alive.get(worker)
            if seen is None or seen[0] != life or now - seen[1] >= FOUND_ALIVE_S:
                if confirm(worker):
                    self.mark_worker_dead(worker, "its process is gone (a call found it so)")
                    return
                self._found_alive[worker] = (life, time.monotonic())
            if self.restarts is not None:  # a caller waiting to leave it goes back to it
                self.restarts.cleared(worker)
            return
        first = worker not in self._suspects
        self._suspects.add(worker)  # the next call asks rank 0 where the actor is
        if self.probe is not None:
            self.probe(worker)  # suspect at once (no new actor there), judged soon
        elif first and self.directory is None:
            # Rank 0 judges it: its heartbeat alone would take heartbeat_timeout, and
            # until then it would place new actors and restarts on the dead process.
            try:
                rpc.rpc_async(self.driver_name, rpc_unreachable, args=(worker,), timeout=5)
            except Exception:  # rank 0 is gone or stopping: nothing to tell
                pass

    def worker_answered(self, worker: str) -> None:
        """Rank 0's probe found the suspect ``worker`` answering: calls go to it again."""
        self._suspects.discard(worker)
        if self.restarts is not None:
            self.restarts.cleared(worker)

    def note_dead(self, worker: str, why: str) -> None:
        """Rank 0 says ``worker`` died: calls to it go through rank 0's restarts from now on.

        The calls this process still waits for there fail now (see :meth:`mark_worker_dead`).
        """
        self._dead_workers.add(worker)
        self._let_go_of(worker, why)

    def _let_go_of(self, worker: str, why: str) -> None:
        """Lets go of what this process held for the dead ``worker``.

        The calls it waits for there fail (after ``inflight.GRACE_S``), and so do the
        streamed values its replies counted that never came; the objects it held are
        freed, the RRefs kept until it confirmed them go (it never will), and the actors
        here forget its calls' order (:meth:`ActorHost.forget_caller`).
        """
        self._death_reasons[worker] = why
        self.inflight.fail_worker_soon(worker, _marked_dead(why))
        self.generators.producer_died(worker, GRACE_S)
        self.objects.holder_died(worker)
        shm.forget_dead()  # its segments this process mapped, if it was on this host
        rref_keeper.owner_died(worker)
        self.host.forget_caller(worker)

    def note_alive(self, worker: str) -> None:
        """A new process replaced the dead ``worker`` (rank 0 says): it takes calls again."""
        with self._dead_lock:
            self._replaced.add(worker)
            self._checked.clear()
            # An actor recreated on the new process is a new instance whose mailbox counts
            # this process's calls from 0: numbers kept for an instance on the dead process
            # of that name would make it wait for ever for the ones before (issue 25). A
            # number taken for the dead one and sent later (once its ref arguments came) is
            # numbered again by send: it was taken for another numbering.
            dead = self.numbering(worker)
            for key in [k for k in self._seqs if k[1] == dead]:
                del self._seqs[key]
            self.lives.bump(worker)  # before inflight.revive: see InFlight.fail_worker_soon
            self._dead_workers.discard(worker)
            self._death_reasons.pop(worker, None)
            self._suspects.discard(worker)
        # The other way round: the new process numbers its calls to the actors here from
        # 0. Forgotten at its death already, unless that news never came here; then the
        # dead one's calls go unanswered (a reply would reach the new process).
        self.host.forget_caller(worker, answer=False)
        self.inflight.revive(worker)

    def admit(self, worker: str, rpc_id: int, replaces: bool = True) -> None:
        """Rank 0: lets a process into the running group.

        Every live process learns its RPC id (and, for one that replaces the dead
        ``worker``, that it is alive again) before it is placed on, so the first actor on
        it can be called from anywhere.

        Args:
            worker: Its name.
            rpc_id: Its RPC id.
            replaces: It replaces the dead ``worker``; False: it is a new process, already
                in :attr:`plan`.
        """
        group.add_members([(worker, rpc_id)])
        others = [
            p.name
            for p in (self.plan.processes if self.plan is not None else ())
            if p.name not in (self.name, worker) and p.name not in self._dead_workers
        ]
        futures = []
        for name in others:
            try:
                futures.append(
                    rpc.rpc_async(name, group.rpc_add_member, args=(worker, rpc_id, replaces))
                )
            except Exception:  # that one is gone too: it learns nothing, it is dead
                pass
        for fut in futures:
            try:
                fut.wait()
            except Exception:
                pass
        self._tell_newcomer(worker, replaces)
        if replaces:
            self.note_alive(worker)
            if self.restarts is not None:
                self.restarts.worker_back(worker)  # before any restart may go there
            if self.directory is not None:
                self.directory.revive(worker)

    def _tell_newcomer(self, worker: str, replaces: bool) -> None:
        """Rank 0: tells a process joining now which names died or were replaced before.

        A death is told to the processes alive then (:meth:`_tell_workers`): one that
        joins later would send to a dead name's old address, where (its sockets held
        open by a forked child) nothing may ever answer or fail, and would take a
        replaced name's new process for the actors of the old one; its own name's too,
        when it replaces a dead process: a handle naming it would call itself, where the
        dead one's actors never were. Told before it is placed on, so its first actor
        knows.
        """
        dead = {w: self._death_reasons.get(w, "it died") for w in self._dead_workers}
        dead.pop(worker, None)  # the one it replaces
        replaced = sorted(self._replaced | {worker} if replaces else self._replaced)
        if not dead and not replaced:
            return
        try:
            rpc.rpc_sync(worker, rpc_past_deaths, args=(dead, replaced), timeout=NEWS_TIMEOUT_S)
        except Exception:  # it died already, or stops: it learns nothing, it is gone
            pass

    def learn_past_deaths(self, dead: dict[str, str], replaced: list[str]) -> None:
        """In a process that just joined: what rank 0 knew of the cluster's past.

        Args:
            dead: The processes dead now, and how rank 0 knew.
            replaced: The names a new process took after their process died.
        """
        with self._dead_lock:
            self._replaced.update(replaced)
        for worker, why in dead.items():
            if worker not in self._dead_workers:
                self.note_dead(worker, why)

    def may_have_lost(self, worker: str) -> bool:
        """Whether objects ``worker`` made may be gone: it is (or was once) known dead.

        A process of that name that replaced the dead one keeps none of its objects; the
        name alone cannot tell an object of the new one from an object of the dead one.
        """
        return worker in self._dead_workers or worker in self._replaced

    @property
    def ever_lost_a_peer(self) -> bool:
        """Whether a process of the cluster died (or was replaced) while this one ran."""
        return bool(self._dead_workers or self._replaced)

    @property
    def dead_workers(self) -> frozenset[str]:
        """Names of the processes known to have died."""
        return frozenset(self._dead_workers)

    def shutdown(self) -> None:
        """Stops the actors here; the caller (api.shutdown / worker main) ends RPC."""
        self.stopped.set()
        self.host.kill_all("the cluster is shutting down")
        self.host.close()
        self.objects.clear()
        shm.forget_all()
        self.generators.shut()
        self.calls.close("the cluster is shutting down")
        if self.restarts is not None:
            self.restarts.close()  # before the retries, which may wait in its locate
        self.retries.close()
        self.functions.close()
        self.replies.close()
        if self._on_shutdown is not None:
            self._on_shutdown()


def rpc_worker_died(worker: str, why: str) -> None:
    """Sent by rank 0 to every process when it marks ``worker`` dead (``why``: how it knew)."""
    rt = current_or_none()
    if rt is not None:
        rt.note_dead(worker, why)


def rpc_past_deaths(dead: dict[str, str], replaced: list[str]) -> None:
    """Sent by rank 0 to a process it admits: see :meth:`Runtime.learn_past_deaths`."""
    rt = current_or_none()
    if rt is not None:
        rt.learn_past_deaths(dead, replaced)


def rpc_unreachable(worker: str) -> None:
    """Sent to rank 0 by a process whose call could not reach ``worker``: judge it now."""
    rt = current_or_none()
    if rt is not None:
        rt.worker_unreachable(worker)


def rpc_stop() -> None:
    """Sent by the driver to each worker at shutdown: stop the actors and quiesce RPC.

    The worker's main thread does both, and counts itself in the store once quiesced
    (:func:`actorrt.runtime.group.quiesce`): a quiesced process sends no more, and takes
    a peer's closing as no error.
    """
    current().stop_requested.set()
