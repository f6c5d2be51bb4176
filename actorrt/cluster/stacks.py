"""A worker's thread stacks on a signal: what a hung process was doing before it goes.

The heartbeat can tell that a worker answers nothing, not why: a deadlock, a method stuck
in C code that holds the GIL, a stopped process. So every worker installs
:mod:`faulthandler` on :data:`STACKS_SIGNAL`: on that signal it writes the Python stack of
every thread to its stderr (for a local worker, the driver's terminal). faulthandler's
handler runs in C and takes no lock and no GIL, so it answers in a process whose every
Python thread waits for the GIL. The driver sends the signal to a local worker it is about
to kill as hung (:meth:`~actorrt.cluster.local.LocalCluster.kill_rank`); anyone can send
it to any worker (``kill -USR1 PID``) to see what it is doing, and it goes on running.

Why not a watchdog that dumps and exits on its own (``faulthandler.dump_traceback_later``):
its C thread does not survive ``fork``, and a forked child of the process (an
environment, a data loader) then waits for it for ever at its interpreter's exit.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import time

__all__ = ["DUMP_GRACE_S", "STACKS_SIGNAL", "install", "request"]

#: The signal on which a worker writes its threads' stacks to stderr (and runs on).
STACKS_SIGNAL = signal.SIGUSR1
#: How long a sender of :data:`STACKS_SIGNAL` waits before it kills the process: the
#: handler writes at once (a few kilobytes), once the kernel has scheduled the process.
DUMP_GRACE_S = 0.5


def install() -> bool:
    """In a worker: writes every thread's stack to stderr on :data:`STACKS_SIGNAL`.

    Returns:
        Whether it was installed (not when the process has no stderr file descriptor).
    """
    err = sys.__stderr__
    if err is None:
        return False
    try:
        err.fileno()
    except (OSError, ValueError):  # a stream with no descriptor (a test's capture)
        return False
    faulthandler.register(STACKS_SIGNAL, file=err, all_threads=True, chain=False)
    return True


def request(pid: int, wait: float = DUMP_GRACE_S) -> bool:
    """Asks process ``pid`` (a worker) for its stacks, then waits ``wait`` seconds.

    A stopped process (SIGSTOP) writes nothing until it runs again; one that has not
    installed the handler yet (starting) ends, the signal's default action.

    Returns:
        Whether the signal was sent (False: no such process).
    """
    try:
        os.kill(pid, STACKS_SIGNAL)
    except ProcessLookupError:
        return False
    time.sleep(wait)
    return True
