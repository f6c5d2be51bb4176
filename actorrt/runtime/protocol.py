"""What travels back from an actor call: ``(status, payload)`` replies, decoded by the caller.

The host never lets an exception escape into torch RPC: a method's error comes back as
a value, so any exception the RPC layer itself raises means the call never ran (or its
process is gone), which is how the caller tells ``ActorError`` from ``ActorDiedError``.
"""

from __future__ import annotations

import inspect
import os
import pickle
import socket
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeAlias

import cloudpickle

from actorrt.errors import (
    ActorDiedError,
    ActorError,
    ObjectLostError,
    TaskCancelledError,
    actor_error,
)

if TYPE_CHECKING:
    import threading

    import torch

    from actorrt.runtime.outbox import KeepAlive
    from actorrt.runtime.payload import Wire

__all__ = [
    "CANCELLED",
    "CONCURRENCY_GROUP",
    "CallName",
    "CancelTicket",
    "Grouped",
    "COPY",
    "DIED",
    "ERROR",
    "KEEP",
    "KEPT",
    "LOCATED",
    "LOST",
    "MULTI",
    "OBJECT",
    "OK",
    "PICKLING_ERRORS",
    "RAISE",
    "RELAY",
    "RESTARTED",
    "Returns",
    "ActorRecord",
    "LocalFailure",
    "Liveness",
    "ReplySlot",
    "Target",
    "actor_gone",
    "call_name",
    "cancelled",
    "cancelled_reply",
    "decode_reply",
    "died_reply",
    "error_reply",
    "failed_in_pickling",
    "rpc_failure",
    "split_returns",
    "task_name",
    "travels",
    "unreadable",
    "unsendable_argument",
    "unsendable_reply",
]

OK = 0
ERROR = 1
DIED = 2
LOST = 3  # an object the call needed (or a fetch asked for) is gone: payload says why
# The value stayed where it was made: payload (object id, bytes, owner); the caller holds
# it. The owner is named because a call sent again (retries) is answered by another process.
OBJECT = 4
RAISE = 5  # payload is an exception to raise as it is (a lent ref whose call failed)
COPY = 6  # as OBJECT, and a copy came along: (object id, bytes, owner, value)
LOCATED = 7  # a lent ref's answer: payload is the lender's ObjectRef, received held
RELAY = 8  # a fetch's answer: ask this process of your host instead (payload: its name)
KEEP = 9  # a fetch's answer: the value, and keep a copy for the rest of your host a while
MULTI = 10  # a call with num_returns: payload is one packed reply per value returned
CANCELLED = 11  # actorrt.cancel() stopped the call before it ran (or while it awaited): why
# As DIED, for a call queued or running when its actor was restarted in place
# (kill(no_restart=False)): a call with retries left is sent again, to the new instance.
RESTARTED = 12
# A reply whose call kept refs that were borrowed for it: payload (the reply's own wire,
# [(owner, object id), ...], the callee's RPC id); the caller tells those owners the
# callee holds them now.
KEPT = 13

CancelTicket: TypeAlias = int | Callable[[bool], None]
"""What cancels a call that went out (see :meth:`ReplySlot.attach`): its sequence number at
the process it went to, or a function of ``recursive`` for a call that may be sent again."""


CONCURRENCY_GROUP = "__actorrt_concurrency_group__"
"""The attribute ``@actorrt.method(concurrency_group=...)`` sets on a method: its group."""


class CallName(str):
    """A method's name that asks something more of its call than a plain name does.

    It is the name (a ``str``: looked up, logged and sent as one); a plain call's name is
    a plain ``str``, so the mailbox tests ``type(name) is str`` once and reads nothing
    more. ``group``: the concurrency group the call runs in, chosen per call
    (``handle.m.options(concurrency_group=...)``); None: the method's own. ``task``: the
    call's own name (Ray's task name, ``.options(name=...)``), which
    ``get_runtime_context().get_task_name()`` and the timeline give; None: the method's.
    """

    group: str | None = None
    task: str | None = None

    def _state(self) -> dict[str, str] | None:
        """What a subclass's ``__reduce__`` adds to its arguments: the task name, if any."""
        return None if self.task is None else {"task": self.task}


