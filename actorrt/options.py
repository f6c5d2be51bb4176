"""Actor and remote function options: parsed and validated once, when the class is decorated.

Bad options fail here, at decoration or ``.options()`` time, never later on a worker. As
in Ray, a value of the wrong type (``num_cpus="2"``, ``max_restarts=1.5``) is a
``TypeError`` and a value of the right type out of range (``max_restarts=-2``) a
``ValueError``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar, cast

from actorrt.placement.layout import LABEL_PATTERN
from actorrt.placement.resources import Resources

__all__ = [
    "STREAMING",
    "ActorOptions",
    "FunctionOptions",
    "check_actor_name",
    "check_backpressure",
    "check_method_retries",
    "check_num_returns",
    "check_retry_exceptions",
    "check_task_name",
    "no_stream_retry",
]

STREAMING = "streaming"
"""The ``num_returns`` of a streaming call (Ray's word)."""

BACKPRESSURE = "_generator_backpressure_num_objects"
"""Ray's name for a streaming call's backpressure, which actorrt takes as it is."""


def check_num_returns(num_returns: object) -> int | str:
    """``num_returns`` as an int >= 0 or ``"streaming"``; ``TypeError`` / ``ValueError`` else.

    0, as Ray's: the call is made for its effect, ``.remote()`` gives None.
    """
    if isinstance(num_returns, str) and num_returns == STREAMING:
        return STREAMING
    if isinstance(num_returns, bool) or not isinstance(num_returns, int):
        raise TypeError(
            f"num_returns={num_returns!r} must be an int (e.g. num_returns=2) or "
            "'streaming' (each value the method yields, as it comes)."
        )
    if num_returns < 0:
        raise ValueError(
            f"num_returns={num_returns} must be >= 0: the number of values the method "
            "(or function) returns as a tuple (0: none to get, as Ray's); or 'streaming' "
            "for a generator."
        )
    return num_returns


def check_task_name(name: object, where: str) -> str | None:
    """``name=`` (a call's task name, as Ray's) as a non-empty string, or None if not given.

    Raises:
        TypeError: Not a string.
        ValueError: An empty one.
    """
    if name is None:
        return None
    if not isinstance(name, str):
        raise TypeError(f"{where}: name={name!r} must be a string (the call's task name).")
    if not name:
        raise ValueError(f"{where}: name='' names nothing; leave name= out for the default.")
    return name


def check_backpressure(value: object) -> int:
    """``_generator_backpressure_num_objects`` as actorrt keeps it: N >= 1, or 0 for none.

    Raises:
        TypeError: Not an int.
        ValueError: An int below 1 other than -1 (Ray's "none").
    """
    rule = (
        f"{BACKPRESSURE}={value!r} must be an int >= 1 (how many values not yet taken "
        "the generator may run ahead by), or -1 for no limit."
    )
    count = _int_or_type_error(value, rule)
    if count < 1 and count != -1:
        raise ValueError(rule)
    return max(count, 0)


def _int_or_type_error(value: object, message: str) -> int:
    """``value`` if it is an int (a bool is not one here); else ``TypeError(message)``.

    As Ray's option checks: the wrong type is a ``TypeError``, a bad int a ``ValueError``
    (the caller's). A bool is refused, where Ray takes it as 0 or 1: ``True`` is not a
    count anyone means.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(message)
    return value


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
        num_cpus: CPUs reserved on the hosting process. None (not given) reserves none,
            as Ray does for running actors; see :meth:`assigned_resources` for what the
            actor reports.
        num_gpus: GPUs reserved; the actor's threads get that GPU as their current device.
            None (not given) is 0.
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
        max_pending_calls: How many calls through one handle may be unanswered at once;
            one more raises :class:`~actorrt.errors.PendingCallsLimitExceeded` at
            ``.remote()`` (backpressure for a caller that sends faster than the actor
            runs); -1 (the default): no limit. Counted per handle object and process,
            as in Ray: a copy of the handle sent to another actor counts its own calls.
        concurrency_groups: Named groups of threads beside the actor's own, as Ray's:
            ``{"io": 2, "compute": 4}`` gives the methods marked
            ``@actorrt.method(concurrency_group="io")`` two threads of their own (tasks
            of their own, at most two at once, in an async actor), so they run while the
            others are busy; unmarked methods keep ``max_concurrency``. Calls of
            different groups run in no set order, as in Ray. Kept as ``(name, threads)``
            pairs, sorted by name.
    """

    label: str | None = None
    # None, not 0: Ray's reported CPUs depend on whether either was given at all.
    num_cpus: float | None = None
    num_gpus: float | None = None
    name: str | None = None
    max_concurrency: int | None = None
    get_if_exists: bool = False
    max_restarts: int = 0
    max_task_retries: int = 0
    max_pending_calls: int = -1
    concurrency_groups: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "concurrency_groups", _groups(self.concurrency_groups))
        _check_label(self.label)
        _ = self.resources  # builds a Resources: the one validation of resources
        mpc = self.max_pending_calls
        rule = (
            f"max_pending_calls={mpc!r} must be an int >= 1, or -1 for no limit, "
            "e.g. max_pending_calls=16."
        )
        if _int_or_type_error(mpc, rule) == 0 or mpc < -1:
            raise ValueError(rule)
        if self.name is not None:
            check_actor_name(self.name)
        mc = self.max_concurrency
        rule = (
            f"max_concurrency={mc!r} must be an int >= 1 (or None for the default), "
            "e.g. max_concurrency=4."
        )
        if mc is not None and _int_or_type_error(mc, rule) < 1:
            raise ValueError(rule)
        mr = self.max_restarts
        _check_retries("max_restarts", mr, "3")
        mtr = self.max_task_retries
        _check_retries("max_task_retries", mtr, "3")
        if mtr != 0 and mr == 0:
            # Ray takes this and never retries (the actor is not recreated): refuse it.
            raise ValueError(
                f"max_task_retries={mtr} needs max_restarts: a call is retried only on a "
                "recreated actor, and an actor without restarts is not recreated; add "
                f"max_restarts=N (or -1), e.g. max_restarts=1, max_task_retries={mtr}."
            )
        if not isinstance(self.get_if_exists, bool):
            raise TypeError(f"get_if_exists={self.get_if_exists!r} must be True or False.")
        if self.get_if_exists and self.name is None:
            raise ValueError(
                "get_if_exists=True needs a name: the actor is looked up by it, e.g. "
                "Cls.options(name='learner', get_if_exists=True)."
            )

    @property
    def resources(self) -> Resources:
        """What the actor reserves (validated by :class:`Resources`); a None is 0."""
        return Resources(
            0.0 if self.num_cpus is None else self.num_cpus,
            0.0 if self.num_gpus is None else self.num_gpus,
        )

    def assigned_resources(self) -> dict[str, float]:
        """What the actor's ``get_assigned_resources()`` reports, as Ray 2.60's does.

        Ray runs an actor given no resources on 0 CPUs, but one given ``num_gpus`` (even
        0) and no ``num_cpus`` on 1 CPU: ``num_gpus=0.25`` reports
        ``{"CPU": 1.0, "GPU": 0.25}``, ``num_cpus=0, num_gpus=0.25`` ``{"GPU": 0.25}``,
        nothing ``{}``. That CPU is reported only: it is not reserved here, since a layout
        slot of ``{"num_gpus": 0.25}`` (0 CPUs) must still take such an actor.

        Returns:
            ``{"CPU": n, "GPU": m}`` as floats, a zero left out.
        """
        cpus = self.num_cpus
        if cpus is None:
            cpus = 0.0 if self.num_gpus is None else 1.0
        return dataclasses.replace(self.resources, num_cpus=cpus).as_dict()

    @classmethod
    def from_kwargs(
        cls, kwargs: Mapping[str, Any], base: ActorOptions | None = None
    ) -> ActorOptions:
        """Builds options from keyword arguments, naming any unknown key and the valid ones."""
        return _replaced(base or cls(), kwargs, "actor")


