"""``ActorPool``: a fixed set of actors working through a stream of tasks, as Ray's.

Evaluation workers, environment runners, preprocessors: N actors, more tasks than actors,
each task given to whichever actor is free. The pool is plain bookkeeping in the caller's
process over handles and refs (``actorrt.wait`` and ``actorrt.get``); nothing of it runs
remotely. Like Ray's ``ray.util.ActorPool``, it is not thread-safe: use it from one thread.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, NoReturn, TypeVar

from actorrt.errors import GetTimeoutError
from actorrt.refs import ObjectRef, failed, get, wait

__all__ = ["ActorPool"]

A = TypeVar("A")
V = TypeVar("V")

Task = Callable[[A, V], ObjectRef[Any] | list[ObjectRef[Any]]]
"""``fn(actor, value)``: starts a task on ``actor``, returns its ref (``a.m.remote(v)``), or a
list of refs (``num_returns=2``'s, or several calls), whose values it gives as a list."""

Started = ObjectRef[Any] | tuple[ObjectRef[Any], ...]
"""The refs of one task as the pool keeps them: its ref, or the refs of its list."""


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
        # Submission index -> (the task's refs, its actor; None: a waiting task that failed
        # to start, see _free), not yet returned, oldest first. By index, not by ref: two
        # tasks may return equal lists (two empty ones).
        self._tasks: dict[int, tuple[Started, A | None]] = {}
        self._submitted = 0  # indices given so far (submission order)
        self._waiting: deque[tuple[Task[A, Any], Any]] = deque()  # no actor was free
        for actor in actors:
            self.push(actor)

    # -- giving work ---------------------------------------------------------------
    def submit(self, fn: Task[A, V], value: V) -> None:
        """Runs ``fn(actor, value)`` on a free actor, or as soon as one is free.

        Args:
            fn: Starts the task: ``lambda actor, v: actor.method.remote(v)``. It may
                return a list of refs instead, as Ray's pool takes (the refs of a method
                with ``num_returns=2``, or of several calls on the actor): the task is
                done once all of them are, and its result is the list of their values.
            value: Its argument.

        Raises:
            TypeError: ``fn`` returned neither an ``ObjectRef`` nor a list of them (a
                tuple too is refused, as by Ray's pool). Whatever ``fn`` raises is
                raised here too, and the actor stays free. A task that waited for an actor
                and fails to start when one is free fails at its turn instead:
                ``get_next`` raises its error, and no other result is lost.
        """
        if not self._idle:
            self._waiting.append((fn, value))
            return
        actor = self._idle.pop()
        try:
            returned = fn(actor, value)
        except BaseException:
            # It started nothing on the actor (a bad argument, a typo in the method's
            # name, PendingCallsLimitExceeded): the actor is free, not lost to the pool.
            self._idle.append(actor)
            raise
        started = _started(returned)
        if started is None:
            self._idle.append(actor)
            raise TypeError(
                f"ActorPool: the task function returned {type(returned).__name__}, not an "
                "ObjectRef or a list of them; it must start a call on the actor it is "
                "given and return its ref, e.g. lambda actor, v: actor.step.remote(v)"
            )
        self._record(started, actor)

    def _record(self, started: Started, actor: A | None) -> None:
        self._tasks[self._submitted] = (started, actor)
        self._submitted += 1

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
        return bool(self._tasks)

    def get_next(self, timeout: float | None = None, ignore_if_timedout: bool = False) -> Any:
        """The result of the oldest task not yet taken (submission order).

        Its actor is free again before the result is read, and takes a waiting task. A
        task whose function returned a list gives the list of its refs' values.

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
        index = next(iter(self._tasks))  # the oldest: those before were taken or given up
        started = self._tasks[index][0]
        if timeout is not None and not _all_ready(started, timeout):
            self._timed_out("get_next", timeout, index if ignore_if_timedout else None)
        self._take(index)
        return _value(started)

    def get_next_unordered(
        self, timeout: float | None = None, ignore_if_timedout: bool = False
    ) -> Any:
        """The result of whichever task not yet taken is ready first.

        A task whose function returned a list is ready once all its refs are.

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
        index = self._first_ready(timeout)
        if index is None:
            oldest = next(iter(self._tasks))
            self._timed_out("get_next_unordered", timeout, oldest if ignore_if_timedout else None)
        started = self._tasks[index][0]
        self._take(index)
        return _value(started)

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
    def _take(self, index: int) -> None:
        """Forgets task ``index`` and frees its actor."""
        _, actor = self._tasks.pop(index)
        if actor is not None:
            self._free(actor)

    def _first_ready(self, timeout: float | None) -> int | None:
        """The index of the oldest task whose refs are all ready, waiting up to ``timeout``.

        Returns:
            None if none is ready within ``timeout``.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            refs = {i: _refs(started) for i, (started, _) in self._tasks.items()}
            every = list(dict.fromkeys(r for task in refs.values() for r in task))
            ready, pending = wait(every, num_returns=len(every), timeout=0) if every else ([], [])
            done = set(ready)
            for index, task in refs.items():
                if done.issuperset(task):
                    return index
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            # Each round waits for one more ref: a list's task needs all of its own.
            wait(pending, num_returns=1, timeout=left)

    def _something_left(self) -> None:
        """Raises ``StopIteration`` when no result is left to take (as Ray's pool)."""
        if not self.has_next():
            raise StopIteration("ActorPool: no more results to get")

    def _timed_out(self, what: str, timeout: float | None, give_up: int | None) -> NoReturn:
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
        while self._tasks:
            self._take(next(iter(self._tasks)))


def _started(returned: object) -> Started | None:
    """What a task function returned, as the pool keeps it; None if it is no ref nor list.

    A list of refs is kept as a tuple; a tuple is refused, as Ray's pool refuses it.
    """
    if isinstance(returned, ObjectRef):
        return returned
    if isinstance(returned, list) and all(isinstance(r, ObjectRef) for r in returned):
        return tuple(returned)
    return None


def _refs(started: Started) -> tuple[ObjectRef[Any], ...]:
    return (started,) if isinstance(started, ObjectRef) else started


def _all_ready(started: Started, timeout: float) -> bool:
    """Whether every ref of a task is ready within ``timeout``."""
    refs = list(dict.fromkeys(_refs(started)))  # wait() takes each ref once
    return not refs or len(wait(refs, num_returns=len(refs), timeout=timeout)[0]) == len(refs)


def _value(started: Started) -> Any:
    """A task's result: its ref's value, or the list of its refs' values."""
    return get(started) if isinstance(started, ObjectRef) else get(list(started))
