"""Streaming generators: a call whose method yields sends each value to its caller as it comes.

As Ray's ``num_returns="streaming"`` (the default for a generator method or function),
``.remote()`` gives an ``ObjectRefGenerator`` at once, and each value the method yields
reaches its caller while the method goes on.

The road is a call's road. The call goes out as any call, its method name a
:class:`Stream` that carries the caller's stream id. The actor's thread runs the
generator (the mailbox) and packs each value for the caller with the payload pipeline, as
it packs a reply: a large value stays at the actor as an object and the caller gets its
location. :func:`post_item` sends it, with its index, to :func:`rpc_item` at the caller,
where :class:`Inboxes` hands it to the stream's :class:`Inbox`. A value goes at once
when none of its stream's is on its way; values yielded meanwhile go together, in one
message, when that one has arrived (:class:`Sender`), so a fast generator pays one
message per round trip, not per value, and a slow one no wait. The call's own reply comes
last and says how many values there were; an exception the generator raised is one more
value, whose ref raises it. torch RPC handles requests on a pool of threads, so values
may arrive in any order, and after that reply: each carries its index, and the inbox
waits for every one the reply counted. A value that comes twice (a call sent again after
its process died) is taken once.

With backpressure (at most N values not taken), :data:`MAX_IN_FLIGHT` messages may be on
their way at once (:func:`rpc_items_held`), and the caller acknowledges a message once it
has taken its values: the acknowledgement carries the count taken, which makes the
producer's room (:mod:`actorrt.runtime.backpressure`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import itertools
import queue
import random
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed.rpc as rpc

from actorrt.options import STREAMING
from actorrt.runtime import context, quick_rpc, streams, torch_threads
from actorrt.runtime.payload import Wire
from actorrt.runtime.protocol import CallName
from actorrt.runtime.trace import wire_bytes

__all__ = [
    "FAILED",
    "Lost",
    "STREAMING",
    "Inbox",
    "Inboxes",
    "Sender",
    "Stream",
    "rpc_items",
    "rpc_items_held",
]

FAILED = "failed"
"""What an inbox gives for the index where the call itself failed: its reply is the error."""


class Lost(str):
    """What an inbox gives for the first value its dead producer never delivered: why."""


MAX_IN_FLIGHT = 2
"""Messages of values one stream with backpressure may have on their way at once.

Their acknowledgements wait until the caller has taken their values (and say how many it
has): with two, the next value travels while the caller takes the last one, and values
yielded meanwhile go together in the message after. A stream without backpressure has
one on its way, acknowledged on arrival.
"""

MAX_GATHERED_BYTES = 4 << 20
"""At most this many bytes of gathered values travel in one message (one value at least).

Values under the object threshold travel inline, and a fast generator of values just
under it would otherwise make one message of many of them. A message that large holds up
what follows it to the caller, its heartbeat pings included, on a slow link for seconds.
"""


class Stream(CallName):
    """A method's name that asks for its yielded values to be streamed to the caller.

    ``stream_id`` says which of the caller's streams the values go to, and
    ``backpressure`` how many values the caller has not taken the method may run ahead
    by (0: any number); see :class:`~actorrt.runtime.protocol.CallName`.
    """

    stream_id: int
    backpressure: int

    def __new__(
        cls, name: str, stream_id: int, backpressure: int = 0, group: str | None = None
    ) -> Stream:
        """The name ``name``, streaming to the caller's stream ``stream_id``."""
        self = super().__new__(cls, name)
        self.stream_id = stream_id
        self.backpressure = backpressure
        self.group = group
        return self

    def __reduce__(
        self,
    ) -> tuple[type[Stream], tuple[str, int, int, str | None], dict[str, str] | None]:
        return (Stream, (str(self), self.stream_id, self.backpressure, self.group), self._state())


