"""``max_pending_calls``: a handle's count of its unanswered calls, and the bound on it.

As Ray's: a handle whose actor was created with ``max_pending_calls=N`` sends at most N
calls that are not answered yet; one more raises
:class:`~actorrt.errors.PendingCallsLimitExceeded` at ``.remote()`` and is not sent, so
a caller that sends faster than its actor runs is told to wait instead of queueing
without bound. Each handle object counts its own calls (a copy sent to another actor
has its own count). Only handles with a limit pay for it: one Python callback per
reply, where other calls have none (see refs.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from actorrt.errors import PendingCallsLimitExceeded
from actorrt.refs import ObjectRef

__all__ = ["PendingCalls"]


class PendingCalls:
    """The unanswered calls sent through one handle, at most ``limit`` of them.

    Args:
        limit: The actor's ``max_pending_calls`` (>= 1).
    """

    __slots__ = ("limit", "_count", "_lock")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._count = 0
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        """How many calls sent through the handle are not answered yet."""
        return self._count

    def send(self, what: str, send: Callable[[], Any]) -> Any:
        """Runs ``send()`` (which sends one call and returns its ref or refs) if one fits.

        Args:
            what: ``Class.method``, for the error.
            send: Sends the call; what it returns is returned.

        Raises:
            PendingCallsLimitExceeded: ``limit`` calls are unanswered; nothing was sent.
        """
        with self._lock:
            if self._count >= self.limit:
                raise PendingCallsLimitExceeded(
                    f"{what}.remote(): {self._count} calls through this handle are not "
                    f"answered yet (max_pending_calls={self.limit}); wait for some "
                    "(actorrt.wait or actorrt.get) before sending more, or raise "
                    "max_pending_calls."
                )
            self._count += 1
        try:
            out = send()
        except BaseException:  # not sent (an argument that cannot be sent)
            self._answered()
            raise
        first: ObjectRef[Any] = out[0] if isinstance(out, list) else out
        first._when_ready(self._answered)
        return out

    def _answered(self) -> None:
        with self._lock:
            self._count -= 1
