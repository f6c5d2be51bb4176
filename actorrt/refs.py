"""``ObjectRef``: the result of a remote call, and ``get`` / ``wait`` over them.

An ``ObjectRef`` holds the torch future of the call's reply. ``get`` without a timeout
waits on it directly and decodes the reply in the caller's thread, so no Python runs on
torch's RPC threads per reply (where it would compete with the caller for the GIL; see
docs/performance.md). A :class:`concurrent.futures.Future` is made only when
something needs one: ``get`` with a timeout, ``wait``, ``await ref``, ``future()``, or a
call that takes the ref as an argument.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import itertools
import logging
import math
import numbers
import os
import threading
import time
from collections.abc import Callable, Generator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, overload

import torch

from actorrt.errors import ActorDiedError, ActorError, GetTimeoutError, ObjectLostError
from actorrt.runtime import lineage, quick_rpc
from actorrt.runtime.exits import in_actor, in_method
from actorrt.runtime.objects import (
    Borrowing,
    Loan,
    ObjectLocation,
    ObjectRefBase,
    borrowed_here,
    rpc_resolve,
)
from actorrt.runtime.payload import ATOMS as _ATOMS
from actorrt.runtime.payload import (
    Aside,
    aside,
    call_pins,
    packing,
    reply_holds,
    snapshot,
    unpack,
)
from actorrt.runtime.protocol import (
    COPY,
    ERROR,
    LOCATED,
    MULTI,
    OBJECT,
    OK,
    RAISE,
    LocalFailure,
    Returns,
    call_name,
    cancelled,
    decode_reply,
    failed_in_pickling,
    rpc_failure,
    unreadable,
)
from actorrt.runtime.raised import fails
from actorrt.runtime.runtime import current, current_or_none
from actorrt.runtime.threads import lender
from actorrt.runtime.trace import wire_bytes

if TYPE_CHECKING:
    from actorrt.runtime.outbox import KeepAlive
    from actorrt.runtime.payload import Wire
    from actorrt.runtime.protocol import CancelTicket, Target
    from actorrt.runtime.raised import RetryOn
    from actorrt.runtime.runtime import Runtime

__all__ = [
    "ObjectRef",
    "cancel",
    "check_timeout",
    "failed",
    "get",
    "new_refs",
    "put",
    "send_call",
    "wait",
    "when_ready",
]

T = TypeVar("T")

if TYPE_CHECKING:
    import typing_extensions

    # The value type of a ref. Covariant: a ref of an int is a ref of an object, so that
    # get([ref_of_int, ref_of_str]) is a list[object]. Its default (PEP 696) makes a bare
    # `ObjectRef` mean ObjectRef[Any], as before refs had a type parameter.
    R_co = typing_extensions.TypeVar("R_co", covariant=True, default=Any)
else:  # at run time the default is not needed (nor does typing.TypeVar take it before 3.13)
    R_co = TypeVar("R_co", covariant=True)


class _Streaming(Protocol):
    """What :func:`cancel` and :func:`wait` read of an ``ObjectRefGenerator``."""

    def completed(self) -> ObjectRef[Any]:
        """The ref of the streaming call."""
        ...

    def _next_ready(self) -> bool:
        """Whether ``next()`` would give a ref (or end) without waiting."""
        ...

    def _ready_future(self) -> cf.Future[Any]:
        """A future done once ``next()`` would not wait."""
        ...


# Guards making a ref's concurrent.futures.Future against the call being sent at the
# same moment (only refs passed as arguments are visible to others before their send).
_hook_lock = threading.Lock()

_NO_COPY: Any = object()
"""Said by ``ObjectRef._copy_of_lost`` when a ref travels as its location."""

# A ref's id: this process's random prefix, then a count. A copy of the ref that
# travelled keeps its id, so refs compare (and hash) equal wherever they went, as Ray's.
# The prefix is random, not the process's name: a process that took a dead one's name
# starts its count again.
_ID_PREFIX = os.urandom(8).hex()
_ids = itertools.count(1)


class _RefFuture(cf.Future[Any]):
    """A ref's future, which cannot be cancelled: the ref would be spoilt for good.

    ``asyncio.wrap_future`` cancels the future it wraps when the awaiting task is
    cancelled (``asyncio.wait_for`` timing out, say); the call runs on regardless, and
    a later ``get`` or ``await`` of the same ref must still return its value.
    """

    def cancel(self) -> bool:
        return False


class ObjectRef(ObjectRefBase, Generic[R_co]):
    """The future result of ``handle.method.remote(...)``, or an object ``actorrt.put`` made.

    Pass it to :func:`actorrt.get` / :func:`actorrt.wait`, ``await`` it, or send it to
    other actors: as a top-level argument of a remote call (its value is fetched by the
    actor before the method runs) or anywhere inside arguments and return values (the
    receiver gets an ``ObjectRef`` it can get, wait for, await or pass on).

    A result that holds at least ``ACTORRT_INLINE_BYTES`` (1 MiB) of tensors and pickled
    bytes stays in the process that made it, and so does a put value: whoever gets the
    ref fetches the value from that owner in one hop, GPU to GPU where the plan gave the
    pair a device map. The value lives as long as some ref to it exists anywhere.

    For type checkers it is generic in the value: ``ObjectRef[int]`` is the ref of an
    ``int``, which ``get`` returns (see :class:`~actorrt.actor_class.TypedActor`); a bare
    ``ObjectRef`` is ``ObjectRef[Any]``. The parameter is static only: at run time a ref
    does not know its value's type.
    """

    __slots__ = (
        "_call",
        "_actor_id",
        "_worker",
        "_sent",
        "_cf",
        "_keep",
        "_loc",
        "_loan",
        "_rf",
        "_counted",
        "_direct",
        "_on_call",
        "_part",
        "_session",
        "_ticket",
        "_cancel_asked",
        "_recursive",
        "_id",
        "_error_read",
        "__weakref__",
    )

    def __init__(self, call: str, actor_id: str | None = None, ref_id: str = "") -> None:
        self._call = call  # "Class.method", named in errors
        # see hex(); a count of this process until needed (formatting costs a call 0.5 us)
        self._id: str | int = ref_id or next(_ids)
        self._actor_id = actor_id
        self._worker = ""
        # torch future of the raw reply (of the call, or of the lender's resolve)
        self._sent: torch.futures.Future[Wire] | None = None
        self._cf: cf.Future[Any] | None = None  # the value, made on demand
        self._keep: KeepAlive | None = None  # a call sent alone: see runtime.outbox.KeepAlive
        self._loc: ObjectLocation | None = None  # once known: where the value lives
        self._loan: Loan | None = None  # borrowed: from whom, under which token
        self._rf: cf.Future[None] | None = None  # done once the call answered (wait)
        self._counted = False  # its reply's bytes are in Runtime.payload_bytes_in
        self._direct = False  # it holds its object directly (no lease yet: see _leased)
        # Borrowed for the call that brought it (its caller holds the object until the
        # call's reply); None: not, or no longer (kept past the call)
        self._on_call: Borrowing | None = None
        self._part = -1  # num_returns: which of the call's values this ref is
        self._session = _session()  # the cluster it belongs to (one per start())
        # What cancels its call once sent (see ReplySlot.attach); None: not sent (yet)
        self._ticket: CancelTicket | None = None
        self._cancel_asked = False  # cancel() before the call went out: it never goes
        self._recursive = True  # that cancel's recursive (it may go out as it is asked)

    def __del__(self) -> None:
        keep = self._keep
        if keep is not None:
            try:
                keep.let_go()
            except Exception:  # interpreter teardown
                pass
        if self._direct:  # the one ref of its object that never travelled: it can go
            rt = current_or_none()
            loc = self._loc
            if rt is not None and loc is not None:
                try:
                    rt.objects.let_go(loc.owner, loc.object_id)
                except Exception:  # interpreter teardown
                    pass
        elif (
            self._loc is None
            and self._cf is None
            and self._loan is None
            and not getattr(self, "_error_read", False)
        ):
            # Its reply was never read (a call whose result nobody got, or only waited
            # for): a value it left at its producer would be kept there for good.
            sent = self._sent
            if sent is None:
                return
            try:
                if sent.done():
                    try:
                        wire = sent.value()
                    except Exception as exc:  # the call failed: nothing was kept
                        rt = current_or_none()
                        _close_gap(rt, self._worker, self._actor_id, self._ticket, exc)
                        return
                    if wire[0] is None and wire[1][0][0] == OK:  # inline: most replies
                        return
                    rt = current_or_none()
                    if rt is not None:  # read on the store's thread: not where GC runs
                        rt.objects.let_go_unread_later(wire, self._part)
                else:
                    rt = current_or_none()
                    if rt is not None:
                        gap = (self._worker, self._actor_id, self._ticket)
                        sent.add_done_callback(partial(_let_go_unread, rt, self._part, gap))
            except Exception:  # interpreter teardown
                pass

    # -- the runtime's side (runtime.protocol.ReplySlot) ---------------------------
    def attach(
        self,
        reply: torch.futures.Future[Wire],
        worker: str,
        keep: KeepAlive | None,
        ticket: CancelTicket,
    ) -> None:
        """The call went out to ``worker``; ``reply`` is the torch future of its raw reply.

        Args:
            reply: The torch future of the call's packed reply.
            worker: The process it went to (named in errors).
            keep: Holds the actor's handle until the reply is in; let go once it is read
                (or the ref goes).
            ticket: What cancels the call (see ``ReplySlot.attach``).
        """
        with _hook_lock:
            self._worker = worker
            self._sent = reply
            self._keep = keep
            self._ticket = ticket
            hook = self._cf is not None
            ready = self._rf
            late = self._cancel_asked  # cancel() came as it went out: cancelled now
        if late:
            _cancel_sent(self, ticket, self._recursive)
        if hook:
            reply.add_done_callback(self._complete)
        if ready is not None:
            reply.add_done_callback(lambda _: _set_ready(ready))

    def _cancel_with_parent(self) -> None:
        """The call that made this ref's call was cancelled: so is this one (runtime.lineage)."""
        cancel(self)

    def fail(self, error: BaseException) -> None:
        """The call failed before it went out: ``get`` raises ``error``."""
        self._set_exception(error)
        with _hook_lock:
            ready = self._rf
        if ready is not None:
            _set_ready(ready)

    def _set_result(self, value: Any) -> None:
        fut = self.future()
        if not fut.done():
            fut.set_result(value)

    def _set_exception(self, exc: BaseException) -> None:
        fut = self.future()
        if not fut.done():
            fut.set_exception(exc)

    def _complete(self, reply: torch.futures.Future[Wire]) -> None:
        # On torch's RPC thread: a value kept at its owner is fetched without waiting here.
        try:
            loc, value = self._reply_value(reply)
        except Exception as exc:
            self._set_exception(exc)
            return
        if loc is None:
            self._set_result(value)
        else:
            self._fetch_into_future(loc)

    def _answered(self) -> None:
        """Its reply is in and read: the actor's handle it kept (KeepAlive) goes now.

        Not when the ref goes: a ref kept after its call answered would keep an unnamed
        actor alive, and its resources taken, after every handle of it went.
        """
        keep, self._keep = self._keep, None
        if keep is not None:
            keep.let_go()

    def _reply_value(self, sent: torch.futures.Future[Wire]) -> tuple[ObjectLocation | None, Any]:
        """The reply ``sent`` (arrived already), read without fetching anything.

        Returns ``(None, value)``, or ``(location, None)`` when the value stayed at its
        owner (a copy that came along is a value: the location is kept in ``_loc``, for
        the ref to travel with); raises the error the reply stands for.
        """
        if self._keep is not None:
            self._answered()
        try:
            wire = sent.value()
        except LocalFailure as failure:
            raise failure.error from None
        except Exception as exc:  # the RPC layer failed: the call never ran, or its process died
            if self._loan is not None:
                raise ObjectLostError(
                    f"{self!r} cannot be resolved: the process that lent it, "
                    f"{self._worker!r}, is unreachable ({str(exc).splitlines()[0]})."
                ) from None
            rt = current_or_none()
            if rt is not None:
                exc = rt.known_failure(self._worker, exc)
            error = rpc_failure(self._call, self._worker, exc, self._actor_id)
            if isinstance(error, ActorDiedError) and rt is not None:
                rt.worker_unreachable(self._worker, exc)  # marked dead before the caller hears
            else:
                _close_gap(rt, self._worker, self._actor_id, self._ticket, exc)
            raise error from None
        if not self._counted and self._part <= 0:  # a call's bytes counted once
            self._count(wire)
        return self._read(wire)

    def _read(self, wire: Wire) -> tuple[ObjectLocation | None, Any]:
        """:meth:`_reply_value` of a reply that arrived: ``wire``, read."""
        blob, side = wire
        if blob is None and side[0][0] == OK:  # a plain value
            return None, side[0][1]
        try:
            reply = unpack(wire)
        except Exception as exc:
            error = unreadable(f"the reply of {self._call}", exc)
            raise ActorError(str(error), error, "", self._actor_id) from None
        status = reply[0]
        if status == MULTI:  # num_returns: this ref's own reply among the call's
            return self._read(reply[1][self._part])
        if status == OBJECT or status == COPY:  # kept at the producer, held by this ref
            object_id, nbytes, owner = reply[1][0], reply[1][1], reply[1][2]
            with _hook_lock:
                if self._loc is None:
                    self._loc = ObjectLocation(object_id, owner, nbytes)
                    self._direct = True
                loc = self._loc
            return (loc, None) if status == OBJECT else (None, reply[1][3])
        if status == LOCATED:  # a lender's answer: the ref it lent, held here directly
            got: ObjectRef[Any] = reply[1]
            if got._loc is None:  # its owner died, and a copy (or an error) came instead
                return None, got._value()
            loan = None
            with _hook_lock:
                if self._loc is None:
                    self._loc = got._loc
                    if got._direct:  # its hold is this ref's now: it goes when this does
                        got._direct = False
                        self._direct = True
                        # Held on its own: the loan's lease can go (dropped outside the
                        # lock), and the loan ends once no borrower needs it.
                        loan = self._loan
                        if loan is not None:
                            self._loan = loan._replace(rref=None)
                loc = self._loc
            del loan
            return loc, None
        if status == ERROR:
            # Its error reached someone (get, a call that needed it): not "unhandled" as
            # the ref goes (see __del__). Set only here, never in __init__: no cost per ref.
            self._error_read = True
        return None, decode_reply(reply, self._actor_id)

    def _as_argument(self) -> Any:
        """What a ready top-level argument travels as: a stand-in with its location.

        The actor fetches the value before the method runs, and the caller keeps this ref
        (and so the object) until the call's reply: no lease is needed for that
        (:func:`send_call`). A ref whose value came back inline travels as that value,
        as Ray sends it: the actor gets what it would have got, and the call's payload
        stays plain (no ref to pickle, rebuild and resolve there). Any other ref without
        a location travels as it is.
        """
        loc = self._loc
        if loc is None and self._session == _session():
            sent = self._sent
            if sent is not None and sent.done():
                try:
                    at, value = self._reply_value(sent)
                except Exception:  # its error travels with it (when_ready gave up before)
                    return self
                if at is None:
                    return value
                loc = at
        if loc is None or self._session != _session() or self._copy_of_lost(loc) is not _NO_COPY:
            return self  # travels as it is (a ref of a cluster shut down, failed, borrowed)
        return _located_ref(self._call, self._actor_id, self.hex(), loc._replace(rref=None))

    def _copy_of_lost(self, loc: ObjectLocation) -> Any:
        """The copy of its value that came with the reply, if its owner may have died since.

        Such a ref travels with that copy, inline: its owner cannot be fetched from any
        more, and the value is here. :data:`_NO_COPY` otherwise (the common case: its
        owner is alive, and the receiver fetches from it in one hop).
        """
        sent = self._sent
        if sent is None or not sent.done():
            return _NO_COPY
        rt = current_or_none()
        if rt is None:
            return _NO_COPY
        # A ref of a cluster shut down since: its owner is gone with that cluster.
        if self._session == _session() and (
            loc.owner == rt.name or not rt.may_have_lost(loc.owner)
        ):
            return _NO_COPY
        try:
            at, value = self._reply_value(sent)
        except Exception:  # its error travels as the ref's (see __reduce__)
            return _NO_COPY
        return _NO_COPY if at is not None else value

    def _of_old_cluster(self) -> ObjectLostError | None:
        """Why it cannot be read, if it belongs to a cluster shut down since, else None.

        Its value or error may have come before: then it is read as any other. An
        object kept by that cluster's processes, or a ref lent there, has nowhere to be
        fetched from: the names of that cluster's processes may now be the new one's.
        """
        if self._session == _session():
            return None
        sent = self._sent
        if self._loc is None and sent is not None and sent.done():
            self._failure()  # reads the reply: its location, if it is an object
        if self._loc is not None:
            # A copy of its value came with the reply: it travels with that.
            return (
                None
                if self._copy_of_lost(self._loc) is not _NO_COPY
                else _after_shutdown(self._loc)
            )
        if self._loan is not None and sent is None:
            return ObjectLostError(
                f"{self!r} cannot be read: it was lent by {self._loan.lender!r} of a cluster "
                "that was shut down, and refs do not outlive their cluster. Get the values "
                "you need before actorrt.shutdown()."
            )
        return None

    def _leased(self) -> ObjectLocation:
        """Its location, with a lease (made now if it held the object directly).

        A ref borrowed for a call is held here first (its call's reply tells the owner).
        """
        borrowing = self._on_call
        if borrowing is not None:
            borrowing.keep(self)
        loc = self._loc
        assert loc is not None
        if self._direct:  # outside the lock: it may wait a round trip
            current("sending an ObjectRef").objects.counted(loc.object_id)
        with _hook_lock:
            loc = self._loc
            assert loc is not None
            if not self._direct:
                return loc
            rt = current("sending an ObjectRef")
            self._loc = loc = rt.objects.lease(loc)
            self._direct = False
            return loc

    def _decode(self, sent: torch.futures.Future[Wire]) -> Any:
        """The value of the reply ``sent`` (arrived already), or the error it stands for.

        A value kept at its owner is fetched from it (this blocks).
        """
        if self._keep is not None:
            self._answered()
        try:
            wire = sent.value()
        except Exception:
            wire = None
        if wire is not None and wire[0] is None and wire[1][0][0] == OK:  # plain: inline
            value = wire[1][0][1]
            if type(value) not in _ATOMS and not self._counted:
                self._count(wire)
            return value
        loc, value = self._reply_value(sent)
        return value if loc is None else self._fetch(loc)

    def _count(self, wire: Wire) -> None:
        self._counted = True
        rt = current_or_none()
        if rt is not None:
            rt.payload_bytes_in += wire_bytes(wire)

    # -- objects kept at their owner ---------------------------------------------------
    def _fetch(self, loc: ObjectLocation) -> Any:
        """The value at ``loc``, fetched from its owner (blocks)."""
        rt = current_or_none()
        if rt is None or self._session != _session():
            raise _after_shutdown(loc)
        if loc.owner == rt.name:
            return rt.objects.value(loc.object_id)
        fut = rt.fetch(loc)
        try:
            fut.wait()
        except Exception:  # _fetched words the error
            pass
        return _fetched(rt, fut, loc)

    def _fetch_into_future(self, loc: ObjectLocation) -> None:
        """Fetches the value at ``loc`` into this ref's future, waiting nowhere."""
        rt = current_or_none()
        try:
            if rt is None or self._session != _session():
                raise _after_shutdown(loc)
            if loc.owner == rt.name:
                self._set_result(rt.objects.value(loc.object_id))
                return
            fut = rt.fetch(loc)
        except Exception as exc:
            self._set_exception(exc)
            return

        def arrived(f: torch.futures.Future[Wire]) -> None:
            try:
                self._set_result(_fetched(rt, f, loc))
            except Exception as exc:
                self._set_exception(exc)

        fut.add_done_callback(arrived)

    def _borrow(self) -> torch.futures.Future[Wire] | None:
        """Asks the lender of a borrowed ref for it (once); the future of its answer."""
        rt = current_or_none()
        with _hook_lock:
            if self._sent is not None or self._loan is None or rt is None:
                return self._sent
            lender, token, _ = self._loan
            fut: torch.futures.Future[Wire]
            old = self._of_old_cluster()
            if old is not None:  # its lender's name may be a process of the new cluster
                fut = torch.futures.Future()
                fut.set_exception(LocalFailure(old))  # type: ignore[arg-type]  # stub is wrong
                self._sent = fut
                return fut
            try:
                # no timeout: the lent ref's call may run for long (get(timeout=) bounds it)
                fut = quick_rpc.rpc_async(lender, rpc_resolve, (token, rt.name))
            except Exception as exc:  # the agent refused at once: the lender is gone
                fut = torch.futures.Future()
                fut.set_exception(exc)  # type: ignore[arg-type]  # torch's stub is wrong
            self._sent = fut
            hook = self._cf is not None
            ready = self._rf
        rt.inflight.track(lender, fut)
        if hook:
            fut.add_done_callback(self._complete)
        if ready is not None:
            fut.add_done_callback(lambda _: _set_ready(ready))
        return fut

    def _ready_future(self) -> cf.Future[None]:
        """A future done once the ref is ready to get (its call answered; nothing fetched)."""
        if self._loan is not None:
            self._borrow()
        with _hook_lock:
            ready = self._rf
            if ready is not None:
                return ready
            ready = self._rf = cf.Future()
            sent, value = self._sent, self._cf
        if self._loc is not None:
            _set_ready(ready)
        elif sent is not None:
            sent.add_done_callback(lambda _: _set_ready(ready))
        elif value is not None:
            value.add_done_callback(lambda _: _set_ready(ready))
        # else: attach() or fail() completes it
        return ready

    def _failure(self) -> BaseException | None:
        """The error of a ready ref (None if it has a value); never fetches."""
        if self._loc is not None:
            return None
        sent = self._sent
        if sent is not None:
            try:
                self._reply_value(sent)
            except BaseException as exc:
                return exc
            return None
        fut = self._cf
        return fut.exception() if fut is not None and fut.done() else None

    # -- what the runtime reads of it (runtime.objects.ObjectRefBase) --------------
    def _value(self) -> Any:
        return _result(self, None)

    async def _value_async(self) -> Any:
        return await self

    def _start(self) -> None:
        self.future()

    def _when_ready(self, fn: Callable[[], None]) -> None:
        self._ready_future().add_done_callback(_Once(lambda _: fn()))

    def _hold_here(self) -> ObjectLocation | None:
        with _hook_lock:
            if self._on_call is None:
                return None
            self._on_call = None
            self._direct = True
            return self._loc

    def _resolution(self, requester: str) -> Wire:
        """The lender's answer to a borrower of this ref, packed as a reply is.

        A value kept at its owner goes as this ref itself, which the borrower receives
        as its direct hold (:meth:`_read` takes it over), as refs in replies travel.
        """
        rt = current("resolving a lent ObjectRef")
        error = self._failure()
        if error is not None:
            return rt.pack(requester, (RAISE, error))
        reply: tuple[int, Any]
        if self._loc is not None:  # known (_failure() read the reply)
            reply = (LOCATED, self)
        elif self._sent is not None:
            reply = (OK, self._reply_value(self._sent)[1])
        else:
            reply = (OK, self._cf.result())  # type: ignore[union-attr]  # ready: set
        return rt.objects.pack_reply(requester, reply)

    # -- the user's side -----------------------------------------------------------
    def done(self) -> bool:
        """True once the result (or error) is ready.

        ``get`` then waits for no call; a value kept at its owner is still fetched from it.
        """
        if self._loc is not None:
            return True
        sent = self._sent
        if sent is None and self._loan is not None:
            sent = self._borrow()
        if sent is not None:
            if sent.done():
                if self._keep is not None:
                    self._answered()
                return True
            return False
        return self._cf is not None and self._cf.done()

    def future(self) -> cf.Future[R_co]:
        """A :class:`concurrent.futures.Future` of the result, for callbacks and ``cf.wait``.

        The same future every time. Its ``result()`` is the value, or raises what
        :func:`get` would raise. Its ``cancel()`` does nothing and returns False: the
        call runs on (to cancel the call, :func:`cancel` the ref).

        Its callbacks run on the thread that completes it, often one of torch's RPC
        threads: keep them short. One that blocks (a ``get`` of the next call) holds that
        thread, and once every RPC thread waits so, no reply is read; hand such work to a
        thread of your own (an executor).

        Returns:
            The future of the call's result.

        Example::

            ref = counter.add.remote(1)
            ref.future().add_done_callback(lambda f: print("got", f.result()))
            done, _ = concurrent.futures.wait([ref.future()], timeout=30)
        """
        fut = self._cf
        if fut is not None:
            return fut
        if self._loan is not None:
            self._borrow()
        with _hook_lock:
            if self._cf is not None:
                return self._cf
            fut = self._cf = _RefFuture()
            sent = self._sent
        if sent is not None:
            sent.add_done_callback(self._complete)  # runs at once if the reply is here
        elif self._loc is not None:
            self._fetch_into_future(self._loc)
        return fut

    def __await__(self) -> Generator[Any, None, R_co]:
        """``await ref`` gives the value in a coroutine (raises what :func:`get` would raise).

        Cancelling the awaiting task (e.g. ``asyncio.wait_for`` timing out) cancels the
        wait only: the call runs on, and a later ``await ref`` or ``get(ref)`` returns its
        value. Awaiting never blocks the event loop.

        Example::

            async def main():
                ref = counter.add.remote(1)
                try:
                    return await asyncio.wait_for(ref, timeout=1)
                except asyncio.TimeoutError:
                    return await ref  # the same ref, still good
        """
        return asyncio.wrap_future(self.future()).__await__()

    def __repr__(self) -> str:
        where = f", object {self._loc.object_id[:12]} on {self._loc.owner}" if self._loc else ""
        return f"ObjectRef({self._call}{where}, {'done' if self.done() else 'pending'})"

    def hex(self) -> str:
        """The ref's id, in hex, as Ray's ``ObjectRef.hex()``.

        Every copy of a ref has its id, wherever it travelled (to an actor and back, inside
        a value, a put): refs are equal, and hash alike, when their ids are, so a ref that
        came back finds its entry in a dict keyed by refs. Each ref of a call with
        ``num_returns`` has its own id, and so has each ref a streaming call yields.
        """
        ref_id = self._id
        return ref_id if type(ref_id) is str else f"{_ID_PREFIX}{ref_id:016x}"

    def __eq__(self, other: object) -> bool:
        if type(other) is not ObjectRef:
            return NotImplemented
        return self._id == other._id or self.hex() == other.hex()

    def __hash__(self) -> int:
        return hash(self.hex())

    # A copy of a ref is the ref (copy.deepcopy of a value holding refs), as in Ray;
    # __reduce__ refuses outside a call.
    def __copy__(self) -> ObjectRef[R_co]:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ObjectRef[R_co]:
        return self

    def __reduce__(self) -> tuple[Callable[..., ObjectRef[Any]], tuple[Any, ...]]:
        if not packing():
            raise TypeError(
                f"{self!r} can travel only inside the arguments or return values of remote "
                "calls (anywhere inside them) or inside actorrt.put values, where actorrt "
                "keeps its object alive for the receiver; it cannot be pickled another way. "
                "Call actorrt.get(ref) first to send the value itself."
            )
        head = (self._call, self._actor_id, self.hex())
        old = self._of_old_cluster()
        if old is not None:
            return _failed_ref, (*head, old)
        if self._loc is not None:
            copy = self._copy_of_lost(self._loc)
            if copy is not _NO_COPY:
                return _inline_ref, (*head, copy)
            return self._located(head)
        sent = self._sent
        ready = sent.done() if sent is not None else self._cf is not None and self._cf.done()
        if ready:
            error = self._failure()  # reads the reply: _loc is known from here on
            if error is not None:
                return _failed_ref, (*head, error)
            if self._loc is not None and self._copy_of_lost(self._loc) is _NO_COPY:
                return self._located(head)
            if sent is not None:
                _, value = self._reply_value(sent)
            else:
                value = self._cf.result()  # type: ignore[union-attr]  # ready: set
            return _inline_ref, (*head, value)
        if self._loan is not None:  # still unanswered: the receiver borrows from our lender
            return _borrowed_ref, (*head, self._loan)
        holds = reply_holds()
        if holds is not None and holds.measuring:  # a put measured: lent once fetched
            return _inline_ref, (*head, None)  # of a loan's size; never unpacked
        return _borrowed_ref, (*head, current("sending an ObjectRef").objects.lend(self))

    def _located(
        self, head: tuple[str, str | None, str]
    ) -> tuple[Callable[..., ObjectRef[Any]], tuple[Any, ...]]:
        """How a ref whose object is kept at its owner travels.

        Inside a call's arguments, borrowed for the call: the sender keeps this ref (and
        so its hold) until the reply, and the receiver holds the object only if it keeps
        the ref past the call (``objects.Borrowing``), as Ray's borrowers do. Most
        refs passed to a call die with it, at no cost. In a reply (a method's result, a
        streamed value, a fetched value), held directly by the receiver (see
        :class:`~actorrt.runtime.payload.ReplyHolds`), this process too; a put value's
        refs are only measured as it is put, and travel so when it is fetched.
        Elsewhere (an actor's constructor arguments), with a lease, whose copies torch
        counts.
        """
        pins = call_pins()
        if pins is None:
            holds = reply_holds()
            loc = self._loc
            assert loc is not None
            if holds is not None:
                held = Aside((_held_ref, (*head, loc._replace(rref=None))))
                if loc.owner == current("sending an ObjectRef").name:
                    # Its owner's reply: the receiver's hold is counted here as the reply
                    # goes (ObjectStore.hold_sent); the ref is rebuilt once on arrival.
                    holds.own.append(loc.object_id)
                    return aside, (held,)
                # Another process's: its owner is told the receiver holds it, and this
                # process keeps this ref (its own hold) until the owner heard
                # (ObjectStore.hold_sent).
                borrowing = self._on_call
                if borrowing is not None:  # a ref borrowed for a call: held here now
                    borrowing.keep(self)
                holds.handed.append((self, loc.owner, loc.object_id))
                return aside, (held,)
            return _located_ref, (*head, self._leased())
        pins.append(self)
        loc = self._loc
        assert loc is not None
        return _ref_for_call, (*head, loc._replace(rref=None))


