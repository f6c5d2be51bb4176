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
import math
import numbers
import threading
import time
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar, overload

from actorrt.errors import ActorDiedError, ActorError, GetTimeoutError
from actorrt.runtime.payload import unpack
from actorrt.runtime.protocol import OK, LocalFailure, decode_reply, rpc_failure, unreadable
from actorrt.runtime.runtime import current_or_none

if TYPE_CHECKING:
    import torch

    from actorrt.runtime.outbox import KeepAlive
    from actorrt.runtime.payload import Wire
    from actorrt.runtime.protocol import Target
    from actorrt.runtime.runtime import Runtime

__all__ = ["ObjectRef", "get", "resolved", "send_call", "wait"]

T = TypeVar("T")

if TYPE_CHECKING:
    import typing_extensions

    # The value type of a ref. Covariant: a ref of an int is a ref of an object, so that
    # get([ref_of_int, ref_of_str]) is a list[object]. Its default (PEP 696) makes a bare
    # `ObjectRef` mean ObjectRef[Any], as before refs had a type parameter.
    R_co = typing_extensions.TypeVar("R_co", covariant=True, default=Any)
else:  # at run time the default is not needed (nor does typing.TypeVar take it before 3.13)
    R_co = TypeVar("R_co", covariant=True)

# Guards making a ref's concurrent.futures.Future against the call being sent at the
# same moment (only refs passed as arguments are visible to others before their send).
_hook_lock = threading.Lock()


class _RefFuture(cf.Future[Any]):
    """A ref's future, which cannot be cancelled: the ref would be spoilt for good.

    ``asyncio.wrap_future`` cancels the future it wraps when the awaiting task is
    cancelled (``asyncio.wait_for`` timing out, say); the call runs on regardless, and
    a later ``get`` or ``await`` of the same ref must still return its value.
    """

    def cancel(self) -> bool:
        return False


class ObjectRef(Generic[R_co]):
    """The future result of ``handle.method.remote(...)``.

    Pass it to :func:`actorrt.get` / :func:`actorrt.wait`, ``await`` it, or pass it as a
    top-level argument of another remote call (it is resolved before that call runs).

    For type checkers it is generic in the value: ``ObjectRef[int]`` is the ref of an
    ``int``, which ``get`` returns (see :class:`~actorrt.actor_class.TypedActor`); a bare
    ``ObjectRef`` is ``ObjectRef[Any]``. The parameter is static only: at run time a ref
    does not know its value's type.
    """

    __slots__ = ("_call", "_actor_id", "_worker", "_sent", "_cf", "_keep", "__weakref__")

    def __init__(self, call: str, actor_id: str | None = None) -> None:
        self._call = call  # "Class.method", named in errors
        self._actor_id = actor_id
        self._worker = ""
        # torch future of the raw reply, once the call is sent
        self._sent: torch.futures.Future[Wire] | None = None
        self._cf: cf.Future[Any] | None = None
        self._keep: KeepAlive | None = None  # a call sent alone: see runtime.outbox.KeepAlive

    def __del__(self) -> None:
        keep = self._keep
        if keep is not None:
            try:
                keep.let_go()
            except Exception:  # interpreter teardown
                pass

    # -- the runtime's side (runtime.protocol.ReplySlot) ---------------------------
    def attach(
        self, reply: torch.futures.Future[Wire], worker: str, keep: KeepAlive | None
    ) -> None:
        """The call went out to ``worker``; ``reply`` is the torch future of its raw reply.

        Args:
            reply: The torch future of the call's packed reply.
            worker: The process it went to (named in errors).
            keep: Holds the actor's handle until the reply is in; let go when this ref goes.
        """
        with _hook_lock:
            self._worker = worker
            self._sent = reply
            self._keep = keep
            hook = self._cf is not None
        if hook:
            reply.add_done_callback(self._complete)

    def fail(self, error: BaseException) -> None:
        """The call failed before it went out: ``get`` raises ``error``."""
        self._set_exception(error)

    def _set_result(self, value: Any) -> None:
        fut = self.future()
        if not fut.done():
            fut.set_result(value)

    def _set_exception(self, exc: BaseException) -> None:
        fut = self.future()
        if not fut.done():
            fut.set_exception(exc)

    def _complete(self, reply: torch.futures.Future[Wire]) -> None:
        try:
            self._set_result(self._decode(reply))
        except Exception as exc:
            self._set_exception(exc)

    def _decode(self, sent: torch.futures.Future[Wire]) -> Any:
        """The value of the reply ``sent`` (arrived already), or the error it stands for."""
        try:
            wire = sent.value()
        except LocalFailure as failure:
            raise failure.error from None
        except Exception as exc:  # the RPC layer failed: the call never ran, or its process died
            error = rpc_failure(self._call, self._worker, exc, self._actor_id)
            rt = current_or_none()
            if isinstance(error, ActorDiedError) and rt is not None:
                rt.worker_unreachable(self._worker)  # marked dead before the caller hears
            raise error from None
        blob, side = wire
        if blob is None and side[0][0] == OK:  # a plain value: decode_reply(unpack()) inline
            return side[0][1]
        try:
            reply = unpack(wire)
        except Exception as exc:
            error = unreadable(f"the reply of {self._call}", exc)
            raise ActorError(str(error), error, "", self._actor_id) from None
        return decode_reply(reply, self._actor_id)

    # -- the user's side -----------------------------------------------------------
    def done(self) -> bool:
        """True once the result (or error) has arrived."""
        if self._sent is not None:
            return self._sent.done()
        return self._cf is not None and self._cf.done()

    def future(self) -> cf.Future[R_co]:
        """A :class:`concurrent.futures.Future` of the result, for callbacks and ``cf.wait``.

        The same future every time. Its ``result()`` is the value, or raises what
        :func:`get` would raise. ``cancel()`` does nothing and returns False: the call
        runs on (to stop an actor, ``actorrt.kill`` it).

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
        with _hook_lock:
            if self._cf is not None:
                return self._cf
            fut = self._cf = _RefFuture()
            sent = self._sent
        if sent is not None:
            sent.add_done_callback(self._complete)  # runs at once if the reply is here
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
        return f"ObjectRef({self._call}, {'done' if self.done() else 'pending'})"

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            f"{self!r} cannot be sent to another process inside a value. Pass it as a top-level "
            "argument of a remote call (actorrt resolves it before the call runs), or call "
            "actorrt.get(ref) first and send the value."
        )


def _check_timeout(timeout: object) -> float | None:
    """``timeout`` as seconds (None: no limit); rejects what is not a number >= 0."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(
            f"timeout={timeout!r} must be a number of seconds (e.g. timeout=30) or None to "
            "wait as long as it takes."
        )
    if not float(timeout) >= 0:  # also NaN
        raise ValueError(
            f"timeout={timeout!r} must be >= 0 seconds (0 polls once), or None to wait as "
            "long as it takes."
        )
    return None if math.isinf(timeout) else float(timeout)