def call_name(name: str, group: str | None = None, task: str | None = None) -> str:
    """``name`` as sent: a plain ``str`` unless the call chose a group or a task name."""
    if group is None and task is None:
        return name
    named = Grouped(name, group)
    named.task = task
    return named


def task_name(name: str) -> str | None:
    """The task name a call's name carries (``.options(name=...)``), or None."""
    return None if type(name) is str else getattr(name, "task", None)


class Grouped(CallName):
    """The name of a call made with ``.options(concurrency_group=...)`` (see :class:`CallName`)."""

    def __new__(cls, name: str, group: str | None) -> Grouped:
        """The name ``name``, run in concurrency group ``group``."""
        self = super().__new__(cls, name)
        self.group = group
        return self

    def __reduce__(
        self,
    ) -> tuple[type[Grouped], tuple[str, str | None], dict[str, str] | None]:
        return (Grouped, (str(self), self.group), self._state())


class Returns(CallName):
    """A method's name that asks for ``n`` return values (``num_returns``).

    The mailbox splits the method's result into ``n`` replies (:func:`split_returns`),
    each its own value or object, for the caller's ``n`` refs.
    """

    n: int

    def __new__(cls, name: str, n: int, group: str | None = None) -> Returns:
        """The name ``name``, asking for ``n`` values (run in ``group``, if given)."""
        self = super().__new__(cls, name)
        self.n = n
        self.group = group
        return self

    def __reduce__(
        self,
    ) -> tuple[type[Returns], tuple[str, int, str | None], dict[str, str] | None]:
        return (Returns, (str(self), self.n, self.group), self._state())


def split_returns(what: str, n: int, reply: tuple[int, Any]) -> tuple[int, Any]:
    """A method's reply for ``num_returns=n``: ``(MULTI, values)``, or the error to all.

    Args:
        what: ``Class.method`` of the actor (named in the error).
        n: How many values the caller asked for.
        reply: The method's own reply, ``(OK, result)`` or an error.
    """
    if reply[0] != OK:
        return reply
    result = reply[1]
    if inspect.isgenerator(result):  # a generator yields its n values (Ray's too)
        result = tuple(result)
    if isinstance(result, (tuple, list)) and len(result) == n:
        return MULTI, tuple(result)
    got = f"{len(result)} values" if isinstance(result, (tuple, list)) else type(result).__name__
    return error_reply(
        what,
        ValueError(
            f"it was called with num_returns={n} and returned {got}; return a tuple of "
            f"{n} values, or call it with num_returns matching what it returns."
        ),
    )


class ActorRecord(NamedTuple):
    """Where an actor lives: what a handle is made of, as plain data.

    The runtime hands these to the caller side (which makes the handle), and the cluster
    directory keeps one per actor name.
    """

    actor_id: str
    worker: str  # RPC name of the process hosting it
    class_name: str
    methods: str  # the class's method table, as ``actor_class.MethodTable`` specs
    retries: int = 0  # its max_task_retries: calls sent again to a recreated instance
    max_pending: int = -1  # its max_pending_calls: unanswered calls per handle (-1: any)


class Target(Protocol):
    """What the runtime reads of the actor a call goes to (an ``ActorHandle`` is one).

    Its names are private so that a handle's own attributes hide none of the actor's
    methods (``handle.worker.remote()`` calls a method named ``worker``).
    """

    @property
    def _actor_id(self) -> str:
        """The actor's id."""
        ...

    _worker: str
    """RPC name of the process hosting it (rewritten when the actor is recreated)."""

    @property
    def _class_name(self) -> str:
        """Its class's name (for messages)."""
        ...

    @property
    def _max_task_retries(self) -> int:
        """How often a call is sent again after the actor's process died (-1: no limit)."""
        ...

    @property
    def _moves(self) -> bool:
        """Whether it lives on one process, asked of rank 0 once that process died.

        True for actors (rank 0 knows whether they were recreated elsewhere); False for a
        remote function's executor, of which every process has its own: a call whose
        process died is sent again by the function's own retries, to another.
        """
        ...