def cancel(
    ref: ObjectRef[Any] | _Streaming, *, force: bool = False, recursive: bool = True
) -> None:
    """Cancels the call behind ``ref``, as ``ray.cancel`` does.

    ``get(ref)`` of a cancelled call raises :class:`~actorrt.errors.TaskCancelledError`.
    What it stops:

    - a call not yet begun (waiting for its ref arguments, queued behind other calls of
      its actor or function threads, or still on its way): it never runs (one waiting
      for its ref arguments fails at once, not when they come);
    - a call of an async actor (one with an ``async def`` method) that has begun: its
      asyncio task is cancelled, so ``CancelledError`` is raised where it awaits (a
      method that catches it and returns gives its value);
    - a call with retries (``max_task_retries``, ``max_retries``): it is not sent again;
    - a streaming call (an ``ObjectRefGenerator``) that has begun: its method stops
      after the value it is making (an async one where it awaits); the refs it gave stay
      good, and the next one raises ``TaskCancelledError``.

    A running remote function is interrupted, as Ray interrupts a running task:
    ``KeyboardInterrupt`` is raised in it, at once in Python code, or when a blocking C
    call (a sleep, a lock, a torch op) returns (an ``async def`` function's task is
    cancelled instead); one that catches it and returns gives its value. A call already
    running in a plain (threaded) actor runs to its end, as in Ray (actors keep their
    state, and a method cut in half would leave it half changed), and its ``get`` raises
    ``TaskCancelledError`` as Ray's does: the value it returns is dropped. Such a method
    can stop early on its own: ``actorrt.get_runtime_context().is_canceled()`` is True
    once its call was cancelled. A call that has answered is left as it is.
    Cancelling does not wait: the call's reply says what came of it.

    With ``recursive=True`` (the default, as Ray's), the calls the cancelled call made
    while it ran (actor calls and remote functions whose refs still exist) are cancelled
    too, as above, and the calls they made in turn. A method blocked in ``get`` of such a
    call then gets ``TaskCancelledError``; leaving the method, it makes the cancelled
    call's ``get`` raise ``TaskCancelledError`` ("while it ran"). Calls it makes after the
    cancel came are not cancelled.

    Args:
        ref: A ref of a call this process made (``handle.method.remote()``,
            ``f.remote()``); with ``num_returns``, any one of the call's refs; or the
            ``ObjectRefGenerator`` of a streaming call.
        force: Not supported: Ray's ``force=True`` kills the worker process, and an
            actorrt process runs many actors and calls.
        recursive: Whether the calls the call made are cancelled with it.

    Raises:
        TypeError: ``ref`` is not an ``ObjectRef`` (or ``ObjectRefGenerator``).
        ValueError: ``force=True``, or ``ref`` came from another process (cancel it in
            the process that made the call).
        NotInitializedError: actorrt is not started.

    Example::

        refs = [learner.train.remote(batch) for batch in batches]
        actorrt.cancel(refs[-1])  # queued behind the others: it never runs
        try:
            actorrt.get(refs[-1])
        except actorrt.TaskCancelledError:
            pass
    """
    if force:
        raise ValueError(
            "actorrt.cancel(ref, force=True) is not supported: it would kill a worker "
            "process, which runs other actors and calls too. Use actorrt.cancel(ref) (a "
            "call not yet begun never runs), or actorrt.kill(handle) to end an actor now."
        )
    if _is_generator(ref):
        ref = ref.completed()  # type: ignore[union-attr]  # the ref of its call
    ref = _check_ref(ref)
    rt = current("actorrt.cancel()")
    if ref._loan is not None:
        raise ValueError(
            f"actorrt.cancel({ref!r}): this ref was passed to this process; only the "
            "process that made the call can cancel it. Cancel it there."
        )
    with _hook_lock:
        ticket = ref._ticket
        unsent = False
        if ticket is None:  # no call out: waiting for its arguments, or none at all
            cf_done = ref._cf is not None and ref._cf.done()
            if ref._sent is None and ref._loc is None and not cf_done:
                ref._recursive = recursive
                ref._cancel_asked = True  # never sent (send_call), or cancelled by attach
                unsent = ref._actor_id is not None
    if unsent:
        # get raises now, as in Ray, not once the ref arguments it waits for are ready
        # (the call then gives its number up, unsent; or, going out this very moment,
        # is cancelled at its actor by attach).
        what = "before it was sent (it waited for its ref arguments)"
        ref.fail(cancelled(ref._call, what, ref._actor_id))
        return
    if ticket is None:
        return
    if not ref.done():
        _cancel_sent(ref, ticket, recursive, rt)