class Inbox:
    """One streaming call's values, as they arrive at its caller.

    :meth:`slot` of an index is a future done with the value's packed form (a ``Wire``),
    ``None`` when the call ended before yielding that many, or :data:`FAILED` at the index
    where the call itself failed (its own reply is then the error).
    """

    __slots__ = (
        "_lock",
        "_slots",
        "_got",
        "_seen",
        "_end",
        "_failed",
        "_lost",
        "producer",
        "run",
        "on_run",
        "on_values",
    )

    def __init__(self) -> None:
        # The run of the call its values come from, (process, run id), and what to tell
        # when a new one begins (a call sent again): see :mod:`actorrt.runtime.backpressure`.
        self.run: tuple[str, int] | None = None
        self.on_run: Callable[[str], None] | None = None
        # Backpressure: told the newest index of each message of values that arrives; it
        # answers the message's acknowledgement, done with the count of values taken
        # once they include the message's (see :mod:`actorrt.runtime.backpressure`).
        self.on_values: Callable[[int], torch.futures.Future[int]] | None = None
        self._lock = threading.Lock()
        self._slots: dict[int, cf.Future[Any]] = {}
        # A value sent twice is taken once: every index below _seen has arrived, and _got
        # holds those above it that have (kept small: a stream may run for days).
        self._got: set[int] = set()
        self._seen = 0
        self._end: int | None = None  # how many values there are, once the call answered
        self._failed = False
        self._lost: Lost | None = None  # why the values from _end on never came
        self.producer: str | None = None  # the process whose reply said how many

    def slot(self, index: int) -> cf.Future[Any]:
        """The future of value ``index`` (made now, or known already)."""
        with self._lock:
            fut = self._slots.get(index)
            if fut is not None:
                return fut
            fut = self._slots[index] = cf.Future()
            end = self._end
            failed = self._failed
            lost = self._lost
        if end is not None and index >= end:
            _settle(fut, (lost or FAILED) if (failed or lost) and index == end else None)
        return fut

    def take(self, index: int) -> None:
        """Forgets value ``index``: its ref holds it now."""
        with self._lock:
            self._slots.pop(index, None)

    def put(self, index: int, wire: Wire) -> bool:
        """Value ``index`` arrived; False when it is not wanted (past the end, or twice)."""
        with self._lock:
            if index < self._seen or index in self._got:
                return False
            if self._end is not None and index >= self._end:
                return False
            self._got.add(index)
            while self._seen in self._got:
                self._got.discard(self._seen)
                self._seen += 1
            fut = self._slots.get(index)
            if fut is None:
                fut = self._slots[index] = cf.Future()
        # False when the call's end (or failure) settled the slot meanwhile: let it go
        return _settle(fut, wire)

    def finish(self, count: int | None) -> None:
        """The call answered: it yielded ``count`` values (None: the call failed).

        A failed call's error goes after the values that have arrived; any that arrive
        later are not wanted.
        """
        with self._lock:
            if self._end is not None:
                return
            self._failed = count is None
            end = self._end = self._seen if count is None else count
            after = [(i, f) for i, f in self._slots.items() if i >= end and not f.done()]
        for index, fut in after:  # one a value settled meanwhile is let go at close()
            _settle(fut, FAILED if count is None and index == end else None)

    def lose(self, why: str) -> None:
        """The producer died after its reply, before values it counted arrived.

        They never will (its messages died with it): the first missing value's ref
        raises ``ObjectLostError`` saying ``why``, and the iteration ends there, as it
        would had the call failed. Values above it that did arrive are let go at close().
        """
        with self._lock:
            if self._end is None or self._seen >= self._end or self._lost is not None:
                return  # no reply yet (a retry may come), or nothing missing
            end = self._end = self._seen
            lost = self._lost = Lost(why)
            after = [(i, f) for i, f in self._slots.items() if i >= end and not f.done()]
        for index, fut in after:
            _settle(fut, lost if index == end else None)

    def missing_from(self, worker: str) -> bool:
        """Whether ``worker``'s reply counted values that have not all arrived."""
        with self._lock:
            return self.producer == worker and self._end is not None and self._seen < self._end

    def close(self) -> list[Wire]:
        """Ends the inbox (its generator is gone); the values arrived and not taken."""
        with self._lock:
            self._end = self._seen if self._end is None else self._end
            slots, self._slots = self._slots, {}
        return [f.result() for f in slots.values() if f.done() and type(f.result()) is tuple]