_O = TypeVar("_O", "ActorOptions", "FunctionOptions")


_RAY_ONLY = {
    "lifetime": "actorrt has no detached actors: every actor ends with its cluster, and a "
    "named one lives until killed",
    "namespace": "actorrt has no namespaces: an actor's name is unique in its cluster",
    "resources": "custom resources are labels here: label='x' places on processes "
    "started with that label (actorrt.start(labels=...), actorrt worker --labels)",
    "memory": "actorrt reserves no memory: only num_cpus and num_gpus are counted",
    "runtime_env": "every process runs the driver's environment; classes and functions of "
    "the driver's script travel by value",
    "scheduling_strategy": "placement is by label= and the cluster's layout (actorrt.start("
    "labels=...)), shown by `actorrt plan`",
    "placement_group": "placement is by label= and the cluster's layout (actorrt.start("
    "labels=...)), shown by `actorrt plan`",
}
"""Ray options actorrt does not take, and what to do instead (for their TypeError)."""


def _replaced(base: _O, kwargs: Mapping[str, Any], what: str) -> _O:
    """``base`` with ``kwargs`` replaced; an unknown key is a ``TypeError`` naming valid ones.

    A Ray option actorrt does not take says what to use instead (:data:`_RAY_ONLY`).
    """
    valid = [f.name for f in dataclasses.fields(base)]
    unknown = sorted(set(kwargs) - set(valid))
    if unknown:
        hints = "".join(f" {key!r}: {_RAY_ONLY[key]}." for key in unknown if key in _RAY_ONLY)
        raise TypeError(
            f"unknown {what} option(s) {', '.join(map(repr, unknown))}; "
            f"valid options are: {', '.join(valid)}.{hints}"
        )
    return dataclasses.replace(base, **dict(kwargs))


