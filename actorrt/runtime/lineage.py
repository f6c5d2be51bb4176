"""The call each thread or task serves, and the calls it made: how far ``actorrt.cancel`` reaches.

``actorrt.cancel(ref)`` cancels, with the call of ``ref``, the calls that call made and
that are still out (``recursive=True``, Ray's default), and theirs in turn, since each
process that receives such a cancel does the same for the call it names. A method that
runs on after a cancel (a plain actor's) can ask whether its call was cancelled:
``actorrt.get_runtime_context().is_canceled()``, as in Ray.

The mailbox sets :data:`serving` around each call it runs; :func:`made` records a call
made there as a child of that call. A child is held weakly, by its ref: a call whose refs
are all gone is forgotten (nobody can read its result), so a method that makes calls for
hours holds no record of the old ones.

This module imports nothing of the runtime: the mailbox (below the refs) and the refs
(above it) meet here through two protocols.
"""

from __future__ import annotations

import contextvars
import threading
import weakref
from typing import Protocol

__all__ = ["Child", "Parent", "cancel_children", "made", "serving"]


class Child(Protocol):
    """A call made while another ran (its ``ObjectRef``): what cancels it with its parent."""

    def _cancel_with_parent(self) -> None:
        """Cancels this call, and the calls it made (``actorrt.cancel(recursive=True)``)."""
        ...


class Parent(Protocol):
    """A call a mailbox runs (``mailbox.Call``): its cancel flag, and the calls it made.

    Its caller and number (in the caller's order for that actor) also name it for
    ``get_runtime_context().get_task_id()``, and its method for ``get_task_name()``.
    """

    cancel_asked: bool
    children: weakref.WeakSet[Child] | None
    caller: str
    seq: int
    method: str | None


serving: contextvars.ContextVar[Parent | None] = contextvars.ContextVar(
    "actorrt_serving", default=None
)
"""The call the actor method or remote function running in this thread or task serves;
None outside one (the driver's own code, a thread the method started). Also where
:mod:`actorrt.runtime.interrupts` finds the call of the function it may interrupt."""

# Children are added on the call's own thread (or task) and read on the RPC thread a
# cancel comes on: a WeakSet does not take both at once.
_lock = threading.Lock()


def made(child: Child) -> None:
    """Records ``child``, a call this thread just made, as a child of the call it serves."""
    parent = serving.get()
    if parent is None:  # the driver, or a thread of the user's own: nobody's child
        return
    with _lock:
        children = parent.children
        if children is None:
            children = parent.children = weakref.WeakSet()
        children.add(child)


def cancel_children(parent: Parent) -> None:
    """Cancels the calls ``parent`` made, as far as they still run (each does the same).

    Runs on the thread the parent's cancel came on. A child that has answered is left
    as it is (cancelling it does nothing); one made after this is not cancelled.
    """
    with _lock:
        children = list(parent.children or ())
    for child in children:
        try:
            child._cancel_with_parent()
        except Exception:  # the runtime is going away: its calls end with it
            pass