def _settle(fut: cf.Future[Any], value: Any) -> bool:
    """Sets ``fut``'s result unless something else did first (a value against an end)."""
    try:
        fut.set_result(value)
    except cf.InvalidStateError:
        return False
    return True


class Inboxes:
    """This process's open streams (a runtime part, found by :func:`rpc_items`).

    Args:
        let_go: Lets go of the object a packed value left at its producer, if any (for
            a value nobody will take: its generator is gone).
    """

    def __init__(self, let_go: Callable[[Wire], None]) -> None:
        self._lock = threading.Lock()
        self._open: dict[int, Inbox] = {}
        # From a random start: a process that took a dead one's name must not open the
        # streams the dead one had open, which a generator still running for it may send
        # to (Mailbox.forget_caller stops those, but a value may still be on its way).
        self._ids = itertools.count(random.getrandbits(48))
        self._let_go = let_go
        # Work a generator's __del__ must not do where it runs (a send: garbage collection
        # runs anywhere, also inside code holding locks a send needs): one thread does it.
        self._later: queue.SimpleQueue[Callable[[], None]] | None = None
        self._shut = False

    def start_later(self) -> None:
        """Starts the thread that runs :meth:`later` work (from code that may start one)."""
        with self._lock:
            if self._later is not None:
                return
            self._later = queue.SimpleQueue()
        # It ends with the runtime (shut), and the interpreter's exit waits for a send it
        # has under way (torch_threads).
        torch_threads.start(self._run_later, name="actorrt-streams")

    def later(self, work: Callable[[], None]) -> None:
        """Runs ``work`` on that thread, soon.

        Nothing runs before :meth:`start_later`, nor after :meth:`shut`.
        """
        pending = self._later
        if pending is not None and not self._shut:
            pending.put(work)

    def shut(self) -> None:
        """The runtime ends: no more :meth:`later` work is run.

        A generator dropped as the interpreter ends would send from that thread, and a
        send that the interpreter's end overtakes aborts the process (see torch_threads).
        """
        self._shut = True
        pending = self._later
        if pending is not None:
            pending.put(_nothing)  # wakes the thread: it ends

    def _run_later(self) -> None:
        pending = self._later
        assert pending is not None
        while True:
            work = pending.get()
            if self._shut:
                return
            try:
                work()
            except Exception:  # a send to a process that is gone: nothing to tell
                pass
            del work  # not kept (with the values it sent) until the next

    def open(self) -> tuple[int, Inbox]:
        """A new stream: its id (what the call's :class:`Stream` name carries) and inbox."""
        inbox = Inbox()
        with self._lock:
            stream_id = next(self._ids)
            self._open[stream_id] = inbox
        return stream_id, inbox

    def close(self, stream_id: int) -> None:
        """Stream ``stream_id``'s generator is gone: its values not taken are let go."""
        with self._lock:
            inbox = self._open.pop(stream_id, None)
        if inbox is not None:
            for wire in inbox.close():
                self._let_go(wire)

    def put(
        self, stream_id: int, index: int, wire: Wire, run: tuple[str, int] | None = None
    ) -> None:
        """Value ``index`` of stream ``stream_id`` arrived, from ``run`` (process, run id)."""
        inbox = self._open.get(stream_id)  # one dict read is atomic
        if inbox is not None and run is not None and inbox.run != run:
            inbox.run = run  # values come from a new run of the call (or its first)
            if inbox.on_run is not None:
                inbox.on_run(run[0])
        if inbox is None or not inbox.put(index, wire):
            self._let_go(wire)

    def acked(
        self, stream_id: int, items: list[tuple[int, Wire]]
    ) -> torch.futures.Future[int] | None:
        """The acknowledgement of a message of values (``items``) of stream ``stream_id``.

        Returns:
            With backpressure, a future done with the count of values taken once they
            include the message's (the producer's room); else None.
        """
        inbox = self._open.get(stream_id)  # one dict read is atomic
        if inbox is None or inbox.on_values is None:
            return None
        return inbox.on_values(max(index for index, _ in items))

    def producer_died(self, worker: str, grace: float) -> None:
        """``worker`` died: streams whose reply it sent lose the values that never came.

        Its reply travels on the caller's own connection to it, its values on its
        connection to the caller: the reply may arrive first and the process die with
        values still unsent. After ``grace`` seconds (its connections have closed, and
        values it did send are handled by then: the runtime gives the grace its waits for
        calls get), each such stream's missing values fail instead of being waited for ever.
        """
        if not self._open:  # checked after the grace: a reply may be read after the news
            return

        def lose() -> None:
            for inbox in list(self._open.values()):
                if inbox.missing_from(worker):
                    inbox.lose(
                        f"{worker} died after its reply said how many values it yielded, "
                        "before this one reached this process"
                    )

        timer = threading.Timer(grace, lose)
        timer.daemon = True
        timer.name = "actorrt-streams-lost"
        timer.start()

    def __len__(self) -> int:
        return len(self._open)


