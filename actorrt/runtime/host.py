"""The actor host: every process's registry of the actors it runs, and the RPC entry points.

Callers reach actors only through the module-level functions here, sent with plain
``rpc_async`` / ``rpc.remote`` (never ``RRef.rpc_async``: see DESIGN.md). They look up
the process's :class:`ActorHost` and hand the call to the actor's :class:`Mailbox`.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import cloudpickle
import torch
import torch.distributed.rpc as rpc

from actorrt.placement.functions import EXECUTOR_PREFIX
from actorrt.runtime import context, group, quick_rpc, rref_keeper, streams
from actorrt.runtime.executor import open_executor
from actorrt.runtime.mailbox import Call, Mailbox, PackReply
from actorrt.runtime.payload import Wire
from actorrt.runtime.protocol import ActorRecord

__all__ = ["RESTART_WAIT_S", "ActorHost", "ActorLease"]

RESTART_WAIT_S = 5.0
"""How long a restart waits, at most, for the creation of an actor still on its way."""


class ActorLease:
    """The value an actor's RRef holds: when the last handle goes, the actor is released."""

    def __init__(self, host: ActorHost, actor_id: str) -> None:
        self._host = host
        self.actor_id = actor_id
        watch = host.watch_lease
        if watch is not None:  # the forks of dead holders are dropped here (holder_died)
            watch(actor_id, True)

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        # On an agent with device maps torch finds the tensors in every RRef value by
        # pickling it (torch._jit_internal._extract_tensors). Without this it would walk the
        # whole host (mailboxes, threads), fail, and drop the lease: the actor would be
        # released before its first call. A lease holds no tensors; it pickles as its id.
        return (str, (self.actor_id,))

    def __del__(self) -> None:
        # __del__ may run inside any code that holds the host's lock (garbage collection
        # runs anywhere), so it only queues the release; a thread of the host does it.
        try:
            watch = self._host.watch_lease
            if watch is not None:
                watch(self.actor_id, False)
            self._host._released.put(self.actor_id)
        except Exception:  # interpreter teardown: nothing left to release
            pass


