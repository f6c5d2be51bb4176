"""An actor's own threads: up to ``count`` threads taking work from one queue.

Not a ``concurrent.futures.ThreadPoolExecutor``: its ``Future``, work item and semaphore
per task cost more than the hand-off itself at actor-call rates (the measurements are in
docs/performance.md, "Why the code is shaped this way"). Actors need no futures from
here: a call's reply travels on its own torch future.

Threads start on demand: one at once (an actor always has its constructor to run), and
another only when work is queued while none is idle, so ``max_concurrency=100_000``
costs threads only for the calls that do run at once. Once all ``count`` threads are up
(at once for the common one-thread actor), :meth:`ActorThreads.submit` is a bare
``put``.

A remote function's executor lends its thread while the function waits on other work
(``actorrt.get`` / ``wait`` of refs not ready): one more thread may run meanwhile, as
Ray gives back a task's CPU while it waits, so that nested functions cannot take every
thread and wait on each other for ever (:meth:`ActorThreads.lending`).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ActorThreads", "current_pool", "lender", "may_lend"]

_STOP = object()

_local = threading.local()  # .pool: whose thread this is; .lends: may lend it now


def current_pool() -> ActorThreads | None:
    """The pool whose thread this is; None on any other thread."""
    return getattr(_local, "pool", None)


def lender() -> ActorThreads | None:
    """The pool of this thread, if its work may lend the thread while it waits; else None."""
    return getattr(_local, "lends", None)


@contextlib.contextmanager
def may_lend() -> Iterator[None]:
    """While inside, a wait on this pool's thread lends it (see :meth:`ActorThreads.lending`)."""
    before = getattr(_local, "lends", None)
    _local.lends = getattr(_local, "pool", None)
    try:
        yield
    finally:
        _local.lends = before


class ActorThreads:
    """Up to ``count`` threads that run the functions put on one queue, in queue order.

    Args:
        count: How many threads at most (the actor's ``max_concurrency``).
        name: Thread name prefix.
        initializer: Run once on each thread before any work (e.g. pick the GPU).
    """

    def __init__(
        self, count: int, name: str, initializer: Callable[[], None] | None = None
    ) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._count = count
        self._name = name
        self._initializer = initializer
        self._closed = False
        self._lock = threading.Lock()  # guards the counts below until all threads are up
        self._started = 0
        # Threads waiting for work that no submit has counted on yet. The first thread
        # starts waiting, so it counts as idle from the start.
        self._idle = 1
        self._start()

    @property
    def size(self) -> int:
        """How many threads may run at once (one more while one of them is lent)."""
        return self._count

    def submit(self, fn: Callable[[Any], None], arg: Any) -> None:
        """Queues ``fn(arg)``; raises ``RuntimeError`` once :meth:`close` was called."""
        if self._started >= self._count:  # no thread left to start: nothing to count
            if self._closed:
                raise RuntimeError("the actor's threads are closed")
            self._queue.put((fn, arg))
            return
        with self._lock:
            if self._closed:
                raise RuntimeError("the actor's threads are closed")
            self._queue.put((fn, arg))
            if self._idle:
                self._idle -= 1  # that thread will take this work
            elif self._started < self._count:  # (above it while a lent thread comes back)
                self._start()

    @contextlib.contextmanager
    def lending(self) -> Iterator[None]:
        """The calling thread, one of these, waits on other work: one more runs meanwhile.

        The count goes up by one (a thread starts at once if all were up) and back down
        afterwards; a thread over the count ends once it has finished its work.
        """
        with self._lock:
            self._count += 1
            if not self._closed and self._started < self._count:
                self._start()
        try:
            yield
        finally:
            with self._lock:
                self._count -= 1

    def close(self) -> None:
        """Ends each thread once the work queued before this call has run."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            started = self._started
        for _ in range(started):
            self._queue.put(_STOP)

    def _start(self) -> None:
        # Under the lock (or in __init__): the thread takes one queued item.
        thread = threading.Thread(
            target=self._loop, name=f"{self._name}_{self._started}", daemon=True
        )
        try:
            thread.start()
        except RuntimeError:  # "can't start new thread": the process is at its limit
            if self._started == 0:
                raise
            # The queued work waits for the threads there are, rather than failing.
            self._count = self._started
            return
        self._started += 1

    def _loop(self) -> None:
        _local.pool = self
        if self._initializer is not None:
            self._initializer()
        get = self._queue.get
        while True:
            item = get()
            if item is _STOP:
                return
            fn, arg = item
            fn(arg)
            # Not kept while the thread waits for more: the last call (its reply, whatever
            # its value holds: handles, refs, tensors) would live until the next one came.
            del item, fn, arg
            if self._started != self._count:  # else no submit counts idle threads any more
                with self._lock:
                    if self._started > self._count:  # a lent thread is back: one too many
                        self._started -= 1
                        return
                    if self._started < self._count:
                        self._idle += 1
