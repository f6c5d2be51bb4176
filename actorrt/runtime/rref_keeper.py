"""Holds user RRefs in Python until torch's C++ side has let go of them.

Why: torch's ``RRefContext::delUser`` (run when a user RRef's last reference goes) holds
a mutex of the RRef context while it sends the delete message, and that send may run
other messages' write completions inline (TensorPipe's on-demand loop), which free
tensors owned by Python objects and so wait for the GIL. A Python thread dropping another
user RRef holds the GIL and waits for that mutex: the process deadlocks, every thread
waiting for the GIL, until the driver's heartbeat marks it dead (seen on a learner
restarted on a collector's process, gdb traces in docs/architecture.md).

A drop from Python always holds the GIL, so the deadlock needs a delete run by torch's C++
on an RPC thread, without the GIL: that happens when torch holds the last reference of a
user RRef, which it does only for a while after the RRef moved:

* an RRef received from a process that is not its owner, until the owner confirmed the
  fork (torch's pending users); one received from its owner needs nothing (the owner
  registered the fork as it sent it, and torch never flags such a copy confirmed);
* an RRef made by ``rpc.remote``, until the owner confirmed it;
* an RRef sent on by a process that is not its owner, until the receiver accepted it
  (pending children).

Holding each such RRef here until then makes every last drop a Python one, taken under
the GIL. The first two are released once ``confirmed_by_owner()`` has said so for
:data:`SETTLE_S` (torch sets the flag a moment before its own reference goes); the last
has no flag to read, so a sent RRef is held :data:`SENT_HOLD_S` after its last send (the
receiver accepts it after one round trip to the owner). Owner RRefs are never held: torch
registers their forks at once, and their deletion takes the GIL itself. Each reason holds
the RRef on its own: one both received and sent on goes when neither holds it.

An owner that dies never confirms: :func:`owner_died` lets go of what waited for it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = [
    "ARRIVAL_TIMEOUT_S",
    "SENT_HOLD_S",
    "SETTLE_S",
    "Carried",
    "Arriving",
    "arrivals",
    "held",
    "holds",
    "hold_received",
    "hold_sent",
    "find_owned_by",
    "owned_by",
    "owner_died",
    "pin",
    "pinned",
    "release_all",
]

_log = logging.getLogger("actorrt.rrefs")

#: How long an RRef this process sent on is held after its last send (seconds).
SENT_HOLD_S = 10.0
#: How long an RRef is held after its owner's confirmation was seen (seconds).
SETTLE_S = 1.0
#: How long a reader waits for the arrivals thread to make a carried RRef (seconds).
ARRIVAL_TIMEOUT_S = 60.0
#: How often the keeper looks for RRefs it may let go of (seconds).
_TICK_S = 0.2

_lock = threading.Lock()
_unconfirmed: dict[int, Any] = {}  # id -> a user RRef its owner has not confirmed yet
# id -> (a user RRef, held until then); each dict in order of that time
_sent: dict[int, tuple[Any, float]] = {}  # sent on (SENT_HOLD_S)
_settling: dict[int, tuple[Any, float]] = {}  # seen confirmed (SETTLE_S)
_thread: threading.Thread | None = None
_work = threading.Event()  # set by every hold: the keeper sleeps on it while it holds none
_arrivals = 0  # RRefs held on their arrival so far
_arriving_queue: queue.SimpleQueue[tuple[Any, Arriving]] = queue.SimpleQueue()
# User RRefs whose owner died, kept until the process ends (see pin).
_pinned: list[Any] = []
# Functions that find the RRefs this process's objects hold that a given process owns
# (the layers above register theirs: actor handles), called when that process dies.
_finders: list[Callable[[str], list[Any]]] = []
_arrivals_thread: threading.Thread | None = None


class Carried:
    """A user RRef on its way inside a message: the receiver holds it from its arrival on.

    It travels as its fork's data, and the receiver makes the RRef on this module's
    arrivals thread (:class:`Arriving`), not while torch unpickles the message: torch
    holds back a request whose RRefs it made itself until their owner confirmed them,
    for ever if the owner dies first (its fork request fails, and torch never finishes
    the fork), and every later call from that caller would then wait behind it in the
    actor's mailbox. Made apart, the RRef is held from its arrival (:func:`hold_received`),
    whether actorrt's code reads the message or drops it unread. Only a process that is
    not the RRef's owner sends it wrapped (see the module's docstring).
    """

    __slots__ = ("rref",)

    def __init__(self, rref: Any) -> None:
        self.rref = rref

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        # What torch's own pickler would send for the RRef (it registers the fork here).
        return _arriving, (self.rref._serialize(),)


class Arriving:
    """A carried RRef on the receiver while the arrivals thread makes it."""

    __slots__ = ("_done", "_rref")

    def __init__(self) -> None:
        self._done = threading.Event()
        self._rref: Any = None

    def rref(self) -> Any:
        """The RRef, once made (at once but for the thread hop).

        None where torch could not make it because its owner is gone: the value then
        arrives without it (see ``_make_arrivals``).

        Raises:
            RuntimeError: The arrivals thread did not answer within
                :data:`ARRIVAL_TIMEOUT_S`.
        """
        if not self._done.wait(ARRIVAL_TIMEOUT_S):
            raise RuntimeError(
                f"an actor handle's RRef was not made within {ARRIVAL_TIMEOUT_S:g} s of its "
                "arrival (actorrt's RRef arrivals thread is stuck: see actorrt.stacks())"
            )
        return self._rref


def _arriving(fork_data: Any) -> Arriving:
    """Unpickles a :class:`Carried` (on torch's RPC thread): queues the RRef's making."""
    global _arrivals_thread
    item = Arriving()
    with _lock:
        if _arrivals_thread is None:
            _arrivals_thread = threading.Thread(
                target=_make_arrivals, name="actorrt-rref-arrivals", daemon=True
            )
            _arrivals_thread.start()
    _arriving_queue.put((fork_data, item))
    return item


def _deserialize(fork_data: Any) -> Any:
    """The RRef that ``fork_data`` (``PyRRef._serialize()``'s) stands for."""
    from torch.distributed.rpc import PyRRef

    return PyRRef._deserialize(fork_data)


def _make_arrivals() -> None:
    # On a thread of its own: torch records the RRefs a request's unpickling makes (per
    # thread) and holds the request until they are confirmed; made here, none is recorded.
    global _arrivals
    while True:
        fork_data, item = _arriving_queue.get()
        try:
            item._rref = _deserialize(fork_data)
            hold_received(item._rref)
        except Exception as exc:
            # Its owner is gone (a process that died has left torch's group: "could not
            # find destination id"), or RPC is ending. The value arrives without it: a
            # handle of an actor that died, whose calls raise ActorDiedError as on Ray,
            # or an object's ref without its lease (the object stays until shutdown).
            _log.debug("a value arrives without its RRef: %s: %s", type(exc).__name__, exc)
        with _lock:
            _arrivals += 1
        item._done.set()
        # No reference left here while waiting for the next: the message and the keeper
        # decide when the RRef goes (its actor is freed with the last one).
        del fork_data, item


def hold_received(rref: Any) -> None:
    """Holds a user RRef until its owner confirms it (received from a non-owner, or made)."""
    if rref.is_owner():
        return
    with _lock:
        _unconfirmed[id(rref)] = rref
        _start()


def hold_sent(rref: Any) -> None:
    """Holds a user RRef this process sends on for :data:`SENT_HOLD_S` from now."""
    if rref.is_owner():
        return
    until = time.monotonic() + SENT_HOLD_S
    with _lock:
        # Popped first, so that the dict stays in order of `until` (a fresh insert goes last).
        _sent.pop(id(rref), None)
        _sent[id(rref)] = (rref, until)
        _start()


def held() -> int:
    """How many holds there are now (an RRef held for two reasons counts twice)."""
    with _lock:
        return len(_unconfirmed) + len(_sent) + len(_settling)


def holds(rref: Any) -> bool:
    """Whether ``rref`` (this very object) is held now."""
    key = id(rref)
    with _lock:
        return (
            _unconfirmed.get(key) is rref
            or _sent.get(key, (None,))[0] is rref
            or _settling.get(key, (None,))[0] is rref
        )


def arrivals() -> int:
    """How many RRefs arrived in messages to this process so far (diagnostics, tests)."""
    with _lock:
        return _arrivals


def pin(rrefs: list[Any]) -> None:
    """Keeps user RRefs whose owner died until this process ends: dropped, they would not be.

    Dropping a user RRef sends its owner a delete, which torch retries for about 13 s
    when the owner is gone; each retry holds a reference to the owner's entry in the
    agent, and when a new process takes the dead one's name that entry is replaced:
    the retry thread then reads freed memory (a driver died of SIGSEGV so, in
    ``RpcAgent::retryExpiredRpcs``), and the deletes that do go reach the new process
    and print torch's tracebacks. An RRef kept here sends nothing; a few bytes each.
    """
    with _lock:
        _pinned.extend(rrefs)


def find_owned_by(finder: Callable[[str], list[Any]]) -> None:
    """Registers ``finder(worker)``: RRefs owned by ``worker`` held by objects it knows.

    :func:`owner_died` pins what each finder gives, so that no later drop of those
    objects sends the dead owner a delete.
    """
    _finders.append(finder)


def pinned() -> int:
    """How many RRefs :func:`pin` keeps (diagnostics, tests)."""
    with _lock:
        return len(_pinned)


def owner_died(worker: str) -> int:
    """Lets go of the RRefs held until ``worker``, their owner, confirms them: it died.

    Dropping them here runs no delete: torch keeps its own reference to an unconfirmed
    user RRef (its pending users) until the confirmation, which will not come now.
    Without this the keeper would look at each of them every tick for as long as this
    process lives. An RRef held because it was sent on or is settling (confirmed) is
    pinned instead (:func:`pin`): its drop would send the dead owner a delete.

    Args:
        worker: The dead process's name (an RRef's ``owner_name()``).

    Returns:
        How many RRefs it let go.
    """
    with _lock:
        gone = [r for r in _unconfirmed.values() if owned_by(r, worker)]
        for rref in gone:
            del _unconfirmed[id(rref)]
        for timed in (_sent, _settling):
            for key in [k for k, (r, _) in timed.items() if owned_by(r, worker)]:
                _pinned.append(timed.pop(key)[0])
    count = len(gone)
    del gone  # dropped outside the lock (see release_all)
    for finder in list(_finders):
        pin(finder(worker))
    return count


def owned_by(rref: Any, worker: str) -> bool:
    """Whether user RRef ``rref`` is owned by the process named ``worker``."""
    try:
        return bool(rref.owner_name() == worker)
    except Exception:  # its owner is no longer known to the agent: not that one's
        return False


def release_all() -> None:
    """Lets go of every held RRef (the agent is ending: torch deletes its users itself)."""
    with _lock:
        gone = [*_unconfirmed.values(), *_sent.values(), *_settling.values()]
        _unconfirmed.clear()
        _sent.clear()
        _settling.clear()
    del gone  # dropped here, outside the lock: each may send a delete message


def _start() -> None:
    """Under ``_lock``: wakes the keeper's thread, started once per process."""
    global _thread
    _work.set()
    if _thread is None:
        _thread = threading.Thread(target=_keep, name="actorrt-rref-keeper", daemon=True)
        _thread.start()


def _due() -> list[Any]:
    """Under ``_lock``: takes out the RRefs that may go now."""
    now = time.monotonic()
    gone = []
    for timed in (_settling, _sent):
        for key, (rref, until) in list(timed.items()):
            if until > now:
                break  # in order of `until`: the rest are held longer
            del timed[key]
            gone.append(rref)  # still held if it waits for its owner too (_unconfirmed)
    for key, rref in list(_unconfirmed.items()):
        if rref.confirmed_by_owner():
            del _unconfirmed[key]
            _settling.pop(key, None)
            _settling[key] = (rref, now + SETTLE_S)
    return gone


def _keep() -> None:
    while True:
        with _lock:
            gone = _due()
            idle = not (_unconfirmed or _sent or _settling)
            if idle:  # cleared under the lock: a hold that comes after sets it again
                _work.clear()
        # Dropped here, outside the lock and under the GIL: a last reference runs torch's
        # delete, which must not find this thread holding `_lock`.
        del gone
        if idle:
            _work.wait()  # holding none, it does not wake every tick (idle processes)
        else:
            time.sleep(_TICK_S)