def _cancel_sent(
    ref: ObjectRef[Any], ticket: CancelTicket, recursive: bool, rt: Runtime | None = None
) -> None:
    """Cancels the call of ``ref``, which went out (``ticket``: see ``ReplySlot.attach``)."""
    if not isinstance(ticket, int):
        ticket(recursive)
        return
    rt = rt or current_or_none()
    if rt is not None and ref._actor_id is not None:
        rt.cancel_call(ref._worker, ref._actor_id, ticket, recursive)


def _let_go_unread(
    rt: Runtime,
    part: int,
    gap: tuple[str, str | None, CancelTicket | None],
    sent: torch.futures.Future[Wire],
) -> None:
    """Lets go of the object a reply nobody read left at its producer (if it left one).

    Runs as the ref goes, or, on torch's RPC thread, when the reply of a ref dropped
    before it came arrives. ``gap``: the call's process, actor and ticket, for
    :func:`_close_gap`.
    """
    try:
        wire = sent.value()
    except Exception as exc:  # the call failed: nothing was kept
        _close_gap(rt, *gap, exc)
        return
    rt.objects.let_go_unread(wire, part)


def _close_gap(
    rt: Runtime | None,
    worker: str,
    actor_id: str | None,
    ticket: CancelTicket | None,
    exc: BaseException,
) -> None:
    """Gives up the number of a call that failed in pickling at a live process.

    torch unpickles a request before actorrt's handler runs: one it fails to unpickle
    there (a class or module the receiver lacks, in what actorrt hands torch) never
    reaches the actor's mailbox, and every later call from this process to the actor
    would wait for its number for good. The failure may as well have come after the
    call ran (its reply failed to pickle): the mailbox then ignores the number, long
    passed. A call that may be sent again (retries: ``ticket`` not a number) numbers
    each attempt itself.
    """
    if rt is None or actor_id is None or type(ticket) is not int:
        return
    if failed_in_pickling(exc):
        rt.skip_at(actor_id, worker, ticket)


