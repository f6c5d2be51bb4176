"""The caller's side of actors: ``@actor``, ``ActorClass``, ``ActorHandle``, ``ActorMethod``.

Nothing here touches the network: decoration validates options and collects the method
names; ``.remote()`` hands over to the process's :class:`~actorrt.runtime.runtime.Runtime`.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

import cloudpickle

from actorrt.options import ActorOptions
from actorrt.refs import ObjectRef
from actorrt.runtime.context import current

__all__ = ["ActorClass", "ActorHandle", "ActorMethod", "actor"]

T = TypeVar("T")


def _method_names(cls: type) -> tuple[str, ...]:
    names = []
    for name, member in inspect.getmembers(cls):
        if name.startswith("__") or not callable(member):
            continue
        names.append(name)
    return tuple(sorted(names))


class ActorClass(Generic[T]):
    """A class turned into a remote class by :func:`actor`."""

    def __init__(self, cls: type[T], options: ActorOptions) -> None:
        if not inspect.isclass(cls):
            raise TypeError(f"@actorrt.actor decorates classes, not {type(cls).__name__} {cls!r}.")
        self._cls = cls
        self._options = options
        self._methods = _method_names(cls)
        self._blob: bytes | None = None
        self._key: str | None = None
        self.__name__ = cls.__name__
        self.__qualname__ = cls.__qualname__
        self.__module__ = cls.__module__
        self.__doc__ = cls.__doc__

    @property
    def cls(self) -> type[T]:
        """The plain class, for use in this process (tests, in-process runs)."""
        return self._cls

    @property
    def default_options(self) -> ActorOptions:
        return self._options

    def options(self, **options: Any) -> _BoundActorClass[T]:
        """Returns the class with some options replaced, e.g. ``Cls.options(num_gpus=1)``."""
        return _BoundActorClass(self, ActorOptions.from_kwargs(options, self._options))

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        """Creates the actor on a process the scheduler picks; returns its handle at once."""
        return self._create(self._options, args, kwargs)

    def _create(self, options: ActorOptions, args: tuple, kwargs: dict) -> ActorHandle:
        return current(f"{self.__name__}.remote()").create_actor(self, options, args, kwargs)

    def shipment(self) -> tuple[str, bytes]:
        """The class as cloudpickle bytes (by value when defined in ``__main__``) and its key."""
        if self._blob is None:
            self._blob = cloudpickle.dumps(self._cls)
            self._key = hashlib.sha1(self._blob).hexdigest()[:20]
        return self._key, self._blob  # type: ignore[return-value]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"{self.__name__} is a remote class: create it with {self.__name__}.remote(...) "
            f"(or use {self.__name__}.cls(...) for a local instance)."
        )

    def __reduce__(self):  # ship the class and options, not the cached blob
        return (ActorClass, (self._cls, self._options))

    def __repr__(self) -> str:
        return f"ActorClass({self._cls.__module__}.{self._cls.__qualname__})"


class _BoundActorClass(Generic[T]):
    """``Cls.options(...)``: the same class with other options, ready for ``.remote()``."""

    def __init__(self, actor_class: ActorClass[T], options: ActorOptions) -> None:
        self._actor_class = actor_class
        self._options = options

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        return self._actor_class._create(self._options, args, kwargs)

    def options(self, **options: Any) -> _BoundActorClass[T]:
        return _BoundActorClass(self._actor_class, ActorOptions.from_kwargs(options, self._options))


class ActorHandle:
    """A reference to a remote actor; pass it to other actors freely.

    ``handle.method.remote(...)`` calls a method. A handle of an unnamed actor keeps the
    actor alive through an RRef (torch's distributed reference counting): the actor is
    released once no handle to it is left anywhere in the cluster.
    """

    __slots__ = ("actor_id", "worker", "class_name", "methods", "_rref", "__weakref__")

    def __init__(
        self, actor_id: str, worker: str, class_name: str, methods: tuple[str, ...], rref: Any
    ) -> None:
        self.actor_id = actor_id
        self.worker = worker
        self.class_name = class_name
        self.methods = methods
        self._rref = rref

    def __getattr__(self, name: str) -> ActorMethod:
        if name in ActorHandle.__slots__ or name.startswith("__"):
            raise AttributeError(name)
        if name not in self.methods:
            raise AttributeError(
                f"actor {self.class_name} has no method {name!r}; its methods are: "
                f"{', '.join(self.methods) or '(none)'}."
            )
        return ActorMethod(self, name)

    def __reduce__(self):
        return (
            ActorHandle,
            (self.actor_id, self.worker, self.class_name, self.methods, self._rref),
        )

    def __repr__(self) -> str:
        return f"ActorHandle({self.class_name}, id={self.actor_id[:8]}, on={self.worker})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorHandle) and other.actor_id == self.actor_id

    def __hash__(self) -> int:
        return hash(self.actor_id)


class ActorMethod:
    """``handle.method``: call it with ``.remote(*args, **kwargs)``."""

    __slots__ = ("_handle", "_name")

    def __init__(self, handle: ActorHandle, name: str) -> None:
        self._handle = handle
        self._name = name

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef:
        """Sends the call; returns an :class:`ObjectRef` for its result at once."""
        return current(f"{self._handle.class_name}.{self._name}.remote()").submit(
            self._handle, self._name, args, kwargs
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"actor methods are called with .remote(): use "
            f"handle.{self._name}.remote(...) and actorrt.get() the result."
        )


@overload
def actor(cls: type[T], /) -> ActorClass[T]: ...
@overload
def actor(
    *,
    label: str | None = None,
    num_cpus: float = 0.0,
    num_gpus: float = 0.0,
    name: str | None = None,
    max_concurrency: int = 1,
) -> Callable[[type[T]], ActorClass[T]]: ...


def actor(cls: type[T] | None = None, /, **options: Any) -> Any:
    """Turns a class into a remote class, bare (``@actor``) or with options.

    Args:
        cls: The class, when used bare.
        **options: ``label``, ``num_cpus``, ``num_gpus``, ``name``, ``max_concurrency``
            (see :class:`~actorrt.options.ActorOptions`). Bad options fail here.

    Returns:
        An :class:`ActorClass` (or a decorator making one).

    Example::

        @actorrt.actor(label="learner", num_gpus=1)
        class Learner:
            def push(self, batch): ...
    """
    if cls is not None:
        if options:
            raise TypeError("use @actorrt.actor or @actorrt.actor(option=...), not both.")
        return ActorClass(cls, ActorOptions())
    parsed = ActorOptions.from_kwargs(options)

    def decorate(c: type[T]) -> ActorClass[T]:
        return ActorClass(c, parsed)

    return decorate
