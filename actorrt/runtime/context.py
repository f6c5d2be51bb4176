"""The process's one ``Runtime`` slot: who is running actorrt here, if anyone.

Kept apart from :mod:`actorrt.runtime.runtime` so the caller-side modules (``actor``)
and the RPC entry points (``host``) can find the runtime without importing it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from actorrt.errors import NotInitializedError

if TYPE_CHECKING:
    from actorrt.runtime.runtime import Runtime

__all__ = ["current", "current_or_none", "ensure_not_started", "install", "is_initialized"]

_current: Runtime | None = None
_lock = threading.Lock()


def current(what: str = "this call") -> Runtime:
    """The process's running ``Runtime``; raises ``NotInitializedError`` before ``start``."""
    rt = _current
    if rt is None:
        raise NotInitializedError(what)
    return rt


def current_or_none() -> Runtime | None:
    """The process's running ``Runtime``, or None before ``start`` and after ``shutdown``."""
    return _current


def is_initialized() -> bool:
    """True between ``actorrt.start()`` and ``actorrt.shutdown()`` (and inside workers)."""
    return _current is not None


def ensure_not_started() -> None:
    """Raises ``RuntimeError`` (saying how to go on) when a runtime is installed here."""
    if _current is not None:
        raise RuntimeError(
            "actorrt is already started in this process: call actorrt.shutdown() before "
            "starting again (or use `with actorrt.start(): ...`)."
        )


def install(rt: Runtime | None) -> None:
    """Makes ``rt`` the process's runtime (None clears the slot)."""
    global _current
    with _lock:
        if rt is not None:
            ensure_not_started()
        _current = rt
