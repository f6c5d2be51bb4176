"""How an actor ends itself: ``actorrt.exit_actor()``, ``sys.exit()`` or ``exit()`` in a method.

As in Ray, ``exit_actor()`` raises an exception (here :class:`ActorExit`, a
``SystemExit``, so ``except Exception`` in the method does not stop it); the mailbox
treats any ``SystemExit`` leaving a method as the actor's end: that call, every call
queued or running beside it and every later call fail with ``ActorDiedError``.

A method may still catch it (``except BaseException``, ``except SystemExit: pass``).
So the end does not hang on the user's code letting the exception through,
``exit_actor()`` also records the request in :data:`exit_asked`, which the mailbox reads
once the method is over, however it ended (as Ray's worker keeps an "exit after this
task" flag).
"""

from __future__ import annotations

import contextvars
from typing import NoReturn

__all__ = [
    "ActorExit",
    "exit_actor",
    "exit_asked",
    "exit_reason",
    "in_actor",
    "in_method",
    "take_exit",
]

in_method: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "actorrt_in_method", default=None
)
"""``Class.method`` of the actor method running in this thread or task; None outside."""

in_actor: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "actorrt_in_actor", default=None
)
"""The id of the actor whose method (or constructor) runs in this thread or task; None
outside one, and in a remote function (``actorrt.get_runtime_context()``)."""

exit_asked: contextvars.ContextVar[ActorExit | None] = contextvars.ContextVar(
    "actorrt_exit_asked", default=None
)
"""The exit an actor method of this thread or task asked for, caught or not; None: none.

A sync actor's threads keep their context from call to call, so whoever reads it clears
it (:func:`take_exit`): a later call on the same thread must not see an old request.
"""


class ActorExit(SystemExit):
    """Raised by :func:`exit_actor`; ends the actor whose method it leaves."""


def exit_actor() -> NoReturn:
    """Ends the actor from inside one of its methods, as Ray's ``exit_actor()``.

    It raises; the actor then ends at once, or, when the method catches the exception
    (``except BaseException``, ``except SystemExit``), as soon as the method returns. The
    call that made it, every call queued or running beside it, and every later call fail
    with ``ActorDiedError`` saying the actor exited. Other actors in the same worker
    process go on. ``sys.exit()`` and ``exit()`` in a method do the same.

    Raises:
        TypeError: Called outside an actor method (e.g. in the driver), as in Ray.

    Example::

        @actorrt.actor
        class Worker:
            def close(self):
                self.flush()
                actorrt.exit_actor()

        w = Worker.remote()
        try:
            actorrt.get(w.close.remote(), timeout=30)
        except actorrt.ActorDiedError:
            pass  # the actor has ended
    """
    method = in_method.get()
    if method is None:
        raise TypeError(
            "actorrt.exit_actor() ends the actor it is called in, so it works only inside an "
            "actor method; to end an actor from outside, call actorrt.kill(handle)."
        )
    exc = ActorExit(f"actorrt.exit_actor() was called in {method}")
    exit_asked.set(exc)  # read by the mailbox after the method, should the method catch exc
    raise exc


def take_exit() -> ActorExit | None:
    """The exit the method just over in this thread or task asked for, cleared; or None."""
    asked = exit_asked.get()
    if asked is not None:
        exit_asked.set(None)
    return asked


def exit_reason(what: str, method: str, exc: SystemExit) -> str:
    """Why the actor ``what`` is gone after ``exc`` left its method ``method``."""
    if isinstance(exc, ActorExit):
        how = "actorrt.exit_actor() was called"
    else:
        how = f"SystemExit({exc.code!r}) was raised (sys.exit() or exit())"
    return f"{what} exited: {how} in {method}. Create a new actor to go on."
