"""How an actor ends itself: ``actorrt.exit_actor()``, ``sys.exit()`` or ``exit()`` in a method.

As in Ray, ``exit_actor()`` raises an exception (here :class:`ActorExit`, a
``SystemExit``, so ``except Exception`` in the method does not stop it); the mailbox
treats any ``SystemExit`` leaving a method as the actor's end: that call, every call
queued or running beside it and every later call fail with ``ActorDiedError``.
"""

from __future__ import annotations

import contextvars
from typing import NoReturn

__all__ = ["ActorExit", "exit_actor", "exit_reason", "in_method"]

in_method: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "actorrt_in_method", default=None
)
"""``Class.method`` of the actor method running in this thread or task; None outside."""


class ActorExit(SystemExit):
    """Raised by :func:`exit_actor`; ends the actor whose method it leaves."""


def exit_actor() -> NoReturn:
    """Ends the actor from inside one of its methods, as Ray's ``exit_actor()``.

    It raises; the actor then ends at once. The call that made it, every call queued or
    running beside it, and every later call fail with ``ActorDiedError`` saying the
    actor exited. Other actors in the same worker process go on. ``sys.exit()`` and
    ``exit()`` in a method do the same.

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
    raise ActorExit(f"actorrt.exit_actor() was called in {method}")


def exit_reason(what: str, method: str, exc: SystemExit) -> str:
    """Why the actor ``what`` is gone after ``exc`` left its method ``method``."""
    if isinstance(exc, ActorExit):
        how = "actorrt.exit_actor() was called"
    else:
        how = f"SystemExit({exc.code!r}) was raised (sys.exit() or exit())"
    return f"{what} exited: {how} in {method}. Create a new actor to go on."
