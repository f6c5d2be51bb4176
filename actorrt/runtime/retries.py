"""Calls to actors with ``max_task_retries``: kept until answered, sent again to a new instance.

When the process of an actor created with ``max_restarts`` dies, rank 0 recreates the
actor (``restarts.py``). A call that was in flight then, or queued in a batch, fails at
the RPC layer; for an actor with ``max_task_retries`` it is sent again, to the recreated
actor, up to that many times (-1: until the restarts run out), instead of failing with
``ActorDiedError``.

Only such actors pay for it: the caller keeps each call's arguments until its reply, and
the ``ObjectRef`` waits on a future of this module's, which a callback on each reply
completes (one Python callback per reply, which other calls avoid; see refs.py). The
resend never runs in that callback, which runs on torch's RPC threads: finding the new
instance waits for rank 0, so the callback hands the failure to a thread of its own.

Order: a caller's calls to one actor that are retried are sent again in the order they
were made, and before any call made through the same handle once the resend has begun
(a send to the actor waits while its calls are being recovered).

A call with ``retry_exceptions`` whose reply is an exception it retries on is sent
again too, to the same actor, spending one of its retries; it then runs after the calls
made meanwhile, as in Ray. So is a call queued or running when its actor was restarted
in place (``actorrt.kill(handle, no_restart=False)``), as Ray retries such calls.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
import weakref
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import torch

from actorrt.errors import ActorDiedError
from actorrt.logs import get_logger
from actorrt.runtime import torch_threads
from actorrt.runtime.objects import reply_of_call
from actorrt.runtime.protocol import (
    Liveness,
    LocalFailure,
    actor_gone,
    cancelled,
    failed_in_pickling,
    rpc_failure,
)
from actorrt.runtime.raised import RetryOn, restarted, retried

if TYPE_CHECKING:
    from actorrt.runtime.outbox import KeepAlive
    from actorrt.runtime.payload import Wire
    from actorrt.runtime.protocol import ReplySlot, Target

__all__ = ["CallRetries", "Route"]

log = get_logger("retries")

#: How long a recovery waits, at most, for the other calls still out to a dead process to
#: come back failed, so that they are resent in order with the first one. Calls that take
#: longer are resent when they do.
SETTLE_S = 5.0


class Route(Liveness, Protocol):
    """What the retries need of the runtime (``Runtime`` is one)."""

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
        """Packs arguments for ``worker``; gives up ``seq`` and raises ``TypeError`` if not.

        With ``pins``, refs inside the arguments travel borrowed for the call and are
        appended to it (``Runtime.pack_call``).
        """
        ...

    def post(
        self, target: Target, worker: str, seq: int, method: str, wire: Wire, may_queue: bool
    ) -> tuple[torch.futures.Future[Wire], KeepAlive | None]:
        """Sends a packed call; the future of its reply (raises if the agent refuses it)."""
        ...

    def locate_away(self, actor_id: str, dead: str) -> tuple[str | None, str]:
        """Where the actor lives once it left ``dead`` (waits), or None and why it will not."""
        ...

    def moved_from_replaced(self, target: Target) -> str | None:
        """Points ``target`` where it lives if a new process took its process's name."""
        ...


@dataclass(eq=False)
class _Call:
    """A call to an actor with retries, kept until its reply."""

    order: int  # when it was made, among this process's calls
    target: Target
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    reply: torch.futures.Future[Wire]  # what the ObjectRef waits on
    left: int  # retries left; -1: no limit
    allowed: int  # its max_task_retries (the actor's, or its method's or options' own)
    worker: str  # where its current attempt went
    attempt: torch.futures.Future[Wire] | None = None
    keep: KeepAlive | None = None
    failure: BaseException | None = None  # why the current attempt found no actor
    sent_as: tuple[str, int] = ("", -1)  # (worker, seq) of the current attempt, set as one
    cancelled: bool = False  # actorrt.cancel(): never sent again
    recursive: bool = True  # and whether that cancel reaches the calls it made
    on: RetryOn = False  # its retry_exceptions: the exceptions raised that send it again
    restarted: bool = False  # its actor was restarted in place under it: to send again

    @property
    def what(self) -> str:
        return f"{self.target._class_name}.{self.method}"


@dataclass
class _Restart:
    """A call its actor's restart in place failed, handed to the retries thread."""

    call: _Call


