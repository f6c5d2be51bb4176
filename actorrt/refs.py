"""``ObjectRef``: the result of a remote call, and ``get`` / ``wait`` over them.

An ``ObjectRef`` wraps a :class:`concurrent.futures.Future` that the runtime completes
when the reply arrives, so ``get`` and ``wait`` can bound their waits (torch futures
cannot), and ``await ref`` works in asyncio through :func:`asyncio.wrap_future`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import time
from collections.abc import Generator, Sequence
from typing import Any, TypeVar, overload

from actorrt.errors import GetTimeoutError

__all__ = ["ObjectRef", "get", "wait"]

T = TypeVar("T")


class ObjectRef:
    """The future result of ``handle.method.remote(...)``.

    Pass it to :func:`actorrt.get` / :func:`actorrt.wait`, ``await`` it, or pass it as a
    top-level argument of another remote call (it is resolved before that call runs).
    """

    __slots__ = ("_future", "_what", "_reply", "__weakref__")

    def __init__(self, what: str, future: cf.Future | None = None) -> None:
        self._future: cf.Future = future if future is not None else cf.Future()
        self._what = what
        # The torch future of the raw reply, with the function that decodes it, once the
        # call is sent: `get` without a timeout waits on it directly (a wake-up from C++),
        # which saves the hop through the Python callback that completes `_future`.
        self._reply: tuple[Any, Any] | None = None

    def done(self) -> bool:
        """True once the result (or error) has arrived."""
        return self._future.done()

    def future(self) -> cf.Future:
        """The underlying :class:`concurrent.futures.Future` (for callbacks)."""
        return self._future

    def __await__(self) -> Generator[Any, None, Any]:
        return asyncio.wrap_future(self._future).__await__()

    def __repr__(self) -> str:
        state = "done" if self._future.done() else "pending"
        return f"ObjectRef({self._what}, {state})"

    def __reduce__(self):
        raise TypeError(
            f"{self!r} cannot be sent to another process inside a value. Pass it as a top-level "
            "argument of a remote call (actorrt resolves it before the call runs), or call "
            "actorrt.get(ref) first and send the value."
        )


def _check_ref(ref: object) -> ObjectRef:
    if not isinstance(ref, ObjectRef):
        raise TypeError(
            f"expected an ObjectRef (what handle.method.remote(...) returns), got {type(ref)!r}."
        )
    return ref


@overload
def get(refs: ObjectRef, *, timeout: float | None = None) -> Any: ...
@overload
def get(refs: Sequence[ObjectRef], *, timeout: float | None = None) -> list[Any]: ...


def get(refs: ObjectRef | Sequence[ObjectRef], *, timeout: float | None = None) -> Any:
    """Waits for one result, or for every result of a list, and returns it.

    Args:
        refs: An ``ObjectRef`` or a list/tuple of them.
        timeout: Seconds to wait in all; ``None`` waits as long as it takes.

    Returns:
        The value, or a list of values in the order of ``refs``.

    Raises:
        GetTimeoutError: The results did not all arrive within ``timeout``.
        ActorError: The method raised (the remote traceback is in the message).
        ActorDiedError: The actor was killed or its process died.
    """
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


def _result(ref: ObjectRef, timeout: float | None, total: float | None = None) -> Any:
    reply = _check_ref(ref)._reply
    if timeout is None and reply is not None and not ref._future.done():
        torch_future, decode = reply
        try:
            torch_future.wait()
        except Exception:  # the RPC layer failed: `_future` gets the classified error
            return ref._future.result()
        return decode(torch_future.value())
    try:
        return ref._future.result(timeout)
    except cf.TimeoutError:
        raise GetTimeoutError(
            f"{ref!r} not ready after {total if total is not None else timeout} s; raise the "
            "timeout, or use actorrt.wait(refs, timeout=...) to poll without raising."
        ) from None


def wait(
    refs: Sequence[ObjectRef], *, num_returns: int = 1, timeout: float | None = None
) -> tuple[list[ObjectRef], list[ObjectRef]]:
    """Waits until ``num_returns`` of ``refs`` are ready, or ``timeout`` passes.

    Args:
        refs: The refs to watch (no duplicates).
        num_returns: How many ready refs to wait for (1 <= num_returns <= len(refs)).
        timeout: Seconds to wait at most; ``None`` waits as long as it takes.

    Returns:
        ``(ready, not_ready)``, each in the order of ``refs``; ``ready`` holds at most
        ``num_returns`` refs. A ref whose call failed counts as ready (``get`` raises).
    """
    if not isinstance(refs, (list, tuple)):
        raise TypeError(f"actorrt.wait takes a list of ObjectRefs, got {type(refs)!r}.")
    refs = [_check_ref(r) for r in refs]
    if len({id(r) for r in refs}) != len(refs):
        raise ValueError("actorrt.wait got the same ObjectRef twice; pass each ref once.")
    if not 1 <= num_returns <= max(1, len(refs)) or (not refs and num_returns):
        raise ValueError(f"num_returns={num_returns} must be between 1 and len(refs)={len(refs)}.")
    deadline = None if timeout is None else time.monotonic() + timeout
    pending = {r._future for r in refs}
    while sum(1 for r in refs if r._future.done()) < num_returns:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            break
        _, pending = cf.wait(pending, timeout=left, return_when=cf.FIRST_COMPLETED)
    ready: list[ObjectRef] = []
    not_ready: list[ObjectRef] = []
    for r in refs:
        (ready if r._future.done() and len(ready) < num_returns else not_ready).append(r)
    return ready, not_ready