class _Once:
    """A ready future's callback that lets go of what it runs once it ran.

    A ``concurrent.futures.Future`` keeps its callbacks after running them, and a ref
    keeps its ready future: a callback that holds the ref (a lender's answer to a
    borrower, a call waiting for its ref arguments) made a cycle that only the cyclic
    garbage collector frees, which an idle process may never run, and the ref's object
    stayed at its owner meanwhile.
    """

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[Any], None]) -> None:
        self._fn: Callable[[Any], None] | None = fn

    def __call__(self, arg: Any) -> None:
        fn, self._fn = self._fn, None
        if fn is not None:
            fn(arg)


def _let_go_after_reply(held: list[ObjectRef[Any]], _: object) -> None:
    held.clear()


def _set_ready(ready: cf.Future[None]) -> None:
    # Not under _hook_lock: set_result runs the callbacks here, and they send calls.
    try:
        ready.set_result(None)
    except cf.InvalidStateError:  # made ready by another road first
        pass


def _session() -> int:
    """The running cluster's :attr:`Runtime.session`; 0 when none runs."""
    rt = current_or_none()
    return 0 if rt is None else rt.session


def _after_shutdown(loc: ObjectLocation) -> ObjectLostError:
    return ObjectLostError(
        f"object {loc.object_id} (owned by {loc.owner!r}) cannot be read: the cluster was "
        "shut down, and objects do not outlive it. Get the values you need before "
        "actorrt.shutdown()."
    )


