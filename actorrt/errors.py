"""The few exception types actorrt raises; each message says what to do next."""

from __future__ import annotations

import threading
from typing import Any

__all__ = [
    "ActorDiedError",
    "ActorError",
    "ActorRtError",
    "ClusterError",
    "GetTimeoutError",
    "NotInitializedError",
    "ObjectLostError",
    "PendingCallsLimitExceeded",
    "PlacementError",
    "TaskCancelledError",
    "actor_error",
]


class ActorRtError(Exception):
    """Base class of every error actorrt raises on purpose."""


class NotInitializedError(ActorRtError, RuntimeError):
    """An actor was created or called before ``actorrt.start()``."""

    def __init__(self, what: str = "this call") -> None:
        super().__init__(
            f"{what} needs a running cluster: call actorrt.start() first "
            "(or actorrt.start(init_method='tcp://HOST:PORT', ...) to join a multi-node cluster)."
        )


class ActorError(ActorRtError):
    """An actor method (or constructor) raised; the actor itself stays usable.

    As Ray's ``RayTaskError``, the error ``get`` raises is also an instance of the class
    the method raised (when that is an ``Exception`` that is not actorrt's own): ``except
    KeyError`` catches a method's ``KeyError``, and ``except actorrt.ActorError`` catches
    it too. Its class is then named ``ActorError(KeyError)``; the method's exception
    itself is ``cause``.

    Attributes:
        cause: The exception the method raised, when it could be sent back; otherwise None.
        remote_traceback: The traceback text printed on the actor's process.
        actor_id: The id of the actor (32 hex digits, as ``ActorHandle.actor_id``), when known.
    """

    def __init__(
        self,
        message: str,
        cause: BaseException | None,
        remote_traceback: str,
        actor_id: str | None = None,
    ) -> None:
        # BaseException's, not super()'s: in an ActorError(KeyError) (actor_error) that
        # would be the cause's own __init__, which takes other arguments.
        BaseException.__init__(self, f"{message}\n\nRemote traceback:\n{remote_traceback}")
        self.cause = cause
        self.remote_traceback = remote_traceback
        self.actor_id = actor_id

    def _fields(self) -> tuple[str, BaseException | None, str, str | None]:
        """What ``__init__`` took: kept when the error is pickled onwards."""
        message = self.args[0].split("\n\nRemote traceback:")[0]
        return (message, self.cause, self.remote_traceback, self.actor_id)

    def __reduce__(
        self,
    ) -> tuple[type[ActorError], tuple[str, BaseException | None, str, str | None]]:
        return (type(self), self._fields())


class ActorDiedError(ActorRtError):
    """The actor is gone: killed, ended itself, its constructor failed, or its process died.

    Pending calls fail with it instead of hanging, and so does every later call: create a
    new actor to go on (actorrt does not restart actors).

    Attributes:
        actor_id: The id of the actor (32 hex digits, as ``ActorHandle.actor_id``), when known.
    """

    def __init__(self, message: str, actor_id: str | None = None) -> None:
        super().__init__(message)
        self.actor_id = actor_id

    def __reduce__(self) -> tuple[type[ActorDiedError], tuple[str, str | None]]:
        return (type(self), (self.args[0], self.actor_id))


class ObjectLostError(ActorRtError):
    """An object's value cannot be had: its owner process died, or it was freed.

    An object lives in the process that made it (a method's large result, or
    ``actorrt.put``) for as long as some ``ObjectRef`` to it exists. When that process
    dies, ``get`` of every ref to it raises this, naming the owner; so does a ref kept
    past ``actorrt.shutdown()``. Make the value again (call the method again, or ``put``
    it again) to go on.
    """


class TaskCancelledError(ActorRtError):
    """A call was cancelled by ``actorrt.cancel(ref)``: ``get`` of its ref raises this.

    As Ray's: the call was cancelled before it ran; in an async actor, while it awaited;
    in a remote function, while it ran (it was interrupted); or, in any method, while it
    waited for a call it made that was cancelled with it (``recursive``). A call that had
    already begun in a plain (threaded) actor is not interrupted: it runs to its end and
    its ref gets its value.

    Attributes:
        actor_id: The id of the actor (32 hex digits, as ``ActorHandle.actor_id``), when known.
    """

    def __init__(self, message: str, actor_id: str | None = None) -> None:
        super().__init__(message)
        self.actor_id = actor_id

    def __reduce__(self) -> tuple[type[TaskCancelledError], tuple[str, str | None]]:
        return (type(self), (self.args[0], self.actor_id))


