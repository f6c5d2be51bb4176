"""What travels back from an actor call: ``(status, payload)`` replies, decoded by the caller.

The host never lets an exception escape into torch RPC: a method's error comes back as
a value, so any exception the RPC layer itself raises means the call never ran (or its
process is gone), which is how the caller tells ``ActorError`` from ``ActorDiedError``.
"""

from __future__ import annotations

import pickle
import traceback
from typing import Any

from actorrt.errors import ActorDiedError, ActorError

__all__ = [
    "DIED",
    "ERROR",
    "OK",
    "PICKLING_ERRORS",
    "LocalFailure",
    "decode_reply",
    "died_reply",
    "error_reply",
    "rpc_failure",
    "unsendable_argument",
]

OK = 0
ERROR = 1
DIED = 2

# Words torch RPC uses when a reply could not be (de)serialised; anything else that
# fails a call at the RPC layer is a lost connection or process.
_PICKLING_WORDS = ("pickl", "serializ", "can't get attribute", "no module named")


# What torch RPC's pickler raises, at rpc_async, for a value it cannot send.
PICKLING_ERRORS = (TypeError, AttributeError, pickle.PicklingError)


def unsendable_argument(what: str, exc: BaseException) -> TypeError:
    """The error for a call whose arguments could not be pickled (``what``: Cls.method)."""
    return TypeError(
        f"{what}.remote(): an argument cannot be sent ({exc}). Arguments travel through "
        "torch RPC's pickler: use tensors, plain data and importable classes (no lambdas "
        "or local classes)."
    )


class LocalFailure(Exception):
    """Carries an error this process decided (not the RPC layer) through a reply future.

    The caller raises ``error`` as it is, instead of classifying it as an RPC failure.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def error_reply(what: str, exc: BaseException) -> tuple[int, Any]:
    """Packs an exception raised by a method: its traceback text and, if it pickles, itself."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        pickle.dumps(exc)
        cause: BaseException | None = exc
    except Exception:  # an unpicklable exception still reaches the caller as text
        cause = None
    return ERROR, (what, f"{type(exc).__name__}: {exc}", text, cause)


def died_reply(reason: str) -> tuple[int, Any]:
    """A reply saying the actor is gone, with why."""
    return DIED, reason


def decode_reply(reply: tuple[int, Any]) -> Any:
    """Returns the value of an ``OK`` reply; raises what the others stand for."""
    status, payload = reply
    if status == OK:
        return payload
    if status == ERROR:
        what, summary, text, cause = payload
        raise ActorError(f"{what} raised {summary}", cause, text)
    raise ActorDiedError(payload)


def rpc_failure(what: str, worker: str, exc: BaseException) -> Exception:
    """Turns an exception raised by torch RPC for a call into the error users see."""
    message = str(exc)
    if any(word in message.lower() for word in _PICKLING_WORDS):
        return ActorError(
            f"{what}: the call or its reply could not be sent ({message.splitlines()[0]}). "
            "Arguments and return values travel through torch RPC's pickler: use tensors, "
            "plain data and importable classes.",
            None,
            message,
        )
    return ActorDiedError(
        f"{what}: the actor's process {worker!r} is unreachable ({message.splitlines()[0]}); "
        "it probably died. Create a new actor to go on."
    )