def _fetched(rt: Runtime, fut: torch.futures.Future[Wire], loc: ObjectLocation) -> Any:
    """The value a fetch of ``loc`` brought (arrived already), or its error."""
    try:
        wire = fut.value()
    except LocalFailure as failure:
        raise rt.lost(loc, str(failure.error)) from None
    except Exception as exc:  # the owner is unreachable: it died
        rt.worker_unreachable(loc.owner, exc)
        why = f"its owner process is unreachable ({str(exc).splitlines()[0]})"
        raise rt.lost(loc, why) from None
    rt.payload_bytes_in += wire_bytes(wire)
    return decode_reply(unpack(wire))


def _located_ref(
    call: str, actor_id: str | None, ref_id: str, loc: ObjectLocation
) -> ObjectRef[Any]:
    """Rebuilds a ref of an object kept at its owner."""
    ref: ObjectRef[Any] = ObjectRef(call, actor_id, ref_id)
    ref._loc = loc
    ref._worker = loc.owner
    return ref


def _ref_for_call(
    call: str, actor_id: str | None, ref_id: str, loc: ObjectLocation
) -> ObjectRef[Any]:
    """Rebuilds a ref of an object kept at its owner, borrowed for the call it came with."""
    ref = _located_ref(call, actor_id, ref_id, loc)
    borrowing = ref._on_call = borrowed_here()
    borrowing.add(ref)
    return ref


def _held_ref(call: str, actor_id: str | None, ref_id: str, loc: ObjectLocation) -> ObjectRef[Any]:
    """Rebuilds a ref its owner sent in a reply: held directly here, let go when it goes."""
    ref = _located_ref(call, actor_id, ref_id, loc)
    ref._direct = True
    return ref


def _inline_ref(call: str, actor_id: str | None, ref_id: str, value: Any) -> ObjectRef[Any]:
    """Rebuilds a ready ref whose (small) value travelled with it."""
    ref: ObjectRef[Any] = ObjectRef(call, actor_id, ref_id)
    fut = ref._cf = _RefFuture()
    fut.set_result(value)
    return ref


def _failed_ref(
    call: str, actor_id: str | None, ref_id: str, error: BaseException
) -> ObjectRef[Any]:
    """Rebuilds a ready ref whose call failed (``ref_id`` empty: a new ref)."""
    ref: ObjectRef[Any] = ObjectRef(call, actor_id, ref_id)
    fut = ref._cf = _RefFuture()
    fut.set_exception(error)
    return ref


def failed(what: str, error: BaseException) -> ObjectRef[Any]:
    """A ready ref of a call ``what`` that never started: ``get`` raises ``error``."""
    return _failed_ref(what, None, "", error)


def _borrowed_ref(call: str, actor_id: str | None, ref_id: str, loan: Loan) -> ObjectRef[Any]:
    """Rebuilds a ref whose call had not answered when it was sent: its lender resolves it."""
    ref: ObjectRef[Any] = ObjectRef(call, actor_id, ref_id)
    ref._loan = loan
    ref._worker = loan.lender
    return ref


