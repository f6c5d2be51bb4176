"""Messages a process sent and has no answer to yet, per worker: failed when it is marked dead.

A worker that dies closes its connections, and TensorPipe fails the futures of what it
had been sent. A worker that hangs, or whose host is cut off, keeps them open: TensorPipe
waits (calls have no RPC timeout, methods may run for long), and so would a ``get``
without a timeout, which waits on the torch future itself (see ``refs.py``). So when the
driver marks a worker dead (its heartbeat, the zygote's exit report, a call that found it
gone), every process fails the futures it still holds for it, here, a moment later
(``GRACE_S``: what a dead process's closing connections fail is left to TensorPipe).

The cost on the way out is one weak reference per message (no callback on the reply:
see docs/performance.md); the list of them is pruned of answered and forgotten messages
as it grows, so it stays proportional to what is unanswered.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from actorrt.runtime.lives import Lives

if TYPE_CHECKING:
    import torch

__all__ = ["InFlight", "WorkerMarkedDead"]

_MIN_PRUNE = 64  # entries per worker before the first pruning

#: How long a worker marked dead is given for its connections to close, before its
#: messages are failed here: a dead process's are failed by TensorPipe first, which spares
#: torch's complaint about futures completed twice (see :func:`fail_future`).
GRACE_S = 1.0


class WorkerMarkedDead(RuntimeError):
    """Completes a message to a worker marked dead (the caller sees ``ActorDiedError``)."""


def _unwrap(value: Any) -> Any:
    # What ``value()`` and ``wait()`` give for a future: the error raised for the failure
    # set here, anything else unchanged (a reply that won the race stays a reply).
    if isinstance(value, WorkerMarkedDead):
        raise value
    return value


def fail_future(future: torch.futures.Future[Any], error: WorkerMarkedDead) -> bool:
    """Completes ``future`` with ``error``; False when it was answered first.

    The future may be one torch's RPC agent completes (``rpc_async``'s): the agent's own
    completion, when it comes later (the connection finally breaks, or the process wakes),
    then fails inside torch, which logs it ("Attempting to mark a completed Future as
    complete again", or "Future is already marked completed") and goes on.
    """
    if future.done():
        return False
    # What torch.futures.Future.set_exception does, for futures of torch._C's own type too.
    future._set_unwrap_func(_unwrap)
    try:
        future.set_result(error)
    except RuntimeError:  # completed in between
        return False
    return True


class InFlight:
    """Weak references to the unanswered messages of this process, per worker.

    :meth:`track` runs once per message sent, so it takes no lock: appending to a list is
    atomic, pruning replaces only the entries it read, and a message tracked while its
    worker is being marked dead is failed by whichever of the two comes second (the
    worker is marked before its list is taken, and :meth:`track` looks after appending).

    Args:
        lives: How many new processes took each name (the runtime's; bumped before
            :meth:`revive`). A fresh count when not given.
    """

    def __init__(self, lives: Lives | None = None) -> None:
        self._sent: dict[str, list[weakref.ref[torch.futures.Future[Any]]]] = {}
        self._prune_at: dict[str, int] = {}
        self._pruning = threading.Lock()
        self._dead: dict[str, str] = {}  # worker -> why
        self._lives = lives if lives is not None else Lives()

    def track(self, worker: str, future: torch.futures.Future[Any]) -> None:
        """Remembers a message sent to ``worker`` until it is answered or forgotten.

        A message sent to a worker already marked dead fails at once.
        """
        sent = self._sent.get(worker)
        if sent is None:
            sent = self._sent.setdefault(worker, [])
        sent.append(weakref.ref(future))
        if len(sent) >= self._prune_at.get(worker, _MIN_PRUNE):
            self._prune(worker, sent)
        if self._dead and worker in self._dead:
            fail_future(future, WorkerMarkedDead(self._dead[worker]))

    def _prune(self, worker: str, sent: list[weakref.ref[torch.futures.Future[Any]]]) -> None:
        # Pruning again only once the list has doubled keeps it amortised O(1) per message
        # however many stay unanswered. Entries appended meanwhile lie past `n`: kept.
        if not self._pruning.acquire(blocking=False):
            return  # another thread is at it
        try:
            n = len(sent)
            sent[:n] = [r for r in sent[:n] if (f := r()) is not None and not f.done()]
            self._prune_at[worker] = max(_MIN_PRUNE, 2 * len(sent))
        finally:
            self._pruning.release()

    def unanswered(self, worker: str) -> int:
        """How many messages to ``worker`` are still unanswered (for tests and status)."""
        return sum(1 for r in list(self._sent.get(worker, ())) if (f := r()) and not f.done())

    def fail_worker_soon(self, worker: str, why: str, grace: float = GRACE_S) -> None:
        """:meth:`fail_worker` after ``grace`` seconds, on a thread of its own.

        If a new process takes the worker's name meanwhile (:meth:`revive`), only the
        messages sent before this call fail: those went to the process marked dead.
        """
        life = self._lives.of(worker)
        sent = self._sent.pop(worker, [])  # appends racing this land in it: failed too
        self._prune_at.pop(worker, None)

        def fail() -> None:
            if self._lives.of(worker) == life:
                self.fail_worker(worker, why)
            _fail_all(sent, why)

        timer = threading.Timer(grace, fail)
        timer.daemon = True
        timer.name = "actorrt-inflight"
        timer.start()

    def revive(self, worker: str) -> None:
        """A new process took ``worker``'s name: what is sent from now on goes to it.

        The caller counted it in ``lives`` first.
        """
        self._dead.pop(worker, None)

    def fail_worker(self, worker: str, why: str) -> int:
        """Fails every unanswered message to ``worker``, and later ones; how many failed.

        Callbacks on those futures run here, so call it holding no lock they may need.
        """
        self._dead.setdefault(worker, why)  # first: see track()
        sent = self._sent.pop(worker, [])
        self._prune_at.pop(worker, None)
        return _fail_all(sent, why)


def _fail_all(sent: list[weakref.ref[torch.futures.Future[Any]]], why: str) -> int:
    """Fails every unanswered message in ``sent``; how many failed."""
    # One error each: an exception raised in several threads at once shares its traceback.
    return sum(
        1 for r in list(sent) if (f := r()) is not None and fail_future(f, WorkerMarkedDead(why))
    )