def _groups(groups: object) -> tuple[tuple[str, int], ...]:
    """``concurrency_groups`` as sorted ``(name, threads)`` pairs.

    Raises:
        TypeError: Not a dict of names to threads (a name not a string, threads not an int).
        ValueError: A name that is not an identifier, or fewer than 1 thread.
    """
    example = "e.g. concurrency_groups={'io': 2, 'compute': 4}"
    if groups is None:
        return ()
    if isinstance(groups, Mapping):
        pairs = list(groups.items())
    elif isinstance(groups, (tuple, list)) and all(
        isinstance(p, (tuple, list)) and len(p) == 2 for p in groups
    ):
        pairs = [(p[0], p[1]) for p in groups]
    else:
        raise TypeError(
            f"concurrency_groups={groups!r} must be a dict of names to threads, {example}."
        )
    for name, threads in pairs:
        rule = f"concurrency group name {name!r} must be a Python identifier, {example}."
        if not isinstance(name, str):
            raise TypeError(rule)
        if not name.isidentifier():
            raise ValueError(rule)
        rule = (
            f"concurrency group {name!r} has {threads!r} threads; each group needs an "
            f"int >= 1, {example}."
        )
        if _int_or_type_error(threads, rule) < 1:
            raise ValueError(rule)
    return tuple(sorted(pairs))


def _check_label(label: object) -> None:
    """A ``label=``: ``TypeError`` if not a string, ``ValueError`` if not a valid label."""
    if label is None:
        return
    rule = (
        f"label={label!r} is not a valid label: use letters, digits, '_', '.', '-' "
        "(starting with a letter or '_'), e.g. label='learner'."
    )
    if not isinstance(label, str):
        raise TypeError(rule)
    if not LABEL_PATTERN.match(label):
        raise ValueError(rule)


def check_method_retries(value: object) -> int:
    """``max_task_retries`` of a method or of one call (``@actorrt.method``, ``.options``).

    Raises:
        TypeError: Not an int.
        ValueError: An int below -1.
    """
    _check_retries("max_task_retries", value, "0")
    return cast("int", value)


def check_retry_exceptions(value: object) -> bool | tuple[type[BaseException], ...]:
    """``retry_exceptions`` of a remote function, an actor method or one call, as Ray's.

    Returns:
        ``value`` if a bool, else its exception classes as a tuple.

    Raises:
        TypeError: Neither a bool nor a list or tuple.
        ValueError: A list or tuple that is empty or holds what is not an exception class.
    """
    if isinstance(value, bool):
        return value
    rule = (
        f"retry_exceptions={value!r} must be True, False or a list of exception "
        "classes, e.g. retry_exceptions=[ConnectionError]."
    )
    if not isinstance(value, (list, tuple)):
        raise TypeError(rule)
    kinds = tuple(value)
    if not kinds or not all(isinstance(k, type) and issubclass(k, BaseException) for k in kinds):
        raise ValueError(rule)
    return cast("tuple[type[BaseException], ...]", kinds)


