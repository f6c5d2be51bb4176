"""The caller's side of remote functions: which executor runs a call, and its retries.

Rank 0 says once per function shape (label, CPUs and GPUs per call) which executors can
run it (:func:`~actorrt.placement.functions.function_spots`); this process keeps that
table and sends each call to the executor with the fewest of its calls outstanding per
thread, passing over processes known to be down. A call goes the way an actor call goes
(``Runtime.send``: one payload pipeline, one send), to the executor's mailbox.

A call is kept until answered (:class:`FunctionCall`), and when the process running it
dies it is sent again, to another process, up to ``max_retries`` times, as Ray retries
tasks. The resend never runs on torch's RPC threads, which complete the failed attempt:
packing the arguments again may take long, so a thread of this module's sends it.

The function travels with its calls as a key and its cloudpickle bytes (which hold, by
value, whatever of ``__main__`` it uses), until the process has answered a call that
carried them; later calls there carry the key alone, as Ray exports a function once. A
process that has lost it since (a replacement under the same name) answers
``FunctionNotLoaded``, and that call is sent again with the bytes, at no cost to its
retries.
"""

from __future__ import annotations

import itertools
import queue
import threading
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import torch

from actorrt.errors import ActorDiedError, PlacementError
from actorrt.logs import get_logger
from actorrt.placement.functions import FunctionSpot
from actorrt.runtime import torch_threads
from actorrt.runtime.inflight import WorkerMarkedDead
from actorrt.runtime.protocol import (
    FunctionNotLoaded,
    Liveness,
    LocalFailure,
    cancelled,
    failed_in_pickling,
    rpc_failure,
)
from actorrt.runtime.raised import RetryOn, error_of, retried

if TYPE_CHECKING:
    from actorrt.placement.resources import Resources
    from actorrt.runtime.outbox import KeepAlive
    from actorrt.runtime.payload import Wire
    from actorrt.runtime.protocol import CancelTicket, ReplySlot, Target

__all__ = ["FunctionCall", "FunctionRoutes", "FunctionTarget", "Shape"]

log = get_logger("functions")


class Shape(NamedTuple):
    """What decides where a function may run: its label and what each call takes."""

    label: str | None
    resources: Resources


class Route(Liveness, Protocol):
    """What the functions need of the runtime (``Runtime`` is one)."""

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
    ) -> None:
        """Sends one call (``Runtime.send``)."""
        ...

    def function_spots(self, shape: Shape) -> tuple[FunctionSpot, ...]:
        """Asks rank 0 which executors can run functions of ``shape``."""
        ...


class FunctionTarget:
    """Where one attempt of a function call goes: an executor (``runtime.protocol.Target``)."""

    __slots__ = ("_actor_id", "_worker", "_class_name")

    _max_task_retries = 0  # the call's own retries resend it (see FunctionCall)
    _moves = False  # every process has its own executor: nothing to ask rank 0

    def __init__(self, spot: FunctionSpot, what: str) -> None:
        self._actor_id = spot.executor
        self._worker = spot.worker
        self._class_name = what