class Liveness(Protocol):
    """What resending calls needs of the runtime (``Runtime`` is one): who is down, numbers."""

    @property
    def stopped(self) -> threading.Event:
        """Set once the runtime is shutting down."""
        ...

    def is_down(self, worker: str) -> bool:
        """Whether ``worker`` is known dead, or a call could not reach it."""
        ...

    def seq_at(self, actor_id: str, worker: str) -> int:
        """The next sequence number of this process's calls to ``actor_id`` on ``worker``."""
        ...

    def numbering(self, worker: str) -> str:
        """Which process of the name ``worker`` a number taken now is for (``seq_worker``)."""
        ...

    def worker_unreachable(self, worker: str, failure: BaseException | None = None) -> None:
        """A call could not reach ``worker`` (``failure``: how): let the driver judge it."""
        ...

    def cancel_call(self, worker: str, actor_id: str, seq: int, recursive: bool) -> None:
        """Asks ``worker`` to drop this process's call ``seq`` to ``actor_id`` (no wait)."""
        ...

    def skip_at(self, actor_id: str, worker: str, seq: int) -> None:
        """Gives up this process's call ``seq`` to ``actor_id`` on ``worker`` (no wait).

        Never raises (``host.give_up``): a process that is gone waits for no number, so
        it is safe in a torch callback.
        """
        ...


class ReplySlot(Protocol):
    """Where the runtime puts one call's outcome (an ``ObjectRef`` is one)."""

    def attach(
        self,
        reply: torch.futures.Future[Wire],
        worker: str,
        keep: KeepAlive | None,
        ticket: CancelTicket,
    ) -> None:
        """The call went out to ``worker``; ``reply`` is the torch future of its raw reply.

        ``keep`` (a call sent alone) holds the actor's handle until the reply is in; the
        slot lets go of it when it is itself collected. ``ticket`` is what cancels the
        call (``actorrt.cancel``): its sequence number at ``worker`` for a call sent once,
        or a function (of ``recursive``) that cancels whichever attempt is current, for a
        call that may be sent again elsewhere (retries).
        """
        ...

    def fail(self, error: BaseException) -> None:
        """The call failed before it went out (or its arguments never resolved)."""
        ...


# Words torch RPC uses when a reply could not be (de)serialised; anything else that
# fails a call at the RPC layer is a lost connection or process.
_PICKLING_WORDS = ("pickl", "serializ", "can't get attribute", "no module named")


# What torch RPC's pickler raises, at rpc_async, for a value it cannot send.
PICKLING_ERRORS = (TypeError, AttributeError, pickle.PicklingError)


_PICKLING_HINT = (
    "Values travel by cloudpickle (classes defined in the driver's script by value) with "
    "tensors out of band; locks, open files, sockets and ctypes pointers cannot travel."
)


def actor_gone(what: str, actor_id: str, why: str) -> ActorDiedError:
    """The error for a call to an actor known to be gone (``what``: Cls.method)."""
    return ActorDiedError(f"{what}: the actor is gone: {why}; create a new actor.", actor_id)


def unsendable_argument(what: str, exc: BaseException) -> TypeError:
    """The error for a call whose arguments could not be pickled (``what``: Cls.method)."""
    return TypeError(
        f"{what}.remote(): an argument cannot be sent ({type(exc).__name__}: {exc}). "
        f"{_PICKLING_HINT} Pass such state by creating it inside the actor instead."
    )


def unsendable_reply(exc: BaseException) -> TypeError:
    """The error a caller gets for a return value that could not be pickled."""
    return TypeError(
        f"cannot be sent back ({type(exc).__name__}: {exc}). {_PICKLING_HINT} Return plain "
        "data or tensors instead."
    )


def unreadable(what: str, exc: BaseException) -> TypeError:
    """The error for a value that was sent but cannot be unpickled in this process."""
    return TypeError(
        f"{what} could not be unpickled on {socket.gethostname()} (pid {os.getpid()}): "
        f"{type(exc).__name__}: {exc}. Classes defined in the driver's script travel by "
        "value; every other class must be importable on every process of the cluster "
        "(install its module there, or put it on PYTHONPATH)."
    )


class FunctionNotLoaded(Exception):
    """An executor was sent a remote function by its key alone and has not loaded it.

    Callers send a function's bytes to a process until it has answered one call of it,
    then its key alone (:mod:`actorrt.runtime.functions`); a process that lost it since
    (a replacement under the same name) answers with this, and the caller sends that
    call again with the bytes. Never reaches user code.
    """


