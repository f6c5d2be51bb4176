"""A worker's last resort when none of its Python threads runs: a kernel timer ends it.

A worker exits on its own once the driver has been silent for three heartbeat timeouts
(:mod:`actorrt.cluster.worker`), but that is decided in Python. A worker stuck in C code
that holds the GIL, or deadlocked with every thread waiting for it, runs no Python
thread: the driver marks it dead after one heartbeat timeout, and a local cluster's
driver kills it, but on another node nothing did, and it held its GPU's memory until
someone killed it by hand.

So each worker also arms a POSIX timer (``timer_create`` on ``CLOCK_MONOTONIC``) that
sends :data:`SIGNAL`, and its heartbeat thread pushes it back each time it runs
(:meth:`Watchdog.pet`). Only a process in which that thread has not run for
:attr:`Watchdog.seconds` gets the signal, and the kernel sends it, GIL or not.
:mod:`faulthandler` handles it in C: it writes the Python stack of every thread to
stderr (where the worker hung), then lets the signal's default action end the process
(exit status ``-SIGUSR2``).

Why a POSIX timer and not ``signal.alarm``: a process has one ``ITIMER_REAL``, and it is
the user's (timeouts in environment code use it); POSIX timers are as many as asked
for. A forked child (an environment, a data loader) does not inherit the timer, and no
thread either (unlike ``faulthandler.dump_traceback_later``: see
:mod:`actorrt.runtime.stacks`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import faulthandler
import signal
import sys

from actorrt.logs import get_logger

__all__ = ["SIGNAL", "Watchdog"]

log = get_logger("watchdog")

#: The signal the timer sends: its default action ends the process.
SIGNAL = signal.SIGUSR2

_CLOCK_MONOTONIC = 1
_SIGEV_SIGNAL = 0


class _SigEvent(ctypes.Structure):
    # glibc's struct sigevent: sigev_value, sigev_signo, sigev_notify, then a union that
    # pads it to 64 bytes.
    _fields_ = [
        ("sigev_value", ctypes.c_void_p),
        ("sigev_signo", ctypes.c_int),
        ("sigev_notify", ctypes.c_int),
        ("_pad", ctypes.c_int * 12),
    ]


class _TimeSpec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("it_interval", _TimeSpec), ("it_value", _TimeSpec)]


def _library() -> ctypes.CDLL | None:
    """The C library that has ``timer_create`` (glibc's own since 2.34, librt before)."""
    for name in (None, ctypes.util.find_library("rt")):
        try:
            lib = ctypes.CDLL(name, use_errno=True)
        except OSError:
            continue
        if hasattr(lib, "timer_create"):
            return lib
    return None


class Watchdog:
    """A timer that ends this process unless :meth:`pet` is called within ``seconds``.

    Make it with :meth:`arm`, in the process it guards (after any fork that made it).
    """

    def __init__(self, lib: ctypes.CDLL, timer: ctypes.c_void_p, seconds: float) -> None:
        self._lib = lib
        self._timer = timer
        self.seconds = seconds
        """How long a pet holds the signal off."""
        whole = int(seconds)
        self._spec = _ITimerSpec(
            _TimeSpec(0, 0), _TimeSpec(whole, int((seconds - whole) * 1e9))
        )  # once, not repeating: each pet sets it anew

    @classmethod
    def arm(cls, seconds: float) -> Watchdog | None:
        """Arms a watchdog that ends this process ``seconds`` after the last pet.

        Returns:
            The watchdog, already petted once; None where it cannot be made (no POSIX
            timers, or no stderr descriptor for the stacks), with the reason logged.
        """
        err = sys.__stderr__
        try:
            has_fd = err is not None and err.fileno() >= 0
        except (OSError, ValueError):  # a stream with no descriptor
            has_fd = False
        if err is None or not has_fd:
            log.debug("no watchdog: stderr has no file descriptor for the stacks")
            return None
        lib = _library()
        if lib is None:
            log.debug("no watchdog: this C library has no timer_create")
            return None
        event = _SigEvent(sigev_signo=int(SIGNAL), sigev_notify=_SIGEV_SIGNAL)
        timer = ctypes.c_void_p()
        if lib.timer_create(_CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(timer)) != 0:
            log.debug("no watchdog: timer_create failed (errno %d)", ctypes.get_errno())
            return None
        # In C, at the signal: every thread's stack to stderr, then the default action.
        faulthandler.register(SIGNAL, file=err, all_threads=True, chain=True)
        dog = cls(lib, timer, seconds)
        dog.pet()
        return dog

    def pet(self) -> None:
        """Holds the signal off for another :attr:`seconds` (one system call)."""
        self._lib.timer_settime(self._timer, 0, ctypes.byref(self._spec), None)

    def disarm(self) -> None:
        """Deletes the timer: the process is no longer guarded."""
        self._lib.timer_delete(self._timer)
        faulthandler.unregister(SIGNAL)
