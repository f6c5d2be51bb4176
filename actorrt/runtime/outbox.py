"""Coalescing messages per destination: one RPC for a burst of calls (or of replies).

Every torch RPC message costs both processes fixed work (a TensorPipe write and read, a
request object, a pickler, a future, a thread wake-up), and on a small machine that work,
not the call itself, bounds how many calls per second get through (measurements:
docs/performance.md, "Why the code is shaped this way").

So a message goes out at once when its destination is quiet, which keeps a lone call's
latency as it was, and is queued when the two previous messages to the same destination
left less than a window ago and the last is still unanswered: a burst. A flusher thread
sends what queued up as one batch; while it works the next batch gathers. Pairs stay out
of batches on purpose: a batch costs a request, replies sent as requests of their own,
and a thread wake-up on each side, so a batch of one or two is slower than sending alone
(see docs/performance.md for what batching pairs cost the DQN example).

The window is a fraction of the destination's measured round trip (:func:`window_for`),
so it shrinks on a fast machine and grows on a loaded one: a burst is calls made faster
than they come back, whatever the machine's speed. The round trip is an exponentially
weighted mean (:func:`next_round_trip`) of single messages sent alone, one sampled per
``SAMPLE_EVERY_S`` and destination (its reply runs one Python callback on torch's RPC
thread, which a sample per reply would make a cost of every call).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from actorrt.runtime import torch_threads

if TYPE_CHECKING:
    import torch

__all__ = [
    "MIN_BATCH",
    "KeepAlive",
    "Outbox",
    "coalescing_enabled",
    "next_round_trip",
    "window_for",
]

Item = TypeVar("Item")


class SentMessage(Protocol):
    """A message sent to a destination, as the outbox remembers the last one (a torch future)."""

    def done(self) -> bool:
        """Whether it was answered."""
        ...

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        """Runs ``fn`` once it is answered (on the thread that completes it)."""
        ...


# How close together two messages must be to count as one burst: shorter than a sync call's
# round trip, so sync callers never queue, and longer than the gap between `.remote()`
# calls made in a loop, so those do (figures: docs/performance.md). As a fraction of the
# measured round trip: on the 2-core VM the tuned 200 us was half of a 300-450 us one.
WINDOW_FRACTION = 0.5
WINDOW_S = 200e-6  # until a destination's round trip is measured
# Bounds: MIN keeps a tight loop of `.remote()` calls a burst where round trips are very
# short (two of its calls must fall within the window); MAX keeps a slow method, whose time
# is part of the round trip, from making callers that pace their calls queue.
MIN_WINDOW_S = 50e-6
MAX_WINDOW_S = 1e-3
RTT_GAIN = 1 / 8  # weight of a new round-trip sample (as TCP's smoothed RTT)
SAMPLE_EVERY_S = 0.05  # at most one round-trip sample per destination in this time
MAX_BATCH = 256  # messages per batch, so no batch grows without bound
MIN_BATCH = 3  # fewer queued messages than this are sent one by one


def next_round_trip(estimate: float | None, samples: int, sample: float) -> float:
    """The round-trip estimate after ``sample`` (seconds): an exponentially weighted mean.

    The first samples are averaged plainly (the k-th weighs 1/k until that is less than
    ``RTT_GAIN``), so a slow first one (a connection being set up) is soon outweighed.
    A sample beyond what the largest window needs counts as that much, so one slow method
    call moves the estimate no further than any other long round trip.

    Args:
        estimate: The estimate so far; None before the first sample.
        samples: How many samples made ``estimate``.
        sample: A measured round trip, in seconds (negative ones count as zero).

    Returns:
        The new estimate, in seconds.
    """
    sample = min(max(sample, 0.0), MAX_WINDOW_S / WINDOW_FRACTION)
    if estimate is None:
        return sample
    return estimate + max(RTT_GAIN, 1 / (samples + 1)) * (sample - estimate)


def window_for(round_trip: float | None) -> float:
    """The burst window for a destination whose round trip is ``round_trip`` seconds.

    Args:
        round_trip: The estimate (see :func:`next_round_trip`); None when not measured yet.

    Returns:
        ``WINDOW_FRACTION`` of it, within ``[MIN_WINDOW_S, MAX_WINDOW_S]``; ``WINDOW_S``
        when unmeasured.
    """
    if round_trip is None:
        return WINDOW_S
    return min(MAX_WINDOW_S, max(MIN_WINDOW_S, WINDOW_FRACTION * round_trip))


def coalescing_enabled() -> bool:
    """``ACTORRT_COALESCE=0`` turns coalescing off (every call and reply its own RPC)."""
    return os.environ.get("ACTORRT_COALESCE", "1") != "0"


class KeepAlive:
    """Whether a call sent alone has been answered, without a callback on its reply.

    The outbox remembers the last message to each destination, and the call must keep its
    actor's handle until the reply (so the actor outlives it). A Python callback on the
    reply's torch future would do both, but it runs on torch's RPC thread and fights the
    caller for the GIL on every reply (see docs/performance.md). So this holds the future
    and the handle while the caller's ``ObjectRef`` lives (which holds them anyway), and
    its :meth:`let_go`, called when the ref is collected, drops them, at once if the reply
    is in, else from a callback when it comes.
    """

    __slots__ = ("_future", "_keep")

    def __init__(self, future: torch.futures.Future[Any], keep: object = None) -> None:
        self._future: torch.futures.Future[Any] | None = future
        self._keep = keep

    def done(self) -> bool:
        """Whether the reply is in (or was let go of already)."""
        future = self._future
        return future is None or future.done()

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        """Runs ``fn`` when the reply comes (never, when it was let go of already)."""
        future = self._future
        if future is not None:
            future.add_done_callback(fn)

    def let_go(self) -> None:
        """Drops the future and the handle: now if the reply is in, else when it comes."""
        future = self._future
        if future is None:
            return
        if future.done():
            self._future = None
            self._keep = None
        else:
            future.add_done_callback(self)

    def __call__(self, _future: torch.futures.Future[Any]) -> None:
        """The reply's done callback: drops the future and the handle."""
        self._future = None
        self._keep = None


