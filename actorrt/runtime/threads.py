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
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["ActorThreads"]

_STOP = object()


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

    def submit(self, fn: Callable[[Any], None], arg: Any) -> None:
        """Queues ``fn(arg)``; raises ``RuntimeError`` once :meth:`close` was called."""
        if self._started == self._count:  # no thread left to start: nothing to count
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
            else:
                self._start()

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
        if self._initializer is not None:
            self._initializer()
        get = self._queue.get
        while True:
            item = get()
            if item is _STOP:
                return
            fn, arg = item
            fn(arg)
            if self._started < self._count:  # else no submit counts idle threads any more
                with self._lock:
                    self._idle += 1
