"""Thread stacks of the cluster's processes: on request, and from a hung worker on a signal.

Two kinds of stuck need two roads:

- **A process that still answers** (a method waiting for a result that never comes, a
  lock taken twice, two actors waiting on each other): the heartbeat sees nothing wrong.
  :func:`actorrt.stacks` asks every live process at once, over RPC and bounded, for the
  stack of each of its threads (:func:`rpc_thread_stacks`), named as actorrt names them
  (an actor's threads ``<Class>-<id8>_<n>``), as ``ray stack`` does for Ray.
- **A process that answers nothing** (a deadlock, a method stuck in C code that holds the
  GIL, a stopped process): every worker installs :mod:`faulthandler` on
  :data:`STACKS_SIGNAL` (:func:`install`), whose handler runs in C and takes no lock and
  no GIL, so it writes the Python stack of every thread to the worker's stderr (for a
  local worker, the driver's terminal) even there. The driver sends the signal to a
  local worker it is about to kill as hung (:func:`request`); anyone can send it to any
  worker (``kill -USR1 PID``), which goes on running.

Why not a watchdog that dumps and exits on its own (``faulthandler.dump_traceback_later``):
its C thread does not survive ``fork``, and a forked child of the process (an
environment, a data loader) then waits for it for ever at its interpreter's exit.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from actorrt.runtime.directory import NodeInfo

__all__ = [
    "DUMP_GRACE_S",
    "STACKS_SIGNAL",
    "cluster_stacks",
    "install",
    "request",
    "rpc_thread_stacks",
    "thread_stacks",
]

#: The signal on which a worker writes its threads' stacks to stderr (and runs on).
STACKS_SIGNAL = signal.SIGUSR1
#: How long a sender of :data:`STACKS_SIGNAL` waits before it kills the process: the
#: handler writes at once (a few kilobytes) once the kernel has run the process, which
#: a loaded machine may put off by a fraction of a second.
DUMP_GRACE_S = 1.0


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


def thread_stacks(all_threads: bool = False) -> str:
    """The stack of every thread of this process, each headed by the thread's name.

    Args:
        all_threads: Also actorrt's own threads (named ``actorrt-*``: heartbeats, output,
            releases), which wait for their work; left out, they are counted.

    Returns:
        Text: per thread a ``Thread "NAME"`` line, then its frames, innermost last, with
        their source lines (as in a traceback). The thread that asks is left out.
    """
    frames = sys._current_frames()
    me = threading.get_ident()
    parts = []
    hidden = 0
    for thread in threading.enumerate():
        frame = frames.get(thread.ident) if thread.ident is not None else None
        if frame is None or thread.ident == me:  # started after the snapshot, or asking
            continue
        if not all_threads and thread.name.startswith("actorrt-"):
            hidden += 1
            continue
        daemon = ", daemon" if thread.daemon else ""
        parts.append(f'Thread "{thread.name}" (id {thread.ident}{daemon}):\n')
        summary = traceback.extract_stack(frame)
        # Every thread starts in threading's bootstrap: three frames that say nothing.
        while len(summary) > 1 and summary[0].filename == threading.__file__:
            summary.pop(0)
        parts.extend(summary.format())
        parts.append("\n")
    if hidden:
        parts.append(f"({hidden} actorrt-* threads not shown: all_threads=True shows them)\n")
    return "".join(parts)


def rpc_thread_stacks(all_threads: bool = False) -> tuple[int, str]:
    """Runs on each process asked by :func:`cluster_stacks`: its pid and its stacks."""
    return os.getpid(), thread_stacks(all_threads)


def cluster_stacks(
    own: str, nodes: Sequence[NodeInfo], timeout: float, all_threads: bool = False
) -> str:
    """The stacks of every live process (see :func:`actorrt.stacks`).

    Args:
        own: This process's RPC name (its stacks are read here, not asked for).
        nodes: The directory's processes.
        timeout: Seconds to wait for all the answers (asked at once).
        all_threads: Also actorrt's own threads (see :func:`thread_stacks`).

    Returns:
        One section per process, in rank order, headed ``=== NAME (rank R, pid P, host
        H) ===``; a process that did not answer in time, or is dead, says so instead.
    """
    from actorrt.runtime.status import ask_live  # torch: only when asked (workers import this)

    answers = ask_live(own, nodes, rpc_thread_stacks, (all_threads,), timeout=timeout)
    sections = []
    for node in sorted(nodes, key=lambda n: n.rank):
        where = f"{node.process} (rank {node.rank}"
        if not node.alive:
            sections.append(f"=== {where}, host {node.host}): dead ===\n")
        elif node.process in answers:
            pid, text = answers[node.process]
            sections.append(f"=== {where}, pid {pid}, host {node.host}) ===\n{text}")
        else:
            sections.append(
                f"=== {where}, host {node.host}): no answer within {timeout:g} s ===\n"
                "It may be hung: a local worker marked dead prints its stacks before its "
                "kill, and `kill -USR1 PID` on its host prints them on its terminal.\n"
            )
    return "\n".join(sections)