class ActorHost:
    """Owns the mailboxes of the actors living in this process."""

    def __init__(
        self, pack_reply: PackReply, on_actor_end: Callable[[str, str], None] | None = None
    ) -> None:
        self._lock = threading.Lock()
        # Notified as each actor's constructor is queued (a restart may come first).
        self._opened = threading.Condition(self._lock)
        self._mailboxes: dict[str, Mailbox] = {}
        self._tombstones: dict[str, str] = {}  # actor id -> why it is gone
        self._classes: dict[str, type] = {}
        self._pinned: dict[str, ActorLease] = {}  # named actors live until killed
        # actor id -> (its record, its lease while some RRef holds it (None: pinned),
        # whether it was made again after its process died), for what an actor asks of
        # itself (actorrt.get_runtime_context()); its name, if it has one, and what it
        # reserved (num_cpus, num_gpus)
        self._own: dict[str, tuple[ActorRecord, weakref.ref[ActorLease] | None, bool]] = {}
        self._names: dict[str, str] = {}
        self._resources: dict[str, dict[str, float]] = {}
        self._on_actor_end = on_actor_end
        # Told as each actor lease is made (True) and goes (False), by its actor id: the
        # runtime keeps which process holds which fork of it (runtime/held_forks.py).
        self.watch_lease: Callable[[str, bool], None] | None = None
        self._pack_reply = pack_reply
        # reentrant-safe put; None ends the thread (close)
        self._released: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        threading.Thread(target=self._release_loop, name="actorrt-release", daemon=True).start()

    def _release_loop(self) -> None:
        while True:
            actor_id = self._released.get()
            if actor_id is None:
                return
            self.release(actor_id, "no handle refers to the actor any more")

    def close(self) -> None:
        """Ends the thread that releases actors (at shutdown, once every actor is killed).

        Without this, each start() and shutdown() in one process left that thread, and
        with it the whole ended runtime, alive.
        """
        self._released.put(None)

    def _mailbox(self, actor_id: str) -> Mailbox:
        # Calls may arrive before the creation request (RPC threads race), so the first
        # message for an actor makes its mailbox; calls wait there for the constructor.
        box = self._mailboxes.get(actor_id)  # one dict read is atomic: no lock per call
        if box is not None:
            return box
        with self._lock:
            box = self._mailboxes.get(actor_id)
            if box is None:
                box = Mailbox(actor_id, self._forget, self._pack_reply)
                reason = self._tombstones.get(actor_id)
                if reason is not None:
                    box.mark_dead(reason)  # answers every call with why the actor is gone
                else:
                    self._mailboxes[actor_id] = box
                    if actor_id.startswith(EXECUTOR_PREFIX):  # remote functions' own
                        open_executor(box, actor_id)
            return box

    def create(
        self,
        actor_id: str,
        class_key: str,
        class_blob: bytes | None,
        wire: Wire,
        *,
        class_name: str,
        max_concurrency: int | None,
        gpu_ids: tuple[int, ...],
        pinned: bool,
        concurrency_groups: tuple[tuple[str, int], ...] = (),
        methods: str = "",
        retries: int = 0,
        max_pending: int = -1,
        reconstructed: bool = False,
        name: str | None = None,
        resources: dict[str, float] | None = None,
    ) -> ActorLease:
        """Creates an actor here (the ``rpc_create`` request); its RRef holds the lease.

        A constructor that fails, or a class that cannot be loaded here, leaves a dead
        mailbox that answers every call with why, so the caller hears it on its first call.
        """
        lease = ActorLease(self, actor_id)
        box = self._mailbox(actor_id)
        try:
            with self._lock:
                cls = self._classes.get(class_key)
                if cls is None:
                    if class_blob is None:
                        raise RuntimeError(f"class {class_name} was never shipped to this process")
                    cls = self._classes[class_key] = cloudpickle.loads(class_blob)
                if pinned:
                    self._pinned[actor_id] = lease
                here = rpc.get_worker_info().name
                record = ActorRecord(actor_id, here, class_name, methods, retries, max_pending)
                lease_ref = None if pinned else weakref.ref(lease)
                self._own[actor_id] = (record, lease_ref, reconstructed)
                if name is not None:
                    self._names[actor_id] = name
                if resources:
                    self._resources[actor_id] = dict(resources)
        except BaseException as exc:  # e.g. the class's module does not import here
            box.kill(
                f"{class_name} actor {actor_id} could not be created on "
                f"{rpc.get_worker_info().name}: {type(exc).__name__}: {exc}"
            )
            return lease
        box.open(
            cls,
            wire,
            class_name=class_name,
            max_concurrency=max_concurrency,
            gpu_ids=gpu_ids,
            concurrency_groups=concurrency_groups,
        )
        with self._lock:
            self._opened.notify_all()
        return lease

    def own_handle_parts(self, actor_id: str) -> tuple[ActorRecord, ActorLease | None]:
        """What a handle of actor ``actor_id``, made in its own process, is made of.

        Returns:
            Its record, and its lease for a new RRef to hold (None: a pinned actor, whose
            handles hold nothing).

        Raises:
            RuntimeError: The actor does not live here, or no handle holds it any more
                (its queued calls run, then it is freed).
        """
        with self._lock:
            own = self._own.get(actor_id)
        if own is None:
            raise RuntimeError(f"actor {actor_id} does not live in this process")
        record, lease_ref, _ = own
        if lease_ref is None:
            return record, None
        lease = lease_ref()
        if lease is None:
            raise RuntimeError(
                f"actor {actor_id} is being freed (no handle refers to it any more): it "
                "can make no handle of itself; keep a handle of it while it needs one"
            )
        return record, lease

    def name_of(self, actor_id: str) -> str | None:
        """The name of actor ``actor_id`` (living here), or None."""
        return self._names.get(actor_id)

    def resources_of(self, actor_id: str) -> dict[str, float]:
        """What actor ``actor_id`` (living here) reports as its ``get_assigned_resources()``.

        ``{"CPU": n, "GPU": m}``, no zeros: its creator's
        :meth:`~actorrt.options.ActorOptions.assigned_resources`, Ray's figures.
        """
        return dict(self._resources.get(actor_id, {}))

    def was_reconstructed(self, actor_id: str) -> bool:
        """Whether actor ``actor_id`` (living here) was made again after its process died."""
        with self._lock:
            own = self._own.get(actor_id)
        return own is not None and own[2]

    def restart(
        self,
        actor_id: str,
        reason: str,
        class_key: str,
        class_blob: bytes,
        wire: Wire,
        numbered: dict[str, int] | None = None,
    ) -> bool:
        """Runs the actor's constructor again where it is; its calls in flight fail.

        ``numbered``: per caller, the last number it took before (see
        :meth:`Mailbox.restart`).

        Returns:
            False when the actor does not live here (any more).
        """

        def opened_or_gone() -> bool:
            box = self._mailboxes.get(actor_id)
            return (box is not None and box.opened) or actor_id in self._tombstones

        with self._lock:
            # Its creation may still be on its way (the handle came back at once).
            self._opened.wait_for(opened_or_gone, timeout=RESTART_WAIT_S)
            box = self._mailboxes.get(actor_id)
            own = self._own.get(actor_id)
            if box is None or own is None:
                return False
            cls = self._classes.get(class_key)
            if cls is None:
                cls = self._classes[class_key] = cloudpickle.loads(class_blob)
            self._own[actor_id] = (own[0], own[1], True)  # was_current_actor_reconstructed
        return box.restart(reason, cls, wire, numbered)

    def deliver(self, actor_id: str, call: Call) -> None:
        """Hands ``call`` to the actor's mailbox (made on first use: calls may arrive first)."""
        box = self._mailboxes.get(actor_id)  # as _mailbox() does, without its call per call
        (box if box is not None else self._mailbox(actor_id)).deliver(call)

    def cancel(self, actor_id: str, caller: str, seq: int, recursive: bool) -> None:
        """``actorrt.cancel`` of ``caller``'s call ``seq`` (see :meth:`Mailbox.cancel`)."""
        # _mailbox(): the cancel may come before the call, or even before the actor
        self._mailbox(actor_id).cancel(caller, seq, recursive)

    def forget_caller(self, caller: str, answer: bool = True) -> None:
        """``caller``'s process died or was replaced (see :meth:`Mailbox.forget_caller`)."""
        with self._lock:
            boxes = list(self._mailboxes.values())
        for box in boxes:
            box.forget_caller(caller, answer)

    def kill(self, actor_id: str, reason: str) -> bool:
        """Ends the actor now with ``reason``; False when it does not live here."""
        with self._lock:
            box = self._mailboxes.get(actor_id)
            self._tombstones.setdefault(actor_id, reason)
            self._pinned.pop(actor_id, None)
        if box is None:
            return False
        box.kill(reason)
        return True

    def release(self, actor_id: str, reason: str) -> None:
        """No handle refers to the actor any more: queued calls finish, then it is freed."""
        with self._lock:
            box = self._mailboxes.get(actor_id)
            self._tombstones.setdefault(actor_id, reason)
        if box is not None:
            box.release(reason)

    def kill_all(self, reason: str) -> None:
        """Kills every actor of this process with ``reason`` (at shutdown)."""
        with self._lock:
            ids = list(self._mailboxes)
        for actor_id in ids:
            self.kill(actor_id, reason)

    def _forget(self, actor_id: str, reason: str) -> None:
        with self._lock:
            gone = self._mailboxes.pop(actor_id, None)
            self._tombstones.setdefault(actor_id, reason)
            self._pinned.pop(actor_id, None)  # a named actor that exited itself
            self._own.pop(actor_id, None)
            self._names.pop(actor_id, None)
            self._resources.pop(actor_id, None)
        if gone is not None and self._on_actor_end is not None:
            self._on_actor_end(actor_id, reason)

    def waits_on_itself(self, actor_id: str, caller: str, seq: int) -> bool:
        """Whether this thread, running the actor, waits for ever on its call (see Mailbox)."""
        box = self._mailboxes.get(actor_id)
        return box is not None and box.waits_on_itself(caller, seq)

    def calls_in_flight(self) -> dict[str, int]:
        """Per actor living here, the calls it received and has not answered yet."""
        with self._lock:
            boxes = list(self._mailboxes.items())
        return {actor_id: box.calls_in_flight() for actor_id, box in boxes}

    def calls_running(self) -> dict[str, list[tuple[str, float]]]:
        """Per actor living here that runs calls now, each one's name and when it began."""
        with self._lock:
            boxes = list(self._mailboxes.items())
        running = ((actor_id, box.running()) for actor_id, box in boxes)
        return {actor_id: calls for actor_id, calls in running if calls}