def _nothing() -> None:
    pass


def _wake(wakers: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]) -> None:
    for loop, woken in wakers:
        try:
            loop.call_soon_threadsafe(_set_done, woken)
        except RuntimeError:  # the loop is closed: its actor ended
            pass


def _set_done(woken: asyncio.Future[None]) -> None:
    if not woken.done():  # a cancelled wait left it behind
        woken.set_result(None)


def _at_most(
    items: list[tuple[int, Wire]], nbytes: int
) -> tuple[list[tuple[int, Wire]], list[tuple[int, Wire]]]:
    """The first of ``items`` that fit in ``nbytes`` (one at least), and the rest."""
    total = 0
    for n, (_, wire) in enumerate(items):
        total += _value_bytes(wire)
        if total > nbytes and n:
            return items[:n], items[n:]
    return items, []


_NUMBERS = (int, float, bool, type(None))


def _value_bytes(wire: Wire) -> int:
    # Most streamed values are numbers (counts, rewards, indices): no walk for those.
    blob, side = wire
    if blob is None and len(side) == 1 and type(side[0][1]) in _NUMBERS:
        return 0
    return wire_bytes(wire)


def rpc_items(
    stream_id: int, items: list[tuple[int, Wire]], producer: str = "", run: int = 0
) -> None:
    """At the caller: values of its stream ``stream_id``, as ``(index, packed value)``.

    ``producer`` is the process running the call, ``run`` which run of it there (a call
    sent again after its process died runs again, maybe under the same process name).
    """
    _deliver(stream_id, items, producer, run)


@rpc.functions.async_execution  # type: ignore[untyped-decorator]  # torch leaves it unannotated
def rpc_items_held(
    stream_id: int, items: list[tuple[int, Wire]], producer: str = "", run: int = 0
) -> torch.futures.Future[int | None]:
    """:func:`rpc_items` for a stream with backpressure, answered once its values are taken.

    The answer is the count of values the caller has taken (the producer's
    :meth:`Sender.taken`, without a message of its own), or None for a stream nobody
    takes from any more; it waits on no thread.
    """
    acked = _deliver(stream_id, items, producer, run)
    if acked is None:
        done: torch.futures.Future[int | None] = torch.futures.Future()
        done.set_result(None)
        return done
    return acked  # type: ignore[return-value]  # an int result is an int | None one


def _deliver(
    stream_id: int, items: list[tuple[int, Wire]], producer: str, run: int
) -> torch.futures.Future[int] | None:
    for _, wire in items:
        streams.arrived(wire)
    try:
        inboxes = context.part(Inboxes)
    except Exception:  # this process's runtime is gone: nobody waits for the values
        return None
    for index, wire in items:
        inboxes.put(stream_id, index, wire, (producer, run))
    return inboxes.acked(stream_id, items)


_runs = itertools.count(1)


def _here() -> str:
    try:
        name: str = rpc.get_worker_info().name
    except Exception:  # no RPC agent (a mailbox in a unit test)
        return ""
    return name