def _check_ref(ref: object) -> ObjectRef[Any]:
    if not isinstance(ref, ObjectRef):
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
        timeout: Seconds to wait in all; ``None`` waits as long as it takes.

    Returns:
        The value, or a list of values in the order of ``refs``. For a type checker,
        ``get(ObjectRef[T])`` is a ``T`` and ``get(list[ObjectRef[T]])`` a ``list[T]``.

    Raises:
        GetTimeoutError: The results did not all arrive within ``timeout``.
        ActorError: The method raised (the remote traceback is in the message).
        ActorDiedError: The actor was killed, ended itself or its process died.
        TypeError: ``timeout`` is not a number.
        ValueError: ``timeout`` is negative.
    """
    if timeout is None and type(refs) is ObjectRef:  # a sync call's get: nothing to check
        sent = refs._sent
        if sent is None:
            return _result(refs, None)
        try:  # _result()'s work, without its call
            sent.wait()
        except Exception:  # _decode turns the RPC error into the one users see
            pass
        return refs._decode(sent)
    timeout = _check_timeout(timeout)
    if isinstance(refs, ObjectRef):
        return _result(refs, timeout)
    if not isinstance(refs, (list, tuple)):
        raise TypeError(f"actorrt.get takes an ObjectRef or a list of them, got {type(refs)!r}.")
    deadline = None if timeout is None else time.monotonic() + timeout
    out = []
    for ref in refs:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        out.append(_result(_check_ref(ref), left, total=timeout))
    return out


def _result(ref: ObjectRef[Any], timeout: float | None, total: float | None = None) -> Any:
    """The value of the checked ``ref`` within ``timeout`` (``total``: named in the error)."""
    sent = ref._sent
    if sent is not None and (timeout is None or sent.done()):
        try:
            sent.wait()
        except Exception:  # _decode turns the RPC error into the one users see
            pass
        return ref._decode(sent)
    try:
        return ref.future().result(timeout)
    except cf.TimeoutError:
        raise GetTimeoutError(
            f"{ref!r} not ready after {total if total is not None else timeout} s; raise the "
            "timeout, or use actorrt.wait(refs, timeout=...) to poll without raising."
        ) from None


def wait(
    refs: Sequence[ObjectRef[T]], *, num_returns: int = 1, timeout: float | None = None
) -> tuple[list[ObjectRef[T]], list[ObjectRef[T]]]:
    """Waits until ``num_returns`` of ``refs`` are ready, or ``timeout`` passes.

    Args:
        refs: The refs to watch (no duplicates).
        num_returns: How many ready refs to wait for (1 <= num_returns <= len(refs)).
        timeout: Seconds to wait at most; ``None`` waits as long as it takes.

    Returns:
        ``(ready, not_ready)``, each in the order of ``refs``; ``ready`` holds at most
        ``num_returns`` refs. A ref whose call failed counts as ready (``get`` raises).
        No refs give ``([], [])``, as in Ray.

    Raises:
        TypeError: ``timeout`` is not a number.
        ValueError: ``timeout`` is negative, ``num_returns`` is out of range, or a ref
            appears twice.
    """
    if not isinstance(refs, (list, tuple)):
        raise TypeError(f"actorrt.wait takes a list of ObjectRefs, got {type(refs)!r}.")
    timeout = _check_timeout(timeout)
    if not refs:
        return [], []
    refs = [_check_ref(r) for r in refs]
    if len({id(r) for r in refs}) != len(refs):
        raise ValueError("actorrt.wait got the same ObjectRef twice; pass each ref once.")
    if not 1 <= num_returns <= len(refs):
        raise ValueError(f"num_returns={num_returns} must be between 1 and len(refs)={len(refs)}.")
    deadline = None if timeout is None else time.monotonic() + timeout
    pending = {r.future() for r in refs}
    while sum(1 for r in refs if r.done()) < num_returns:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            break
        _, pending = cf.wait(pending, timeout=left, return_when=cf.FIRST_COMPLETED)
    ready: list[ObjectRef[T]] = []
    not_ready: list[ObjectRef[T]] = []
    for r in refs:
        (ready if r.done() and len(ready) < num_returns else not_ready).append(r)
    return ready, not_ready


def resolved(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` with each top-level ``ObjectRef`` replaced by its value (waits).

    For constructor arguments, which ``Cls.remote()`` resolves before it returns.
    """
    if not any(type(a) is ObjectRef for a in args) and not any(
        type(v) is ObjectRef for v in kwargs.values()
    ):
        return args, kwargs
    args = tuple(get(a) if type(a) is ObjectRef else a for a in args)
    kwargs = {k: get(v) if type(v) is ObjectRef else v for k, v in kwargs.items()}
    return args, kwargs


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


