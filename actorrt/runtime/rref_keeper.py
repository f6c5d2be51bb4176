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
:data:`SETTLE_S` (torch sets the flag a moment before its own reference goes). The last
has no flag to read at the sender, so the receiver tells it (:func:`rpc_children_accepted`)
once torch has sent it the child accept: a receiver that is the owner sends that accept
as it makes the RRef, one that is not a few microseconds after it flags the fork
confirmed (the flag read here). The word takes the same connection, after the accept,
and the sender's agent reads messages and starts handling them in order: the accept's
handling (a few microseconds) has begun when the word is read, and the sender holds the
RRef :data:`ACCEPTED_SETTLE_S` more for it to end (and for the microseconds between
that flag and the accept). Each send is a fork of its own, held on its own, at most
:data:`SENT_HOLD_S` when no word comes (a receiver that died or could not make the
RRef: torch then keeps its pending child for good, so no drop here is the last one).
Owner RRefs are never held: torch registers their forks at once, and their deletion
takes the GIL itself. Each reason holds the RRef on its own: one both received and sent
on goes when neither holds it.

An owner that dies never confirms: :func:`owner_died` lets go of what waited for it.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = [
    "ACCEPTED_SETTLE_S",
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
    "ids_of",
    "made",
    "on_lease_arrival",
    "owned_by",
    "owner_died",
    "pin",
    "pinned",
    "release_all",
    "rpc_children_accepted",
]

_log = logging.getLogger("actorrt.rrefs")

#: How long an RRef this process sent on is held at most, per send, when its receiver
#: does not say that torch accepted it (seconds).
SENT_HOLD_S = 10.0
#: How long an RRef is held after its owner's confirmation was seen (seconds).
SETTLE_S = 1.0
#: How long a sent RRef is held after its receiver said torch accepted it (seconds).
ACCEPTED_SETTLE_S = 1.0
#: How long a reader waits for the arrivals thread to make a carried RRef (seconds).
ARRIVAL_TIMEOUT_S = 60.0
#: How often the keeper looks for RRefs it may let go of (seconds).
_TICK_S = 0.2

ForkId = tuple[int, int]
"""A fork of an RRef, as torch names it: (the worker id that made it, its local id)."""

_lock = threading.Lock()
# id -> (a user RRef its owner has not confirmed yet, who sent it and the fork: told then)
_unconfirmed: dict[int, tuple[Any, tuple[int, ForkId] | None]] = {}
# key -> (a user RRef, held until then); each dict in order of that time
_sent: dict[ForkId, tuple[Any, float]] = {}  # sent on, per fork (SENT_HOLD_S at most)
_accepted: dict[ForkId, tuple[Any, float]] = {}  # sent on, accepted (ACCEPTED_SETTLE_S)
_settling: dict[int, tuple[Any, float]] = {}  # seen confirmed (SETTLE_S)
# worker id -> the forks it sent this process that torch accepted, to tell it of
_to_tell: dict[int, list[ForkId]] = {}
_thread: threading.Thread | None = None
_work = threading.Event()  # set by every hold: the keeper sleeps on it while it holds none
_arrivals = 0  # RRefs held on their arrival so far
_arriving_queue: queue.SimpleQueue[tuple[Any, Arriving, str | None]] = queue.SimpleQueue()
# User RRefs whose owner died, kept until the process ends (see pin).
_pinned: list[Any] = []
# Functions that find the RRefs this process's objects hold that a given process owns
# (the layers above register theirs: actor handles), called when that process dies.
_finders: list[Callable[[str], list[Any]]] = []
_arrivals_thread: threading.Thread | None = None
# Told of each lease's fork this process comes to hold (see on_lease_arrival).
_lease_arrived: Callable[[int, str, ForkId, ForkId], None] | None = None


class Carried:
    """A user RRef on its way inside a message: the receiver holds it from its arrival on.

    It travels as its fork's data, and the receiver makes the RRef on this module's
    arrivals thread (:class:`Arriving`), not while torch unpickles the message: torch
    holds back a request whose RRefs it made itself until their owner confirmed them,
    for ever if the owner dies first (its fork request fails, and torch never finishes
    the fork), and every later call from that caller would then wait behind it in the
    actor's mailbox. Made apart, the RRef is held from its arrival (:func:`hold_received`),
    whether actorrt's code reads the message or drops it unread. Only a process that is
    not the RRef's owner sends it wrapped (see the module's docstring), but for a lease's
    RRef (``lease`` given), which every sender wraps.

    Args:
        rref: The RRef.
        lease: The key of the lease the RRef holds (an object's, whose RRef rank 0 owns,
            or an actor's, owned by its host), or None. The receiver tells the RRef's
            owner that it holds this fork, so that the owner can drop it if the receiver
            dies (:func:`on_lease_arrival`). Such an RRef is sent wrapped by its owner too.
    """

    __slots__ = ("lease", "rref")

    def __init__(self, rref: Any, lease: str | None = None) -> None:
        self.rref = rref
        self.lease = lease

    def __reduce__(self) -> tuple[Any, tuple[Any, str | None]]:
        # What torch's own pickler would send for the RRef: torch makes the fork here, its
        # pending child until the receiver accepts it (registered at once by an owner),
        # and it is held here until then.
        fork_data = self.rref._serialize()
        hold_sent(self.rref, _fork_of(fork_data))
        return _arriving, (fork_data, self.lease)


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


