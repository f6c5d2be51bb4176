"""Actor options: parsed and validated once, when the class is decorated.

Bad options fail here, at decoration or ``.options()`` time, never later on a worker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from actorrt.placement.layout import LABEL_PATTERN
from actorrt.placement.resources import Resources

__all__ = ["ActorOptions", "check_actor_name"]


def check_actor_name(name: object, where: str = "name") -> None:
    """Checks an actor name: the wrong type is a ``TypeError``, a bad string a ``ValueError``.

    As in Ray. Besides the empty string (Ray's one refusal), a name that is only whitespace or holds
    a control character is refused: names are shown in ``actorrt.status()`` rows and log
    lines, where such a name would look empty or break the row.

    Args:
        name: The name given.
        where: How the caller named the argument, for the message.

    Raises:
        TypeError: ``name`` is not a ``str``.
        ValueError: ``name`` is empty, only whitespace, or holds a control character.
    """
    if not isinstance(name, str):
        raise TypeError(
            f"{where}={name!r} must be a string, not {type(name).__name__}, e.g. {where}='learner'."
        )
    if not name.strip():
        raise ValueError(
            f"{where}={name!r} must be a non-empty string (not only whitespace), "
            f"e.g. {where}='learner'."
        )
    if not name.isprintable():
        raise ValueError(
            f"{where}={name!r} holds a control character (newline, tab, NUL...); "
            f"use printable characters, e.g. {where}='learner'."
        )


@dataclasses.dataclass(frozen=True)
class ActorOptions:
    """How an actor is placed and run.

    Attributes:
        label: Role of the actor (``"learner"``, ``"collector"``...). With a layout
            (``actorrt.start(labels=...)``) the actor goes into a slot of its label, on the
            process and GPU the plan gave that slot; without one, only to processes that
            offer the label, when any process offers labels at all.
        num_cpus: CPUs reserved on the hosting process (0 reserves none, as Ray does for
            running actors).
        num_gpus: GPUs reserved; the actor's threads get that GPU as their current device.
        name: Registers the actor under this name for ``actorrt.get_actor(name)``; a named
            actor lives until it is killed or the cluster shuts down.
        max_concurrency: How many calls may run at once. None (the default): 1 for a plain
            actor, whose calls from one caller run one at a time in the order they were
            made; 1000 for an async actor (a class with an ``async def`` method), as in Ray.
        get_if_exists: With ``name``: return the live actor of that name (of the same
            class) instead of creating one; only when there is none is it created.
        max_restarts: How many times the actor is recreated (its constructor run again
            with the same arguments, on a live process) when its process dies; -1: without
            limit. Calls in flight when it died fail with ``ActorDiedError`` unless
            ``max_task_retries`` allows a retry; later calls through any of its handles go
            to the new instance. An actor with restarts is kept until it is killed (as a
            named one is).
        max_task_retries: How many times a call in flight (or queued) when the actor's
            process died is sent again, to the recreated actor; -1: without limit (until
            the restarts run out); 0 (the default): never, at most once. Needs
            ``max_restarts``. A retried call may run twice: its process may have died
            after running it and before its reply left.
    """

    label: str | None = None
    num_cpus: float = 0.0
    num_gpus: float = 0.0
    name: str | None = None
    max_concurrency: int | None = None
    get_if_exists: bool = False
    max_restarts: int = 0
    max_task_retries: int = 0

    def __post_init__(self) -> None:
        if self.label is not None and (
            not isinstance(self.label, str) or not LABEL_PATTERN.match(self.label)
        ):
            raise ValueError(
                f"label={self.label!r} is not a valid label: use letters, digits, '_', '.', '-' "
                "(starting with a letter or '_'), e.g. label='learner'."
            )
        Resources(self.num_cpus, self.num_gpus)  # the one validation of resources
        if self.name is not None:
            check_actor_name(self.name)
        mc = self.max_concurrency
        if mc is not None and (isinstance(mc, bool) or not isinstance(mc, int) or mc < 1):
            raise ValueError(
                f"max_concurrency={mc!r} must be an int >= 1 (or None for the default), "
                "e.g. max_concurrency=4."
            )
        mr = self.max_restarts
        if isinstance(mr, bool) or not isinstance(mr, int) or mr < -1:
            raise ValueError(
                f"max_restarts={mr!r} must be an int >= 0, or -1 for no limit, e.g. max_restarts=3."
            )
        mtr = self.max_task_retries
        if isinstance(mtr, bool) or not isinstance(mtr, int) or mtr < -1:
            raise ValueError(
                f"max_task_retries={mtr!r} must be an int >= 0, or -1 for no limit, e.g. "
                "max_task_retries=3."
            )
        if mtr != 0 and mr == 0:
            # Ray takes this and never retries (the actor is not recreated): refuse it.
            raise ValueError(
                f"max_task_retries={mtr} needs max_restarts: a call is retried only on a "
                "recreated actor, and an actor without restarts is not recreated; add "
                f"max_restarts=N (or -1), e.g. max_restarts=1, max_task_retries={mtr}."
            )
        if not isinstance(self.get_if_exists, bool):
            raise ValueError(f"get_if_exists={self.get_if_exists!r} must be True or False.")
        if self.get_if_exists and self.name is None:
            raise ValueError(
                "get_if_exists=True needs a name: the actor is looked up by it, e.g. "
                "Cls.options(name='learner', get_if_exists=True)."
            )

    @property
    def resources(self) -> Resources:
        """What the actor reserves (validated by :class:`Resources`)."""
        return Resources(self.num_cpus, self.num_gpus)

    @classmethod
    def from_kwargs(
        cls, kwargs: Mapping[str, Any], base: ActorOptions | None = None
    ) -> ActorOptions:
        """Builds options from keyword arguments, naming any unknown key and the valid ones."""
        valid = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(kwargs) - set(valid))
        if unknown:
            raise TypeError(
                f"unknown actor option(s) {', '.join(map(repr, unknown))}; "
                f"valid options are: {', '.join(valid)}."
            )
        return dataclasses.replace(base or cls(), **dict(kwargs))