class LocalFailure(Exception):
    """Carries an error this process decided (not the RPC layer) through a reply future.

    The caller raises ``error`` as it is, instead of classifying it as an RPC failure.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def error_reply(what: str, exc: BaseException) -> tuple[int, Any]:
    """Packs an exception raised by a method: its traceback text and, if it travels, itself.

    It travels when it pickles and unpickles again; else the caller's ``ActorError`` has
    its text and traceback, and ``cause`` None.
    """
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    cause = exc if travels(exc) else None  # one that does not still reaches it as text
    return ERROR, (what, f"{type(exc).__name__}: {exc}", text, cause)


def travels(exc: BaseException) -> bool:
    """Whether ``exc`` can be sent and made again at the other end.

    Pickled as replies are (see payload.py), and made again from its bytes: one that
    pickles but cannot be made again (an ``__init__`` whose arguments are not its
    ``args``) would fail the receiver's unpickling of the whole message and lose its text.
    """
    try:
        pickle.loads(cloudpickle.dumps(exc))
    except Exception:
        return False
    return True


def cancelled_reply(what: str, when: str) -> tuple[int, Any]:
    """A reply saying ``actorrt.cancel`` stopped the call ``what`` (Cls.method), and when."""
    return CANCELLED, _cancelled_words(what, when)


def cancelled(what: str, when: str, actor_id: str | None = None) -> TaskCancelledError:
    """The error of a call ``actorrt.cancel`` stopped in the caller, before it was sent."""
    return TaskCancelledError(_cancelled_words(what, when), actor_id)


def _cancelled_words(what: str, when: str) -> str:
    return f"{what} was cancelled (actorrt.cancel) {when}; call it again to run it."


def died_reply(reason: str, restarted: bool = False) -> tuple[int, Any]:
    """A reply saying the actor is gone, with why (``restarted``: made again in place)."""
    return (RESTARTED if restarted else DIED), reason


def decode_reply(reply: tuple[int, Any], actor_id: str | None = None) -> Any:
    """Returns the value of an ``OK`` reply; raises what the others stand for.

    An ``OBJECT``, ``COPY`` or ``LOCATED`` reply's value is its payload: where the value
    lives (the caller fetches it), with a copy of it for ``COPY``.
    """
    status, payload = reply
    if status in (OK, OBJECT, COPY, LOCATED, KEEP):
        return payload
    if status == ERROR:
        what, summary, text, cause = payload
        raise actor_error(f"{what} raised {summary}", cause, text, actor_id)
    if status == LOST:
        raise ObjectLostError(payload)
    if status == RAISE:
        raise payload
    if status == CANCELLED:
        raise TaskCancelledError(payload, actor_id)
    raise ActorDiedError(payload, actor_id)


def failed_in_pickling(exc: BaseException) -> bool:
    """Whether torch RPC failed a call in (un)pickling it or its reply, not in reaching it.

    The process at the other end was alive to say so.
    """
    message = str(exc).lower()
    return any(word in message for word in _PICKLING_WORDS)


def rpc_failure(
    what: str, worker: str, exc: BaseException, actor_id: str | None = None
) -> Exception:
    """Turns an exception raised by torch RPC for a call into the error users see.

    ``actor_id``: the actor called (None: a remote function, or not known).
    """
    message = str(exc)
    if failed_in_pickling(exc):
        return ActorError(
            f"{what}: the call or its reply could not be sent ({message.splitlines()[0]}). "
            f"{_PICKLING_HINT}",
            None,
            message,
            actor_id,
        )
    # An actor made with max_restarts comes back by itself: "create a new one" would
    # mislead there, and the caller cannot tell (its handle does not carry the option).
    go_on = (
        " Later calls go to the actor's new instance if it was made with max_restarts; "
        "else create a new actor to go on."
        if actor_id is not None
        else ""
    )
    return ActorDiedError(
        f"{what}: the actor's process {worker!r} is unreachable ({message.splitlines()[0]}); "
        f"it probably died.{go_on}",
        actor_id,
    )
