"""The process's runtime slot: who runs actorrt here, if anyone, and the parts it serves with.

The runtime installs itself here with its parts (the actor host, the call and reply
batches, the cluster directory on rank 0). RPC entry points, which torch resolves by
their module-level names, find the part they serve with :func:`part`, by its type;
caller-side code finds the runtime itself with :func:`actorrt.runtime.runtime.current`.
This module imports nothing of the runtime, so a module that serves RPC finds its state
without importing the runtime that imports it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TypeVar, cast

from actorrt.errors import NotInitializedError

__all__ = ["ensure_not_started", "install", "installed", "is_initialized", "part"]

T = TypeVar("T")

_installed: object | None = None
_parts: dict[type, object] = {}
_lock = threading.Lock()


def installed() -> object | None:
    """The installed runtime, or None before ``start`` and after ``shutdown``."""
    return _installed


def part(kind: type[T], what: str = "this call") -> T:
    """The installed runtime's part of type ``kind`` (e.g. its ``ActorHost``).

    Raises:
        NotInitializedError: No runtime is installed, or it has no such part (the
            cluster directory lives on rank 0 only).
    """
    try:
        return cast(T, _parts[kind])
    except KeyError:
        raise NotInitializedError(what) from None


def is_initialized() -> bool:
    """True between ``actorrt.start()`` and ``actorrt.shutdown()`` (and inside workers)."""
    return _installed is not None


def ensure_not_started() -> None:
    """Raises ``RuntimeError`` (saying how to go on) when a runtime is installed here."""
    if _installed is not None:
        raise RuntimeError(
            "actorrt is already started in this process: call actorrt.shutdown() before "
            "starting again (or use `with actorrt.start(): ...`)."
        )


def install(rt: object | None, parts: Iterable[object] = ()) -> None:
    """Makes ``rt`` the process's runtime, with ``parts`` found by type; None clears the slot."""
    global _installed, _parts
    with _lock:
        if rt is not None:
            ensure_not_started()
        _parts = {type(p): p for p in parts} if rt is not None else {}
        _installed = rt