class FunctionRoutes:
    """This process's tables of executors per function shape, and its calls' resends.

    Args:
        route: The runtime.
    """

    def __init__(self, route: Route) -> None:
        self._route = route
        self._lock = threading.Lock()
        self._tables: dict[Shape, tuple[FunctionSpot, ...]] = {}
        self._outstanding: dict[FunctionSpot, int] = {}
        self._turn = itertools.count()
        self._loaded: dict[str, set[str]] = {}  # process -> keys of functions it has
        # (call, where its attempt was, whether to tell rank 0 that process died, whether
        # the resend counts against the call's retries): sent again by a thread
        self._resends: queue.SimpleQueue[tuple[FunctionCall, str, bool, bool] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None

    def _table(self, shape: Shape, fresh: bool = False) -> tuple[FunctionSpot, ...]:
        table = None if fresh else self._tables.get(shape)
        if table is None:
            table = self._route.function_spots(shape)  # raises PlacementError if none
            with self._lock:
                self._tables[shape] = table
        return table

    def choose(self, shape: Shape, avoid: str = "") -> FunctionSpot:
        """The executor for one call: the least busy per thread, of those not down.

        Args:
            shape: The function's shape.
            avoid: A process not to send to (where the call's last attempt died).

        Raises:
            PlacementError: No process can run it (asks rank 0 again before saying so:
                processes may have been replaced or have joined since).
        """
        spots = self._live(self._table(shape), avoid)
        if not spots:
            spots = self._live(self._table(shape, fresh=True), avoid)
        if not spots:
            raise PlacementError("every process that can run it is down")
        turn = next(self._turn)
        out = self._outstanding
        n = len(spots)
        # Ties go round: a burst of calls spreads over equally idle executors.
        best = min(
            range(n), key=lambda i: (out.get(spots[i], 0) / spots[i].threads, (i - turn) % n)
        )
        spot = spots[best]
        with self._lock:
            out[spot] = out.get(spot, 0) + 1
        return spot

    def _live(self, spots: tuple[FunctionSpot, ...], avoid: str) -> list[FunctionSpot]:
        return [s for s in spots if s.worker != avoid and not self._route.is_down(s.worker)]

    def answered(self, spot: FunctionSpot) -> None:
        """A call :meth:`choose` sent to ``spot`` is over there."""
        with self._lock:
            self._outstanding[spot] -= 1

    def loaded(self, worker: str, key: str) -> bool:
        """Whether ``worker`` has answered a call of the function ``key`` that carried it."""
        keys = self._loaded.get(worker)
        return keys is not None and key in keys

    def learned(self, worker: str, key: str) -> None:
        """``worker`` answered a call that carried the function ``key``: it has it now."""
        if not self.loaded(worker, key):
            with self._lock:
                self._loaded.setdefault(worker, set()).add(key)

    def forget(self, worker: str, key: str | None = None) -> None:
        """``worker`` lacks the function ``key`` (or, with None, every function: it died)."""
        with self._lock:
            if key is None:
                self._loaded.pop(worker, None)
            else:
                self._loaded.get(worker, set()).discard(key)

    def lost(self, call: FunctionCall, worker: str, exc: BaseException) -> None:
        """``call``'s attempt on ``worker`` found it dead: a thread sends it again."""
        self.forget(worker)  # whatever comes up under its name starts without them
        if self._route.stopped.is_set():  # the thread may be gone: nothing is resent now
            call.give_up(call.died(worker, exc))
            return
        # Unless rank 0 itself marked it dead (or this process decided), the driver may
        # not know yet: the resending thread tells it.
        tell = not isinstance(exc, (LocalFailure, WorkerMarkedDead))
        self._resend(call, worker, tell, True)

    def again(self, call: FunctionCall) -> None:
        """``call`` raised an exception it retries on (``retry_exceptions``): send it again."""
        self._resend(call, "", False, True)

    def reload(self, call: FunctionCall, worker: str, key: str) -> None:
        """``worker`` lacked the function ``key`` that ``call`` named: send it again with it."""
        self.forget(worker, key)
        self._resend(call, "", False, False)

    def _resend(self, call: FunctionCall, worker: str, tell: bool, counts: bool) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    # It ends at close; the exit waits for a send under way (torch_threads).
                    self._thread = torch_threads.start(
                        self._resend_loop, name="actorrt-function-retries"
                    )
        self._resends.put((call, worker, tell, counts))

    def _resend_loop(self) -> None:
        while True:
            item = self._resends.get()
            if item is None:
                return
            call, worker, tell, counts = item
            try:
                if tell:
                    self._route.worker_unreachable(worker)
                call.retry(worker, counts)
            except Exception as error:  # never lose the thread: its calls would wait
                call.give_up(error)
            del item, call  # not kept (with its arguments) until the next resend

    def close(self) -> None:
        """Stops the resending thread (the runtime is stopping)."""
        self._resends.put(None)


class FunctionCall:
    """One call of a remote function, kept until answered; the slot of each attempt.

    The call's refs wait on :attr:`reply`, which the first attempt to be answered
    completes; an attempt that finds its process dead is sent again elsewhere while
    retries are left.

    Args:
        routes: This process's routes.
        route: The runtime.
        shape: The function's shape.
        what: ``remote function <name>``, for errors.
        method: The name the executor runs it under (a ``Returns`` for ``num_returns``).
        retries: Its ``max_retries`` (-1: no limit).
        retry_on: Its ``retry_exceptions`` (as names, ``runtime/raised.py``): the exceptions
            raised that are retried too.
    """

    __slots__ = (
        "_routes",
        "_route",
        "_shape",
        "_what",
        "_method",
        "_left",
        "_retries",
        "_retry_on",
        "_args",
        "_kwargs",
        "_spot",
        "_keep",
        "_key",
        "_without",
        "_sent_as",
        "_cancelled",
        "_recursive",
        "reply",
    )

    def __init__(
        self,
        routes: FunctionRoutes,
        route: Route,
        shape: Shape,
        what: str,
        method: str,
        retries: int,
        retry_on: RetryOn = False,
    ) -> None:
        self._routes = routes
        self._route = route
        self._shape = shape
        self._what = what
        self._method = method
        self._left = self._retries = retries
        self._retry_on = retry_on
        self._args: tuple[Any, ...] = ()
        self._kwargs: dict[str, Any] = {}
        self._spot: FunctionSpot | None = None
        self._keep: KeepAlive | None = None
        self._key = ""  # the function's key (the first argument)
        self._without = ""  # the process the current attempt went to without the bytes
        self._sent_as: tuple[str, str, int] | None = None  # (worker, executor, seq), as one
        self._cancelled = False  # actorrt.cancel(): no attempt goes out any more
        self._recursive = True  # and whether that cancel reaches the calls it made
        self.reply: torch.futures.Future[Wire] = torch.futures.Future()

    def send(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], now: bool, avoid: str = ""
    ) -> torch.futures.Future[Wire]:
        """Sends the first attempt (``now``: from ``.remote()``, which may raise).

        Raises:
            PlacementError: No process can run it (``now`` only; else the refs fail).
            TypeError: An argument cannot be sent (``now`` only).
        """
        if self._cancelled:
            self.give_up(cancelled(self._what, "before it was sent"))
            return self.reply
        if self._retries:  # kept for a resend; dropped once answered
            self._args, self._kwargs = args, kwargs
        try:
            self._attempt(args, kwargs, now, avoid)
        except PlacementError as exc:
            error = PlacementError(f"{self._what}: {exc}")
            if now:
                raise error from None
            self.give_up(error)
        return self.reply

    def _attempt(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], now: bool, avoid: str
    ) -> None:
        spot = self._spot = self._routes.choose(self._shape, avoid)
        key = self._key = args[0]
        sent = args
        self._without = ""
        if self._routes.loaded(spot.worker, key):
            # Kept until answered, to be sent again with the bytes should it lack them.
            self._args, self._kwargs = args, kwargs
            sent = (key, None, *args[2:])
            self._without = spot.worker
        target = FunctionTarget(spot, self._what)
        seq = self._route.seq_at(spot.executor, spot.worker)
        try:
            self._route.send(target, seq, self._method, sent, kwargs, self, raise_now=now)
        except BaseException:
            self._routes.answered(spot)
            raise

    def retry(self, dead: str, counts: bool = True) -> None:
        """Sends the call again, away from ``dead`` if given (on the resending thread).

        Args:
            dead: The process its last attempt found dead ("": none).
            counts: Whether this resend uses one of its retries (not when it goes again
                only because the process lacked the function).
        """
        if counts and self._left > 0:
            self._left -= 1
        self.send(self._args, self._kwargs, False, avoid=dead)

    def cancel(self, recursive: bool) -> None:
        """``actorrt.cancel`` of the call: unsent, it never goes; sent, its process is asked."""
        self._recursive = recursive
        self._cancelled = True  # before _sent_as is read: an attempt then cancels itself
        sent = self._sent_as
        if sent is None:  # waiting for its ref arguments (or a resend): get raises now
            self.give_up(cancelled(self._what, "before it was sent"))
        elif not self.reply.done():
            self._route.cancel_call(*sent, recursive)

    def give_up(self, error: BaseException) -> None:
        """Fails the call's refs with ``error``."""
        self._args, self._kwargs = (), {}
        if not self.reply.done():
            try:
                self.reply.set_exception(LocalFailure(error))  # type: ignore[arg-type]
            except RuntimeError:  # completed in between
                pass

    # -- runtime.protocol.ReplySlot, of the current attempt --------------------------
    def attach(
        self,
        reply: torch.futures.Future[Wire],
        worker: str,
        keep: KeepAlive | None,
        ticket: CancelTicket,
    ) -> None:
        """The attempt went out to ``worker`` (``ticket``: its sequence number there)."""
        self._keep = keep
        spot = self._spot
        assert spot is not None and type(ticket) is int  # sent once by Runtime.send
        self._sent_as = sent = (worker, spot.executor, ticket)
        reply.add_done_callback(lambda f: self._answered(spot, f))
        if self._cancelled:  # a cancel that found no attempt out: this one is cancelled
            self._route.cancel_call(*sent, self._recursive)

    def fail(self, error: BaseException) -> None:
        """The attempt could not go out (an argument cannot be sent)."""
        if self._spot is not None:
            self._routes.answered(self._spot)
        self.give_up(error)

    def _answered(self, spot: FunctionSpot, attempt: torch.futures.Future[Wire]) -> None:
        # On torch's RPC thread: no waiting here.
        self._routes.answered(spot)
        keep, self._keep = self._keep, None
        if keep is not None:
            keep.let_go()
        try:
            wire = attempt.value()
        except Exception as exc:
            worded = rpc_failure(self._what, spot.worker, exc)  # as the ref would say it
            error = exc.error if isinstance(exc, LocalFailure) else exc
            if not isinstance(error, ActorDiedError) and not isinstance(worded, ActorDiedError):
                self.give_up(worded)
                if self._sent_as is not None and failed_in_pickling(exc):
                    # it may not have reached the executor's mailbox (refs._close_gap)
                    worker, executor, seq = self._sent_as
                    self._route.skip_at(executor, worker, seq)
            elif self._left != 0 and not self._route.stopped.is_set():
                self._routes.lost(self, spot.worker, exc)
            else:
                self.give_up(self.died(spot.worker, exc))
            return
        if self._without == spot.worker:
            if _not_loaded(wire):  # it lost the function: again, with the bytes
                self._routes.reload(self, spot.worker, self._key)
                return
        else:  # it had the bytes: it has the function now
            self._routes.learned(spot.worker, self._key)
        if self._retry_on and self._left != 0 and self._retried_on(wire):
            self._routes.again(self)
            return
        self._args, self._kwargs = (), {}
        if not self.reply.done():
            self.reply.set_result(wire)

    def _retried_on(self, wire: Wire) -> bool:
        """Whether ``wire`` is an error this call retries on (``retry_exceptions``)."""
        return not self._route.stopped.is_set() and retried(wire, self._retry_on)

    def died(self, worker: str, exc: BaseException) -> ActorDiedError:
        """The error of the call once its process ``worker`` died and it is not resent."""
        cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if self._route.stopped.is_set():
            why = "and the cluster is shutting down"
        elif self._retries:
            why = f"and its retries are used up (max_retries={self._retries})"
        else:
            why = "and it was not sent again (max_retries=0)"
        return ActorDiedError(
            f"{self._what}: the process running it, {worker!r}, died ({cause}), {why}. "
            "Call it again to go on, or raise max_retries."
        )


def _not_loaded(wire: Wire) -> bool:
    """Whether ``wire`` is an executor's ``FunctionNotLoaded`` (sent the key alone)."""
    failed, cause = error_of(wire)
    return failed and isinstance(cause, FunctionNotLoaded)