class GetTimeoutError(ActorRtError, TimeoutError):
    """``actorrt.get`` or ``actorrt.wait`` ran past its ``timeout``."""


class PendingCallsLimitExceeded(ActorRtError):
    """A call would exceed its handle's ``max_pending_calls``, as Ray's: it was not sent.

    Wait for some of the handle's calls to be answered (``actorrt.wait``, ``actorrt.get``)
    and call again.
    """


class PlacementError(ActorRtError):
    """No process in the cluster can host an actor, or a cluster plan is infeasible."""


class ClusterError(ActorRtError):
    """The cluster could not be started, joined or reached (rendezvous, token, ports)."""


# One class per class of cause (Ray's as_instanceof_cause does the same), made on first use.
_duals: dict[type[BaseException], type[ActorError] | None] = {}
_duals_lock = threading.Lock()


def _combined(cause: BaseException) -> bool:
    """Whether an ``ActorError`` takes on the class of ``cause``.

    Every ``Exception`` and a user's own ``BaseException`` subclass, as Ray's
    ``RayTaskError`` does; not Python's own ``BaseException`` kinds: a caller's ``except
    KeyboardInterrupt`` is for its own Ctrl-C.
    """
    if isinstance(cause, Exception):
        return True
    import asyncio  # here: `actorrt --help` imports this module, and never gets here

    return not isinstance(
        cause, (KeyboardInterrupt, SystemExit, GeneratorExit, asyncio.CancelledError)
    )


def actor_error(
    message: str, cause: BaseException | None, remote_traceback: str, actor_id: str | None = None
) -> ActorError:
    """The :class:`ActorError` of a method that raised ``cause``, also of ``cause``'s class.

    A cause that is itself such an error (a method that let a call's error through) gives
    the class of the error first raised. A plain ``ActorError`` where no such class can
    be made: no cause (it did not travel), Python's own ``BaseException`` kinds (see
    :func:`_combined`), one of actorrt's own errors (they keep their meaning:
    ``ObjectLostError`` raised by the method is its error, not the call's), or a class
    Python cannot combine with ``ActorError`` (layout, ``final``).
    """
    cls = None
    if cause is not None and _combined(cause):
        kind: type[BaseException] = getattr(type(cause), "_actorrt_cause_class", type(cause))
        cls = _dual(kind)  # kind: the error first raised, for a nested call's error
    if cls is None:
        return ActorError(message, cause, remote_traceback, actor_id)
    error = cls.__new__(cls)  # not cls(...): a cause's own __new__ may read the arguments
    ActorError.__init__(error, message, cause, remote_traceback, actor_id)
    if isinstance(error, OSError) and isinstance(cause, OSError):  # fields, not attributes
        error.errno, error.strerror = cause.errno, cause.strerror
        error.filename, error.filename2 = cause.filename, cause.filename2
    return error


def _dual(kind: type[BaseException]) -> type[ActorError] | None:
    with _duals_lock:
        if kind in _duals:
            return _duals[kind]
        made: type[ActorError] | None = None
        if not issubclass(kind, ActorRtError):
            try:
                made = type(
                    f"ActorError({kind.__name__})",
                    (ActorError, kind),
                    {
                        "__module__": __name__,
                        "__str__": BaseException.__str__,  # not KeyError's repr of it
                        "__repr__": BaseException.__repr__,
                        "__reduce__": _dual_reduce,
                        "__getattr__": _dual_getattr,
                        "_actorrt_cause_class": kind,
                    },
                )
            except TypeError:  # instance layout conflict, a final class, a metaclass
                made = None
        _duals[kind] = made
        return made


def _dual_reduce(self: ActorError) -> tuple[Any, tuple[Any, ...]]:
    # Rebuilt by actor_error: the class is made on the receiver's side too.
    return (actor_error, self._fields())


def _dual_getattr(self: ActorError, name: str) -> Any:
    # The cause's own attributes (OSError's errno, a user's fields), as Ray's does.
    cause = self.__dict__.get("cause")
    if cause is None or name.startswith("__"):
        raise AttributeError(name)
    return getattr(cause, name)