def put(value: Any) -> ObjectRef[Any]:
    """Keeps ``value`` in this process as an object; returns its ref at once.

    As ``ray.put``: pass the ref to any number of actors (as an argument, or inside
    values), and each fetches the value from this process in one hop (GPU to GPU where
    the plan gave the pair a device map; CUDA tensors stay on their GPU here). Works on
    the driver and inside actor methods. The value lives while some ref to it exists.

    Args:
        value: Anything a remote call could carry (tensors, containers, dataclasses,
            handles, other refs).

    Returns:
        The object's ref.

    Raises:
        TypeError: ``value`` is an ``ObjectRef`` (pass the ref itself), or cannot be sent
            to another process (a lock, an open file, a socket).
        NotInitializedError: actorrt is not started.
    """
    if isinstance(value, ObjectRef):
        raise TypeError(
            "actorrt.put() of an ObjectRef: the ref can already be passed anywhere; put "
            "the value itself (actorrt.get(ref)) if you mean to copy it."
        )
    rt = current("actorrt.put()")
    ref = _located_ref("put", None, "", rt.put(value))
    ref._direct = True  # the one ref of the object, until it travels
    return ref


def check_timeout(timeout: object, name: str = "timeout") -> float | None:
    """``timeout`` as seconds (None: no limit); rejects what is not a number >= 0.

    ``name`` is the parameter the errors name.
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(
            f"{name}={timeout!r} must be a number of seconds (e.g. {name}=30) or None to "
            "wait as long as it takes."
        )
    if not float(timeout) >= 0:  # also NaN
        raise ValueError(
            f"{name}={timeout!r} must be >= 0 seconds (0 polls once), or None to wait as "
            "long as it takes."
        )
    return None if math.isinf(timeout) else float(timeout)


def _refuse_generator(value: object) -> None:
    """Raises ``TypeError`` naming the fix when ``value`` is an ``ObjectRefGenerator``."""
    if _is_generator(value):
        raise TypeError(
            f"{value!r} is the generator of a streaming call, not an ObjectRef: iterate it "
            "(for ref in gen: actorrt.get(ref)), or use gen.completed(), the ref that is "
            "ready once the method has ended."
        )


def _check_ref(ref: object) -> ObjectRef[Any]:
    if not isinstance(ref, ObjectRef):
        _refuse_generator(ref)
        raise TypeError(
            f"expected an ObjectRef (what handle.method.remote(...) returns), got {type(ref)!r}."
        )
    return ref


@overload
def get(refs: ObjectRef[T], *, timeout: float | None = None) -> T: ...
@overload
def get(refs: Sequence[ObjectRef[T]], *, timeout: float | None = None) -> list[T]: ...


def get(refs: ObjectRef[Any] | Sequence[ObjectRef[Any]], *, timeout: float | None = None) -> Any:
    """Waits for one result, or for every result of a list, and returns it.

    Args:
        refs: An ``ObjectRef`` or a list/tuple of them.
        timeout: Seconds to wait in all; ``None`` (or exactly ``-1``, as Ray's ``get``
            takes it) waits as long as it takes.

    Returns:
        The value, or a list of values in the order of ``refs``. For a type checker,
        ``get(ObjectRef[T])`` is a ``T`` and ``get(list[ObjectRef[T]])`` a ``list[T]``.

    Raises:
        GetTimeoutError: The results did not all arrive within ``timeout``.
        ActorError: The method raised (the remote traceback is in the message). Of a
            list, the first failure is raised as soon as it is known, as in Ray: it does
            not wait for slower calls before it in the list.
        ActorDiedError: The actor was killed, ended itself or its process died.
        TypeError: ``timeout`` is not a number.
        ValueError: ``timeout`` is negative, other than ``-1``.
        RuntimeError: Inside an actor's method, a result of a call to the same actor
            that cannot run until the method returns (the actor runs one call at a
            time, or this blocks its event loop): the wait would never end.
    """
    timeout = _minus_one_is_none(timeout)
    actor_id = in_actor.get()
    if actor_id is not None:
        if asyncio._get_running_loop() is not None:
            _blocking_an_event_loop()
        _not_waiting_on_itself(refs, actor_id)
    pool = lender()
    if pool is not None and not _all_done(refs):  # in a remote function: lend its thread
        with pool.lending():
            return _get(refs, _ready_in_slices(refs, timeout))
    return _get(refs, timeout)


def _minus_one_is_none(timeout: Any) -> Any:
    """``get``'s ``timeout``, with exactly ``-1`` read as None (no limit).

    Ray's ``get`` passes -1 to its core as "wait for ever", and code written for Ray uses
    it; any other negative stays refused (Ray's core aborts the process on one), as does
    a negative ``wait`` timeout, which Ray refuses too. A bool is left for
    :func:`check_timeout` to refuse.
    """
    if isinstance(timeout, numbers.Real) and not isinstance(timeout, bool) and timeout == -1:
        return None
    return timeout


_SLICE_S = 0.1
"""How long a remote function's ``get`` waits in C at a time (see :func:`_ready_in_slices`)."""


def _ready_in_slices(refs: object, timeout: object) -> Any:
    """In a remote function: waits until ``refs`` are ready (or one failed), in slices.

    A cancel interrupts a running function by raising in its thread, which happens only
    when the thread runs Python: a ``get`` waiting in C for a child call that goes on
    (a plain actor's method) would hold the cancel until the child answered. Waiting at
    most :data:`_SLICE_S` at a time lets it land within one slice, as Ray's does.

    Returns:
        What is left of ``timeout`` (unchecked arguments are returned as they are, for
        :func:`_get` to refuse).
    """
    if isinstance(refs, ObjectRef):
        items = [refs]
    elif isinstance(refs, (list, tuple)) and all(isinstance(r, ObjectRef) for r in refs):
        items = list(refs)
    else:
        return timeout
    timeout = check_timeout(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    while not all(r.done() for r in items) and not any(_failed_already(r) for r in items):
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            break
        # one slice at a time: a failure among them ends the wait, as get raises it then
        _wait(items, len(items), _SLICE_S if left is None else min(_SLICE_S, left))
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0 and not all(r.done() for r in items):
        if any(_failed_already(r) for r in items):
            return 0.0  # get raises the failure, as it does outside a function
        raise _not_ready(refs, timeout)
    return max(0.0, left)


def _not_waiting_on_itself(refs: object, actor_id: str) -> None:
    """Raises where an actor's method would wait for ever on a call to its own actor.

    Ray's ``get`` hangs there (or times out): the call waits in the actor's queue for
    the thread (or event loop) that waits for it. Asked only of refs of calls to this
    actor that are not ready, so other gets pay one comparison per ref.
    """
    items = refs if isinstance(refs, (list, tuple)) else (refs,)
    for ref in items:
        if _waits_on_itself(ref, actor_id):
            raise _waiting_on_itself("actorrt.get()", ref)


def _waits_on_itself(ref: object, actor_id: str) -> bool:
    """Whether ``ref`` is of a call to this actor that cannot run until this method returns."""
    if type(ref) is not ObjectRef or ref._actor_id != actor_id:
        return False
    seq = ref._ticket
    if type(seq) is not int or ref.done():  # a call with retries: not judged here
        return False
    rt = current_or_none()
    return rt is not None and rt.host.waits_on_itself(actor_id, rt.name, seq)


def _waiting_on_itself(what: str, ref: ObjectRef[Any]) -> RuntimeError:
    """The error of ``what`` (``get``, ``wait``) waiting for ever on ``ref`` (see above)."""
    here = in_method.get() or "this method"
    how = (
        "blocks its actor's event loop, where that call would run: await the ref "
        "instead (await ref)"
        if asyncio._get_running_loop() is not None
        else "holds its actor's only thread (max_concurrency=1), which that call "
        "needs: call the method directly (self.method(...)), or let the actor run "
        "two calls at once (max_concurrency=2, or a concurrency group for the method)"
    )
    return RuntimeError(
        f"{what} in {here} waits on {ref!r}, a call to its own actor that cannot run "
        f"until {here} returns, so the wait would never end: {here} {how}."
    )


_warned_blocking = False


def _blocking_an_event_loop() -> None:
    """Says once per process that an async actor's method blocks its loop in ``get``.

    The actor's other calls (and its own awaits) wait meanwhile; a call back into it
    then waits for ever. Ray warns the same way.
    """
    global _warned_blocking
    if not _warned_blocking:
        _warned_blocking = True
        logging.getLogger("actorrt").warning(
            "actorrt.get() inside an async actor's method blocks its event loop: every "
            "other call of the actor waits meanwhile. Await the ref instead (await ref, "
            "await asyncio.gather(*refs))."
        )


def _all_done(refs: object) -> bool:
    if isinstance(refs, ObjectRef):
        return refs.done()
    return isinstance(refs, (list, tuple)) and all(
        isinstance(r, ObjectRef) and r.done() for r in refs
    )


def _get(refs: ObjectRef[Any] | Sequence[ObjectRef[Any]], timeout: float | None) -> Any:
    """:func:`get`, waiting on this thread."""
    if timeout is None and type(refs) is ObjectRef:  # a sync call's get: nothing to check
        sent = refs._sent
        if sent is None:
            return _result(refs, None)
        try:  # _result()'s work, without its call
            sent.wait()
        except Exception:  # _decode turns the RPC error into the one users see
            pass
        return refs._decode(sent)
    timeout = check_timeout(timeout)
    if isinstance(refs, ObjectRef):
        return _result(refs, timeout)
    if not isinstance(refs, (list, tuple)):
        _refuse_generator(refs)
        raise TypeError(f"actorrt.get takes an ObjectRef or a list of them, got {type(refs)!r}.")
    deadline = None if timeout is None else time.monotonic() + timeout
    refs = [_check_ref(ref) for ref in refs]
    if len(refs) > 1 and not all(ref.done() for ref in refs):
        _all_or_first_error(refs, timeout)
    elif len(refs) > 1:  # objects known to live elsewhere: fetch them all at once
        for ref in refs:
            if ref._loc is not None:
                ref.future()
    out = []
    for ref in refs:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        out.append(_result(ref, left, total=timeout))
    return out


def _all_or_first_error(refs: list[ObjectRef[Any]], timeout: float | None) -> None:
    """Waits until every ref is ready or one of them failed (raises the first failed).

    As Ray's ``get`` of a list: a call that failed is not hidden behind slower ones that
    come before it in the list (nor behind a timeout they run past). Objects kept
    elsewhere are fetched at once, not one after another. A reply is read only as far as
    its status here; the values are read by the caller's thread afterwards, as before.
    """
    for ref in refs:
        if ref._loc is not None and ref._cf is None:
            ref.future()  # its fetch starts now
    waiting: list[cf.Future[Any] | torch.futures.Future[Wire]] = []
    for ref in refs:
        fut: cf.Future[Any] | torch.futures.Future[Wire] | None = ref._cf
        if fut is None:
            fut = ref._sent if ref._sent is not None else ref._borrow()
        if fut is not None and not fut.done():
            waiting.append(fut)
    # One failed already: raised now, not after the slower ones (nor their timeout).
    if waiting and not any(_failed_already(ref) for ref in refs):
        ready = threading.Condition()
        state = [len(waiting), False]  # replies still to come; whether one failed

        def arrived(failure: bool) -> None:
            with ready:
                state[0] -= 1
                state[1] = state[1] or failure
                if state[0] <= 0 or failure:  # the waiter wakes once, not per reply
                    ready.notify()

        for fut in waiting:
            if isinstance(fut, cf.Future):
                fut.add_done_callback(lambda f: arrived(f.exception() is not None))
            else:
                fut.add_done_callback(lambda f: arrived(_reply_fails(f)))
        with ready:
            ready.wait_for(lambda: state[0] <= 0 or state[1], timeout)
    for ref in refs:  # the first failed in the list's order, of those failed by now
        if _failed_already(ref):
            _result(ref, 0.0)  # raises its error


def _reply_fails(sent: torch.futures.Future[Wire]) -> bool:
    """Whether an arrived reply stands for an error (the RPC failing counts)."""
    try:
        wire = sent.value()
    except Exception:
        return True
    try:
        if wire[0] is None and wire[1][0][0] == OK:  # a plain value: most replies
            return False
        return fails(wire)
    except Exception:  # unreadable here: its own read raises what it is (and must wake)
        return True


def _failed_already(ref: ObjectRef[Any]) -> bool:
    if ref._cf is not None:
        return ref._cf.done() and ref._cf.exception() is not None
    sent = ref._sent
    return sent is not None and sent.done() and _reply_fails(sent)


def _result(ref: ObjectRef[Any], timeout: float | None, total: float | None = None) -> Any:
    """The value of the checked ``ref`` within ``timeout`` (``total``: named in the error)."""
    if ref._cf is None:
        sent = ref._sent if ref._sent is not None else ref._borrow()
        if sent is not None:
            if timeout is None:
                try:
                    sent.wait()
                except Exception:  # _decode turns the RPC error into the one users see
                    pass
                return ref._decode(sent)
            if sent.done():  # with a timeout, only a value already here is read directly
                try:
                    loc, value = ref._reply_value(sent)
                except Exception:
                    return ref._decode(sent)  # raises the reply's error
                if loc is None:
                    return value
        elif ref._loc is not None and timeout is None:  # a ref that came as a location
            return ref._fetch(ref._loc)
    try:
        return ref.future().result(timeout)
    except cf.TimeoutError:
        raise _not_ready(ref, total if total is not None else timeout) from None


def _not_ready(what: object, timeout: float | None) -> GetTimeoutError:
    return GetTimeoutError(
        f"{what!r} not ready after {timeout} s; raise the timeout, or use "
        "actorrt.wait(refs, timeout=...) to poll without raising."
    )


@overload
def wait(
    refs: Sequence[ObjectRef[T]],
    *,
    num_returns: int = 1,
    timeout: float | None = None,
    fetch_local: bool = False,
) -> tuple[list[ObjectRef[T]], list[ObjectRef[T]]]: ...
@overload
def wait(
    refs: Sequence[ObjectRef[Any] | _Streaming],
    *,
    num_returns: int = 1,
    timeout: float | None = None,
    fetch_local: bool = False,
) -> tuple[list[Any], list[Any]]: ...


def wait(
    refs: Sequence[Any],
    *,
    num_returns: int = 1,
    timeout: float | None = None,
    fetch_local: bool = False,
) -> tuple[list[Any], list[Any]]:
    """Waits until ``num_returns`` of ``refs`` are ready, or ``timeout`` passes.

    Args:
        refs: The refs to watch (no duplicates). An ``ObjectRefGenerator`` among them is
            ready once ``next(gen)`` would not wait (its next value came, or its end), as
            in Ray.
        num_returns: How many ready refs to wait for (1 <= num_returns <= len(refs)).
        timeout: Seconds to wait at most; ``None`` waits as long as it takes.
        fetch_local: As Ray's: True counts a ref ready once its value is here (a value
            kept at its owner is fetched, all at once); False (the default here, unlike
            Ray) once its call answered, fetching nothing.

    Returns:
        ``(ready, not_ready)``, each in the order of ``refs``; ``ready`` holds at most
        ``num_returns`` refs. A ref whose call failed counts as ready (``get`` raises).
        No refs give ``([], [])``, as in Ray.

    Raises:
        TypeError: ``timeout`` is not a number.
        ValueError: ``timeout`` is negative, ``num_returns`` is out of range, or a ref
            appears twice.
        RuntimeError: Without a timeout, inside an actor's method, too few of ``refs``
            can ever be ready: the others are calls to the same actor that cannot run
            until the method returns (see :func:`get`).
    """
    if not isinstance(refs, (list, tuple)):
        if _is_generator(refs):
            raise TypeError(
                f"actorrt.wait takes a list: actorrt.wait([gen]) for {refs!r} (ready once "
                "next(gen) would not wait)."
            )
        raise TypeError(f"actorrt.wait takes a list of ObjectRefs, got {type(refs)!r}.")
    timeout = check_timeout(timeout)
    if not refs:
        return [], []
    refs = [r if _is_generator(r) else _check_ref(r) for r in refs]
    if len({r if type(r) is ObjectRef else id(r) for r in refs}) != len(refs):
        raise ValueError("actorrt.wait got the same ObjectRef twice; pass each ref once.")
    if not 1 <= num_returns <= len(refs):
        raise ValueError(f"num_returns={num_returns} must be between 1 and len(refs)={len(refs)}.")
    if not isinstance(fetch_local, bool):
        raise TypeError(f"fetch_local={fetch_local!r} must be True or False.")
    is_ready = _is_here if fetch_local else _is_ready
    actor_id = in_actor.get()
    if timeout is None and actor_id is not None:
        blocked = [r for r in refs if _waits_on_itself(r, actor_id)]
        if blocked and len(refs) - len(blocked) < num_returns:  # too few of them can come
            raise _waiting_on_itself("actorrt.wait()", blocked[0])
    pool = lender()
    if pool is not None and sum(1 for r in refs if is_ready(r)) < num_returns:
        with pool.lending():  # in a remote function: lend its thread while it waits
            return _wait(refs, num_returns, timeout, fetch_local, _SLICE_S)
    return _wait(refs, num_returns, timeout, fetch_local)


def _wait(
    refs: list[Any],
    num_returns: int,
    timeout: float | None,
    fetch_local: bool = False,
    slice_s: float | None = None,
) -> tuple[list[Any], list[Any]]:
    """:func:`wait` of checked arguments (refs and generators), waiting on this thread.

    ``slice_s``: wait in C at most this long at a time (a remote function's: see
    :func:`_ready_in_slices`).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    if fetch_local:  # a ref's own future is done once its value is here (fetched)
        is_ready = _is_here
        pending = {r.future() if type(r) is ObjectRef else r._ready_future() for r in refs}
    else:  # ready: answered, not fetched
        is_ready = _is_ready
        pending = {r._ready_future() for r in refs}
    while sum(1 for r in refs if is_ready(r)) < num_returns:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            break
        if slice_s is not None:
            left = slice_s if left is None else min(left, slice_s)
        _, pending = cf.wait(pending, timeout=left, return_when=cf.FIRST_COMPLETED)
    ready: list[Any] = []
    not_ready: list[Any] = []
    for r in refs:
        (ready if is_ready(r) and len(ready) < num_returns else not_ready).append(r)
    return ready, not_ready


def _is_here(ref: Any) -> bool:
    """With ``fetch_local``: a ref's value is here (its future done); a generator as before."""
    if type(ref) is ObjectRef:
        fut = ref._cf
        return fut is not None and fut.done()
    return bool(ref._next_ready())


def _is_generator(value: object) -> bool:
    """Whether ``value`` is an ``ObjectRefGenerator`` (refs.py cannot import it: a cycle)."""
    return not isinstance(value, ObjectRef) and callable(getattr(value, "_next_ready", None))


def _is_ready(ref: Any) -> bool:
    """A ref's ``done()``; a generator's ``_next_ready()`` (see :func:`wait`)."""
    return bool(ref.done() if type(ref) is ObjectRef else ref._next_ready())


def _has_refs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    # On every call: a loop without the lists that collecting the refs would make.
    for a in args:
        if type(a) is ObjectRef:
            return True
    if kwargs:
        for v in kwargs.values():
            if type(v) is ObjectRef:
                return True
    return False


class _Parts:
    """Where one call with ``num_returns`` puts its outcome: each of its refs."""

    __slots__ = ("refs",)

    def __init__(self, refs: list[ObjectRef[Any]]) -> None:
        self.refs = refs

    def attach(
        self,
        reply: torch.futures.Future[Wire],
        worker: str,
        keep: KeepAlive | None,
        ticket: CancelTicket,
    ) -> None:
        for ref in self.refs:
            ref.attach(reply, worker, keep, ticket)

    def fail(self, error: BaseException) -> None:
        for ref in self.refs:
            ref.fail(error)


def new_refs(
    what: str,
    actor_id: str | None,
    method: str,
    num_returns: int,
    group: str | None = None,
    task: str | None = None,
) -> tuple[Any, ObjectRef[Any] | _Parts, str]:
    """The refs of one call: what ``.remote()`` returns, where its outcome goes, its name.

    With ``num_returns`` other than 1 that is a list of refs, each of one value of the
    tuple the call returns, and the name carries the count (:class:`Returns`). With
    ``group``, the name carries the concurrency group the call chose, and with ``task``
    its task name (``.options(name=...)``).
    """
    ref: ObjectRef[Any] = ObjectRef(what, actor_id)
    if num_returns == 1:
        return ref, ref, call_name(method, group, task)
    out = [ObjectRef(what, actor_id) for _ in range(num_returns)]
    for i, part in enumerate(out):
        part._part = i
    name = Returns(method, num_returns, group)
    name.task = task
    return out, _Parts(out), name


def when_ready(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    send: Callable[[tuple[Any, ...], dict[str, Any], bool], torch.futures.Future[Wire] | None],
    give_up: Callable[[BaseException], None],
) -> None:
    """Calls ``send(args, kwargs, now)`` once the call's top-level ref arguments are ready.

    As in Ray, a call with top-level ``ObjectRef`` arguments is sent once they are ready
    (their calls answered), so the callee never waits on a producer that may itself wait
    on it; the callee then fetches their values from their owners before it runs, so the
    bytes go producer -> consumer, not through this process (a small value that came
    back inline travels with the call). Refs nested inside values travel as they are.

    Args:
        args: The call's positional arguments.
        kwargs: Its keyword arguments.
        send: Sends the call (``now``: made in ``.remote()`` itself, which may raise);
            returns the future of its reply, until which the refs hold their objects.
        give_up: A ref argument failed: the call fails with its error, unsent.
    """
    if not _has_refs(args, kwargs):
        send(args, kwargs, True)
        return
    # Sent (and packed) once the refs are ready, after the caller went on: the lists and
    # dicts it passed are copied now, as they were at the call.
    args, kwargs = snapshot(args), snapshot(kwargs)
    deps = [a for a in args if type(a) is ObjectRef]
    deps += [v for v in kwargs.values() if type(v) is ObjectRef]
    remaining = [len(deps)]
    lock = threading.Lock()

    def on_dep_ready(_: object) -> None:
        with lock:
            remaining[0] -= 1
            if remaining[0]:
                return
        errors = (d._failure() for d in deps)
        error = next((e for e in errors if e is not None), None)
        if error is not None:
            give_up(error)
            return
        a = tuple(x._as_argument() if type(x) is ObjectRef else x for x in args)
        kw = {k: v._as_argument() if type(v) is ObjectRef else v for k, v in kwargs.items()}
        sent = send(a, kw, False)
        if sent is not None:  # the refs hold their objects until the callee has fetched them
            sent.add_done_callback(partial(_let_go_after_reply, deps))

    for dep in deps:
        dep._ready_future().add_done_callback(_Once(on_dep_ready))


def send_call(
    rt: Runtime,
    target: Target,
    method: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    num_returns: int = 1,
    *,
    parts: tuple[Any, ObjectRef[Any] | _Parts, str] | None = None,
    retries: int | None = None,
    on: RetryOn = False,
) -> Any:
    """Sends ``target.method(*args, **kwargs)`` through ``rt``; returns its ref at once.

    Top-level ref arguments: see :func:`when_ready`. The call's sequence number is taken
    now, so it still runs in the order it was made.

    With ``num_returns`` other than 1, a list of that many refs, each of one value of the
    tuple the method returns (each its own object, when large).

    Args:
        rt: This process's runtime.
        target: The actor.
        method: The method's name.
        args: The call's positional arguments.
        kwargs: Its keyword arguments.
        num_returns: How many values the method returns as a tuple.
        parts: Instead of ``num_returns``: what to return, where the call's reply goes
            and the name to send (:func:`new_refs` with a group, or a streaming call's:
            see ``ref_generator``).
        retries: The call's own ``max_task_retries`` (the method's, or its
            ``.options``'); None: the actor's.
        on: The exceptions it raises that send it again (``retry_exceptions``).

    Raises:
        TypeError: An argument cannot be sent (a call without ref arguments).
    """
    # The number is the actor's instance on this worker's; if the actor moves before the
    # call is sent (another thread found its process dead), or a new process takes the
    # worker's name meanwhile, send numbers it afresh.
    worker = target._worker
    seq, numbered = rt.number(target._actor_id, worker)
    what = f"{target._class_name}.{method}"
    out, slot, name = parts or new_refs(what, target._actor_id, method, num_returns)
    first: ObjectRef[Any] = slot if type(slot) is ObjectRef else out[0]
    lineage.made(first)  # made in a method: a recursive cancel of its call reaches it

    def send(
        a: tuple[Any, ...], kw: dict[str, Any], now: bool
    ) -> torch.futures.Future[Wire] | None:
        if first._cancel_asked or (type(slot) is _Parts and any(r._cancel_asked for r in out)):
            give_up(cancelled(what, "before it was sent (it waited for its ref arguments)"))
            return None
        rt.send(
            target,
            seq,
            name,
            a,
            kw,
            slot,
            raise_now=now,
            seq_worker=numbered,
            retries=retries,
            on=on,
        )
        return first._sent

    def give_up(error: BaseException) -> None:
        if rt.numbering(worker) == numbered:  # else the process it was numbered for died
            rt.skip(target, seq, worker)
        slot.fail(error)

    when_ready(args, kwargs, send, give_up)
    return out
