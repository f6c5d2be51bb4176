"""The few exception types actorrt raises; each message says what to do next."""

from __future__ import annotations

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
        super().__init__(f"{message}\n\nRemote traceback:\n{remote_traceback}")
        self.cause = cause
        self.remote_traceback = remote_traceback
        self.actor_id = actor_id

    def __reduce__(
        self,
    ) -> tuple[type[ActorError], tuple[str, BaseException | None, str, str | None]]:
        # keep the fields when the error is pickled onwards
        message = self.args[0].split("\n\nRemote traceback:")[0]
        return (type(self), (message, self.cause, self.remote_traceback, self.actor_id))


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