def no_stream_retry(what: str) -> str:
    """The error of ``retry_exceptions`` asked of a streaming method, function or call.

    A stream's values reach the caller as they are made, and one that raised partway has
    given some already: sending the call again would not give the caller a clean stream.
    """
    return (
        f"{what}: retry_exceptions is not for streaming calls (a generator, or "
        "num_returns='streaming'): their values reach the caller as they are made, so a "
        "stream that raised partway cannot be made again; catch and retry inside the "
        "generator instead."
    )


def _check_retries(what: str, value: object, example: str) -> None:
    """A count of retries or restarts: ``TypeError`` if not an int, ``ValueError`` below -1."""
    rule = f"{what}={value!r} must be an int >= 0, or -1 for no limit, e.g. {what}={example}."
    if _int_or_type_error(value, rule) < -1:
        raise ValueError(rule)


@dataclasses.dataclass(frozen=True)
class FunctionOptions:
    """How a remote function runs (``@actorrt.remote(...)``, ``f.options(...)``), as Ray's.

    Attributes:
        label: Runs the function only on processes of this label: with a layout
            (``actorrt.start(labels=...)``), those holding a slot of it; without one, those
            offering it (``actorrt worker --labels``), or any when none offers labels.
        num_cpus: CPUs each running call takes (1, as in Ray): a process runs as many
            calls at once as its share of its host's CPUs holds (at least one).
        num_gpus: GPUs each running call takes: a fraction below 1 (that many calls share
            a GPU) or whole GPUs. The call's thread has its GPU as the current device.
        num_returns: How many values the function returns as a tuple: ``.remote()`` then
            gives that many refs (0: None, the call made for its effect, as Ray's);
            ``"streaming"``: ``.remote()`` gives an
            ``ObjectRefGenerator`` of the values it yields, as they come. None (the
            default): ``"streaming"`` for a generator function, else 1, as in Ray.
        _generator_backpressure_num_objects: For a streaming call, as Ray's: the
            generator is not asked for its next value while this many of its values are
            not yet taken by the caller (-1, the default: no limit).
        max_retries: How many times a call is sent again, to another process, when the
            process running it dies (3, as in Ray); -1: without limit; 0: never. An
            exception the function raises is not retried (see ``retry_exceptions``). A
            retried call may run twice.
        retry_exceptions: Whether an exception the function raises is retried too (on
            any process), as Ray's: ``True`` for any ``Exception``, or a list of the
            exception classes to retry; the retries count against ``max_retries``.
        name: The calls' own name, as Ray's task name: what
            ``get_runtime_context().get_task_name()`` gives in the function and the
            timeline shows; its errors name the function, then it. None: the function's name.
    """

    label: str | None = None
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    num_returns: int | str | None = None
    _generator_backpressure_num_objects: int = -1
    max_retries: int = 3
    retry_exceptions: bool | tuple[type[BaseException], ...] = False
    name: str | None = None

    def __post_init__(self) -> None:
        _check_label(self.label)
        check_task_name(self.name, "remote function options")
        Resources(self.num_cpus, self.num_gpus)  # the one validation of resources
        if self.num_returns is not None:
            check_num_returns(self.num_returns)
        check_backpressure(self._generator_backpressure_num_objects)
        _check_retries("max_retries", self.max_retries, "3")
        # frozen: set once here, a list made a tuple
        object.__setattr__(self, "retry_exceptions", check_retry_exceptions(self.retry_exceptions))

    @property
    def resources(self) -> Resources:
        """What each running call takes (validated by :class:`Resources`)."""
        return Resources(self.num_cpus, self.num_gpus)

    @classmethod
    def from_kwargs(
        cls, kwargs: Mapping[str, Any], base: FunctionOptions | None = None
    ) -> FunctionOptions:
        """Builds options from keyword arguments, naming any unknown key and the valid ones."""
        return _replaced(base or cls(), kwargs, "remote function")
