"""``Queue``: a first-in first-out queue that actors share, as Ray's ``ray.util.queue.Queue``.

Collectors putting episodes for a learner to take, a driver handing work to actors that
take it when they are free: the queue is one async actor holding an ``asyncio.Queue``,
and a :class:`Queue` is a small object over its handle, so it travels to actors inside
the arguments of their calls as handles do. Items travel as any call's arguments and
results do (tensors out of band, CUDA tensors GPU to GPU where the plan maps the pair).
A caller blocked in ``get`` or ``put`` holds no thread of the queue's actor: each waits
as an asyncio task of it, up to 1000 at once.

An item goes producer -> queue actor -> consumer; for large tensors put a ref inside a
container, ``q.put([actorrt.put(t)])``, and the consumer fetches the bytes from the
producer in one hop (a ref put alone is resolved first, as any top-level argument).
"""

from __future__ import annotations

import asyncio
import queue as stdlib_queue
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from actorrt.actor_class import ActorHandle, actor
from actorrt.errors import ActorError
from actorrt.refs import ObjectRef, check_timeout, get, wait
from actorrt.runtime.runtime import current

__all__ = ["Empty", "Full", "Queue"]

T = TypeVar("T")


class Empty(stdlib_queue.Empty):
    """``get`` found the queue empty (``block=False``, or ``timeout`` passed), as Ray's."""


class Full(stdlib_queue.Full):
    """``put`` found the queue full (``block=False``, or ``timeout`` passed), as Ray's."""


