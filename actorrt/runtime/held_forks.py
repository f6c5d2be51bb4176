"""Which process holds which fork of the leases made here, so a dead holder's are dropped.

A lease is an RRef whose value frees something when torch drops it: an object's
(``ObjectLease``, made on rank 0) or an actor's (``ActorLease``, made on its host). torch
counts its forks across processes, but never forgets those of a process that died: an
object or actor one of whose copies died with its holder would stay until the cluster
ends. So each process tells a lease's owner which fork it came to hold (a lease's RRef
travels wrapped, ``rref_keeper.Carried`` with its key; one made here by ``rpc.remote``
is read from its ``repr``), and when a process is marked dead, each owner drops the forks
it said it held, as that process's own deletes would have.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable

import torch.distributed.rpc as rpc

from actorrt.runtime import context, rref_keeper
from actorrt.runtime.rref_keeper import ForkId

__all__ = [
    "DEAD_HOLDER_SETTLE_S",
    "EARLY_KEPT_S",
    "FORKS_KEPT_PER_HOLDER",
    "HeldForks",
    "rpc_lease_forks",
]

_log = logging.getLogger("actorrt.rrefs")

DEAD_HOLDER_SETTLE_S = 1.0
"""How long an owner waits, after a process was marked dead, before it drops the forks
that process held: a ref or handle it sent on just before it died has its receiver's
fork registered with the owner by then (else a lease whose last fork was the dead one's
would go first, and its object or actor with it)."""

FORKS_KEPT_PER_HOLDER = 64
"""How many forks of one lease an owner remembers per holder (the newest): a process
given the same ref or handle again and again (weights put once, sent in every batch)
would otherwise grow the record for as long as the lease lives. One that holds more at
once and dies keeps the lease until the cluster ends."""

EARLY_KEPT_S = 10.0
"""How long an owner keeps the forks told of a lease it has not made yet: the holder's word
may overtake the lease's making (a process that made an actor or a lease with
``rpc.remote`` tells its fork at once, and torch handles the two messages in parallel).
Those of a lease that never comes (one that went before its word came) go after this."""

Fork = tuple[str, ForkId, ForkId]
"""A lease's key, its RRef's id, and the id of one fork of it."""


class HeldForks:
    """This process's side of the record: the forks it holds, and those of its leases.

    Args:
        name: This process's RPC name (a holder, as owners know it).
        wake: Asks the thread that sends (the object store's) to call :meth:`tell`.
        tells: Whether this process tells owners what it holds (every process does,
            rank 0 too: an owner drops what rank 0 holds at the cluster's end, see
            :meth:`drop_all`; False leaves ``rref_keeper``'s hook alone).
    """

    def __init__(self, name: str, wake: Callable[[], None], tells: bool) -> None:
        self._name = name
        self._wake = wake
        self._tells = tells
        self._lock = threading.Lock()
        self._closed = False
        # The forks this process came to hold, not yet told: (owner's worker id, fork).
        self._holding: queue.SimpleQueue[tuple[int, Fork]] = queue.SimpleQueue()
        # The leases made here that are alive, and per lease the forks each holder told.
        self._alive: set[str] = set()
        self._forks: dict[str, dict[str, collections.deque[tuple[ForkId, ForkId]]]] = {}
        # Per lease not made yet, the forks told of it: (when, holder, RRef id, fork id).
        self._early: dict[str, list[tuple[float, str, ForkId, ForkId]]] = {}
        self._early_pruned = time.monotonic()
        # What holders that died held, each batch until its DEAD_HOLDER_SETTLE_S is past.
        self._dying: list[list[Fork]] = []
        if tells:
            rref_keeper.on_lease_arrival(self.holds)

    # -- a holder -----------------------------------------------------------------
    def holds(self, owner: int, key: str, rref_id: ForkId, fork_id: ForkId) -> None:
        """This process holds ``fork_id`` of lease ``key``'s RRef: its ``owner`` is told."""
        if not self._closed:
            self._holding.put((owner, (key, rref_id, fork_id)))
            self._wake()

    def tell(self) -> None:
        """Tells each owner the forks this process came to hold (one message each)."""
        by_owner: dict[int, list[Fork]] = {}
        while True:
            try:
                owner, fork = self._holding.get_nowait()
            except queue.Empty:
                break
            by_owner.setdefault(owner, []).append(fork)
        for owner, forks in by_owner.items():
            try:
                rpc.rpc_async(owner, rpc_lease_forks, args=(self._name, forks))
            except Exception:  # the owner is gone (what it owned with it), or RPC is ending
                pass

    # -- an owner -----------------------------------------------------------------
    def watch(self, key: str, alive: bool) -> None:
        """The lease ``key`` was made here (``alive``), or went (torch dropped it)."""
        with self._lock:
            if alive:
                self._alive.add(key)
                for _, holder, rref_id, fork_id in self._early.pop(key, ()):
                    self._record(key, holder, rref_id, fork_id)
            else:
                self._alive.discard(key)
                self._forks.pop(key, None)
                self._early.pop(key, None)

    def note(self, holder: str, forks: list[Fork]) -> None:
        """``holder`` holds these forks of leases made here (:func:`rpc_lease_forks`)."""
        now = time.monotonic()
        with self._lock:
            for key, rref_id, fork_id in forks:
                if key in self._alive:
                    self._record(key, holder, rref_id, fork_id)
                else:  # its making may still be on its way (EARLY_KEPT_S)
                    self._early.setdefault(key, []).append((now, holder, rref_id, fork_id))
            if self._early and now - self._early_pruned > EARLY_KEPT_S:
                self._early_pruned = now
                for key in list(self._early):
                    kept = [e for e in self._early[key] if now - e[0] < EARLY_KEPT_S]
                    if kept:
                        self._early[key] = kept
                    else:
                        del self._early[key]

    def _record(self, key: str, holder: str, rref_id: ForkId, fork_id: ForkId) -> None:
        """Under the lock: ``holder`` holds ``fork_id`` of lease ``key``."""
        per_holder = self._forks.setdefault(key, {})
        kept = per_holder.get(holder)
        if kept is None:
            kept = per_holder[holder] = collections.deque(maxlen=FORKS_KEPT_PER_HOLDER)
        kept.append((rref_id, fork_id))

    def holder_died(self, holder: str) -> None:
        """Drops, :data:`DEAD_HOLDER_SETTLE_S` from now, the forks ``holder`` held here."""
        with self._lock:
            forks = [
                (key, *fork)
                for key, per_holder in self._forks.items()
                for fork in per_holder.pop(holder, ())
            ]
            if forks:
                self._dying.append(forks)
        if forks:
            timer = threading.Timer(DEAD_HOLDER_SETTLE_S, self._drop_dead, args=(forks,))
            timer.daemon = True
            timer.name = "actorrt-dead-holder"
            timer.start()

    def _drop_dead(self, forks: list[Fork]) -> None:
        """The timer of :meth:`holder_died`: drops what a dead holder held (unless done)."""
        with self._lock:
            if not any(batch is forks for batch in self._dying):
                return  # drop_all took it
            self._dying = [batch for batch in self._dying if batch is not forks]
        self._drop(forks)

    def drop_all(self) -> None:
        """At the cluster's end, after a process died: drops every fork holders told of.

        Nobody lets go of the RRefs it holds then (torch's deletes would reach for the
        dead process), so each owner's torch would print every fork still registered
        with it as a leak as its agent ends ("Detected RRef Leaks", a warning per owner
        process). Dropped here, locally, before that, none is left to print but those
        never told of. A holder's own delete that comes after finds nothing, which torch
        takes silently.
        """
        with self._lock:
            forks = [
                (key, *fork)
                for key, per_holder in self._forks.items()
                for kept in per_holder.values()
                for fork in kept
            ]
            for batch in self._dying:  # a dead holder's, still waiting for their time
                forks += batch
            self._forks.clear()
            self._dying = []
        self._drop(forks, at_end=True)

    def _drop(self, forks: list[Fork], at_end: bool = False) -> None:
        """Drops these forks of a dead holder, each of a lease still alive.

        An owner that unpickles a fork it sent itself drops that fork (torch's
        ``delForkOfOwner``): what the holder's own delete would have done. One the holder
        dropped before it died is no longer there, and torch only logs that.

        Args:
            forks: The forks.
            at_end: From :meth:`drop_all`: also once this runtime is closed.
        """
        made = []
        try:
            me = rpc.get_worker_info().id
        except Exception as exc:  # RPC is ending: everything goes with the cluster
            _log.debug("could not drop a dead holder's lease forks: %s", exc)
            return
        for key, (rc, rl), (fc, fl) in forks:
            with self._lock:
                if (self._closed and not at_end) or key not in self._alive:
                    continue
                try:
                    made.append(rpc.PyRRef._deserialize((me, rc, rl, fc, fl, me, "PyObject")))
                except Exception as exc:  # that one only (its RRef is gone here): the rest go
                    _log.debug("could not drop lease fork %s of %s: %s", (fc, fl), key, exc)
        # Outside the lock: the last reference of a lease runs its __del__ (watch).
        made.clear()

    def close(self) -> None:
        """The runtime is ending: nothing is told or dropped any more but by :meth:`drop_all`."""
        self._closed = True
        if self._tells:
            rref_keeper.on_lease_arrival(None)


def rpc_lease_forks(holder: str, forks: list[Fork]) -> None:
    """Sent to a lease's owner: ``holder`` holds these forks of its leases (key, RRef, fork)."""
    context.part(HeldForks).note(holder, forks)
