"""``ActorPool``: a fixed set of actors working through a stream of tasks, as Ray's.

Evaluation workers, environment runners, preprocessors: N actors, more tasks than actors,
each task given to whichever actor is free. The pool is plain bookkeeping in the caller's
process over handles and refs (``actorrt.wait`` and ``actorrt.get``); nothing of it runs
remotely. Like Ray's ``ray.util.ActorPool``, it is not thread-safe: use it from one thread.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, NoReturn, TypeVar

from actorrt.errors import GetTimeoutError
from actorrt.refs import ObjectRef, failed, get, wait

__all__ = ["ActorPool"]

A = TypeVar("A")
V = TypeVar("V")

Task = Callable[[A, V], ObjectRef[Any]]
"""``fn(actor, value)``: starts one task on ``actor``, returns its ref (``a.m.remote(v)``)."""


class ActorPool(Generic[A]):
    """Gives tasks to free actors of a fixed set, and hands back their results.

    Args:
        actors: The handles of the actors to use (each at most once).

    Raises:
        ValueError: An actor appears twice.

    Example::

        pool = actorrt.ActorPool([Evaluator.remote() for _ in range(4)])
        returns = list(pool.map(lambda a, seed: a.episode.remote(seed), range(32)))
    """

    def __init__(self, actors: Iterable[A]) -> None:
        self._idle: list[A] = []
        self._members: list[A] = []  # every actor of the pool, busy or not
        # ref -> (index, actor); None: a waiting task that failed to start (see _free)
        self._running: dict[ObjectRef[Any], tuple[int, A | None]] = {}
        self._by_index: dict[int, ObjectRef[Any]] = {}  # index -> ref, not yet returned
        self._submitted = 0  # indices given so far (submission order)
        self._returned = 0  # the lowest index get_next may still return
        self._waiting: deque[tuple[Task[A, Any], Any]] = deque()  # no actor was free
        for actor in actors:
            self.push(actor)

    # -- giving work ---------------------------------------------------------------
    def submit(self, fn: Task[A, V], value: V) -> None:
        """Runs ``fn(actor, value)`` on a free actor, or as soon as one is free.

        Args:
            fn: Starts the task: ``lambda actor, v: actor.method.remote(v)``.
            value: Its argument.

        Raises:
            TypeError: ``fn`` did not return an ``ObjectRef``. Whatever ``fn`` raises is
                raised here too, and the actor stays free. A task that waited for an actor
                and fails to start when one is free fails at its turn instead:
                ``get_next`` raises its error, and no other result is lost.
        """
        if not self._idle:
            self._waiting.append((fn, value))
            return
        actor = self._idle.pop()
        try:
            ref = fn(actor, value)
        except BaseException:
            # It started nothing on the actor (a bad argument, a typo in the method's
            # name, PendingCallsLimitExceeded): the actor is free, not lost to the pool.
            self._idle.append(actor)
            raise
        if not isinstance(ref, ObjectRef):
            self._idle.append(actor)
            raise TypeError(
                f"ActorPool: the task function returned {type(ref).__name__}, not an "
                "ObjectRef; it must start one call on the actor it is given and return its "
                "ref, e.g. lambda actor, v: actor.step.remote(v)"
            )
        self._record(ref, actor)

    def _record(self, ref: ObjectRef[Any], actor: A | None) -> None:
        index = self._submitted
        self._submitted += 1
        self._running[ref] = (index, actor)
        self._by_index[index] = ref

    def map(self, fn: Task[A, V], values: Iterable[V]) -> Iterator[Any]:
        """Runs ``fn`` over ``values`` on the pool's actors; yields results in order.

        Tasks submitted before and not yet taken are given up first, as in Ray: their
        results are never returned (an actor still running one takes its next task after).
        Every task is submitted at the call, as in Ray, not when iteration starts.

        Raises:
            ActorError: A task raised (when its result is reached; its actor is free).
        """
        self._drop_results()
        for value in values:
            self.submit(fn, value)
        return self._results(self.get_next)

    def map_unordered(self, fn: Task[A, V], values: Iterable[V]) -> Iterator[Any]:
        """Like :meth:`map`, yielding each result as soon as it is ready."""
        self._drop_results()
        for value in values:
            self.submit(fn, value)
        return self._results(self.get_next_unordered)

    def _results(self, take: Callable[[], Any]) -> Iterator[Any]:
        while self.has_next():
            yield take()

    # -- taking results ------------------------------------------------------------
    def has_next(self) -> bool:
        """Whether some submitted task's result has not been taken yet."""
        return bool(self._running)

    def get_next(self, timeout: float | None = None, ignore_if_timedout: bool = False) -> Any:
        """The result of the oldest task not yet taken (submission order).

        Its actor is free again before the result is read, and takes a waiting task.

        Args:
            timeout: Seconds to wait for it; None waits as long as it takes.
            ignore_if_timedout: On a timeout, give up that task: its result is never
                returned, and its actor counts as free again (a later task may queue
                behind the abandoned call on it).

        Raises:
            StopIteration: No result is left to take.
            GetTimeoutError: ``timeout`` passed (a ``TimeoutError``).
            ActorError: The task raised; ActorDiedError: its actor died.
        """
        self._something_left()
        while self._returned not in self._by_index:  # taken out of order, or given up
            self._returned += 1
        ref = self._by_index[self._returned]
        if timeout is not None and not wait([ref], timeout=timeout)[0]:
            self._timed_out("get_next", timeout, ref if ignore_if_timedout else None)
        self._take(ref)
        return get(ref)

    def get_next_unordered(
        self, timeout: float | None = None, ignore_if_timedout: bool = False
    ) -> Any:
        """The result of whichever task not yet taken is ready first.

        Args:
            timeout: Seconds to wait; None waits as long as it takes.
            ignore_if_timedout: On a timeout, give up the oldest task (see
                :meth:`get_next`).

        Raises:
            StopIteration: No result is left to take.
            GetTimeoutError: ``timeout`` passed (a ``TimeoutError``).
            ActorError: The task raised; ActorDiedError: its actor died.
        """
        self._something_left()
        ready, _ = wait(list(self._running), num_returns=1, timeout=timeout)
        if not ready:
            oldest = self._by_index[min(self._by_index)]
            self._timed_out("get_next_unordered", timeout, oldest if ignore_if_timedout else None)
        (ref,) = ready
        self._take(ref)
        return get(ref)

    # -- the actors ----------------------------------------------------------------
    def has_free(self) -> bool:
        """Whether an actor is free and no task waits for one."""
        return bool(self._idle) and not self._waiting

    def pop_idle(self) -> A | None:
        """Takes a free actor out of the pool (None if none is free)."""
        if not self.has_free():
            return None
        actor = self._idle.pop()
        self._members.remove(actor)
        return actor

    def push(self, actor: A) -> None:
        """Adds ``actor`` to the pool; it takes a waiting task at once, if any.

        Raises:
            ValueError: It is in the pool already.
        """
        if any(actor is member or actor == member for member in self._members):
            raise ValueError(f"ActorPool: {actor!r} is in the pool already")
        self._members.append(actor)
        self._free(actor)

    # -- inside --------------------------------------------------------------------
    def _take(self, ref: ObjectRef[Any]) -> None:
        """Forgets ``ref``'s task and frees its actor."""
        index, actor = self._running.pop(ref)
        del self._by_index[index]
        if actor is not None:
            self._free(actor)

    def _something_left(self) -> None:
        """Raises ``StopIteration`` when no result is left to take (as Ray's pool)."""
        if not self.has_next():
            raise StopIteration("ActorPool: no more results to get")

    def _timed_out(
        self, what: str, timeout: float | None, give_up: ObjectRef[Any] | None
    ) -> NoReturn:
        """Raises the timeout of ``what``, first giving up ``give_up``'s task if given."""
        message = f"ActorPool.{what}: no result within {timeout} s"
        if give_up is not None:
            self._take(give_up)
            message += "; the task was given up"
        raise GetTimeoutError(message)

    def _free(self, actor: A) -> None:
        self._idle.append(actor)
        while self._waiting and self._idle:
            fn, value = self._waiting.popleft()
            try:
                self.submit(fn, value)
            except Exception as exc:
                # Raised here it would lose the result being taken (get_next frees the
                # actor first): the task fails at its own turn instead, its actor free.
                self._record(failed("ActorPool task", exc), None)

    def _drop_results(self) -> None:
        """Gives up every task not yet taken, done or not (before a ``map``, as in Ray)."""
        self._waiting.clear()  # never started: nothing to give up on an actor
        while self._by_index:
            self._take(self._by_index[min(self._by_index)])