# -- RPC entry points (module level so every process can resolve them by name) ---------


def _host() -> ActorHost:
    return context.part(ActorHost)


def rpc_create(
    actor_id: str, class_key: str, class_blob: bytes | None, wire: Wire, meta: dict[str, Any]
) -> ActorLease:
    """Runs on the chosen process under ``rpc.remote``; returns the lease the RRef holds."""
    streams.arrived(wire)
    return _host().create(actor_id, class_key, class_blob, wire, **meta)


def create_remote(
    worker: str,
    actor_id: str,
    class_key: str,
    class_blob: bytes | None,
    wire: Wire,
    meta: dict[str, Any],
) -> Any:
    """Creates an actor on ``worker``; returns the RRef that holds its lease, or None.

    None where this process's RRefs cannot work (``group.rrefs_work()``: a driver that
    started a second cluster): the actor is then created by a plain call and pinned (it
    lives until killed or the cluster stops), since an RRef held here would never be let
    go. Otherwise ``rpc.remote``, as before, whatever ``meta["pinned"]`` says.
    """
    args = (actor_id, class_key, class_blob, wire, meta)
    if group.rrefs_work():
        rref = rpc.remote(worker, rpc_create, args=args)
        rref_keeper.hold_received(rref)  # until the worker confirms it (see rref_keeper)
        rref_keeper.made(rref, actor_id)  # its host drops this fork if this process dies
        return rref
    # Failures show on the actor's calls (a dead mailbox, or its process gone), as with
    # an RRef nobody reads.
    rpc.rpc_async(worker, rpc_create, args=(*args[:4], {**meta, "pinned": True}))
    return None


