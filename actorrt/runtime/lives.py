"""How many new processes took each process name: one count for the whole process.

A local cluster replaces a dead worker with a new process under the same name
(``max_worker_restarts``). What was said to, numbered for or placed on the dead process
must not be taken for the new one: the runtime numbers its calls per process of a name,
the in-flight table fails only what was sent to the dead one, and rank 0's restarts tell
an actor on the new process from one on the old. All three read this count, which the
runtime bumps when rank 0 says a new process took a name.
"""

from __future__ import annotations

__all__ = ["Lives"]


class Lives:
    """How many new processes took each name so far (0: still its first process)."""

    def __init__(self) -> None:
        self._taken: dict[str, int] = {}

    def of(self, worker: str) -> int:
        """How many new processes took ``worker``'s name so far."""
        return self._taken.get(worker, 0)

    def bump(self, worker: str) -> None:
        """A new process took ``worker``'s name."""
        self._taken[worker] = self._taken.get(worker, 0) + 1