class _QueueActor:
    """Holds the items: an async actor, so waiting ``get``s and ``put``s hold no thread."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.items: asyncio.Queue[Any] = asyncio.Queue(maxsize)

    def qsize(self) -> int:
        return self.items.qsize()

    async def put(self, item: Any, timeout: float | None) -> None:
        # timeout 0 (block=False) is put_nowait: wait_for(..., 0) would give up even with
        # room, before the put's task ever ran.
        try:
            if timeout == 0:
                self.items.put_nowait(item)
            else:
                await asyncio.wait_for(self.items.put(item), timeout)
        except (asyncio.QueueFull, asyncio.TimeoutError):
            raise Full(f"the queue is full (maxsize={self.maxsize}){_after(timeout)}") from None

    async def get(self, timeout: float | None) -> Any:
        try:
            if timeout == 0:
                return self.items.get_nowait()
            return await asyncio.wait_for(self.items.get(), timeout)
        except (asyncio.QueueEmpty, asyncio.TimeoutError):
            raise Empty(f"the queue is empty{_after(timeout)}") from None

    def put_nowait_batch(self, items: list[Any]) -> None:
        room = self.maxsize - self.items.qsize() if self.maxsize > 0 else len(items)
        if len(items) > room:
            raise Full(
                f"{len(items)} items do not fit: the queue has room for {room} "
                f"(maxsize={self.maxsize}); none was put"
            )
        for item in items:
            self.items.put_nowait(item)

    def get_nowait_batch(self, n: int) -> list[Any]:
        if n > self.items.qsize():
            raise Empty(f"{n} items asked for, {self.items.qsize()} in the queue; none was taken")
        return [self.items.get_nowait() for _ in range(n)]


def _after(timeout: float | None) -> str:
    return f", and stayed so for {timeout} s" if timeout else ""


_queue_actor = actor(_QueueActor)


class Queue(Generic[T]):
    """A first-in first-out queue that the driver and any actor can use, as Ray's.

    Made in one process and passed to actors as an argument of their calls (or inside
    one), it is the same queue everywhere. Its items live in one actor (``maxsize``
    items at most; 0 or less: no bound, as in ``queue.Queue`` and Ray) until taken.

    Args:
        maxsize: The most items it holds; ``put`` waits (or raises :class:`Full`) beyond.
        actor_options: Options of the queue's actor, as ``Cls.options(...)`` takes them
            (``label``, ``num_cpus``, ``name``...).

    Raises:
        TypeError: ``maxsize`` is not an int.
        NotInitializedError: actorrt is not started.

    Example::

        episodes = actorrt.Queue(maxsize=64)
        collectors = [Collector.remote(episodes) for _ in range(8)]  # each calls put
        batch = [episodes.get(timeout=30) for _ in range(32)]
    """

    def __init__(self, maxsize: int = 0, actor_options: dict[str, Any] | None = None) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int):
            raise TypeError(f"maxsize={maxsize!r} must be an int (0: no bound), e.g. maxsize=64.")
        maxsize = max(maxsize, 0)  # as queue.Queue and Ray: a negative size is no bound
        self.maxsize = maxsize
        make = _queue_actor.options(**actor_options) if actor_options else _queue_actor
        self.actor: ActorHandle = make.remote(maxsize)

    def __len__(self) -> int:
        return self.size()

    def size(self) -> int:
        """How many items it holds now."""
        return int(get(self.actor.qsize.remote()))

    def qsize(self) -> int:
        """How many items it holds now (as ``queue.Queue.qsize``)."""
        return self.size()

    def empty(self) -> bool:
        """Whether it holds no item now."""
        return self.size() == 0

    def full(self) -> bool:
        """Whether it holds ``maxsize`` items now (never, with no bound)."""
        return self.maxsize > 0 and self.size() >= self.maxsize

    def put(self, item: T, block: bool = True, timeout: float | None = None) -> None:
        """Puts ``item`` at the end; when full, waits for room (at most ``timeout`` s).

        Raises:
            Full: It is full and ``block`` is False, or stayed full for ``timeout``.
            ValueError: ``timeout`` is negative; TypeError: it is not a number.
        """
        _call(self.actor.put.remote(item, _wait_for(block, timeout)))

    async def put_async(self, item: T, block: bool = True, timeout: float | None = None) -> None:
        """:meth:`put` for a coroutine: waits without blocking the event loop."""
        await _call_async(self.actor.put.remote(item, _wait_for(block, timeout)))

    def get(self, block: bool = True, timeout: float | None = None) -> T:
        """Takes the first item; when empty, waits for one (at most ``timeout`` s).

        Raises:
            Empty: It is empty and ``block`` is False, or stayed empty for ``timeout``.
            ValueError: ``timeout`` is negative; TypeError: it is not a number.
        """
        item: T = _call(self.actor.get.remote(_wait_for(block, timeout)))
        return item

    async def get_async(self, block: bool = True, timeout: float | None = None) -> T:
        """:meth:`get` for a coroutine: waits without blocking the event loop."""
        item: T = await _call_async(self.actor.get.remote(_wait_for(block, timeout)))
        return item

    def put_nowait(self, item: T) -> None:
        """``put(item, block=False)``."""
        self.put(item, block=False)

    def put_nowait_batch(self, items: Iterable[T]) -> None:
        """Puts every item, in order, or none of them when they do not all fit.

        Raises:
            Full: They do not all fit now.
        """
        _call(self.actor.put_nowait_batch.remote(list(items)))

    def get_nowait(self) -> T:
        """``get(block=False)``."""
        return self.get(block=False)

    def get_nowait_batch(self, num_items: int) -> list[T]:
        """Takes the first ``num_items`` items, or none when it holds fewer.

        Raises:
            Empty: It holds fewer than ``num_items`` now.
            TypeError: ``num_items`` is not an int.
            ValueError: ``num_items`` is negative.
        """
        if isinstance(num_items, bool) or not isinstance(num_items, int):
            raise TypeError(f"num_items={num_items!r} must be an int, e.g. num_items=32.")
        if num_items < 0:
            raise ValueError(f"num_items={num_items} must be >= 0, e.g. num_items=32.")
        items: list[T] = _call(self.actor.get_nowait_batch.remote(num_items))
        return items

    def shutdown(self, force: bool = False, grace_period_s: float | None = 5) -> None:
        """Ends the queue's actor, dropping its items (Ray's arguments).

        Later calls raise ``ActorDiedError``, as do the ``get`` and ``put`` calls waiting.

        Args:
            force: True ends it now. False (the default) first lets the calls this
                process sent it before run (a ``put`` that did not wait for its answer),
                for at most ``grace_period_s`` seconds; calls waiting for room or items
                are not waited for.
            grace_period_s: That bound, in seconds (None: as long as they take).

        Raises:
            TypeError: ``force`` is not a bool, or ``grace_period_s`` not a number.
            ValueError: ``grace_period_s`` is negative.
        """
        rt = current("Queue.shutdown()")
        if not isinstance(force, bool):
            raise TypeError(f"force={force!r} must be True or False.")
        grace = check_timeout(grace_period_s, "grace_period_s")
        if not force:
            # Sent after them, it is answered once they ran (a caller's calls start in
            # order): then nothing this process put is lost in flight.
            wait([self.actor.qsize.remote()], timeout=grace)
        rt.kill(self.actor)


def _wait_for(block: bool, timeout: float | None) -> float | None:
    """How long the queue's actor waits: 0 for ``block=False``, else ``timeout``."""
    if not block:
        return 0
    return check_timeout(timeout)  # as get() and wait() take it


def _call(ref: ObjectRef[Any]) -> Any:
    try:
        return get(ref)
    except ActorError as exc:
        raise _queue_error(exc) from None


async def _call_async(ref: ObjectRef[Any]) -> Any:
    try:
        return await ref
    except ActorError as exc:
        raise _queue_error(exc) from None


def _queue_error(exc: ActorError) -> Exception:
    """The queue's own ``Empty`` / ``Full`` as they are; any other error unchanged."""
    return exc.cause if isinstance(exc.cause, (Empty, Full)) else exc