class Sender:
    """Sends one streaming call's values to its caller: at once, or gathered (see above).

    Args:
        caller: The caller's process.
        stream_id: Its stream (what the call's :class:`Stream` name carries).
        limit: How many values the caller has not taken the method may run ahead by
            (:meth:`wait_room`); 0: any number.
    """

    __slots__ = (
        "_caller",
        "_stream_id",
        "_lock",
        "_waiting",
        "_in_flight",
        "_taken",
        "_from",
        "_wakers",
        "limit",
        "gone",
    )

    def __init__(self, caller: str, stream_id: int, limit: int = 0) -> None:
        self._caller = caller
        self._stream_id = stream_id
        self._lock = threading.Condition()
        self._waiting: list[tuple[int, Wire]] = []
        self._in_flight = 0  # messages of this stream on their way
        self._taken = 0  # how many values the caller has taken (told when limit > 0)
        self._from = (_here(), next(_runs))  # this process, and this run of the call
        # An async generator's wait for room (wait_room_async): woken on its loop.
        self._wakers: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.limit = limit
        self.gone = False
        """Whether the caller is gone (a message to it failed): the generator may stop."""

    def taken(self, count: int) -> None:
        """The caller has taken ``count`` values (backpressure): room for more."""
        with self._lock:
            if count <= self._taken:
                return
            self._taken = count
            self._lock.notify_all()
            wakers, self._wakers = self._wakers, []
        _wake(wakers)

    def has_room(self, index: int) -> bool:
        """Whether value ``index`` may be made now (fewer than ``limit`` not taken)."""
        return not self.limit or index - self._taken < self.limit or self.gone

    def wait_room(self, index: int, stopped: Callable[[], bool]) -> bool:
        """Waits until value ``index`` may be made; False once ``stopped()`` is true."""
        with self._lock:
            while not self.has_room(index):
                if stopped():
                    return False
                self._lock.wait(0.05)  # a cancel or a kill is seen within this
        return True

    async def wait_room_async(self, index: int) -> None:
        """:meth:`wait_room` on an async actor's loop; a cancel or a kill cancels the task."""
        while not self.has_room(index):
            loop = asyncio.get_running_loop()
            woken: asyncio.Future[None] = loop.create_future()
            with self._lock:
                if self.has_room(index):  # room came while the future was made
                    return
                self._wakers.append((loop, woken))
            await woken

    def send(self, index: int, wire: Wire) -> None:
        """Sends value ``index``; never waits. Once the caller is gone, it is dropped.

        It goes at once while fewer messages than :data:`MAX_IN_FLIGHT` allows are on
        their way; else it waits, and goes with the others waiting when one of those is
        acknowledged.
        """
        with self._lock:
            if self.gone:
                return
            if self._in_flight >= (MAX_IN_FLIGHT if self.limit else 1):
                self._waiting.append((index, wire))
                return
            self._in_flight += 1
        self._post([(index, wire)])

    def _post(self, items: list[tuple[int, Wire]]) -> None:
        try:
            fut = quick_rpc.rpc_async(
                self._caller,
                rpc_items_held if self.limit else rpc_items,
                (self._stream_id, items, *self._from),
            )
        except Exception:  # the caller is gone: nobody waits for the values
            self._lost()
            return
        fut.add_done_callback(self._arrived)

    def _arrived(self, fut: torch.futures.Future[int | None]) -> None:
        # On torch's RPC thread, as the message is acknowledged: what waited goes now.
        try:
            taken = fut.value()
        except Exception:  # the caller died
            self._lost()
            return
        if type(taken) is int:  # backpressure: the count the acknowledgement carries
            self.taken(taken)
        with self._lock:
            items, self._waiting = _at_most(self._waiting, MAX_GATHERED_BYTES)
            if not items:
                self._in_flight -= 1
                return
        self._post(items)

    def _lost(self) -> None:
        with self._lock:
            self.gone = True
            self._waiting = []
            self._lock.notify_all()
            wakers, self._wakers = self._wakers, []
        _wake(wakers)