@rpc.functions.async_execution  # type: ignore[untyped-decorator]  # torch leaves it unannotated
def rpc_call(
    actor_id: str, caller: str, seq: int, method: str | None, wire: Wire | None
) -> torch.futures.Future[Wire]:
    """Hands one call to the actor's mailbox; the packed reply goes back when it is done."""
    # torch's own future type, without the Python subclass's __init__ (a third of the
    # cost of making one); torch takes either from an async_execution function.
    future: torch.futures.Future[Wire] = torch._C.Future([])  # type: ignore[assignment]
    streams.arrived(wire)
    context.part(ActorHost).deliver(actor_id, Call(caller, seq, method, wire, future))
    return future


def post_call(
    worker: str, actor_id: str, caller: str, seq: int, method: str | None, wire: Wire | None
) -> torch.futures.Future[Wire]:
    """Sends one call to ``worker`` (``method`` None: seq ``seq`` is given up); its reply's future.

    The one place a call leaves alone (the batches send theirs with ``rpc_call_batch``).
    No timeout: actor methods may run for long, and ``get(timeout=)`` bounds the waits.
    """
    future: torch.futures.Future[Wire] = quick_rpc.rpc_async(
        worker, rpc_call, (actor_id, caller, seq, method, wire)
    )
    return future


def give_up(worker: str, actor_id: str, caller: str, seq: int) -> None:
    """Tells the actor's mailbox that ``caller``'s call ``seq`` will never come.

    For a call numbered and then not sent: without this every later call from ``caller``
    to the actor would wait for it for ever. Nothing to do where the worker is gone.
    """
    try:
        post_call(worker, actor_id, caller, seq, None, None)
    except Exception:  # the worker is gone: nothing waits for the number any more
        pass


def rpc_cancel(actor_id: str, caller: str, seq: int, recursive: bool) -> None:
    """Cancels ``caller``'s call ``seq`` to the actor (``actorrt.cancel``): see Mailbox.cancel."""
    _host().cancel(actor_id, caller, seq, recursive)


def post_cancel(
    worker: str, actor_id: str, caller: str, seq: int, recursive: bool
) -> torch.futures.Future[None]:
    """Sends :func:`rpc_cancel` to ``worker``; the call's own reply says what came of it."""
    future: torch.futures.Future[None] = quick_rpc.rpc_async(
        worker, rpc_cancel, (actor_id, caller, seq, recursive)
    )
    return future


def rpc_restart(
    actor_id: str,
    reason: str,
    class_key: str,
    class_blob: bytes,
    wire: Wire,
    numbered: dict[str, int] | None = None,
) -> bool:
    """Restarts the actor where it is (rank 0's ``restart_in_place``); False: not here."""
    streams.arrived(wire)
    return _host().restart(actor_id, reason, class_key, class_blob, wire, numbered)


def rpc_kill(actor_id: str, reason: str) -> bool:
    """Ends the actor now with ``reason``; False when it does not live here."""
    return _host().kill(actor_id, reason)


_heard = [time.monotonic()]  # when the last ping arrived (the driver's heartbeat)


def rpc_ping(value: Any = None) -> Any:
    """Returns ``value``: a plain round trip (the driver's heartbeat; raw RPC in benchmarks)."""
    _heard[0] = time.monotonic()
    return value


def last_ping() -> float:
    """``time.monotonic()`` of the last ping this process answered (or of its import)."""
    return _heard[0]