def send_call(
    rt: Runtime, target: Target, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> ObjectRef:
    """Sends ``target.method(*args, **kwargs)`` through ``rt``; returns its ref at once.

    As in Ray, top-level ``ObjectRef`` arguments are resolved before the call is sent; the
    call's sequence number is taken now, so it still runs in the order it was made.

    Raises:
        TypeError: An argument cannot be sent (a call without ref arguments).
    """
    # The number is the actor's instance on this worker's; if the actor moves before the
    # call is sent (another thread found its process dead), send numbers it afresh.
    worker = target.worker
    seq = rt.seq_at(target.actor_id, worker)
    ref = ObjectRef(f"{target.class_name}.{method}", target.actor_id)
    if not _has_refs(args, kwargs):
        rt.send(target, seq, method, args, kwargs, ref, raise_now=True, seq_worker=worker)
        return ref
    deps = [a for a in args if type(a) is ObjectRef]
    deps += [v for v in kwargs.values() if type(v) is ObjectRef]
    remaining = [len(deps)]
    lock = threading.Lock()

    def on_dep_done(_: object) -> None:
        with lock:
            remaining[0] -= 1
            if remaining[0]:
                return
        errors = (d.future().exception() for d in deps)
        error = next((e for e in errors if e is not None), None)
        if error is not None:
            rt.skip(target, seq, worker)
            ref.fail(error)
            return
        a = tuple(x.future().result() if type(x) is ObjectRef else x for x in args)
        kw = {k: v.future().result() if type(v) is ObjectRef else v for k, v in kwargs.items()}
        rt.send(target, seq, method, a, kw, ref, raise_now=False, seq_worker=worker)

    for dep in deps:
        dep.future().add_done_callback(on_dep_done)
    return ref