def _arriving(fork_data: Any, lease: str | None = None) -> Arriving:
    """Unpickles a :class:`Carried` (on torch's RPC thread): queues the RRef's making."""
    global _arrivals_thread
    item = Arriving()
    with _lock:
        if _arrivals_thread is None:
            _arrivals_thread = threading.Thread(
                target=_make_arrivals, name="actorrt-rref-arrivals", daemon=True
            )
            _arrivals_thread.start()
    _arriving_queue.put((fork_data, item, lease))
    return item


def on_lease_arrival(tell: Callable[[int, str, ForkId, ForkId], None] | None) -> None:
    """Sets who hears of each fork of a lease this process comes to hold (None: nobody).

    ``tell(owner, key, rref_id, fork_id)`` (``owner``: the RRef owner's worker id) runs on
    the arrivals thread once a carried lease is made, and in :func:`made` for one this
    process made with ``rpc.remote``.
    """
    global _lease_arrived
    _lease_arrived = tell


def made(rref: Any, lease: str) -> None:
    """This process made ``rref`` with ``rpc.remote``: its owner hears of this fork too.

    The lease's key is ``lease``; see :func:`on_lease_arrival`.
    """
    tell = _lease_arrived
    ids = None if tell is None else ids_of(rref)
    if tell is None or ids is None:
        return
    try:
        owner = int(rref.owner().id)
    except Exception:  # its owner is gone already: nothing to tell it
        return
    tell(owner, lease, *ids)


def ids_of(rref: Any) -> tuple[ForkId, ForkId] | None:
    """The RRef id and fork id of a user RRef, read from its ``repr`` (torch has no getter).

    Without this a process could not say which fork ``rpc.remote`` made it; None where
    the text is not torch's ``UserRRef(RRefId = GloballyUniqueId(created_on=.., local_id=..),
    ForkId = ...)``.
    """
    text = repr(rref)
    found = _GUID.findall(text)
    if len(found) != 2 or not text.startswith("UserRRef("):
        return None
    (rc, rl), (fc, fl) = found
    return (int(rc), int(rl)), (int(fc), int(fl))


_GUID = re.compile(r"GloballyUniqueId\(created_on=(\d+), local_id=(\d+)\)")


def _fork_of(fork_data: Any) -> ForkId:
    """The fork that ``fork_data`` (``PyRRef._serialize()``'s tuple) stands for."""
    return int(fork_data[3]), int(fork_data[4])


def _sender_of(fork_data: Any) -> tuple[int, ForkId]:
    """The worker id of the process that sent ``fork_data`` (its parent), and the fork."""
    return int(fork_data[5]), _fork_of(fork_data)


def _deserialize(fork_data: Any) -> Any:
    """The RRef that ``fork_data`` (``PyRRef._serialize()``'s) stands for."""
    from torch.distributed.rpc import PyRRef

    return PyRRef._deserialize(fork_data)


def _make_arrivals() -> None:
    # On a thread of its own: torch records the RRefs a request's unpickling makes (per
    # thread) and holds the request until they are confirmed; made here, none is recorded.
    global _arrivals
    while True:
        fork_data, item, lease = _arriving_queue.get()
        try:
            item._rref = _deserialize(fork_data)
            # One its owner sent was registered there as it was sent, and torch never
            # flags it confirmed: there is nothing to wait for (nor anyone to tell).
            if _sender_of(fork_data)[0] != int(fork_data[0]):
                hold_received(item._rref, _sender_of(fork_data))
            tell = _lease_arrived
            if lease is not None and tell is not None and not item._rref.is_owner():
                rref_id = (int(fork_data[1]), int(fork_data[2]))
                tell(int(fork_data[0]), lease, rref_id, _fork_of(fork_data))
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
        del fork_data, item, lease


