"""Coalescing messages per destination: one RPC for a burst of calls (or of replies).

Every torch RPC message costs both processes fixed work (a TensorPipe write and read, a
request object, a pickler, a future, a thread wake-up), and on a small machine that work,
not the call itself, bounds how many calls per second get through (measurements:
docs/performance.md, "Why the code is shaped this way").

So a message goes out at once when its destination is quiet, which keeps a lone call's
latency as it was, and is queued when the two previous messages to the same destination
left less than ``window`` seconds ago and the last is still unanswered: a burst. A
flusher thread sends what queued up as one batch; while it works the next batch gathers.
Pairs stay out of batches on purpose: a batch costs a request, replies sent as requests
of their own, and a thread wake-up on each side, so a batch of one or two is slower than
sending alone (see docs/performance.md for what batching pairs cost the DQN example).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    import torch

__all__ = ["MIN_BATCH", "KeepAlive", "Outbox", "coalescing_enabled"]

Item = TypeVar("Item")


class SentMessage(Protocol):
    """A message sent to a destination, as the outbox remembers the last one (a torch future)."""

    def done(self) -> bool:
        """Whether it was answered."""
        ...


# How close together two messages must be to count as one burst: shorter than a sync call's
# round trip, so sync callers never queue, and longer than the gap between `.remote()`
# calls made in a loop, so those do (figures: docs/performance.md).
WINDOW_S = 200e-6
MAX_BATCH = 256  # messages per batch, so no batch grows without bound
MIN_BATCH = 3  # fewer queued messages than this are sent one by one


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

    def let_go(self) -> None:
        """Drops the future and the handle: now if the reply is in, else when it comes."""
        future = self._future
        if future is None:
            return
        if future.done():
            self(future)
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
        window: See ``WINDOW_S``.
    """

    def __init__(
        self,
        name: str,
        send_batch: Callable[[str, list[Item]], SentMessage | None],
        window: float = WINDOW_S,
    ) -> None:
        self._name = name
        self._send_batch = send_batch
        self._window = window
        self._lock = threading.Lock()
        self._pending: dict[str, list[Item]] = {}
        # dest -> (time of the last send but one, time of the last, the last's future or flag)
        self._last: dict[str, tuple[float, float, SentMessage]] = {}
        self._wake: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.batches_sent = 0  # for tests and curious users

    def busy(self, dest: str) -> bool:
        """True when a message to ``dest`` should queue (a burst is under way)."""
        if dest in self._pending:
            return True
        last = self._last.get(dest)
        return last is not None and time.monotonic() - last[0] < self._window and not last[2].done()

    def sent(self, dest: str, future: SentMessage) -> None:
        """Records a message the caller sent itself: anything with ``done()``."""
        self._record(dest, future)

    def _record(self, dest: str, future: SentMessage) -> None:
        last = self._last.get(dest)
        self._last[dest] = (last[1] if last else float("-inf"), time.monotonic(), future)

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
                self._thread = threading.Thread(
                    target=self._flush_loop, name=self._name, daemon=True
                )
                self._thread.start()
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
