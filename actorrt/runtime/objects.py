"""Objects: values that live in the process that made them, fetched from it in one hop.

An object is a value kept in its owner's :class:`ObjectStore`: a method's result too large
to come back inline (see :data:`INLINE_BYTES`), or a value given to ``actorrt.put``. What
travels instead is its :class:`ObjectLocation` (id, owner, size, and an RRef), inside an
``ObjectRef``. Whoever needs the value sends ``rpc_fetch`` to the owner, whose reply is
packed for that requester by the one payload pipeline, so it takes the pair's road:
GPU to GPU where the plan gave the pair a device map, host staging where it did not, the
shared-memory road on one host. The bytes never pass through a third process.

Lifetime: an object is first held directly by one process (the caller of the call that
made it, or the process that put it), which tells the owner to let it go when its ref
goes. A ref nested in a call's arguments travels borrowed for the call
(:class:`Borrowing`): the caller holds it until the reply, and a callee that keeps it
past the call becomes one more direct holder, which the caller tells the owner from the
reply. When a ref travels any other way (inside a reply or another object), the hold
becomes a lease: an RRef whose value is an :class:`ObjectLease` (owned by rank 0, see
there), a fork of which every copy of the ref holds, wherever it went, so torch's
distributed reference counting decides. When the last fork is gone, torch drops the
lease, and rank 0 tells the object's owner. The owner drops the value once no direct
holder and no lease is left.

A ref whose call has not answered yet can travel too. Its process lends it
(:meth:`ObjectStore.lend`): the receiver gets a :class:`Loan` (the lender's name, a token
and an RRef, a lease that keeps the loan open), and asks the lender (``rpc_resolve``) when
it needs the ref; the lender answers once its call has, with the value inline (small) or
the location (large).

This module imports nothing of the caller side: it sees an ``ObjectRef`` as an
:class:`ObjectRefBase`, which :mod:`actorrt.refs` implements.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
import torch.distributed.rpc as rpc

from actorrt.errors import ObjectLostError
from actorrt.logs import get_logger
from actorrt.runtime import context, rref_keeper, shm, streams, torch_threads
from actorrt.runtime.held_forks import HeldForks
from actorrt.runtime.payload import ReplyHolds, holds_in_reply, unpack
from actorrt.runtime.protocol import COPY, ERROR, KEEP, KEPT, LOST, MULTI, OBJECT, OK, RELAY

if TYPE_CHECKING:
    from actorrt.runtime.payload import Wire

__all__ = [
    "INLINE_BYTES",
    "PULL_BYTES",
    "Loan",
    "ObjectLease",
    "ObjectLocation",
    "ObjectRefBase",
    "Borrowing",
    "ObjectStore",
    "borrowed_here",
    "reply_of_call",
    "unpack_arguments",
    "with_kept",
    "resolve_args",
    "rpc_fetch",
    "rpc_fetch_copy",
    "rpc_hold",
    "rpc_lease",
    "rpc_leased",
    "rpc_let_go",
    "rpc_resolve",
]


def _bytes(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    return int(raw) if raw.strip() else default


_PREFIX_LEN = 8
"""Hex digits of an object id (or loan token) that name the process that made it."""

INLINE_BYTES = _bytes("ACTORRT_INLINE_BYTES", 1 << 20)
"""A result whose tensors and pickled bytes add up to at least this many bytes stays at
the process that made it (``ACTORRT_INLINE_BYTES``; default 1 MiB), so that a ref passed
on is fetched from there. Smaller results only come back inline with the reply, as Ray
inlines small objects."""

PULL_BYTES = _bytes("ACTORRT_PULL_BYTES", 32 << 20)
"""A kept result under this many bytes (``ACTORRT_PULL_BYTES``; default 32 MiB) also
comes back with its reply, so the caller's own ``get`` costs what a plain reply does; a
larger one does not, and the caller fetches it only if it gets it (one more round trip,
a few percent of moving that many bytes)."""


RELAY_S = 5.0
"""How long a process that fetched an object from another host keeps a copy, to pass it on
to the other processes of its host (they ask it instead of the owner)."""

HELD, LEASED, LOAN = 0, 1, 2
"""What an owner is told has gone (:func:`rpc_let_go`): the sender's direct hold of an
object, one lease of it (told by rank 0), or a loan (told by rank 0)."""

LET_GO_GATHER_S = 0.02
"""How often, at most, a process tells owners of the refs gone (one message each): what
goes within that while travels together; the first after a quiet while goes at once."""

HANDING_WAIT_S = 10.0
"""How long a ref that came back to this process in its own reply waits, before it travels
leased, for its owner to count it (a message's round trip; a dead owner ends it)."""


_holding = threading.Lock()
"""Taken while a process converts refs borrowed for a call into holds of its own."""

_local = threading.local()  # .borrowing: of the call whose arguments are being unpacked


class ObjectLocation(NamedTuple):
    """Where an object lives: what an ``ObjectRef`` of it carries, as plain data."""

    object_id: str
    owner: str  # RPC name of the process that keeps the value
    nbytes: int  # its tensors and pickled bytes, as measured when it was kept
    rref: Any = None  # a copy of its lease's RRef (rank 0's); None: held directly
    sealed: shm.Sealed | None = None  # its bytes in shared memory, for the owner's host

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # The lease's RRef travels wrapped, from every sender (rank 0 too): its receiver
        # tells rank 0 which fork it holds (see ObjectStore.holder_died).
        rref = self.rref if self.rref is None else rref_keeper.Carried(self.rref, self.object_id)
        return ObjectLocation, (self.object_id, self.owner, self.nbytes, rref, self.sealed)


class Loan(NamedTuple):
    """A ref lent before its call answered: what a borrowed ``ObjectRef`` carries.

    The lender resolves it when a borrower needs its value (:func:`rpc_resolve`).
    """

    lender: str  # RPC name of the process that made the call and lent the ref
    token: str  # the loan's key at the lender
    rref: Any = None  # a copy of the loan's lease RRef (rank 0's); None: leases are off

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # As ObjectLocation's: the receiver tells rank 0 which fork of the lease it holds,
        # so that the loan ends if the receiver dies holding the last copy (held_forks).
        rref = self.rref if self.rref is None else rref_keeper.Carried(self.rref, self.token)
        return Loan, (self.lender, self.token, rref)


class ObjectLease:
    """What an object's (or a loan's) RRef holds on rank 0; dropped, it frees the value.

    When torch drops it (no ref is left anywhere), the owner is told to let the value (or
    the loan) go.

    Rank 0 owns every such RRef, not the process that keeps the value: torch's fork
    protocol has each receiver of an RRef confirm it with the RRef's owner before the
    message that carried it is handled, and a message confirming with a dead process
    would wait for ever. Rank 0 lives as long as the cluster, so a ref whose owner died
    still arrives, and getting it raises ``ObjectLostError``.
    """

    __slots__ = ("_store", "owner", "key", "loan")

    def __init__(self, store: ObjectStore, owner: str, key: str, loan: bool) -> None:
        self._store = store
        self.owner = owner
        self.key = key
        self.loan = loan
        store.forks.watch(key, True)

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        # torch pickles an RRef's value to find tensors in it (agents with device maps);
        # a lease holds none, and must not drag the store along.
        return (str, (self.key,))

    def __del__(self) -> None:
        try:
            self._store.forks.watch(self.key, False)
            self._store.let_go(self.owner, self.key, LOAN if self.loan else LEASED)
        except Exception:  # interpreter teardown
            pass


class ObjectRefBase:
    """What the runtime needs of an ``ObjectRef`` (:class:`actorrt.refs.ObjectRef`)."""

    __slots__ = ()

    def _value(self) -> Any:
        """The ref's value, fetched from its owner if need be (blocks; raises its error)."""
        raise NotImplementedError

    async def _value_async(self) -> Any:
        """:meth:`_value` without blocking an event loop."""
        raise NotImplementedError

    def _start(self) -> None:
        """Starts getting the value (fetching it), without waiting for it."""
        raise NotImplementedError

    def _when_ready(self, fn: Callable[[], None]) -> None:
        """Runs ``fn`` once the ref's call has answered (at once if it has)."""
        raise NotImplementedError

    def _resolution(self, requester: str) -> Wire:
        """The answered ref, packed for ``requester``: an inline reply or the location."""
        raise NotImplementedError

    def _hold_here(self) -> ObjectLocation | None:
        """Makes a ref borrowed for its call held by its process directly; its location.

        See :class:`Borrowing`. None if it was not borrowed (or is held already).
        """
        raise NotImplementedError


class ObjectStore:
    """The objects this process owns, and the refs it lent before their calls answered.

    An object kept here is held at first by one process directly, with no RRef: the
    caller whose reply it was (or the process that put it). That holder lets it go when
    its ``ObjectRef`` goes (:meth:`let_go`, one small message), unless the ref travelled
    first: then the holder turned its hold into a lease (:meth:`lease`), an RRef owned by
    rank 0 that torch counts across every copy, and rank 0 lets it go when the last copy
    goes. A callee that kept a ref borrowed for a call is one more direct holder
    (:meth:`hold`). A result got only by its caller, or only passed to calls that did
    not keep it, thus costs no RRef at all.

    Args:
        name: This process's RPC name (every object kept here names it as owner).
        pack: The payload pipeline: ``pack(peer, value)`` packs a value for ``peer``.
        driver_name: Rank 0's RPC name (it owns every lease's RRef).
        is_driver: This process is rank 0.
    """

    def __init__(
        self, name: str, pack: Callable[[str, Any], Wire], driver_name: str, is_driver: bool
    ) -> None:
        self.name = name
        self._pack = pack
        self._driver = driver_name
        self._is_driver = is_driver
        self._lock = threading.Lock()
        # Every id made here begins with this process's own prefix: a process that took
        # the name of a dead one tells a ref to the dead one's object (or loan) that its
        # owner died, not that its refs were dropped.
        self._prefix = uuid.uuid4().hex[:_PREFIX_LEN]
        self._values: dict[str, Any] = {}
        self._sizes: dict[str, int] = {}
        self._sealed: dict[str, shm.Sealed] = {}  # puts whose bytes lie in shared memory
        # Per object: how many refs each process holds directly (the caller whose reply
        # it was or the process that put it; each process that kept a ref borrowed for a
        # call), and how many leases of it are out. Both signed: rank 0's word that a
        # lease ended may overtake its holder's word that it made it. It goes when no
        # holder and no lease is left.
        self._holders: dict[str, dict[str, int]] = {}
        self._leases: dict[str, int] = {}
        self._loans: dict[str, ObjectRefBase] = {}
        self.fetches_served = 0  # fetches answered with a value (for tests)
        # Fan-out across hosts: per object, the process of each other host that fetched it
        # first (until when it passes it on); here, copies kept to pass on, and the
        # fetches under way (a process of this host may ask for what is still coming).
        self._relays: dict[str, dict[str, tuple[str, float]]] = {}
        self._copies: dict[str, tuple[Any, float]] = {}
        self.fetching: dict[str, torch.futures.Future[Wire]] = {}
        self.node_of: Callable[[str], str | None] = lambda process: None
        # This process's RPC id, and whether a process's word about its holds comes from
        # the live process of its name (set by the runtime): a word from a dead one, late
        # after its death freed its holds (or after a new process took its name), is
        # not counted, or its hold would never go (or a count would go negative under
        # a name a new process then holds under). RPC ids are never reused.
        self.rpc_id = 0
        self.is_current: Callable[[str, int | None], bool] = lambda process, rpc_id: True
        # The RPC id this process knows under a name (None: none known; set by the
        # runtime): a hold told to another owner names the holder by it.
        self.rpc_id_of: Callable[[str], int | None] = lambda process: None
        self._closed = False
        # False where rank 0 cannot keep leases (its second agent in one process, see
        # group.rrefs_work): objects then live until the cluster ends.
        self.leases = True
        # Owners to tell that an object (or loan) can go, told by one thread: a ref or a
        # lease may be dropped anywhere (inside torch's RRef bookkeeping, a collection),
        # where sending is no place to be. Started now: a lease may be dropped as the
        # interpreter ends, too late to start a thread. It ends with the store (clear),
        # and the interpreter's exit waits for a send it has under way (torch_threads).
        self._outbox: queue.SimpleQueue[tuple[str, str, int]] = queue.SimpleQueue()
        # Replies dropped unread, read on that thread (see let_go_unread_later).
        self._unread: queue.SimpleQueue[tuple[Wire, int]] = queue.SimpleQueue()
        # Objects of other processes whose refs a reply of this process to itself carried,
        # per id how many such replies their owners have not yet counted (hold_sent), and
        # the let-gos of them held back meanwhile (_tell_owners). Both holds go under
        # this process's name: a let-go of the ref that came back, overtaking the
        # owner's count of it, would take off the sender's own hold instead, the last
        # one perhaps, and the object would go while the sender still held it.
        self._handing: dict[str, int] = {}
        self._held_back: list[tuple[str, str, int]] = []
        self._handed_here = threading.Condition()
        # Which process holds which fork of the leases made here (see held_forks).
        self.forks = HeldForks(name, lambda: self._outbox.put(_HOLDING), tells=True)
        torch_threads.start(self._tell_owners, name="actorrt-objects")

    def keep(self, value: Any, nbytes: int, holder: str) -> str:
        """Keeps ``value`` here as a new object, held directly by ``holder``; its id."""
        object_id = self._new_id()
        self._add(object_id, value, nbytes, holder, None)
        return object_id

    def _add(
        self, object_id: str, value: Any, nbytes: int, holder: str, sealed: shm.Sealed | None
    ) -> None:
        streams.leaving_all()  # fetches are served on streams that do not wait for ours
        with self._lock:
            self._values[object_id] = value
            self._sizes[object_id] = nbytes
            self._holders[object_id] = {holder: 1}
            if sealed is not None:
                self._sealed[object_id] = sealed

    def keep_sealed(self, value: Any, nbytes: int, holder: str) -> ObjectLocation:
        """:meth:`keep`, copying the tensors of ``value`` into shared memory first.

        For a CPU tensor, or dicts, lists and tuples of them (a state dict), of at least
        1 MiB of tensors (:func:`shm.seal`). The object is that copy (a later change to
        ``value`` does not reach it, as Ray's ``put`` copies), and its location carries
        the copy's handle: processes of this host map it instead of fetching it
        (:func:`shm.open_sealed`). Any other value is kept as :meth:`keep` keeps it.
        """
        object_id = self._new_id()
        sealed = shm.seal(value, object_id)
        value, handle = sealed if sealed is not None else (value, None)
        self._add(object_id, value, nbytes, holder, handle)
        return ObjectLocation(object_id, self.name, nbytes, None, handle)

    def lease(self, loc: ObjectLocation) -> ObjectLocation:
        """At the direct holder of ``loc``, as its ref first travels: ``loc`` with a lease.

        The owner is told this process's direct hold became a lease (its death then no
        longer frees it); rank 0 lets it go once the lease's last copy is gone.
        """
        if loc.owner == self.name:
            self.leased(loc.object_id, self.name)
        else:
            try:
                args = (loc.object_id, self.name, self.rpc_id)
                rpc.rpc_async(loc.owner, rpc_leased, args=args)
            except Exception:  # the owner is gone: the object with it
                pass
        return loc._replace(rref=self._lease(loc.owner, loc.object_id, loan=False))

    def counted(self, object_id: str) -> None:
        """Waits until the owners counted what this process handed itself of ``object_id``.

        Called before a ref of it becomes a lease, whose word would take a hold off that
        may not be counted yet (see ``_handing``). At once, but for a ref leased as it
        arrives; at most :data:`HANDING_WAIT_S`.
        """
        if object_id in self._handing:
            with self._handed_here:
                self._handed_here.wait_for(
                    lambda: object_id not in self._handing, timeout=HANDING_WAIT_S
                )

    def leased(self, object_id: str, holder: str, holder_id: int | None = None) -> None:
        """At the owner: ``holder``'s direct hold of an object kept here became a lease.

        ``holder_id``: its RPC id (None: this process). The lease counts even if that
        process died since; its hold, freed at the death, is not taken off again.
        """
        current = holder_id is None or self.is_current(holder, holder_id)
        with self._lock:
            if object_id not in self._values:
                return
            if current:
                self._count(object_id, holder, -1)
            self._leases[object_id] = self._leases.get(object_id, 0) + 1
            value = self._pop_if_unheld(object_id)
        del value  # outside the lock (see _pop_if_unheld)

    def hold(self, object_ids: list[str], holder: str, holder_id: int | None) -> None:
        """At the owner: ``holder`` (RPC id ``holder_id``) holds these objects directly too.

        It kept refs that were borrowed for a call; the call's caller says so, from the
        reply (:func:`reply_of_call`), and holds them until this is done. Or a reply of
        this process carries refs of them to it (:meth:`hold_sent`; ``holder_id`` None:
        whichever process has that name now). Not counted if that process died
        meanwhile (its death came here first).
        """
        if not self.is_current(holder, holder_id):
            return
        with self._lock:
            for object_id in object_ids:
                if object_id in self._values:
                    self._count(object_id, holder, 1)

    def pack_reply(self, receiver: str, value: Any) -> Wire:
        """``value`` packed for ``receiver`` as a reply, its refs held by ``receiver``.

        For the answers of this store (a fetch, a relay's copy) and a lender's
        (``ObjectRef._resolution``): see :meth:`hold_sent`.
        """
        with holds_in_reply() as holds:
            wire = self._pack(receiver, value)
        self.hold_sent(receiver, holds)
        return wire

    def hold_sent(self, receiver: str, holds: ReplyHolds) -> None:
        """A reply is about to go to ``receiver``: the holds of its refs are made.

        ``holds`` were gathered as it was packed
        (:func:`~actorrt.runtime.payload.reply_holds`). The receiver holds each ref in it
        directly. Of an object of this process, counted now, before the reply goes, so
        the receiver's let-go cannot overtake it. Of another process's object, counted
        by its owner when told (:func:`rpc_hold`, one message per owner, naming the
        receiver's RPC id as known here): this process keeps its own refs of them, and
        so its holds, until every owner heard. A reply to this process itself holds back
        its let-gos of those objects until then too (see ``_handing``).
        """
        if holds.own:
            self.hold(holds.own, receiver, None)
        if not holds.handed:
            return
        kept = [ref for ref, _, _ in holds.handed]
        pairs = [(owner, object_id) for _, owner, object_id in holds.handed]
        if receiver != self.name:
            self._say_held(receiver, self.rpc_id_of(receiver), pairs, kept.clear)
            return
        ids = [object_id for _, object_id in pairs]
        with self._handed_here:
            for object_id in ids:
                self._handing[object_id] = self._handing.get(object_id, 0) + 1

        def counted() -> None:
            with self._handed_here:
                for object_id in ids:
                    left = self._handing.pop(object_id) - 1
                    if left:
                        self._handing[object_id] = left
                self._handed_here.notify_all()
            self._outbox.put(_HANDED)  # let-gos held back for them may go now
            kept.clear()

        self._say_held(self.name, self.rpc_id, pairs, counted)

    def _count(self, object_id: str, holder: str, change: int) -> None:
        """Under the lock: ``holder``'s direct holds of an object change by ``change``.

        Signed: a holder's word that it let go of a borrowed ref it kept may overtake
        the caller's word that it holds it (they come from two processes).
        """
        held = self._holders.setdefault(object_id, {})
        held[holder] = held.get(holder, 0) + change

    def hold_for(
        self, callee: str, callee_id: int, kept: list[tuple[str, str]], pins: list[Any]
    ) -> None:
        """At a caller: tells owners that ``callee`` kept these borrowed refs; then unpins.

        ``pins`` (what this process held for the call) are let go once every owner heard.

        Args:
            callee: The process the call ran on.
            callee_id: Its RPC id (a process that took its name since is another).
            kept: ``(owner, object id)`` of each ref it kept past the call.
            pins: The refs the call's arguments carried, held here until the owners heard.
        """
        self._say_held(callee, callee_id, kept, pins.clear)

    def _say_held(
        self,
        holder: str,
        holder_id: int | None,
        pairs: list[tuple[str, str]],
        then: Callable[[], None],
    ) -> None:
        """Tells the owners of ``pairs`` that ``holder`` holds them; ``then()`` once all heard.

        ``holder_id``: its RPC id (None: whichever process has that name now).
        """
        by_owner: dict[str, list[str]] = {}
        for owner, object_id in pairs:
            by_owner.setdefault(owner, []).append(object_id)
        waiting = [len(by_owner)]
        lock = threading.Lock()

        def told(_: object = None) -> None:
            with lock:
                waiting[0] -= 1
                last = waiting[0] == 0
            if last:
                then()

        for owner, object_ids in by_owner.items():
            if owner == self.name:
                self.hold(object_ids, holder, holder_id)
                told()
                continue
            try:
                fut = rpc.rpc_async(owner, rpc_hold, args=(object_ids, holder, holder_id))
            except Exception:  # the owner is gone: its objects with it
                told()
                continue
            fut.add_done_callback(told)

    def _lease(self, owner: str, key: str, loan: bool) -> Any:
        """An RRef, owned by rank 0, whose lease lets ``key`` go at ``owner`` when dropped.

        None where leases do not work (:attr:`leases`): the object stays until shutdown.
        """
        if not self.leases:
            return None
        if self._is_driver:
            return rpc.RRef(ObjectLease(self, owner, key, loan))
        rref = rpc.remote(self._driver, rpc_lease, args=(owner, key, loan))
        rref_keeper.hold_received(rref)  # until rank 0 confirms it (see rref_keeper)
        if not loan:
            rref_keeper.made(rref, key)
        return rref

    def let_go(self, owner: str, key: str, kind: int = HELD) -> None:
        """A hold of ``key`` (kept by ``owner``) is gone: the owner is told.

        Called by a direct holder's ``ObjectRef`` as it goes (:data:`HELD`), and on rank 0
        when torch drops a lease (:data:`LEASED`, :data:`LOAN`).
        """
        if owner == self.name:
            self.release(key, kind, self.name)
        elif not self._closed:
            self._outbox.put((owner, key, kind))

    def released(self, holder: str, holder_id: int, keys: list[tuple[str, int]]) -> None:
        """At the owner: ``holder`` (RPC id ``holder_id``) says these holds went.

        Each ``(key, kind)`` as :meth:`release` takes it. A dead process's direct holds
        (:data:`HELD`) are not taken off: its death freed them already.
        """
        current = self.is_current(holder, holder_id)  # once per message, not per key
        for key, kind in keys:
            if current or kind != HELD:
                self.release(key, kind, holder)

    def release(self, key: str, kind: int, holder: str) -> None:
        """At the owner: a hold of ``key`` went (see :meth:`let_go`); unheld, it goes."""
        if kind == LOAN:
            self.end_loan(key)
            return
        with self._lock:
            if key not in self._values:
                return
            if kind == LEASED:
                self._leases[key] = self._leases.get(key, 0) - 1
            else:
                self._count(key, holder, -1)
            value = self._pop_if_unheld(key)
        del value  # outside the lock (see _pop_if_unheld)

    def _pop_if_unheld(self, object_id: str) -> Any:
        """Under the lock: forgets an object no holder and no lease is left of.

        Returns its value (None if it is still held), for the caller to drop outside the
        lock: the value may hold refs, whose going lets go of their objects.
        """
        held = self._holders.get(object_id, {})
        if self._leases.get(object_id, 0) > 0 or any(n > 0 for n in held.values()):
            return None
        return self._pop(object_id)

    def let_go_unread(self, wire: Wire, part: int = -1) -> None:
        """Lets go of the object a reply (or streamed value) nobody read left at its owner.

        Args:
            wire: The packed reply, arrived and not read: an inline value (most replies)
                costs one test.
            part: For a reply of ``num_returns``, which of its values.
        """
        kept = _kept_by(wire, part)
        if kept is not None:
            self.let_go(*kept)

    def let_go_unread_later(self, wire: Wire, part: int = -1) -> None:
        """:meth:`let_go_unread`, on this store's thread: for an ``ObjectRef.__del__``.

        Reading a reply may unpickle (an error, a value that came with a copy), which has
        no place where garbage collection runs; the ref rules out an inline reply first.
        """
        if self._closed:
            return
        self._unread.put((wire, part))
        self._outbox.put(_UNREAD)

    def _tell_owners(self) -> None:
        last = 0.0  # when the last batch went
        while True:
            batch = [self._outbox.get()]
            # A message per ref gone would cost both processes as much as a small call
            # (a caller getting results in a loop paid a quarter more per get): what goes
            # within a short while travels as one message per owner. The first after a
            # quiet while goes at once, so that a fork's holder that dies soon after it
            # arrived has told its owner (held_forks), and an object goes sooner.
            wait = last + LET_GO_GATHER_S - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            while True:
                try:
                    batch.append(self._outbox.get_nowait())
                except queue.Empty:
                    break
            if self._closed:
                # Shutdown began while these were gathered: every object goes with its
                # cluster, and a send racing the interpreter's end aborts the process.
                return
            if _HOLDING in batch:
                batch = [item for item in batch if item != _HOLDING]
                self.forks.tell()
            if _UNREAD in batch:  # replies nobody read: which objects they left, if any
                batch = [item for item in batch if item != _UNREAD]
                while True:
                    try:
                        kept = _kept_by(*self._unread.get_nowait())
                    except queue.Empty:
                        break
                    if kept is not None and kept[0] == self.name:
                        self.release(kept[1], HELD, self.name)
                    elif kept is not None:
                        batch.append((*kept, HELD))
            if _HANDED in batch or self._handing or self._held_back:  # see __init__
                batch = self._hold_back([item for item in batch if item != _HANDED])
            by_owner: dict[str, list[tuple[str, int]]] = {}
            for owner, key, kind in batch:
                by_owner.setdefault(owner, []).append((key, kind))
            for owner, keys in by_owner.items():
                try:
                    rpc.rpc_async(owner, rpc_let_go, args=(self.name, self.rpc_id, keys))
                except Exception:  # the owner is gone (its objects with it) or RPC is ending
                    pass
            last = time.monotonic()

    def _hold_back(self, batch: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
        """The let-gos of ``batch`` and those held back that may go now; holds the rest.

        A direct hold's let-go of an object a reply of this process to itself carried
        waits until its owner counted that reply's hold (see ``_handing``).
        """
        going: list[tuple[str, str, int]] = []
        held: list[tuple[str, str, int]] = []
        with self._handed_here:  # one pass: an owner's answer may change _handing meanwhile
            for item in self._held_back + batch:
                (held if item[2] == HELD and item[1] in self._handing else going).append(item)
            self._held_back = held
        return going

    def holder_died(self, process: str) -> None:
        """Lets go of the objects ``process`` held directly (it died holding them).

        And of the forks of leases made here that it held (:class:`HeldForks`): an object
        (rank 0) or actor (its host) whose every other ref or handle went then goes.
        """
        with self._lock:
            touched = [
                oid for oid, held in self._holders.items() if held.pop(process, None) is not None
            ]
            values = [self._pop_if_unheld(object_id) for object_id in touched]
        values.clear()  # outside the lock (see _pop_if_unheld)
        self.forks.holder_died(process)

    def value(self, object_id: str) -> Any:
        """The value of an object kept here.

        Raises:
            ObjectLostError: It is not here: freed (no ref to it was left), or made by a
                dead process whose name this one took.
        """
        try:
            return self._values[object_id]
        except KeyError:
            if not self.made_here(object_id):
                raise ObjectLostError(
                    f"object {object_id} is lost: its owner process died ({self.replaced()}). "
                    "Objects live in the process that made them; make the value again to go on."
                ) from None
            raise ObjectLostError(
                f"object {object_id} is no longer kept by its owner {self.name!r}: every "
                "ref to it was dropped (keep an ObjectRef while you need its value)."
            ) from None

    def _new_id(self) -> str:
        """A new object id or loan token: this process's prefix, then random hex."""
        return self._prefix + uuid.uuid4().hex[_PREFIX_LEN:]

    def made_here(self, object_id: str) -> bool:
        """Whether ``object_id`` (or a loan token) was made by this process.

        One that was not, asked of this process by name, was made by a process of this
        name that died: a new process took its name.
        """
        return object_id.startswith(self._prefix)

    def replaced(self) -> str:
        """Says that this process replaced a dead one of its name (for lost-object errors)."""
        return f"{self.name!r} is now a new process that took the dead one's name"

    def _pop(self, object_id: str) -> Any:
        """Under the lock: forgets an object; its value, to be dropped outside the lock."""
        sealed = self._sealed.pop(object_id, None)
        if sealed is not None:  # no process maps it from now on (those that did keep it)
            shm.unseal(sealed)
        self._sizes.pop(object_id, None)
        self._holders.pop(object_id, None)
        self._leases.pop(object_id, None)
        self._relays.pop(object_id, None)
        return self._values.pop(object_id, None)

    def stats(self) -> tuple[int, int]:
        """How many objects this process keeps, and their bytes."""
        with self._lock:
            return len(self._sizes), sum(self._sizes.values())

    def clear(self) -> None:
        """Drops every object and loan (at shutdown); the store tells no owner any more."""
        self._closed = True
        self.forks.close()
        self._outbox.put(_CLOSED)  # wakes the thread that tells owners: it ends
        with self._lock:
            values, loans = self._values, self._loans
            self._values, self._loans = {}, {}
            self._sizes.clear()
            self._holders.clear()
            self._leases.clear()
            self._relays.clear()
            copies, self._copies = self._copies, {}
            sealed, self._sealed = self._sealed, {}
        for handle in sealed.values():
            shm.unseal(handle)
        shm.drop_free_sealed()
        values.clear()  # outside the lock (see _pop_if_unheld)
        copies.clear()
        loans.clear()

    # -- refs lent before their calls answered ---------------------------------------
    def lend(self, ref: ObjectRefBase) -> Loan:
        """Lends a ref whose call has not answered: what its borrowers carry."""
        token = self._new_id()
        with self._lock:
            self._loans[token] = ref
        return Loan(self.name, token, self._lease(self.name, token, loan=True))

    def end_loan(self, token: str) -> None:
        """Ends a loan (no borrower is left)."""
        with self._lock:
            ref = self._loans.pop(token, None)
        del ref  # outside the lock (see _pop_if_unheld)

    def loaned(self, token: str) -> ObjectRefBase | None:
        """The ref lent under ``token``, if the loan is open."""
        return self._loans.get(token)

    def answer_fetch(self, object_id: str, requester: str, relay: bool) -> Wire:
        """The packed reply to a fetch of an object kept here.

        ``(OK, value)``; ``(KEEP, value)`` to the first process of another host, which
        keeps a copy for :data:`RELAY_S` to pass on to the rest of its host; ``(RELAY,
        that process)`` to the rest of that host meanwhile (unless ``relay`` is False: that
        process could not pass it on); or ``(LOST, why)``. So the owner's link carries
        one copy per host, not one per consumer.
        """
        try:
            value = self.value(object_id)
        except ObjectLostError as exc:
            return self._pack(requester, (LOST, str(exc)))
        status = OK
        node = self.node_of(requester)
        if node is not None and node != self.node_of(self.name):
            now = time.monotonic()
            with self._lock:
                hosts = self._relays.setdefault(object_id, {})
                first = hosts.get(node)
                if first is not None and first[0] != requester and first[1] > now and relay:
                    return self._pack(requester, (RELAY, first[0]))
                hosts[node] = (requester, now + RELAY_S)
            status = KEEP
        with self._lock:
            self.fetches_served += 1
        return self.pack_reply(requester, (status, value))

    def fetched(self, object_id: str, fut: torch.futures.Future[Wire]) -> None:
        """The fetch ``fut`` of ``object_id`` under way here is over."""
        if self.fetching.get(object_id) is fut:
            del self.fetching[object_id]

    def keep_copy(self, object_id: str, value: Any) -> None:
        """Keeps a fetched value for :data:`RELAY_S`, for this host's other processes."""
        streams.leaving_all()  # the copy in has landed before another process reads it
        until = time.monotonic() + RELAY_S
        with self._lock:
            self._copies[object_id] = (value, until)
        timer = threading.Timer(RELAY_S, self._drop_copy, (object_id, until))
        timer.daemon = True
        timer.start()

    def _drop_copy(self, object_id: str, until: float) -> None:
        with self._lock:
            kept = self._copies.get(object_id)
            if kept is not None and kept[1] <= until:  # not kept again since
                del self._copies[object_id]
        del kept  # outside the lock (see _pop_if_unheld)

    def answer_copy(self, object_id: str, requester: str) -> Wire:
        """The packed reply to a process of this host asking for a copy kept here."""
        with self._lock:
            kept = self._copies.get(object_id)
        if kept is None or kept[1] <= time.monotonic():
            return self._pack(requester, (LOST, f"{self.name!r} keeps no copy of it"))
        return self.pack_reply(requester, (OK, kept[0]))


# -- RPC entry points --------------------------------------------------------------


_UNREAD = ("", "unread", HELD)
"""Put on a store's outbox: replies dropped unread wait in its ``_unread`` queue."""

_CLOSED = ("", "closed", HELD)
"""Put on a store's outbox as it closes: its thread ends."""

_HOLDING = ("", "holding", HELD)
"""Put on a store's outbox: forks of leases it came to hold wait in its ``forks``."""

_HANDED = ("", "handed", HELD)
"""Put on a store's outbox: an owner counted a hold this process handed itself."""


IGNORE_UNHANDLED = "ACTORRT_IGNORE_UNHANDLED_ERRORS"
"""Set to 1, a dropped ref's error nobody read is not logged (Ray's RAY_IGNORE_UNHANDLED_ERRORS)."""

_log = get_logger()


def _kept_by(wire: Wire, part: int) -> tuple[str, str] | None:
    """(owner, object id) of the object a reply left at its producer; None if it left none.

    A method's error in it is logged: its ref went without a ``get``, so nobody else will
    see it (a call made for its effect, ``actor.step.remote()``, that raised), as Ray
    logs an "unhandled error".
    """
    try:
        if wire[0] is None and wire[1][0][0] == OK:
            return None
        reply = unpack(wire)
        if reply[0] == ERROR and part <= 0:  # the calls of num_returns=N: logged once
            _unhandled(reply[1])
        if reply[0] == MULTI:
            reply = unpack(reply[1][max(part, 0)])
        if reply[0] == OBJECT or reply[0] == COPY:
            return reply[1][2], reply[1][0]
    except Exception:  # an unreadable reply: nothing to let go that can be known
        pass
    return None


def _unhandled(error: tuple[str, str, str, Any]) -> None:
    if os.environ.get(IGNORE_UNHANDLED, "") not in ("", "0"):
        return
    what, _, text, _ = error
    _log.error(
        "unhandled error: %s raised, and its ref went without actorrt.get (set %s=1 to "
        "hide these):\n%s",
        what,
        IGNORE_UNHANDLED,
        text.rstrip(),
    )


def rpc_lease(owner: str, key: str, loan: bool) -> ObjectLease:
    """Runs on rank 0 under ``rpc.remote``: the lease of an object (or loan) of ``owner``."""
    return ObjectLease(context.part(ObjectStore), owner, key, loan)


def rpc_let_go(holder: str, holder_id: int, keys: list[tuple[str, int]]) -> None:
    """Sent to an owner by ``holder`` (RPC id ``holder_id``): these holds are gone.

    Each ``(key, kind)``.
    """
    context.part(ObjectStore).released(holder, holder_id, keys)


def rpc_leased(object_id: str, holder: str, holder_id: int) -> None:
    """Sent to an owner by a direct holder of its object, whose ref now travels leased."""
    context.part(ObjectStore).leased(object_id, holder, holder_id)


def rpc_hold(object_ids: list[str], holder: str, holder_id: int | None) -> None:
    """Sent to an owner: ``holder`` holds these refs directly too.

    By a call's caller (its callee kept them), or by the sender of a reply that carried
    them to ``holder``. With ``holder``'s RPC id (None: whichever process has that
    name now).
    """
    context.part(ObjectStore).hold(object_ids, holder, holder_id)


def rpc_fetch(object_id: str, requester: str, relay: bool = True) -> Wire:
    """Runs on an object's owner: the value, packed for ``requester`` (its pair's road)."""
    return context.part(ObjectStore).answer_fetch(object_id, requester, relay)


@rpc.functions.async_execution  # type: ignore[untyped-decorator]  # torch leaves it unannotated
def rpc_fetch_copy(object_id: str, requester: str) -> torch.futures.Future[Wire]:
    """Runs on the process an owner named as its host's relay: its copy, once it has it.

    Its own fetch may still be under way: the answer waits for it, on no thread.
    """
    store = context.part(ObjectStore)
    under_way = store.fetching.get(object_id)
    future: torch.futures.Future[Wire] = torch.futures.Future()
    if under_way is None:
        future.set_result(store.answer_copy(object_id, requester))
    else:
        under_way.add_done_callback(
            lambda _: future.set_result(store.answer_copy(object_id, requester))
        )
    return future


@rpc.functions.async_execution  # type: ignore[untyped-decorator]  # torch leaves it unannotated
def rpc_resolve(token: str, requester: str) -> torch.futures.Future[Wire]:
    """Runs on a lender: answers once the lent ref's call has (never blocks an RPC thread)."""
    store = context.part(ObjectStore)
    future: torch.futures.Future[Wire] = torch.futures.Future()
    ref = store.loaned(token)
    if ref is None:
        why = (
            f"the ref lent by {store.name!r} was released before it was asked for"
            if store.made_here(token)
            else f"the process that lent it died ({store.replaced()})"
        )
        future.set_result(store._pack(requester, (LOST, why)))
        return future

    def answer() -> None:
        try:
            future.set_result(ref._resolution(requester))
        except Exception as exc:  # packing failed: the borrower hears why
            future.set_result(store._pack(requester, (LOST, f"{type(exc).__name__}: {exc}")))

    ref._when_ready(answer)
    return future


def rpc_object_stats() -> tuple[int, int]:
    """Runs on each process for ``actorrt.status()``: its objects' count and bytes."""
    return context.part(ObjectStore).stats()


# -- the callee's side: refs borrowed for a call --------------------------------------


class Borrowing:
    """The refs a call's arguments brought, borrowed for the call, at the callee.

    A ref nested in a call's arguments travels without a lease of its own: the caller
    holds its object until the call's reply (its pins). Most such refs die with the
    call, at no cost. One the callee keeps past the call (the method stored it, returned
    it, put it or sent it on) is held by the callee from then on: the reply says so
    (:data:`KEPT`), and the caller tells the ref's owner before it lets go of its pins,
    as Ray's borrowers report in their task's reply.
    """

    __slots__ = ("_refs", "_kept")

    def __init__(self) -> None:
        self._refs: list[weakref.ref[ObjectRefBase]] = []
        self._kept: list[tuple[str, str]] = []  # (owner, object id), once held here

    def add(self, ref: ObjectRefBase) -> None:
        """A ref of the call's arguments, as it is rebuilt."""
        self._refs.append(weakref.ref(ref))

    def keep(self, ref: ObjectRefBase) -> None:
        """``ref`` outlives the call: this process holds its object directly from now on."""
        with _holding:
            self._keep(ref)

    def _keep(self, ref: ObjectRefBase) -> None:
        loc = ref._hold_here()
        if loc is not None:  # else held already
            self._kept.append((loc.owner, loc.object_id))

    def close(self) -> list[tuple[str, str]]:
        """As the call answers: each ref still alive is kept; all that were, as pairs."""
        with _holding:
            for found in self._refs:
                ref = found()
                if ref is not None:
                    self._keep(ref)
            self._refs = []
            return self._kept


def unpack_arguments(wire: Wire) -> tuple[Any, Borrowing | None]:
    """Unpacks a call's arguments; and what they brought borrowed, if anything.

    Raises:
        Exception: What unpickling raised.
    """
    outer = getattr(_local, "borrowing", None)
    _local.borrowing = None
    try:
        return unpack(wire), _local.borrowing
    finally:
        _local.borrowing = outer


def borrowed_here() -> Borrowing:
    """The :class:`Borrowing` of the call whose arguments this thread unpacks now."""
    borrowing = getattr(_local, "borrowing", None)
    if borrowing is None:
        borrowing = _local.borrowing = Borrowing()
    return borrowing


def with_kept(wire: Wire, borrowing: Borrowing) -> Wire:
    """A call's packed reply, saying which of its borrowed refs the callee kept.

    With the callee's RPC id: the owners count its holds only while it lives.
    """
    kept = borrowing.close()
    if not kept:
        return wire
    return (None, [(KEPT, (wire, kept, context.part(ObjectStore).rpc_id))])


def reply_of_call(
    sent: torch.futures.Future[Wire], callee: str, pins: list[Any]
) -> torch.futures.Future[Wire]:
    """The reply of a call whose arguments carried refs borrowed for it (``pins``).

    A reply saying the callee kept some (:data:`KEPT`) is given on at once; the pins
    are let go once those refs' owners know the callee holds them. Others let go at once.
    """
    out: torch.futures.Future[Wire] = torch.futures.Future()

    def arrived(fut: torch.futures.Future[Wire]) -> None:
        try:
            wire = fut.value()
        except Exception as exc:
            pins.clear()
            out.set_exception(exc)  # type: ignore[arg-type]  # torch's stub is too narrow
            return
        kept: list[tuple[str, str]] = []
        if wire[0] is None and type(wire[1][0]) is tuple and wire[1][0][0] == KEPT:
            wire, kept, callee_id = wire[1][0][1]
        out.set_result(wire)
        if not kept:
            pins.clear()
            return
        try:
            context.part(ObjectStore).hold_for(callee, callee_id, kept, pins)
        except Exception:  # the runtime stopped: every object goes with it
            pins.clear()

    sent.add_done_callback(arrived)
    return out


# -- the callee's side: top-level ref arguments are resolved before the method runs ---


def _has_ref(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    for a in args:
        if isinstance(a, ObjectRefBase):
            return True
    return any(isinstance(v, ObjectRefBase) for v in kwargs.values())


def _start_all(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    refs = [x for x in (*args, *kwargs.values()) if isinstance(x, ObjectRefBase)]
    if len(refs) > 1:  # several objects: their fetches run at once
        for ref in refs:
            ref._start()


def resolve_args(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` / ``kwargs`` with each top-level ref replaced by its value (fetches; blocks).

    Raises:
        Exception: What getting a ref raises (``ObjectLostError``, the producer's error).
    """
    if not _has_ref(args, kwargs):
        return args, kwargs
    _start_all(args, kwargs)
    a = tuple(x._value() if isinstance(x, ObjectRefBase) else x for x in args)
    kw = {k: v._value() if isinstance(v, ObjectRefBase) else v for k, v in kwargs.items()}
    return a, kw


async def resolve_args_async(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """:func:`resolve_args` for an async actor: awaits instead of blocking its loop."""
    if not _has_ref(args, kwargs):
        return args, kwargs
    _start_all(args, kwargs)
    a = tuple([await x._value_async() if isinstance(x, ObjectRefBase) else x for x in args])
    kw = {
        k: await v._value_async() if isinstance(v, ObjectRefBase) else v for k, v in kwargs.items()
    }
    return a, kw