def hold_received(rref: Any, sent_by: tuple[int, ForkId] | None = None) -> None:
    """Holds a user RRef until its owner confirms it (received from a non-owner, or made).

    Args:
        rref: The RRef.
        sent_by: For one that arrived in a message: the worker id of its sender and its
            fork. The sender is told once torch accepted it here: at once at its owner
            (torch sent its child accept as it made the RRef), else on confirmation.
    """
    with _lock:
        if not rref.is_owner():
            _unconfirmed[id(rref)] = (rref, sent_by)
        elif sent_by is not None:
            _to_tell.setdefault(sent_by[0], []).append(sent_by[1])
        else:
            return
        _start()


def hold_sent(rref: Any, fork: ForkId) -> None:
    """Holds a user RRef this process sends on as ``fork`` until its receiver accepted it.

    At most :data:`SENT_HOLD_S` from now; :data:`ACCEPTED_SETTLE_S` once the receiver
    said that torch accepted it (:func:`rpc_children_accepted`).
    """
    if rref.is_owner():
        return
    until = time.monotonic() + SENT_HOLD_S
    with _lock:
        _sent[fork] = (rref, until)  # a new fork each send: the dict stays in order of `until`
        _start()


def rpc_children_accepted(forks: list[ForkId]) -> None:
    """Sent to a process by the receiver of RRefs it sent: torch accepted these forks.

    Their child accepts came first on the same connection (see the module's docstring):
    each is held :data:`ACCEPTED_SETTLE_S` more. Runs on torch's RPC thread, and drops
    nothing here: every RRef moves from one hold to the other.
    """
    until = time.monotonic() + ACCEPTED_SETTLE_S
    with _lock:
        for made_on, local_id in forks:
            fork = (made_on, local_id)
            entry = _sent.pop(fork, None)
            if entry is not None:
                _accepted[fork] = (entry[0], until)
        _start()


def held() -> int:
    """How many holds there are now (an RRef held for two reasons counts twice)."""
    with _lock:
        return len(_unconfirmed) + len(_sent) + len(_accepted) + len(_settling)


def holds(rref: Any) -> bool:
    """Whether ``rref`` (this very object) is held now."""
    key = id(rref)
    with _lock:
        return (
            _unconfirmed.get(key, (None,))[0] is rref
            or _settling.get(key, (None,))[0] is rref
            or any(r is rref for timed in (_sent, _accepted) for r, _ in timed.values())
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
        gone = [r for r, _ in _unconfirmed.values() if owned_by(r, worker)]
        for rref in gone:
            del _unconfirmed[id(rref)]
        for timed in _timed():
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
        gone = [*_unconfirmed.values(), *_sent.values(), *_accepted.values(), *_settling.values()]
        _unconfirmed.clear()
        _sent.clear()
        _accepted.clear()
        _settling.clear()
        _to_tell.clear()  # the agent they would go by is ending
    del gone  # dropped here, outside the lock: each may send a delete message


def _timed() -> tuple[dict[Any, tuple[Any, float]], ...]:
    """The holds that end at a time: (RRef, until) by key, each dict in order of until."""
    return _settling, _accepted, _sent


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
    for timed in _timed():
        for key, (rref, until) in list(timed.items()):
            if until > now:
                break  # in order of `until`: the rest are held longer
            del timed[key]
            gone.append(rref)  # still held if it waits for its owner too (_unconfirmed)
    for key, (rref, sent_by) in list(_unconfirmed.items()):
        if rref.confirmed_by_owner():
            del _unconfirmed[key]
            _settling.pop(key, None)
            _settling[key] = (rref, now + SETTLE_S)
            if sent_by is not None:  # torch has sent its child accept (module docstring)
                _to_tell.setdefault(sent_by[0], []).append(sent_by[1])
    return gone


def _tell(sender: int, forks: list[ForkId]) -> None:
    """Tells process ``sender`` (a worker id) that torch accepted these forks it sent."""
    import torch.distributed.rpc as rpc

    try:
        rpc.rpc_async(sender, rpc_children_accepted, args=(forks,))
    except Exception as exc:  # it is gone (it holds nothing then), or RPC is ending
        _log.debug("could not tell worker %d of %d accepted RRef(s): %s", sender, len(forks), exc)


def _keep() -> None:
    global _to_tell
    while True:
        with _lock:
            gone = _due()
            tell, _to_tell = _to_tell, {}
            idle = not (_unconfirmed or _sent or _accepted or _settling)
            if idle:  # cleared under the lock: a hold that comes after sets it again
                _work.clear()
        # Dropped here, outside the lock and under the GIL: a last reference runs torch's
        # delete, which must not find this thread holding `_lock`.
        del gone
        for sender, forks in tell.items():
            _tell(sender, forks)
        if idle:
            _work.wait()  # holding none, it does not wake every tick (idle processes)
        else:
            time.sleep(_TICK_S)
