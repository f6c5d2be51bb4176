"""Threads that call into torch's C++ while the cluster ends, and the exit that waits for them.

Python ends a daemon thread that wakes during the interpreter's teardown by unwinding
it where it stands. A thread that was inside a torch call which let go of the GIL (RPC
shutdown, an agent's join, a store read, a ping) wakes in C++ frames that may not be
unwound, and the whole process aborts: ``terminate called without an active
exception``, exit status -6, after a shutdown that went well. A program that ends
while ``rpc.shutdown`` runs in a daemon thread shows it often.

So the threads the runtime leaves running past a bound (the bounded steps of shutdown)
or that end with the runtime (the driver's heartbeat, its probes, the late-claims
loop) are started here, and the interpreter's exit waits for them first, at most
:data:`EXIT_GRACE_S`. The dangerous ones are those that shutdown itself set free (a
join or a store read that the agent's end fails): they return soon after it, and the
wait keeps them out of the teardown. One still blocked after the grace is parked for
good (a join waiting for an answer from a hung worker, which ``rpc.shutdown`` never
wakes): the process ends without it, as it did before. Nothing waits when every such
thread ended, which is every exit where shutdown kept its bounds.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from actorrt.logs import get_logger

__all__ = ["EXIT_GRACE_S", "running", "start", "wait"]

EXIT_GRACE_S = 2.0
"""How long the interpreter's exit waits for these threads, all together."""

log = get_logger("exit")

_lock = threading.Lock()
_threads: list[threading.Thread] = []


def start(target: Callable[..., Any], *, name: str, args: Iterable[Any] = ()) -> threading.Thread:
    """Starts a daemon thread that calls into torch; the process's exit waits for it.

    Args:
        target: What the thread runs; it must end once the runtime stopped.
        name: The thread's name (shown by debuggers and in the exit's message).
        args: ``target``'s arguments.

    Returns:
        The started thread.
    """
    thread = threading.Thread(target=target, args=tuple(args), name=name, daemon=True)
    with _lock:
        _threads[:] = [t for t in _threads if t.is_alive()]
        _threads.append(thread)
    thread.start()
    return thread


def running() -> list[threading.Thread]:
    """The threads started here that have not ended yet."""
    with _lock:
        return [t for t in _threads if t.is_alive()]


def wait(timeout: float) -> list[threading.Thread]:
    """Waits until every thread started here ended, at most ``timeout`` in all.

    Returns:
        The threads still running.
    """
    deadline = time.monotonic() + timeout
    for thread in running():
        thread.join(max(0.0, deadline - time.monotonic()))
    return running()


def _at_exit() -> None:
    left = wait(EXIT_GRACE_S)
    if left:
        log.info(
            "the process ends; thread(s) %s still wait in torch %.0f s after shutdown",
            ", ".join(t.name for t in left), EXIT_GRACE_S,
        )  # fmt: skip


# Registered at import, before ``start()`` registers its shutdown: atexit runs the later
# first, so the runtime shuts down, and then this waits for what shutdown left running.
atexit.register(_at_exit)
