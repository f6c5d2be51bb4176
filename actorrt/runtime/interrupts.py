"""Interrupting a running remote function, as ``ray.cancel`` interrupts a running task.

Ray raises ``KeyboardInterrupt`` in a task that is cancelled while it runs. actorrt
raises :class:`Interrupted`, a ``KeyboardInterrupt``, in the thread that runs the
function, with CPython's ``PyThreadState_SetAsyncExc``: the thread raises it at its next
bytecode. So a function running Python code (a loop over an environment's steps) stops
at once, and one blocked in C (a sleep, a lock, a long torch op) stops when that
returns to Python. A function that catches it and returns gives its value. An
``async def`` function is cancelled as an async actor's call is instead: its task, so
``CancelledError`` is raised where it awaits (:func:`run_coroutine`); its event loop
would otherwise sit in C until its next timer.

Such an exception lands wherever its thread is, the runtime's own code too. So it is
fired only while the function runs (between the two ends of :func:`run`, under one
lock), at most once per call, and the end takes back one not raised yet; both ends are
inside one ``try`` of :func:`run`, so one raised on the way in or out is caught there
and never reaches the executor's thread loop. Actors are not interrupted: a method's
state change cut in half would stay in the actor (Ray leaves running actor calls too).
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Protocol, TypeVar, cast

from actorrt.runtime import lineage

__all__ = ["Interrupted", "Interruptible", "interrupt", "run", "run_coroutine"]

T = TypeVar("T")


class Interrupted(KeyboardInterrupt):
    """Raised in a running remote function whose call ``actorrt.cancel`` cancelled."""


class Interruptible(Protocol):
    """A call as this module sees it (the mailbox's ``Call``)."""

    cancel_asked: bool
    thread: int  # the thread running its function; 0 while it is not running
    fired: bool  # an Interrupted was set for its thread (or its task cancelled)
    waker: Callable[[], object] | None  # cancels an async function's task


_lock = threading.Lock()


def _served() -> Interruptible | None:
    # The call the mailbox runs in this thread (lineage.serving); an executor's mailbox
    # serves its own Call, which is Interruptible too.
    return cast("Interruptible | None", lineage.serving.get())


def run(work: Callable[[], T]) -> T:
    """Runs ``work`` (the function of the call this thread serves) so it can be interrupted.

    Raises:
        Interrupted: The call was cancelled while (or before) ``work`` ran, and ``work``
            did not catch it.
    """
    call = _served()
    if call is None:  # not a call's (a unit test's, a nested runner)
        return work()
    try:
        try:
            with _lock:
                call.thread = threading.get_ident()
                asked = call.cancel_asked  # a cancel that came before: no need to fire
            if asked:
                raise Interrupted
            return work()
        finally:
            _leave(call)
    except Interrupted:
        _leave(call)  # it landed in the first _leave: nothing can be pending now
        raise


def _leave(call: Interruptible) -> None:
    with _lock:
        thread, call.thread = call.thread, 0
        if thread and call.fired:
            _set_async_exc(thread, None)  # fired and not raised yet: taken back


def run_coroutine(coro: Coroutine[object, object, T]) -> T:
    """Runs an ``async def`` function's coroutine to its end on a loop of its own.

    Inside :func:`run`, :func:`interrupt` cancels its task (``CancelledError`` where it
    awaits) rather than raising in the thread.

    Raises:
        Interrupted: It was cancelled, and did not catch it.
    """
    call = _served()
    if call is None:
        return asyncio.run(coro)
    try:
        return asyncio.run(_cancellable(call, coro))
    except asyncio.CancelledError:
        if call.cancel_asked:
            raise Interrupted from None
        raise


async def _cancellable(call: Interruptible, coro: Coroutine[object, object, T]) -> T:
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    with _lock:
        call.waker = partial(loop.call_soon_threadsafe, task.cancel)
    try:
        return await coro
    finally:
        with _lock:
            call.waker = None


def interrupt(call: Interruptible) -> bool:
    """Raises :class:`Interrupted` in the thread running ``call``'s function, if it runs.

    An ``async def`` function's task is cancelled instead (see :func:`run_coroutine`).

    Returns:
        Whether it was fired (False: not running, or fired already).
    """
    with _lock:
        if not call.thread or call.fired:
            return False
        call.fired = True
        if call.waker is None:
            _set_async_exc(call.thread, Interrupted)
            return True
        waker = call.waker
    try:
        waker()
    except RuntimeError:  # its loop closed: the function ended
        pass
    return True


def _set_async_exc(thread: int, exc: type[BaseException] | None) -> None:
    # No argtypes: None goes as NULL, which takes back a pending exception.
    arg = None if exc is None else ctypes.py_object(exc)
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), arg)