class Outbox(Generic[Item]):
    """Queues messages for busy destinations and sends them in batches from one thread.

    Args:
        name: Name of the flusher thread.
        send_batch: ``send_batch(dest, items)`` sends a list of queued items (as one
            message, or one by one when fewer than ``MIN_BATCH``) and returns the torch
            future of what it sent last (or ``None``). It runs on the flusher thread and
            must deal with its own errors.
        window: A fixed burst window in seconds; None (the default): per destination, from
            its measured round trip (:func:`window_for`).
    """

    def __init__(
        self,
        name: str,
        send_batch: Callable[[str, list[Item]], SentMessage | None],
        window: float | None = None,
    ) -> None:
        self._name = name
        self._send_batch = send_batch
        self.fixed_window = window
        self._lock = threading.Lock()
        self._pending: dict[str, list[Item]] = {}
        # dest -> (time of the last send but one, time of the last, the last's future or flag)
        self._last: dict[str, tuple[float, float, SentMessage]] = {}
        self._round_trips: dict[str, tuple[float, int]] = {}  # dest -> (estimate s, samples)
        self._windows: dict[str, float] = {}  # dest -> window_for(its estimate), kept current
        self._next_sample: dict[str, float] = {}  # dest -> when to sample a round trip again
        self._wake: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.batches_sent = 0  # for tests and curious users

    def busy(self, dest: str) -> bool:
        """True when a message to ``dest`` should queue (a burst is under way)."""
        if dest in self._pending:
            return True
        last = self._last.get(dest)
        if last is None or last[2].done():  # a sync caller's case: asked first
            return False
        window = self.fixed_window
        if window is None:
            window = self._windows.get(dest, WINDOW_S)
        return time.monotonic() - last[0] < window

    def window(self, dest: str) -> float:
        """The burst window for ``dest`` now, in seconds."""
        if self.fixed_window is not None:
            return self.fixed_window
        return window_for(self.round_trip(dest))

    def round_trip(self, dest: str) -> float | None:
        """The round-trip estimate for ``dest`` in seconds; None before the first sample."""
        known = self._round_trips.get(dest)
        return None if known is None else known[0]

    def sent(self, dest: str, message: SentMessage) -> None:
        """Records a message the caller sent alone (a round-trip sample, now and then)."""
        self._record(dest, message, sample=True)

    def _record(self, dest: str, message: SentMessage, sample: bool = False) -> None:
        now = time.monotonic()
        last = self._last.get(dest)
        self._last[dest] = (last[1] if last else float("-inf"), now, message)
        if sample and now >= self._next_sample.get(dest, 0.0):
            self._next_sample[dest] = now + SAMPLE_EVERY_S
            message.add_done_callback(partial(self._sampled, dest, now))

    def _sampled(self, dest: str, sent_at: float, _message: object) -> None:
        # On the thread that completed the message (torch's RPC thread, usually).
        estimate, samples = self._round_trips.get(dest, (None, 0))
        rtt = next_round_trip(estimate, samples, time.monotonic() - sent_at)
        self._round_trips[dest] = (rtt, samples + 1)
        self._windows[dest] = window_for(rtt)

    def put(self, dest: str, item: Item) -> bool:
        """Queues ``item`` for ``dest``; False once the outbox is closed."""
        with self._lock:
            if self._closed:
                return False
            pending = self._pending.get(dest)
            if pending is not None:
                pending.append(item)
                return True
            self._pending[dest] = [item]
            if self._thread is None:
                # It ends at close, and the interpreter's exit waits for a send it has
                # under way: one the exit overtakes aborts the process (torch_threads).
                self._thread = torch_threads.start(self._flush_loop, name=self._name)
        self._wake.put(dest)
        return True

    def close(self) -> list[tuple[str, Item]]:
        """Stops the flusher; returns the ``(dest, item)`` pairs that were never sent."""
        with self._lock:
            self._closed = True
            left = [(dest, item) for dest, items in self._pending.items() for item in items]
            self._pending.clear()
        self._wake.put(None)
        return left

    def _flush_loop(self) -> None:
        while True:
            dest = self._wake.get()
            if dest is None:
                return
            self._flush(dest)

    def _flush(self, dest: str) -> None:
        # Its own frame, so the batch (handles, arguments, replies) is dropped as soon as
        # it is sent, not kept by the loop's variables until the next burst.
        with self._lock:
            items = self._pending.pop(dest, None)
        if not items:
            return
        for start in range(0, len(items), MAX_BATCH):
            future = self._send_batch(dest, items[start : start + MAX_BATCH])
            self.batches_sent += 1
            if future is not None:
                self._record(dest, future)
