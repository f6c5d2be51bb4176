"""Backpressure of streaming calls: a generator runs at most N values ahead of its caller.

As Ray's ``_generator_backpressure_num_objects=N``: a streaming call's method is not
asked for its next value while N of the values it yielded are not yet taken by the
caller (``next(gen)``), so a collector that yields faster than its learner consumes
holds at most N values, not its whole output.

The caller's :class:`Reporter` tells the process running the call how many values it
has taken, there :class:`~actorrt.runtime.generators.Sender` ``taken``, on whose
``wait_room`` the actor's thread (or loop) waits. Mostly without a message of its own:
values travel in messages (:func:`~actorrt.runtime.generators.rpc_items_held`, two on
their way at once, the values yielded meanwhile gathered in the next) whose
acknowledgement the caller holds until it has taken their values and which then carries
the count taken, as Ray's caller answers a generator's report of a value once it is
consumed. So the producer hears of takes as they happen, and a value costs at most one
message and its acknowledgement.

A report (:func:`rpc_taken`, which :class:`Senders` hands to the call's sender; one on
its way at a time, what is taken meanwhile goes in the next) goes only when the counts
told left the producer without room for the value after the newest one here, once the
caller has taken enough for it: for a caller that takes values out of step with the
acknowledgements (a message of several values, a new run). When the call runs again
elsewhere (retries) the reporter tells the new run, whose values it hears from first;
when the caller's generator goes, it tells the run that everything is taken (and
answers every acknowledgement it held), so the method runs to its end as it would
without a limit.
"""

from __future__ import annotations

import threading

import torch

from actorrt.runtime import context, quick_rpc
from actorrt.runtime.generators import Sender, Stream

__all__ = ["ALL", "Reporter", "Senders", "close_sender", "open_sender", "rpc_taken"]

ALL = 1 << 62
"""What a caller whose generator went reports as taken: no value is waited for."""


class Senders:
    """The streaming calls with backpressure running in this process (a runtime part)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[str, int], Sender] = {}

    def open(self, caller: str, stream_id: int, sender: Sender) -> None:
        """Registers the sender of ``caller``'s stream ``stream_id``."""
        with self._lock:
            self._open[(caller, stream_id)] = sender

    def close(self, caller: str, stream_id: int, sender: Sender) -> None:
        """The call ended: its sender is no longer told."""
        with self._lock:
            if self._open.get((caller, stream_id)) is sender:
                del self._open[(caller, stream_id)]

    def taken(self, caller: str, stream_id: int, count: int) -> None:
        """``caller`` has taken ``count`` values of its stream ``stream_id``."""
        sender = self._open.get((caller, stream_id))  # one dict read is atomic
        if sender is not None:
            sender.taken(count)

    def __len__(self) -> int:
        return len(self._open)


def open_sender(caller: str, name: Stream) -> Sender:
    """The sender of a streaming call, registered here when it has a limit."""
    sender = Sender(caller, name.stream_id, name.backpressure)
    if name.backpressure:
        try:
            context.part(Senders).open(caller, name.stream_id, sender)
        except Exception:  # no runtime (a mailbox in a unit test): nobody can tell it
            pass
    return sender


def close_sender(caller: str, name: Stream, sender: Sender) -> None:
    """Unregisters ``sender`` (see :func:`open_sender`)."""
    if name.backpressure:
        try:
            context.part(Senders).close(caller, name.stream_id, sender)
        except Exception:  # no runtime
            pass


def rpc_taken(caller: str, stream_id: int, count: int) -> None:
    """At the process running it: ``caller`` has taken ``count`` values of the stream."""
    try:
        senders = context.part(Senders)
    except Exception:  # this process's runtime is gone
        return
    senders.taken(caller, stream_id, count)


class Reporter:
    """Tells the process running a streaming call how many of its values were taken.

    Args:
        here: This (the caller's) process.
        stream_id: The call's stream.
        limit: How many values not taken the call may run ahead by (its backpressure).
    """

    def __init__(self, here: str, stream_id: int, limit: int) -> None:
        self._here = here
        self._stream_id = stream_id
        self._limit = limit
        self._lock = threading.Lock()
        self._producer: str | None = None  # where the call runs (known from its values)
        self._taken = 0
        self._told = 0  # what the producer was told (-1: a new run, not told yet)
        self._newest = -1  # the newest value's index that arrived from the current run
        self._busy = False  # a report is on its way
        # Acknowledgements held until the count taken reaches theirs: (count, future).
        self._held: list[tuple[int, torch.futures.Future[int]]] = []

    def run_began(self, producer: str) -> None:
        """Values come from a new run of the call, on ``producer``: it is told afresh."""
        with self._lock:
            self._producer = producer
            self._told = -1
            self._newest = -1
        self._push()

    def received(self, newest: int) -> torch.futures.Future[int]:
        """A message of values up to index ``newest`` arrived (on an RPC thread).

        Returns:
            Its acknowledgement: done with the count of values taken once that count
            includes value ``newest`` (at once if it does).
        """
        ack: torch.futures.Future[int] = torch.futures.Future()
        with self._lock:
            if newest > self._newest:
                self._newest = newest
            count = self._taken
            if count <= newest:
                self._held.append((newest + 1, ack))
                return ack
            self._acknowledging(count)
        ack.set_result(count)
        return ack

    def took(self, count: int) -> None:
        """The caller has taken ``count`` values: the acknowledgements due are answered."""
        with self._lock:
            if count <= self._taken:
                return
            self._taken = count
            due = [ack for until, ack in self._held if until <= count]
            if due:
                self._held = [(until, ack) for until, ack in self._held if until > count]
                self._acknowledging(count)
        for ack in due:  # outside the lock: each sends its answer
            ack.set_result(count)
        self._push()

    def _acknowledging(self, count: int) -> None:
        """Under the lock: an acknowledgement tells the producer ``count`` (on its way).

        Not after a new run began: that run's own report goes (``_told`` stays -1).
        """
        if self._told != -1 and count > self._told:
            self._told = count

    def _push(self) -> None:
        with self._lock:
            if self._busy or self._producer is None or self._taken == self._told:
                return
            if self._told != -1 and self._taken != ALL:
                # What the producer needs to make the value after the newest one here
                # (has_room); the acknowledgements of any it sent since tell it more.
                need = self._newest + 2 - self._limit
                if self._told >= need or self._taken < need:
                    return  # it has room already, or still has none: no message
            self._busy = True
            producer, count = self._producer, self._taken
        try:
            fut: torch.futures.Future[None] = quick_rpc.rpc_async(
                producer, rpc_taken, (self._here, self._stream_id, count)
            )
        except Exception:  # the producer is gone: a new run, if any, is told afresh
            with self._lock:
                self._busy = False
            return
        fut.add_done_callback(lambda f: self._told_it(producer, count, f))

    def _told_it(self, producer: str, count: int, fut: torch.futures.Future[None]) -> None:
        try:
            fut.value()
        except Exception:  # the producer died: a new run, if any, is told afresh
            with self._lock:
                self._busy = False
            return
        with self._lock:
            self._busy = False
            if producer == self._producer and self._told != -1:
                self._told = max(self._told, count)  # an acknowledgement may have told more
            elif producer == self._producer:  # told before run_began: tell again
                self._told = 0
        self._push()
