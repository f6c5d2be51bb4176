"""What a reply raised, and whether a call retries on it (``retry_exceptions``).

One rule for actor calls and remote functions. An actor method's ``retry_exceptions``
travels in its handle's method table, a string (``actor_class.MethodTable``), to every
process that may call it, so the exception classes go by name: ``module.QualName``,
matched against the names along the raised exception's class hierarchy. A name needs no
import where the caller runs, and a class defined in the user's script (shipped by
value) matches by its name as well. A remote function's classes are matched the same way.
"""

from __future__ import annotations

import pickletools
from typing import TYPE_CHECKING, TypeAlias

from actorrt.runtime.payload import unpack
from actorrt.runtime.protocol import CANCELLED, DIED, ERROR, LOST, RAISE, RESTARTED

if TYPE_CHECKING:
    from actorrt.runtime.payload import Wire

__all__ = [
    "ExitRefused",
    "RetryOn",
    "error_of",
    "exception_names",
    "fails",
    "restarted",
    "retried",
    "retry_on",
]

RetryOn: TypeAlias = "bool | tuple[str, ...]"
"""A call's ``retry_exceptions``: False, True (any ``Exception``), or class names."""


class ExitRefused(RuntimeError):
    """A remote function called ``sys.exit()``: that call fails (its worker goes on).

    Never retried by ``retry_exceptions``: ``SystemExit`` is no ``Exception``, and a
    function that asked to exit would only ask again.
    """


def exception_names(kinds: tuple[type, ...]) -> tuple[str, ...]:
    """The names that stand for ``kinds`` in a :data:`RetryOn` (``module.QualName``)."""
    return tuple(f"{k.__module__}.{k.__qualname__}" for k in kinds)


def retry_on(kinds: bool | tuple[type[BaseException], ...]) -> RetryOn:
    """A checked ``retry_exceptions`` (``options.check_retry_exceptions``) as a RetryOn."""
    return kinds if isinstance(kinds, bool) else exception_names(kinds)


def error_of(wire: Wire) -> tuple[bool, BaseException | None]:
    """Whether ``wire`` is a raising call's reply, and what it raised (None: not sent).

    Only an error is unpacked: a value's reply is read as far as its status, so that a
    large result (its tensors, the refs inside it) is not unpacked twice.
    """
    if _status(wire) != ERROR:
        return False, None
    try:
        status, payload = unpack(wire)
    except Exception:  # an unreadable reply: the ref says so
        return False, None
    if status != ERROR:
        return False, None
    return True, payload[3]  # (what, summary, traceback, the exception if it pickled)


_FAILURES = frozenset((ERROR, DIED, LOST, RAISE, CANCELLED, RESTARTED))


def restarted(wire: Wire) -> bool:
    """Whether ``wire`` says its actor was restarted in place with the call queued or running."""
    return _status(wire) == RESTARTED


def fails(wire: Wire) -> bool:
    """Whether the reply ``wire`` stands for an error, read as far as its status only."""
    return _status(wire) in _FAILURES


def _status(wire: Wire) -> int | None:
    """The status of a packed reply ``(status, payload)``, without unpacking it."""
    blob, side = wire
    if blob is None:  # packed as it is
        reply = side[0]
        return reply[0] if type(reply) is tuple and reply else None
    # A pickled tuple's first item comes first, after the protocol and frame opcodes.
    for op, arg, _ in pickletools.genops(blob):
        if op.name in ("PROTO", "FRAME", "MARK"):
            continue
        return arg if type(arg) is int else None
    return None


def retried(wire: Wire, on: RetryOn) -> bool:
    """Whether ``wire`` raised an exception that ``on`` retries.

    True retries any ``Exception``, and an exception that did not pickle (it reached the
    caller as text alone); names retry an exception whose class, or a base of it, has
    one of them, and never one that did not pickle. A function's ``sys.exit()``
    (:class:`ExitRefused`) is never retried.
    """
    if not on:
        return False
    failed, cause = error_of(wire)
    if not failed or isinstance(cause, ExitRefused):
        return False
    if isinstance(on, bool):
        return cause is None or isinstance(cause, Exception)
    if cause is None:
        return False
    return not set(exception_names(type(cause).__mro__)).isdisjoint(on)