class CallRetries:
    """This process's calls to actors with ``max_task_retries``, and their resends.

    Args:
        route: The runtime: sends, sequence numbers, where an actor lives now.
        settle: See ``SETTLE_S``.
    """

    def __init__(self, route: Route, settle: float = SETTLE_S) -> None:
        self._route = route
        self._settle_s = settle
        self._lock = threading.Lock()  # guards the tables below, briefly
        self._actor_locks: dict[str, threading.Lock] = {}  # held while sending / recovering
        self._calls: dict[str, dict[int, _Call]] = {}  # actor id -> unanswered, by order
        self._order = itertools.count()
        # (actor id, dead worker): calls lost with a process; a call: raised, to send again;
        # a _Restart: failed by its actor's restart in place, to send again
        self._failed: queue.SimpleQueue[tuple[str, str] | _Call | _Restart | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None

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
        left: int | None = None,
        on: RetryOn = False,
    ) -> None:
        """Sends a call to an actor with retries (see ``Runtime.send`` for the arguments).

        ``left``: how many times it may be sent again (its method's or its options'
        ``max_task_retries``; None: the actor's; -1: without limit). ``on``: its
        ``retry_exceptions``.
        """
        allowed = target._max_task_retries if left is None else left
        reply: torch.futures.Future[Wire] = torch.futures.Future()
        with self._actor_lock(target._actor_id):
            worker = target._worker
            if seq_worker is not None and self._route.numbering(worker) != seq_worker:
                # the retries thread's _recover moved the actor after the number was taken
                seq = self._route.seq_at(target._actor_id, worker)
            if self._route.is_down(worker):
                new, why = self._recover(target._actor_id, worker)  # earlier calls go first
                if new is None:
                    slot.fail(actor_gone(f"{target._class_name}.{method}", target._actor_id, why))
                    return
                target._worker = worker = new
                seq = self._route.seq_at(target._actor_id, worker)
            else:
                # A new process took the name of the actor's process: the actor may have
                # died with the old one, or been recreated elsewhere meanwhile.
                gone = self._route.moved_from_replaced(target)
                if gone is not None:
                    slot.fail(actor_gone(f"{target._class_name}.{method}", target._actor_id, gone))
                    return
                if target._worker != worker:
                    worker = target._worker
                    seq = self._route.seq_at(target._actor_id, worker)
            pins: list[Any] = []
            try:
                wire = self._route.pack_call(target, worker, seq, method, args, kwargs, pins)
            except TypeError as err:
                if raise_now:
                    raise
                slot.fail(err)
                return
            call = _Call(
                order=next(self._order),
                target=target,
                method=method,
                args=args,
                kwargs=kwargs,
                reply=reply,
                left=allowed,
                allowed=allowed,
                worker=worker,
                on=on,
            )
            with self._lock:
                self._calls.setdefault(target._actor_id, {})[call.order] = call
            self._post(call, seq, wire, pins, may_queue=True)
        # The call holds the handle until its reply; a cancel goes to its current attempt.
        # The ref holds the call weakly: kept, it would keep the handle, and so the actor,
        # alive for as long as the ref.
        slot.attach(reply, worker, None, partial(self._cancel, weakref.ref(call)))

    # -- each attempt's reply (on torch's RPC threads: no waiting here) ---------------
    def _post(self, call: _Call, seq: int, wire: Wire, pins: list[Any], *, may_queue: bool) -> None:
        call.sent_as = (call.worker, seq)  # before cancelled is read: see _cancel
        try:
            attempt, keep = self._route.post(
                call.target, call.worker, seq, call.method, wire, may_queue
            )
        except Exception as exc:  # the agent refused it: the process is gone
            self._lost(call, exc)
            return
        if pins:  # refs inside the arguments travelled borrowed: held until this reply
            attempt = reply_of_call(attempt, call.worker, pins)
        call.attempt, call.keep = attempt, keep
        attempt.add_done_callback(partial(self._answered, call))
        if call.cancelled:  # a cancel that read the attempt before: this one too
            self._route.cancel_call(call.worker, call.target._actor_id, seq, call.recursive)

    def _cancel(self, ref: weakref.ref[_Call], recursive: bool) -> None:
        """``actorrt.cancel`` of the call: its current attempt is cancelled, none follows."""
        call = ref()
        if call is None:  # answered, and let go of
            return
        call.recursive = recursive
        call.cancelled = True  # before sent_as is read: a resend then cancels itself
        worker, seq = call.sent_as
        if not call.reply.done():
            self._route.cancel_call(worker, call.target._actor_id, seq, recursive)

    def _answered(self, call: _Call, attempt: torch.futures.Future[Wire]) -> None:
        if call.attempt is not attempt:
            return
        try:
            wire = attempt.value()
        except Exception as exc:
            died = isinstance(rpc_failure(call.what, call.worker, exc), ActorDiedError)
            if died and not self._route.stopped.is_set():
                self._lost(call, exc)
            else:
                self._done(call)
                _fail(call.reply, exc)  # the caller's ObjectRef words it
                if failed_in_pickling(exc):  # it may not have reached the mailbox
                    worker, seq = call.sent_as  # (refs._close_gap, for an attempt)
                    self._route.skip_at(call.target._actor_id, worker, seq)
            return
        try:
            again = call.left != 0 and not call.cancelled and not self._route.stopped.is_set()
            lost_to_restart = again and restarted(wire)
            again = again and (lost_to_restart or bool(call.on and retried(wire, call.on)))
        except Exception:  # a reply it cannot read: the caller's ref says so, not a hang
            again = lost_to_restart = False
        if again:
            if call.left > 0:
                call.left -= 1
            if lost_to_restart:
                call.restarted = True
                self._wake(_Restart(call))
            else:
                self._wake(call)  # sent from the thread: packing may take long
            return
        self._done(call)
        call.reply.set_result(wire)

    def _lost(self, call: _Call, exc: BaseException) -> None:
        """The attempt found no actor: the thread sends it again, or gives up."""
        call.failure = exc
        self._wake((call.target._actor_id, call.worker))

    def _wake(self, item: tuple[str, str] | _Call | _Restart) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    # It ends at close; the exit waits for a send under way (torch_threads).
                    self._thread = torch_threads.start(self._loop, name="actorrt-retries")
        self._failed.put(item)

    def _done(self, call: _Call) -> None:
        with self._lock:
            calls = self._calls.get(call.target._actor_id)
            if calls is not None:
                calls.pop(call.order, None)
                if not calls:
                    del self._calls[call.target._actor_id]
        call.args, call.kwargs = (), {}  # not kept a moment longer than the reply
        if call.keep is not None:
            call.keep.let_go()

    def _give_up(self, call: _Call, error: Exception) -> None:
        self._done(call)
        try:
            _fail(call.reply, LocalFailure(error))
        except RuntimeError:  # given up already (close() and the thread both did)
            pass

    # -- the thread that sends again -----------------------------------------------
    def _loop(self) -> None:
        while True:
            item = self._failed.get()
            if item is None:
                self._drain()
                return
            if isinstance(item, _Call):
                self._raised(item)
                del item  # not kept (with its arguments) while waiting for the next
                continue
            if isinstance(item, _Restart):
                self._restarted(item.call)
                del item
                continue
            actor_id, dead = item
            try:
                with self._actor_lock(actor_id):
                    if any(c.failure is not None for c in self._calls_on(actor_id, dead)):
                        self._recover(actor_id, dead)
            except Exception:  # never lose the thread: its calls would wait for ever
                log.exception("recovering the calls to actor %s failed", actor_id)

    def _raised(self, call: _Call) -> None:
        """Sends ``call`` again to its actor: it raised an exception it retries on."""
        if call.keep is not None:  # the raising attempt is answered
            call.keep.let_go()
            call.keep = None
        try:
            with self._actor_lock(call.target._actor_id):
                if call.cancelled:
                    when = "before it was sent again (it had raised)"
                    self._give_up(call, cancelled(call.what, when, call.target._actor_id))
                    return
                if self._route.stopped.is_set():
                    self._give_up(call, _shut_before_resent(call))
                    return
                # where the actor lives now: a recovery may have moved it meanwhile
                self._resend(call, call.target._worker)
        except Exception as exc:  # never lose the thread, nor leave the call unanswered
            log.exception("sending %s again failed", call.what)
            self._give_up(call, exc)

    def _restarted(self, call: _Call) -> None:
        """Sends ``call`` again with the other calls its actor's restart failed, in order.

        Their replies come at once but may be read in any order: the calls made before
        ``call`` are waited for (at most ``SETTLE_S``) until each is answered or failed by
        the restart too. One sent with an earlier one is not sent again.
        """
        actor_id = call.target._actor_id
        try:
            with self._actor_lock(actor_id):
                if not call.restarted:
                    return
                with self._lock:
                    calls = list(self._calls.get(actor_id, {}).values())
                group = sorted((c for c in calls if c.order <= call.order), key=lambda c: c.order)
                deadline = time.monotonic() + self._settle_s
                for c in group:
                    while not (c.restarted or c.reply.done()) and time.monotonic() < deadline:
                        time.sleep(0.005)
                for c in [c for c in group if c.restarted]:
                    c.restarted = False
                    if c.keep is not None:  # the failed attempt is answered
                        c.keep.let_go()
                        c.keep = None
                    if c.cancelled:
                        when = "before it was sent again (its actor had been restarted)"
                        self._give_up(c, cancelled(c.what, when, actor_id))
                    elif self._route.stopped.is_set():
                        self._give_up(c, _shut_before_resent(c))
                    else:
                        self._resend(c, c.target._worker)
        except Exception as exc:  # never lose the thread, nor leave the call unanswered
            log.exception("sending %s again failed", call.what)
            self._give_up(call, exc)

    def _drain(self) -> None:
        """At close: the calls still waiting to be sent again (raised, or restarted) fail."""
        while True:
            try:
                item = self._failed.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Restart) and item.call.restarted:
                item = item.call
            if isinstance(item, _Call):
                self._give_up(item, _shut_before_resent(item))

    def _recover(self, actor_id: str, dead: str) -> tuple[str | None, str]:
        """Finds the actor away from ``dead`` and sends its calls that failed there again.

        Holds the actor's lock. Returns where the actor lives now, or None and why not.
        """
        calls = self._calls_on(actor_id, dead)
        if self._route.stopped.is_set():
            new: str | None = None
            why = "the cluster is shutting down"
        else:
            self._route.worker_unreachable(dead)
            new, why = self._route.locate_away(actor_id, dead)
            self._settle(calls)
        for call in calls:
            if call.failure is None:  # answered, or still out (it comes back on its own)
                continue
            retries = call.allowed
            lost = f"{call.what}: the actor's process {dead!r} died with the call in flight"
            if call.cancelled:
                when = "before it was sent again (its actor's process had died)"
                self._give_up(call, cancelled(call.what, when, actor_id))
            elif new is None:
                self._give_up(
                    call,
                    ActorDiedError(
                        f"{lost}, and it was not sent again: the actor is gone: {why}. "
                        "Create a new actor to go on.",
                        actor_id,
                    ),
                )
            elif call.left == 0:
                self._give_up(
                    call,
                    ActorDiedError(
                        f"{lost}, and it was not sent again: its retries are used up "
                        f"(max_task_retries={retries}). The actor was recreated on {new!r}: "
                        "call it again to go on.",
                        actor_id,
                    ),
                )
            else:
                if call.left > 0:
                    call.left -= 1
                self._resend(call, new)
        if new is not None:
            # Only now: a call made through these handles from here on is numbered after
            # the resends (the instance runs a caller's calls in the order of their numbers).
            for call in calls:
                call.target._worker = new
        return new, why

    def _resend(self, call: _Call, worker: str) -> None:
        call.failure = None
        call.worker = worker
        seq = self._route.seq_at(call.target._actor_id, worker)
        pins: list[Any] = []
        try:
            wire = self._route.pack_call(
                call.target, worker, seq, call.method, call.args, call.kwargs, pins
            )
        except TypeError as err:
            self._give_up(call, err)
            return
        log.info("%s: sent again to %s", call.what, worker)
        # Not through the outbox: it would send to where the handle points, which is
        # still the dead process until the recovery ends.
        self._post(call, seq, wire, pins, may_queue=False)

    def _settle(self, calls: list[_Call]) -> None:
        deadline = time.monotonic() + self._settle_s
        for call in calls:
            while call.failure is None and not call.reply.done():
                if time.monotonic() >= deadline:
                    return
                time.sleep(0.01)

    def _calls_on(self, actor_id: str, worker: str) -> list[_Call]:
        with self._lock:
            calls = list(self._calls.get(actor_id, {}).values())
        return sorted((c for c in calls if c.worker == worker), key=lambda c: c.order)

    def _actor_lock(self, actor_id: str) -> threading.Lock:
        lock = self._actor_locks.get(actor_id)
        if lock is None:
            with self._lock:
                lock = self._actor_locks.setdefault(actor_id, threading.Lock())
        return lock

    def close(self) -> None:
        """Stops the thread; calls it has not sent again yet fail (the runtime is stopping)."""
        self._failed.put(None)
        with self._lock:
            calls = [c for cs in self._calls.values() for c in cs.values()]
        for call in calls:
            if call.failure is not None:
                self._give_up(
                    call,
                    ActorDiedError(
                        f"{call.what}: the actor's process {call.worker!r} died with the call "
                        "in flight, and the cluster is shutting down",
                        call.target._actor_id,
                    ),
                )


def _shut_before_resent(call: _Call) -> ActorDiedError:
    return ActorDiedError(
        f"{call.what} was to be sent again (it raised, or its actor was restarted), and "
        "the cluster shut down first",
        call.target._actor_id,
    )


def _fail(future: torch.futures.Future[Wire], error: Exception) -> None:
    # torch annotates set_exception's argument as the future's value type, not an exception
    future.set_exception(error)  # type: ignore[arg-type]
