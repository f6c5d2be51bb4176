"""The backend seam: the few runtime operations the example needs, on actorrt or on Ray.

The learner and the collectors are plain classes; what makes them actors, and the waits
the collectors and the driver do on their calls, go through a :class:`Backend`:
``actor`` (create one), ``get``, ``put``, ``wait``, ``kill``, and ``died``, ``object_lost``
and ``restarting`` (which actor an error says is gone, whether an object's value is, and
whether an actor is coming back). A call itself is written the same on both
(``handle.method.remote(...)`` returns a ref), so the seam has no operation for it.
Starting and stopping the runtime stays with the driver: actorrt's cluster has a layout
and a plan, Ray's has neither.

A collector is given the backend's name (a string pickles everywhere) and looks the
backend up in its own process with :func:`backend`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["BACKENDS", "ActorSpec", "Backend", "backend", "ray_options"]

#: The backends :func:`backend` knows, by name.
BACKENDS = ("actorrt", "ray")


@dataclass(frozen=True)
class ActorSpec:
    """How an actor is placed and run; each backend maps it onto its own options.

    Attributes:
        label: actorrt's layout label (the slot the plan gave it); Ray has no layout and
            ignores it.
        num_gpus: GPUs reserved for the actor.
        max_restarts: Times the actor is recreated when its process dies (-1: no limit).
        max_concurrency: Calls that may run at once (None: the backend's default, one
            for these synchronous classes on both).
    """

    label: str | None = None
    num_gpus: float = 0.0
    max_restarts: int = 0
    max_concurrency: int | None = None


class Backend(Protocol):
    """What the example asks of a runtime."""

    name: str

    def actor(self, cls: type, spec: ActorSpec, *args: Any, **kwargs: Any) -> Any:
        """Creates an actor of ``cls`` (``cls(*args, **kwargs)`` in its process)."""

    def get(self, refs: Any, timeout: float) -> Any:
        """The result of a ref (or a list of refs); raises TimeoutError past ``timeout``."""

    def put(self, value: Any) -> Any:
        """Keeps ``value`` in this process as an object; its ref, for any actor to get."""

    def wait(self, refs: list[Any], num_returns: int, timeout: float) -> tuple[list, list]:
        """``(ready, not_ready)`` once ``num_returns`` refs are done or ``timeout`` passed."""

    def kill(self, handle: Any) -> None:
        """Ends the actor (no restart)."""

    def died(self, exc: BaseException) -> str | None:
        """The id of the actor ``exc`` says is gone, looking inside a method's error.

        A collector whose push failed because the learner died raises that error from
        its ``run``; the caller of ``run`` receives it wrapped in the method's error.
        """

    def object_lost(self, exc: BaseException) -> bool:
        """Whether ``exc`` says an object's value cannot be had (its owner died, say)."""

    def restarting(self, exc: BaseException) -> bool:
        """Whether ``exc`` says its actor is being recreated (a later call may reach it).

        actorrt holds calls to an actor being recreated until it is back, so they never
        fail that way; Ray fails them with ``ActorUnavailableError``.
        """

    def actor_id(self, handle: Any) -> str:
        """The actor's id, as :meth:`died` gives it."""

    def process(self, handle: Any) -> str | None:
        """The name of the process the actor runs in, when the backend names processes."""


class _Actorrt:
    name = "actorrt"

    def __init__(self) -> None:
        import actorrt

        self._rt = actorrt

    def actor(self, cls: type, spec: ActorSpec, *args: Any, **kwargs: Any) -> Any:
        options = {
            "label": spec.label,
            "num_gpus": spec.num_gpus,
            "max_restarts": spec.max_restarts,
            "max_concurrency": spec.max_concurrency,
        }
        return self._rt.actor(**options)(cls).remote(*args, **kwargs)

    def get(self, refs: Any, timeout: float) -> Any:
        return self._rt.get(refs, timeout=timeout)

    def put(self, value: Any) -> Any:
        return self._rt.put(value)

    def wait(self, refs: list[Any], num_returns: int, timeout: float) -> tuple[list, list]:
        return self._rt.wait(refs, num_returns=num_returns, timeout=timeout)

    def kill(self, handle: Any) -> None:
        self._rt.kill(handle)

    def died(self, exc: BaseException) -> str | None:
        if isinstance(exc, self._rt.ActorError) and exc.cause is not None:
            exc = exc.cause
        return exc.actor_id if isinstance(exc, self._rt.ActorDiedError) else None

    def object_lost(self, exc: BaseException) -> bool:
        return isinstance(exc, self._rt.ObjectLostError)

    def restarting(self, exc: BaseException) -> bool:
        return False

    def actor_id(self, handle: Any) -> str:
        return str(handle.actor_id)

    def process(self, handle: Any) -> str | None:
        return str(handle.worker)


def ray_options(spec: ActorSpec) -> dict[str, Any]:
    """``ray.remote(...)`` options for ``spec``.

    ``num_cpus=0``: like actorrt's actors, any number fits on a few cores (Ray's default
    of 1 CPU per actor would leave collectors unscheduled on a 2-core machine, where
    actorrt runs them side by side).
    """
    options: dict[str, Any] = {
        "num_cpus": 0,
        "num_gpus": spec.num_gpus,
        "max_restarts": spec.max_restarts,
    }
    if spec.max_concurrency is not None:
        options["max_concurrency"] = spec.max_concurrency
    return options


class _Ray:
    name = "ray"

    def __init__(self) -> None:
        import ray

        self._ray = ray

    def actor(self, cls: type, spec: ActorSpec, *args: Any, **kwargs: Any) -> Any:
        return self._ray.remote(**ray_options(spec))(cls).remote(*args, **kwargs)

    def get(self, refs: Any, timeout: float) -> Any:
        return self._ray.get(refs, timeout=timeout)

    def put(self, value: Any) -> Any:
        return self._ray.put(value)

    def wait(self, refs: list[Any], num_returns: int, timeout: float) -> tuple[list, list]:
        return self._ray.wait(refs, num_returns=num_returns, timeout=timeout)

    def kill(self, handle: Any) -> None:
        self._ray.kill(handle)

    def died(self, exc: BaseException) -> str | None:
        from ray.exceptions import RayActorError, RayTaskError

        # A RayTaskError of a method that raised RayActorError is also an instance of it
        # (Ray's dual classes), but names the caller: the dead actor is in the cause.
        if isinstance(exc, RayTaskError) and exc.cause is not None:
            exc = exc.cause
        if isinstance(exc, RayActorError):
            return exc.actor_id
        return None

    def object_lost(self, exc: BaseException) -> bool:
        from ray.exceptions import ObjectLostError  # OwnerDiedError is one

        return isinstance(exc, ObjectLostError)

    def restarting(self, exc: BaseException) -> bool:
        from ray.exceptions import ActorUnavailableError

        return isinstance(exc, ActorUnavailableError)

    def actor_id(self, handle: Any) -> str:
        # The handle's id is not public API; RayActorError.actor_id is its hex form.
        return str(handle._actor_id.hex())

    def process(self, handle: Any) -> str | None:
        return None  # Ray runs each actor in a process of its own, named by its pid only


_MADE: dict[str, Backend] = {}


def backend(name: str) -> Backend:
    """The backend called ``name`` (one of :data:`BACKENDS`), made once per process.

    Raises:
        ValueError: Not a backend name; the message lists them.
    """
    if name not in BACKENDS:
        raise ValueError(f"backend={name!r} is not one of {', '.join(BACKENDS)}; pick one of them")
    if name not in _MADE:
        _MADE[name] = _Actorrt() if name == "actorrt" else _Ray()
    return _MADE[name]
