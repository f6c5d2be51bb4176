"""The caller's side of actors: ``@actor``, ``ActorClass``, ``ActorHandle``, ``ActorMethod``.

Nothing here touches the network: decoration validates options; the method table (names
and signatures) is read from the class on first use; ``.remote()`` checks that the
arguments bind, as a local call would, and hands over to the process's
:class:`~actorrt.runtime.runtime.Runtime`.

Static typing (opt-in, for mypy and pyright, no plugin): a class deriving from
:class:`TypedActor` gets handles that a type checker sees as instances of the class, and
its methods marked :func:`method` get a ``.remote`` checked against their parameters and
returning ``ObjectRef[R]``. All of it is for the type checker only: at run time handles,
methods and calls are the same as for any other class.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import inspect
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    Literal,
    NoReturn,
    ParamSpec,
    Protocol,
    TypeVar,
    cast,
    overload,
)

from actorrt.binding import Binder, params_of, signature_of
from actorrt.errors import ActorDiedError
from actorrt.options import (
    BACKPRESSURE,
    ActorOptions,
    check_backpressure,
    check_method_retries,
    check_num_returns,
    check_retry_exceptions,
    check_task_name,
    no_stream_retry,
)
from actorrt.pending_calls import PendingCalls
from actorrt.ref_generator import ObjectRefGenerator, streaming_refs
from actorrt.refs import ObjectRef, new_refs, send_call
from actorrt.runtime import group, rref_keeper, shipping
from actorrt.runtime.generators import STREAMING
from actorrt.runtime.payload import packing
from actorrt.runtime.protocol import CONCURRENCY_GROUP, ActorRecord
from actorrt.runtime.raised import RetryOn, retry_on
from actorrt.runtime.runtime import current, current_or_none

__all__ = [
    "ActorClass",
    "ActorHandle",
    "ActorMethod",
    "BoundRemoteMethod",
    "RemoteMethod",
    "TypedActor",
    "actor",
    "handle_of",
    "method",
]

T = TypeVar("T")
R = TypeVar("R")
S = TypeVar("S")
Q = ParamSpec("Q")
S_contra = TypeVar("S_contra", contravariant=True)
L_co = TypeVar("L_co", covariant=True)
R_co = TypeVar("R_co", covariant=True)

if TYPE_CHECKING:
    import typing_extensions

    from actorrt.runtime.runtime import Runtime

    # The parameters of a class's constructor. The default (PEP 696) keeps a one-argument
    # `ActorClass[X]` meaning ActorClass[X, ...], as before the parameter existed.
    P = typing_extensions.ParamSpec("P", default=...)
else:  # typing.ParamSpec takes no default before 3.13; run time does not need it
    P = ParamSpec("P")


# A class's own dunder methods that are never called remotely: Python's and pickle's hooks.
_NOT_REMOTE = frozenset(
    {"__del__", "__copy__", "__deepcopy__", "__setstate__", "__set_name__", "__post_init__"}
)


def _remote_dunder(cls: type, name: str) -> bool:
    """Whether ``handle.<name>.remote()`` calls the class's own dunder method ``name``.

    As in Ray: one the class defines in Python (``__call__``, ``__len__``,
    ``__getitem__``...), which a handle does not have itself (``__repr__``, ``__eq__``
    stay the handle's), and that is not a hook of Python's (:data:`_NOT_REMOTE`).
    """
    raw = inspect.getattr_static(cls, name, None)
    handles_own = any(name in vars(k) for k in ActorHandle.__mro__)  # not type's __call__
    return inspect.isfunction(raw) and not handles_own and name not in _NOT_REMOTE


def _method_specs(cls: type) -> str:
    """The methods of ``cls`` in the form :class:`MethodTable` takes."""
    entries = []
    for name, member in inspect.getmembers(cls):  # sorted by name
        if not name.isidentifier() or not callable(member):
            continue
        if name.startswith("__") and not _remote_dunder(cls, name):
            continue
        raw = inspect.getattr_static(cls, name)
        # Functions and method descriptors get the instance as first argument; static
        # methods, class methods (bound already), builtins and callable objects do not.
        bound = not isinstance(raw, (staticmethod, classmethod)) and (
            inspect.isfunction(raw) or inspect.ismethoddescriptor(raw)
        )
        sig = signature_of(member, drop_self=bound)
        returns = getattr(member, _NUM_RETURNS, None)
        if returns is None:  # as Ray: a generator method streams its values by default
            is_generator = inspect.isgeneratorfunction(member) or inspect.isasyncgenfunction(member)
            returns = STREAMING if is_generator else 1
        backpressure = getattr(member, _BACKPRESSURE, 0)
        if returns == STREAMING and backpressure:
            returns = f"{STREAMING}/{backpressure}"
        on = getattr(member, _RETRY_EXCEPTIONS, False)
        if on:
            name = f"{name}?{'*' if on is True else ','.join(on)}"
        retries = getattr(member, _MAX_TASK_RETRIES, None)
        if retries is not None:
            name = f"{name}!{retries}"
        if returns != 1:
            name = f"{name}#{returns}"
        if sig is None:
            entries.append(name)
        else:
            entries.append(f"{name}:" + ",".join(f"{code}{p}" for p, code in params_of(sig)))
    return ";".join(entries)


class MethodTable:
    """An actor class's methods and their signatures, shared by all handles of the class.

    Handles carry it to every process as its ``specs``, one short string, so that a
    handle pickles small and fast; each process parses a given ``specs`` once
    (:func:`_method_table`), so all handles of a class there share one table.

    Args:
        specs: Methods sorted by name, separated by ``;``: ``name:params``, params being
            ``<code><name>`` per parameter separated by ``,`` (code: kind index * 2 +
            has_default, as in :data:`~actorrt.binding.Params`); a bare ``name`` has an
            unknown signature and goes unchecked. E.g. ``"add:3k;value:"`` for
            ``add(self, k=1)`` and ``value(self)``. A name may end in ``#N``: the
            method's ``num_returns`` (``#streaming``: a generator's values, as they come;
            ``#streaming/N``: with backpressure N), before that ``!N``: the method's
            own ``max_task_retries``, and before that ``?names``: its
            ``retry_exceptions``, the classes' names separated by ``,`` (``?*``: any
            ``Exception``; see ``runtime/raised.py``). An entry ``@io,cpu`` names the
            actor's concurrency groups (a call may choose one).
    """

    __slots__ = (
        "specs",
        "names",
        "returns",
        "backpressure",
        "retries",
        "retry_on",
        "groups",
        "_binders",
    )

    def __init__(self, specs: str) -> None:
        self.specs = specs
        self._binders: dict[str, Binder | None] = {}
        self.returns: dict[str, int | str] = {}  # num_returns of the methods that set one
        self.backpressure: dict[str, int] = {}  # of the streaming methods that set one
        self.retries: dict[str, int] = {}  # max_task_retries of the methods that set one
        self.retry_on: dict[str, RetryOn] = {}  # retry_exceptions of those that set one
        self.groups: tuple[str, ...] = ()  # the actor's concurrency groups
        for entry in specs.split(";") if specs else ():
            if entry.startswith("@"):
                self.groups = tuple(entry[1:].split(","))
                continue
            name, has_params, params = entry.partition(":")
            name, has_returns, returns = name.partition("#")
            name, has_retries, retries = name.partition("!")
            name, has_on, on = name.partition("?")
            if has_retries:
                self.retries[name] = int(retries)
            if has_on:
                self.retry_on[name] = True if on == "*" else tuple(on.split(","))
            if has_returns and returns.startswith(STREAMING):
                self.returns[name] = STREAMING
                if "/" in returns:
                    self.backpressure[name] = int(returns.partition("/")[2])
            elif has_returns:
                self.returns[name] = int(returns)
            binder = None
            if has_params:
                binder = Binder(tuple((p[1:], int(p[0])) for p in params.split(",") if p))
            self._binders[name] = binder
        self.names = tuple(self._binders)

    def __contains__(self, name: object) -> bool:
        return name in self._binders

    def check(
        self, class_name: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """Raises ``TypeError`` when the arguments do not bind to ``method``."""
        binder = self._binders.get(method)
        if binder is None:
            return
        if not kwargs and binder.min_pos <= len(args) <= binder.max_pos and not binder.required_kw:
            return  # binds()'s common case, without its call
        if not binder.binds(args, kwargs):
            binder.fail(f"{class_name}.{method}.remote()", args, kwargs)


_TABLES: dict[str, MethodTable] = {}


def _method_table(specs: str) -> MethodTable:
    """The process's one table for ``specs``."""
    table = _TABLES.get(specs)
    if table is None:
        table = _TABLES.setdefault(specs, MethodTable(specs))
    return table


# Class attributes read through an ActorClass besides its non-dunder ones; the other
# dunders stay ActorClass's own, so copy, pickle and friends see a plain object. Not
# __bases__: issubclass() would then take an ActorClass for a class, and answer wrongly.
_CLASS_DUNDERS = frozenset({"__name__", "__qualname__", "__mro__"})


class TypedActor:
    """Base class of an actor class whose handles and calls a type checker checks.

    Derive from it and mark the methods called remotely with :func:`method`::

        @actorrt.actor
        class Counter(actorrt.TypedActor):
            def __init__(self, start: int) -> None:
                self.n = start

            @actorrt.method
            def add(self, k: int = 1) -> int:
                self.n += k
                return self.n

        c = Counter.remote(0)         # checked against __init__; a type checker sees a Counter
        ref = c.add.remote(2)         # checked against add; an ObjectRef[int]
        n = actorrt.get(ref)          # an int

    It is static only: at run time the class has no extra attribute or behaviour
    (it has empty ``__slots__``), and ``Counter.remote(0)`` returns an
    :class:`ActorHandle` as for any actor class. A type checker is told otherwise in
    three ways, which are the price of typing without a plugin:

    * A handle's static type is the class itself (``Counter``), though at run time it is
      an :class:`ActorHandle` (``isinstance(c, ActorHandle)`` is true, ``isinstance(c,
      Counter)`` false). Calling ``c.add(2)`` without ``.remote`` type-checks but raises
      ``TypeError``; ``c.actor_id`` and friends are not known statically (narrow with
      ``isinstance(c, actorrt.ActorHandle)`` to read them).
    * Methods not marked :func:`method` have no ``.remote`` for the type checker (at run
      time they are called remotely as always).
    * For a type checker, ``@actorrt.actor`` leaves such a class as it is (so that
      ``Counter`` still names the type of its handles; mypy does not apply class
      decorators at all), and ``remote`` and ``options`` are declared here as class
      methods. At run time the name is bound to the :class:`ActorClass` that
      ``@actorrt.actor`` returns, which has them; ``Counter.cls`` and the other
      attributes of ActorClass are not known statically.

    Works with mypy and pyright, without a plugin. Decorate the class (``@actorrt.actor``)
    rather than call ``actorrt.actor(Cls)``: through the call form mypy loses the
    constructor's parameters (``remote`` would then reject every argument).
    """

    __slots__ = ()

    if TYPE_CHECKING:

        @classmethod
        def remote(cls: Callable[Q, _A], *args: Q.args, **kwargs: Q.kwargs) -> _A:
            """Creates the actor (see :meth:`ActorClass.remote`); its handle, typed as ``cls``."""
            ...

        @classmethod
        def options(cls: Callable[Q, _A], **options: Any) -> _BoundActorClass[_A, Q]:
            """The class with some options replaced (see :meth:`ActorClass.options`)."""
            ...


_A = TypeVar("_A", bound=TypedActor)


class BoundRemoteMethod(Protocol[Q, L_co, R_co]):
    """What a type checker sees for ``handle.method`` (and ``self.method``) of a :func:`method`.

    ``Q`` is the method's parameters without ``self``, ``L_co`` what a local call returns,
    ``R_co`` the result of a remote call (the awaited value for an ``async def``).
    """

    def __call__(self, *args: Q.args, **kwargs: Q.kwargs) -> L_co:
        """A local call (inside the actor); on a handle it raises ``TypeError``."""
        ...

    def remote(self, *args: Q.args, **kwargs: Q.kwargs) -> ObjectRef[R_co]:
        """Calls the method on the actor; the ref of its result."""
        ...


class RemoteMethod(Protocol[S_contra, Q, L_co, R_co]):
    """What a type checker sees for a method marked :func:`method` on a class of ``S_contra``.

    Read on an instance (a handle, or ``self``) it is a :class:`BoundRemoteMethod`; read
    on the class, the plain function.
    """

    @overload
    def __get__(
        self, instance: None, owner: type[Any], /
    ) -> Callable[Concatenate[S_contra, Q], L_co]: ...
    @overload
    def __get__(
        self, instance: S_contra, owner: type[Any], /
    ) -> BoundRemoteMethod[Q, L_co, R_co]: ...


class BoundStreamingMethod(Protocol[Q, L_co, R_co]):
    """What a type checker sees for ``handle.method`` of a marked generator method.

    ``Q`` is the method's parameters without ``self``, ``L_co`` what a local call returns
    (the generator), ``R_co`` the type of each value it yields.
    """

    def __call__(self, *args: Q.args, **kwargs: Q.kwargs) -> L_co:
        """A local call (inside the actor); on a handle it raises ``TypeError``."""
        ...

    def remote(self, *args: Q.args, **kwargs: Q.kwargs) -> ObjectRefGenerator[R_co]:
        """Calls the method on the actor; the generator of its values' refs."""
        ...


class StreamingMethod(Protocol[S_contra, Q, L_co, R_co]):
    """What a type checker sees for a generator method marked :func:`method`.

    Read on an instance it is a :class:`BoundStreamingMethod`; on the class, the plain
    function.
    """

    @overload
    def __get__(
        self, instance: None, owner: type[Any], /
    ) -> Callable[Concatenate[S_contra, Q], L_co]: ...
    @overload
    def __get__(
        self, instance: S_contra, owner: type[Any], /
    ) -> BoundStreamingMethod[Q, L_co, R_co]: ...


_NUM_RETURNS = "__actorrt_num_returns__"
_BACKPRESSURE = "__actorrt_backpressure__"
_MAX_TASK_RETRIES = "__actorrt_max_task_retries__"
_RETRY_EXCEPTIONS = "__actorrt_retry_exceptions__"

_F = TypeVar("_F", bound=Callable[..., Any])


def _retry_on(value: object) -> RetryOn:
    """A method's or a call's ``retry_exceptions``, checked, its classes as names."""
    return retry_on(check_retry_exceptions(value))


@overload
def method(  # type: ignore[overload-overlap]  # a generator is also a value (the last overload)
    fn: Callable[Concatenate[S, Q], Iterator[R]], /
) -> StreamingMethod[S, Q, Iterator[R], R]: ...
@overload
def method(  # type: ignore[overload-overlap]
    fn: Callable[Concatenate[S, Q], AsyncIterator[R]], /
) -> StreamingMethod[S, Q, AsyncIterator[R], R]: ...
@overload
def method(
    fn: Callable[Concatenate[S, Q], Coroutine[Any, Any, R]], /
) -> RemoteMethod[S, Q, Coroutine[Any, Any, R], R]: ...
@overload
def method(fn: Callable[Concatenate[S, Q], R], /) -> RemoteMethod[S, Q, R, R]: ...
@overload
def method(
    *,
    num_returns: int | Literal["streaming"] = 1,
    concurrency_group: str | None = None,
    max_task_retries: int | None = None,
    retry_exceptions: bool | list[type[BaseException]] | tuple[type[BaseException], ...] = False,
    _generator_backpressure_num_objects: int = -1,
) -> Callable[[_F], _F]: ...


def method(
    fn: Any = None,
    /,
    *,
    num_returns: int | Literal["streaming"] = 1,
    concurrency_group: str | None = None,
    max_task_retries: int | None = None,
    retry_exceptions: bool | list[type[BaseException]] | tuple[type[BaseException], ...] = False,
    _generator_backpressure_num_objects: int = -1,
) -> Any:
    """Marks a method: for typed remote calls (static only), with ``num_returns``, or a group.

    For a type checker, ``handle.m.remote(...)`` of a marked ``m`` of a
    :class:`TypedActor` is checked against ``m``'s parameters and is an
    ``ObjectRef[R]``, ``R`` being ``m``'s return type (for an ``async def``, the awaited
    type). At run time ``@actorrt.method`` returns ``fn`` itself.

    ``@actorrt.method(num_returns=N)`` (as Ray's ``@ray.method``): ``handle.m.remote()``
    returns a list of N refs, the i-th resolving to the i-th value of the tuple ``m``
    returns; each value is its own result (a large one stays at the actor as its own
    object). A method that returns something else fails each ref with an
    ``ActorError`` saying so. ``handle.m.options(num_returns=N).remote()`` does the same
    for one call.

    A generator method (``yield``, also ``async def`` with ``yield``) streams, as in Ray:
    ``handle.m.remote()`` returns an :class:`~actorrt.ref_generator.ObjectRefGenerator`
    giving each value's ref as soon as ``m`` has yielded it.
    ``@actorrt.method(num_returns="streaming")`` asks the same of a method that returns
    an iterator. ``_generator_backpressure_num_objects=N`` (Ray's name) pauses it while N
    of its values are not yet taken by the caller.

    ``@actorrt.method(concurrency_group="io")`` (as Ray's): ``m`` runs on the threads of
    the actor's concurrency group ``"io"`` (``concurrency_groups={"io": 2}``, an option
    of the actor), beside its other methods.

    ``@actorrt.method(max_task_retries=N)`` (as Ray's): calls of ``m`` are sent again at
    most N times when the actor's process dies with them in flight, instead of the
    actor's own ``max_task_retries``; 0 for a method that must never run twice (one
    that is not idempotent). It is for an actor made with ``max_task_retries``: on one
    without, its calls are never sent again, and a method asking for retries is
    refused when the class is decorated.

    ``@actorrt.method(retry_exceptions=True)`` (as Ray's): a call of ``m`` that raises
    is sent again to the actor, as many times as the call's ``max_task_retries`` (the
    method's, or the actor's), and raises once they are used up; a list of exception
    classes retries only those (and their subclasses, matched by class name, so that
    classes of the user's script match in every process). Each retry spends one of the
    retries a process death would; with ``max_task_retries=-1`` a call that always
    raises is sent for ever. It too is for an actor made with ``max_task_retries``, and
    not for a streaming method (its values reach the caller as they are made).

    Args:
        fn: The method (a plain or ``async`` function taking ``self`` first).
        num_returns: How many values the method returns (an int >= 1; 0: none to get,
            ``.remote()`` gives None, as Ray's), or ``"streaming"``.
        concurrency_group: The group of the actor's threads it runs on (None: the
            actor's own threads, ``max_concurrency`` of them).
        max_task_retries: How many times its calls are sent again to the recreated actor
            (-1: without limit; 0: never). None: the actor's ``max_task_retries``.
        retry_exceptions: Whether a call that raises is sent again too: True for any
            ``Exception``, or a list of the exception classes to retry.
        _generator_backpressure_num_objects: For a streaming method: how many values
            not yet taken by the caller it may run ahead by (-1: no limit).

    Returns:
        ``fn``, unchanged (marked with ``num_returns``, the group or the retries when
        given).

    Raises:
        TypeError: ``fn`` is not callable; an option of the wrong type, as in Ray
            (``num_returns`` not an int or ``"streaming"``, ``max_task_retries`` or the
            backpressure not an int, ``retry_exceptions`` neither a bool nor a list,
            ``concurrency_group`` not a string); or backpressure on a method that does
            not stream, or ``retry_exceptions`` on one that does.
        ValueError: ``num_returns`` is less than 0, the backpressure less than 1 (other
            than -1), ``max_task_retries`` less than -1, or ``retry_exceptions`` an empty
            list or one holding what is not an exception class.
    """
    if fn is None:
        n = check_num_returns(num_returns)
        retries = None if max_task_retries is None else check_method_retries(max_task_retries)
        on = _retry_on(retry_exceptions)
        backpressure = check_backpressure(_generator_backpressure_num_objects)
        if concurrency_group is not None and not isinstance(concurrency_group, str):
            raise TypeError(
                f"concurrency_group={concurrency_group!r} must be the name of one of the "
                "actor's concurrency_groups, e.g. concurrency_group='io'."
            )

        def mark(f: _F) -> _F:
            if not callable(f):
                raise TypeError(f"@actorrt.method decorates methods, not {f!r}.")
            if n != 1:
                setattr(f, _NUM_RETURNS, n)
            streams = n == STREAMING or (
                n == 1 and (inspect.isgeneratorfunction(f) or inspect.isasyncgenfunction(f))
            )
            if on and streams:
                raise TypeError(no_stream_retry(f"@actorrt.method on {f!r}"))
            if backpressure:
                if not streams:
                    raise TypeError(
                        f"@actorrt.method: {BACKPRESSURE} is for streaming methods (a "
                        f"generator, or num_returns='streaming'), not {f!r}."
                    )
                setattr(f, _BACKPRESSURE, backpressure)
            if concurrency_group is not None:
                setattr(f, CONCURRENCY_GROUP, concurrency_group)
            if retries is not None:
                setattr(f, _MAX_TASK_RETRIES, retries)
            if on:
                setattr(f, _RETRY_EXCEPTIONS, on)
            return f

        return mark
    if not callable(fn):
        raise TypeError(f"@actorrt.method decorates methods, not {type(fn).__name__} {fn!r}.")
    return fn


class ActorClass(Generic[T, P]):
    """A class turned into a remote class by :func:`actor`.

    Attributes of the original class (class attributes, static and class methods,
    ``mro()``...) read through it, except where ActorClass has its own (``remote``,
    ``options``, ``cls``, ``default_options``, ``shipment``).

    For type checkers it is generic in the class ``T`` and its constructor's parameters
    ``P``, so that ``.remote(...)`` is checked against ``__init__``.
    """

    def __init__(self, cls: Callable[P, T], options: ActorOptions) -> None:
        if not inspect.isclass(cls):
            raise TypeError(f"@actorrt.actor decorates classes, not {type(cls).__name__} {cls!r}.")
        _check_methods(cls, options)
        self._cls = cast("type[T]", cls)  # a class (checked above) making T
        self._options = options
        self._blob: bytes | None = None
        self._key: str | None = None
        self.__name__ = cls.__name__
        self.__module__ = cls.__module__
        self.__doc__ = cls.__doc__

    @functools.cached_property
    def _table(self) -> MethodTable:
        # Read on first use, not in __init__: when a method of a class shipped by value
        # refers to its ActorClass, cloudpickle makes this object while the class is still
        # an empty skeleton, and fills the class in only afterwards.
        return _method_table(_method_specs(self._cls))

    @functools.cached_property
    def _init(self) -> Binder | None:
        sig = signature_of(self._cls, drop_self=False)  # __init__ (or __new__) without self
        return None if sig is None else Binder(params_of(sig))

    @property
    def _methods(self) -> tuple[str, ...]:
        return self._table.names

    @property
    def cls(self) -> type[T]:
        """The plain class, for use in this process (tests, in-process runs)."""
        return self._cls

    @property
    def default_options(self) -> ActorOptions:
        """The options given to ``@actorrt.actor``; ``.options(...)`` overrides them per call."""
        return self._options

    def options(self, **options: Any) -> _BoundActorClass[T, P]:
        """Returns the class with some options replaced, e.g. ``Cls.options(num_gpus=1)``."""
        return _BoundActorClass(self, ActorOptions.from_kwargs(options, self._options))

    # A TypedActor's handle is typed as the class (static only, see TypedActor). The two
    # overloads overlap for a type checker, which takes the first that fits.
    @overload
    def remote(  # type: ignore[overload-overlap]
        self: ActorClass[_A, Q], *args: Q.args, **kwargs: Q.kwargs
    ) -> _A: ...
    @overload
    def remote(self, *args: P.args, **kwargs: P.kwargs) -> ActorHandle: ...

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Creates the actor on a process the scheduler picks; returns its handle at once.

        Returns:
            The actor's :class:`ActorHandle` (for a type checker, an instance of the
            class when it derives from :class:`TypedActor`).

        Raises:
            TypeError: The arguments do not bind to the class's ``__init__``.
        """
        return self._create(self._options, args, kwargs)

    def _create(
        self, options: ActorOptions, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> ActorHandle:
        init = self._init
        if init is not None and not init.binds(args, kwargs):
            init.fail(f"{self.__name__}.remote()", args, kwargs)
        # Ref arguments go as they are: the actor gets their values before __init__ runs,
        # so the handle comes back at once, as in Ray.
        rt = current(f"{self.__name__}.remote()")
        class_path = f"{self.__module__}.{self.__name__}"  # the same on every process
        specs = self._table.specs
        if options.concurrency_groups:  # handles carry them: a call may choose one
            specs += ";@" + ",".join(g for g, _ in options.concurrency_groups)
        record, rref = rt.create_actor(
            self.__name__, class_path, specs, self.shipment, options, args, kwargs
        )
        return handle_of(record, rref)

    def shipment(self) -> tuple[str, bytes]:
        """The class as cloudpickle bytes (by value when defined in ``__main__``) and its key."""
        if self._blob is None:
            self._blob = shipping.dumps(self._cls)
            self._key = hashlib.sha1(self._blob).hexdigest()[:20]
        return self._key, self._blob  # type: ignore[return-value]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Always raises: create the actor with ``Cls.remote(...)``, or use ``Cls.cls(...)``.

        Raises:
            TypeError: Always, saying which of the two to use.
        """
        raise TypeError(
            f"{self.__name__} is a remote class: create it with {self.__name__}.remote(...) "
            f"(or use {self.__name__}.cls(...) for a local instance)."
        )

    def __getattr__(self, name: str) -> Any:
        # Only names ActorClass lacks get here. The guard keeps its own lazy attributes
        # (whose computation may raise AttributeError) and a half-made object out.
        cls = self.__dict__.get("_cls")
        if (
            cls is None
            or name in ActorClass.__dict__
            or (name.startswith("__") and name not in _CLASS_DUNDERS)
        ):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(cls, name)

    def __dir__(self) -> list[str]:
        own = set(super().__dir__())
        return sorted(own | {n for n in dir(self._cls) if not n.startswith("__")})

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type[T]]:
        # `class Sub(Cls)` of a remote class derives from the plain class: decorate Sub
        # with @actorrt.actor to make it remote too (Ray refuses such a class statement).
        return (self._cls,)

    def __reduce__(self) -> tuple[type[ActorClass[T, P]], tuple[type[T], ActorOptions]]:
        # ship the class and options, not the cached blob or table
        return (ActorClass, (self._cls, self._options))

    def __repr__(self) -> str:
        return f"ActorClass({self._cls.__module__}.{self._cls.__qualname__})"


class _BoundActorClass(Generic[T, P]):
    """``Cls.options(...)``: the same class with other options, ready for ``.remote()``."""

    def __init__(self, actor_class: ActorClass[T, P], options: ActorOptions) -> None:
        _check_methods(actor_class._cls, options)
        self._actor_class = actor_class
        self._options = options

    @overload
    def remote(  # type: ignore[overload-overlap]
        self: _BoundActorClass[_A, Q], *args: Q.args, **kwargs: Q.kwargs
    ) -> _A: ...
    @overload
    def remote(self, *args: P.args, **kwargs: P.kwargs) -> ActorHandle: ...

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self._actor_class._create(self._options, args, kwargs)

    def options(self, **options: Any) -> _BoundActorClass[T, P]:
        return _BoundActorClass(self._actor_class, ActorOptions.from_kwargs(options, self._options))


def _check_methods(cls: type, options: ActorOptions) -> None:
    """What the methods of ``cls`` ask of the actor, ``options`` must give.

    Every ``concurrency_group`` a method names is one of the actor's, and a method's own
    ``max_task_retries`` other than 0, or its ``retry_exceptions``, needs the actor's
    ``max_task_retries`` (calls are kept for a resend only then).
    """
    groups = dict(options.concurrency_groups)
    handles_own = _handles_own()
    for name, member in inspect.getmembers(cls):
        if not inspect.isroutine(member):
            continue
        if name in handles_own:
            raise ValueError(
                f"{cls.__name__}.{name}: a handle has an attribute {name!r} of its own, "
                f"which would hide this method from handle.{name}.remote(); rename the "
                "method."
            )
        retries = getattr(member, _MAX_TASK_RETRIES, 0)
        if retries and not options.max_task_retries:
            raise ValueError(
                f"{cls.__name__}.{name} asks for max_task_retries={retries}, and the actor "
                "has none: give the actor max_restarts and max_task_retries (e.g. "
                f"max_restarts=1, max_task_retries={retries}), then set 0 on the methods "
                "that must never run twice."
            )
        if getattr(member, _RETRY_EXCEPTIONS, False) and not options.max_task_retries:
            raise ValueError(
                f"{cls.__name__}.{name} asks for retry_exceptions, and the actor has no "
                "max_task_retries to spend on them: give the actor max_restarts and "
                "max_task_retries (e.g. max_restarts=1, max_task_retries=3)."
            )
        group = getattr(member, CONCURRENCY_GROUP, None)
        if group is not None and group not in groups:
            have = f"its groups are {sorted(groups)}" if groups else "it has none"
            raise ValueError(
                f"{cls.__name__}.{name} runs in concurrency group {group!r}, which the actor "
                f"does not have ({have}); add it to the actor's options, e.g. "
                f"concurrency_groups={{{group!r}: 1}}."
            )


def _handles_own() -> frozenset[str]:
    """The handle's own private attributes: no actor method may take these names.

    Its public ones (``worker``, ``actor_id``, ...) give way to a method of that name.
    """
    return frozenset(n for n in dir(ActorHandle) if n.startswith("_") and not n.startswith("__"))


def _init_remote(*args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(
        "actor constructors cannot be called as methods: handle.__init__.remote() is not "
        "allowed; create a new actor with Cls.remote(...) instead."
    )


class ActorHandle:
    """A reference to a remote actor; pass it to other actors freely.

    ``handle.method.remote(...)`` calls a method. A handle of an unnamed actor keeps the
    actor alive through an RRef (torch's distributed reference counting): the actor is
    released once no handle to it is left anywhere in the cluster.

    Args:
        actor_id: The actor's id.
        worker: RPC name of the process hosting it.
        class_name: Its class's name.
        methods: Its class's method table (shared by the class's handles).
        rref: The RRef keeping an unnamed actor alive; None for a named one.
        max_task_retries: The actor's ``max_task_retries`` (every copy of the handle
            carries it: the caller keeps a call's arguments for a retry only when it is
            not 0).
        max_pending_calls: The actor's ``max_pending_calls`` (-1: no limit); each copy
            of the handle counts its own unanswered calls.
    """

    __slots__ = (
        "_actor_id",
        "_worker",
        "_class_name",
        "_max_task_retries",
        "_max_pending_calls",
        "_table",
        "_rref",
        "_pending",
        "_session",
        "__weakref__",
    )

    def __init__(
        self,
        actor_id: str,
        worker: str,
        class_name: str,
        methods: MethodTable,
        rref: Any,
        max_task_retries: int = 0,
        max_pending_calls: int = -1,
    ) -> None:
        self._actor_id = actor_id
        self._worker = worker
        self._class_name = class_name
        self._max_task_retries = max_task_retries
        self._max_pending_calls = max_pending_calls
        self._table = methods
        self._rref = rref
        self._pending = PendingCalls(max_pending_calls) if max_pending_calls > 0 else None
        rt = current_or_none()
        self._session = 0 if rt is None else rt.session  # 0: made outside any cluster

    def _check_cluster(self, rt: Runtime) -> None:
        """Raises if this handle was made in a cluster this process has shut down since.

        Its worker's name may be taken by a process of the new cluster, where a call
        would wait for ever for an actor that is not coming.

        Raises:
            ActorDiedError: It belongs to an ended cluster.
        """
        if self._session and self._session != rt.session:
            raise ActorDiedError(
                f"{self!r} belongs to a cluster that was shut down (actorrt.shutdown()): "
                "its actor ended with it. Make the actor again in this cluster (a named "
                "one: Cls.options(name=...).remote(), then actorrt.get_actor(name)).",
                self._actor_id,
            )

    _moves = True  # runtime.protocol.Target: an actor lives on one process at a time

    # What a handle tells of its actor. Only annotated here, never stored under these
    # names: __getattr__ answers them, after the actor's methods, so a method of the same
    # name (``worker``, say) is what ``handle.worker`` gives, as on a Ray handle.
    actor_id: str
    """The actor's id (32 hex digits), as errors and ``repr`` give it."""
    worker: str
    """RPC name of the process hosting the actor."""
    class_name: str
    """The actor's class's name."""
    max_task_retries: int
    """The actor's ``max_task_retries``."""
    max_pending_calls: int
    """The actor's ``max_pending_calls`` (-1: no limit)."""
    methods: tuple[str, ...]
    """The names of the actor's methods."""

    # `handle.__init__` finds this method (never __getattr__), and a bound method reads
    # missing attributes from its function: so `handle.__init__.remote()` lands here.
    __init__.remote = _init_remote  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> ActorMethod:
        if name in ActorHandle.__slots__:
            raise AttributeError(name)  # not set yet (while unpickling): no recursion
        table = self._table
        if name in table._binders:  # MethodTable.__contains__, without its call
            return ActorMethod(self, name)
        told = _TOLD.get(name)
        if told is not None:
            # A type checker reads these names' annotations above, never this return type.
            return cast("ActorMethod", told(self))
        if name.startswith("__"):
            raise AttributeError(name)  # Python's and libraries' probes: no message to make
        raise AttributeError(
            f"actor {self._class_name} has no method {name!r}; its methods are: "
            f"{', '.join(table.names) or '(none)'}."
        )

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(_TOLD) | set(self._table.names))

    # A copy of a handle is the handle: it names the same actor (copy.deepcopy of a config
    # that holds handles; __reduce__ would refuse an unnamed actor's outside a call).
    def __copy__(self) -> ActorHandle:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ActorHandle:
        return self

    def __reduce__(
        self,
    ) -> tuple[Callable[..., ActorHandle], tuple[str, str, str, str, Any, int, int]]:
        if self._rref is not None and not packing():
            raise TypeError(
                f"{self!r} is the handle of an unnamed actor; it can travel only inside "
                "the arguments or return values of actor calls (anywhere inside them, "
                "e.g. in a dataclass), where actorrt keeps the actor alive for the "
                "receiver. To store or send it another way, name the actor "
                "(Cls.options(name=...).remote()) and use actorrt.get_actor(name); "
                "handles of named actors pickle anywhere."
            )
        rt = current_or_none()
        if rt is not None and self._session != rt.session:
            self._check_cluster(rt)
        rref = self._rref
        if rref is not None and group.keeping_rrefs():
            # To a peer that cannot receive RRefs (a second cluster's driver): the handle
            # goes without it, and this process keeps the actor alive in its stead.
            group.keep_rref(self._actor_id, rref)
            rref = None
        elif rref is not None:
            # The receiver tells the actor's host which fork it holds: the host drops it
            # should the receiver die (runtime/held_forks.py), or the actor would live on.
            rref = rref_keeper.Carried(rref, self._actor_id)
        # The table travels as its specs string: many handles of a class in one message
        # carry it once (pickle's memo), and the receiver looks it up in one dict access.
        return (
            _rebuild_handle,
            (
                self._actor_id,
                self._worker,
                self._class_name,
                self._table.specs,
                rref,
                self._max_task_retries,
                self._max_pending_calls,
            ),
        )

    def __repr__(self) -> str:
        return f"ActorHandle({self._class_name}, id={self._actor_id}, on={self._worker})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorHandle) and other._actor_id == self._actor_id

    def __hash__(self) -> int:
        return hash(self._actor_id)


_TOLD: dict[str, Callable[[ActorHandle], Any]] = {
    "actor_id": lambda h: h._actor_id,
    "worker": lambda h: h._worker,
    "class_name": lambda h: h._class_name,
    "max_task_retries": lambda h: h._max_task_retries,
    "max_pending_calls": lambda h: h._max_pending_calls,
    "methods": lambda h: h._table.names,
}
"""What a handle tells of its actor under a public name, unless a method takes the name."""


def _handle_rrefs_owned_by(worker: str) -> list[Any]:
    """The RRefs of this process's handles that ``worker`` owns (it died: they are pinned).

    A handle's RRef is owned by the process that hosted its actor when the handle was
    made, which it keeps after the actor is restarted elsewhere. Found by walking the
    objects the garbage collector tracks: once per death, nothing per handle.
    """
    return [
        h._rref
        for h in gc.get_objects()
        if type(h) is ActorHandle and h._rref is not None and rref_keeper.owned_by(h._rref, worker)
    ]


rref_keeper.find_owned_by(_handle_rrefs_owned_by)


def handle_of(record: ActorRecord, rref: Any = None) -> ActorHandle:
    """The handle of the actor ``record`` describes (``rref``: what keeps it alive, if any)."""
    table = _method_table(record.methods)
    return ActorHandle(
        record.actor_id,
        record.worker,
        record.class_name,
        table,
        rref,
        record.retries,
        record.max_pending,
    )


def _rebuild_handle(
    actor_id: str,
    worker: str,
    class_name: str,
    specs: str,
    rref: Any,
    retries: int = 0,
    max_pending: int = -1,
) -> ActorHandle:
    """Rebuilds a pickled :class:`ActorHandle`."""
    table = _method_table(specs)
    return ActorHandle(actor_id, worker, class_name, table, rref, retries, max_pending)


class ActorMethod:
    """``handle.method``: call it with ``.remote(*args, **kwargs)``."""

    __slots__ = (
        "_handle",
        "_name",
        "_returns",
        "_backpressure",
        "_group",
        "_retries",
        "_retry_on",
        "_task",
    )

    def __init__(
        self,
        handle: ActorHandle,
        name: str,
        num_returns: int | str | None = None,
        backpressure: int | None = None,
        group: str | None = None,
        retries: int | None = None,
        retry_on: RetryOn | None = None,
        task: str | None = None,
    ) -> None:
        self._handle = handle
        self._name = name
        self._task = task  # None: the call is named by its method (Ray's task name)
        self._returns = num_returns  # None: the method's own (1 unless it set one)
        self._backpressure = backpressure  # None: the method's own (none unless it set one)
        self._group = group  # None: the method's own concurrency group
        self._retries = retries  # None: the method's own max_task_retries (or the actor's)
        self._retry_on = retry_on  # None: the method's own retry_exceptions (or none)

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef[Any]:
        """Sends the call; returns an :class:`ObjectRef` for its result at once.

        A method marked ``@actorrt.method(num_returns=N)`` (N other than 1) returns a list
        of N refs instead, one per value it returns (for a type checker, call it through
        ``.options(num_returns=N)``, whose ``remote`` is typed so). A generator method
        (or one marked ``num_returns="streaming"``) returns an
        :class:`~actorrt.ref_generator.ObjectRefGenerator` of the values it yields.

        Raises:
            TypeError: The arguments do not bind to the method's signature.
            PendingCallsLimitExceeded: The actor's ``max_pending_calls`` calls through
                this handle are unanswered (the call is not sent).
        """
        handle = self._handle
        table = handle._table
        table.check(handle._class_name, self._name, args, kwargs)
        rt = current_or_none()
        if rt is None:  # raises; its message is made only here, not on every call
            rt = current(f"{handle._class_name}.{self._name}.remote()")
        if handle._session != rt.session:
            handle._check_cluster(rt)
        returns = self._returns
        if returns is None:
            returns = table.returns.get(self._name, 1) if table.returns else 1
        retries = self._retries
        if retries is None and table.retries:
            retries = table.retries.get(self._name)
        on = self._retry_on
        if on is None:
            on = table.retry_on.get(self._name, False) if table.retry_on else False
        if returns == 0:  # as Ray's num_returns=0: made for its effect, nothing to get
            self._send_for_effect(rt, retries, on, args, kwargs)
            return cast("ObjectRef[Any]", None)
        pending = handle._pending
        if pending is not None:  # max_pending_calls: counted here, per handle
            return cast(
                "ObjectRef[Any]",
                pending.send(
                    f"{handle._class_name}.{self._name}",
                    lambda: self._send(rt, returns, retries, on, args, kwargs),
                ),
            )
        if returns == 1 and self._group is None and self._task is None:
            ref: ObjectRef[Any] = send_call(
                rt, handle, self._name, args, kwargs, retries=retries, on=on
            )
            return ref
        # refs of several values, typed as the class's own calls are (see the docstring)
        return cast("ObjectRef[Any]", self._send(rt, returns, retries, on, args, kwargs))

    def _send_for_effect(
        self,
        rt: Runtime,
        retries: int | None,
        on: RetryOn,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        """A call with ``num_returns=0``: sent as one with a value, whose ref goes at once.

        An error it raises is then logged as unhandled (Ray's drops it unseen).
        """
        pending = self._handle._pending

        def send() -> Any:
            return self._send(rt, 1, retries, on, args, kwargs)

        if pending is not None:  # max_pending_calls counts it until it is answered
            pending.send(f"{self._handle._class_name}.{self._name}", send)
        else:
            send()

    def _send(
        self,
        rt: Runtime,
        returns: int | str,
        retries: int | None,
        on: RetryOn,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        handle = self._handle
        what = f"{handle._class_name}.{self._name}"
        group, task = self._group, self._task
        name = self._name
        if returns == STREAMING:
            limit = self._backpressure
            if limit is None:
                limit = handle._table.backpressure.get(name, 0)
            parts = streaming_refs(rt, what, handle._actor_id, name, limit, group, task)
            return send_call(rt, handle, name, args, kwargs, parts=parts, retries=retries, on=on)
        if group is not None or task is not None:
            many = new_refs(what, handle._actor_id, name, cast("int", returns), group, task)
            return send_call(rt, handle, name, args, kwargs, parts=many, retries=retries, on=on)
        n = cast("int", returns)
        return send_call(rt, handle, name, args, kwargs, n, retries=retries, on=on)

    @overload
    def options(
        self,
        *,
        _generator_backpressure_num_objects: int,
        num_returns: Literal["streaming"] | None = None,
        concurrency_group: str | None = None,
        max_task_retries: int | None = None,
        retry_exceptions: bool | list[type[BaseException]] | None = None,
        name: str | None = None,
    ) -> StreamingReturns: ...
    @overload
    def options(
        self,
        *,
        num_returns: Literal["streaming"],
        concurrency_group: str | None = None,
        max_task_retries: int | None = None,
        retry_exceptions: bool | list[type[BaseException]] | None = None,
        name: str | None = None,
    ) -> StreamingReturns: ...
    # 0 and 1 are also ints: the int overload's list would be wrong for them, so these win.
    @overload
    def options(  # type: ignore[overload-overlap]
        self,
        *,
        num_returns: Literal[0],
        concurrency_group: str | None = None,
        max_task_retries: int | None = None,
        retry_exceptions: bool | list[type[BaseException]] | None = None,
        name: str | None = None,
    ) -> NoReturns: ...
    @overload
    def options(  # type: ignore[overload-overlap]
        self,
        *,
        num_returns: Literal[1],
        concurrency_group: str | None = None,
        max_task_retries: int | None = None,
        retry_exceptions: bool | list[type[BaseException]] | None = None,
        name: str | None = None,
    ) -> ActorMethod: ...
    @overload
    def options(
        self,
        *,
        num_returns: int,
        concurrency_group: str | None = None,
        max_task_retries: int | None = None,
        retry_exceptions: bool | list[type[BaseException]] | None = None,
        name: str | None = None,
    ) -> ManyReturns: ...
    @overload
    def options(
        self,
        *,
        concurrency_group: str,
        max_task_retries: int | None = None,
        retry_exceptions: bool | list[type[BaseException]] | None = None,
        name: str | None = None,
    ) -> ActorMethod: ...
    @overload
    def options(
        self,
        *,
        max_task_retries: int,
        retry_exceptions: bool | list[type[BaseException]] | None = None,
        name: str | None = None,
    ) -> ActorMethod: ...
    @overload
    def options(
        self, *, retry_exceptions: bool | list[type[BaseException]], name: str | None = None
    ) -> ActorMethod: ...
    @overload
    def options(self, *, name: str) -> ActorMethod: ...

    def options(
        self,
        *,
        num_returns: int | str | None = None,
        concurrency_group: str | None = None,
        max_task_retries: int | None = None,
        retry_exceptions: bool | list[type[BaseException]] | None = None,
        _generator_backpressure_num_objects: int | None = None,
        name: str | None = None,
    ) -> ManyReturns | StreamingReturns | NoReturns | ActorMethod:
        """The same method with options for its calls, as Ray's ``.options()``.

        Args:
            num_returns: How many values the method returns: ``.remote()`` then gives
                a list of that many refs (see :func:`method`), one ref for 1, or None for
                0 (the call made for its effect), as Ray's; ``"streaming"``: it gives an
                :class:`~actorrt.ref_generator.ObjectRefGenerator` of the values a
                generator method yields. None: the method's own.
            concurrency_group: The actor's concurrency group the call runs in (its
                threads, or its limit in an async actor), instead of the method's own.
            max_task_retries: How many times the call is sent again to the recreated
                actor if its process dies with it in flight (-1: without limit; 0:
                never), instead of the method's own (or the actor's); for an actor made
                with ``max_task_retries``.
            retry_exceptions: Whether the call is sent again when it raises (True: any
                ``Exception``; a list: those classes), instead of the method's own (see
                :func:`method`); for an actor made with ``max_task_retries``.
            _generator_backpressure_num_objects: For a streaming call (Ray's name): the
                method is not asked for its next value while this many of its values
                are not yet taken by the caller (-1: no limit).
            name: The call's own name, as Ray's task name: what
                ``get_runtime_context().get_task_name()`` gives in the method and the
                timeline shows; its errors name the method, then it. None: ``Class.method``.

        Returns:
            What ``.remote()`` is called on: with ``num_returns`` other than 1 or
            backpressure, an object whose ``remote`` gives a list of refs or a
            generator; otherwise the method itself with the options given.

        Raises:
            TypeError: An option of the wrong type, as in Ray (``num_returns`` not an
                int or ``"streaming"``, ``max_task_retries`` or the backpressure not an
                int, ``retry_exceptions`` neither a bool nor a list, ``name`` not a
                string); no option is given, backpressure is asked of a call that does
                not stream, or ``retry_exceptions`` of one that does.
            ValueError: ``num_returns`` is less than 0, the backpressure less than 1
                (other than -1), the actor has no such concurrency group, or
                ``max_task_retries`` is less than -1, or other than 0 for an actor
                without retries, or ``retry_exceptions`` is an empty list or holds what
                is not an exception class, or asks for retries of an actor without.
        """
        given = (
            num_returns,
            concurrency_group,
            max_task_retries,
            retry_exceptions,
            _generator_backpressure_num_objects,
            name,
        )
        if given == (None, None, None, None, None, None):
            raise TypeError(
                f"{self._name}.options() takes num_returns=, concurrency_group=, "
                f"max_task_retries=, retry_exceptions=, name= or {BACKPRESSURE}=, e.g. "
                f"handle.{self._name}.options(num_returns=2).remote()."
            )
        task = check_task_name(name, f"{self._name}.options()")
        on = None
        if retry_exceptions is not None:
            on = _retry_on(retry_exceptions)
            if on and not self._handle._max_task_retries:
                raise ValueError(
                    f"{self._handle._class_name}.{self._name}.options(retry_exceptions=...): "
                    "the actor was made without max_task_retries, which its retries would "
                    "spend; make it with max_restarts and max_task_retries (e.g. "
                    "max_restarts=1, max_task_retries=3)."
                )
        retries = None
        if max_task_retries is not None:
            retries = check_method_retries(max_task_retries)
            if retries and not self._handle._max_task_retries:
                raise ValueError(
                    f"{self._handle._class_name}.{self._name}.options(max_task_retries="
                    f"{retries}): the actor was made without max_task_retries, so its calls "
                    "are never sent again; make it with max_restarts and max_task_retries "
                    "(then max_task_retries=0 here keeps one call from running twice)."
                )
        if concurrency_group is not None:
            groups = self._handle._table.groups
            if concurrency_group not in groups:
                raise ValueError(
                    f"{self._handle._class_name}.{self._name}.options(): the actor has no "
                    f"concurrency group {concurrency_group!r}; its groups: "
                    f"{', '.join(groups) or '(none: give the actor concurrency_groups=)'}."
                )
        n = (
            check_num_returns(num_returns)
            if num_returns is not None
            else self._handle._table.returns.get(self._name, 1)
        )
        if on and n == STREAMING:
            raise TypeError(no_stream_retry(f"{self._handle._class_name}.{self._name}.options()"))
        limit = None
        if _generator_backpressure_num_objects is not None:
            limit = check_backpressure(_generator_backpressure_num_objects)
            if n != STREAMING:
                raise TypeError(
                    f"{self._name}.options(): {BACKPRESSURE} is for streaming calls (a "
                    "generator method, or num_returns='streaming')."
                )
        method = ActorMethod(
            self._handle, self._name, n, limit, concurrency_group, retries, on, task
        )
        if limit is None and (num_returns is None or n == 1):
            return method  # one ref (or the method's own number of values)
        if n == STREAMING:
            return StreamingReturns(method)
        if n == 0:
            return NoReturns(method)
        return ManyReturns(method)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Always raises: call the method with ``handle.method.remote(...)``.

        Raises:
            TypeError: Always, showing the ``.remote()`` form.
        """
        raise TypeError(
            f"actor methods are called with .remote(): use "
            f"handle.{self._name}.remote(...) and actorrt.get() the result."
        )


class NoReturns:
    """``handle.method.options(num_returns=0)``: its ``remote`` gives None, as Ray's."""

    __slots__ = ("_method",)

    def __init__(self, method: ActorMethod) -> None:
        self._method = method

    def remote(self, *args: Any, **kwargs: Any) -> None:
        """Sends the call, for its effect: nothing to get (its error, if any, is logged).

        Raises:
            TypeError: The arguments do not bind to the method's signature.
        """
        self._method.remote(*args, **kwargs)


class ManyReturns:
    """``handle.method.options(num_returns=N)``: its ``remote`` gives a list of N refs."""

    __slots__ = ("_method",)

    def __init__(self, method: ActorMethod) -> None:
        self._method = method

    def remote(self, *args: Any, **kwargs: Any) -> list[ObjectRef[Any]]:
        """Sends the call; returns its refs at once, the i-th of the i-th value returned.

        Raises:
            TypeError: The arguments do not bind to the method's signature.
        """
        out = self._method.remote(*args, **kwargs)
        return cast("list[ObjectRef[Any]]", out) if isinstance(out, list) else [out]


class StreamingReturns:
    """``handle.method.options(num_returns="streaming")``: its ``remote`` gives a generator."""

    __slots__ = ("_method",)

    def __init__(self, method: ActorMethod) -> None:
        self._method = method

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRefGenerator[Any]:
        """Sends the call; returns the generator of its values' refs at once.

        Raises:
            TypeError: The arguments do not bind to the method's signature.
        """
        return cast("ObjectRefGenerator[Any]", self._method.remote(*args, **kwargs))


class _Decorator(Protocol):
    """What ``@actorrt.actor(option=...)`` returns, for a type checker."""

    @overload
    def __call__(self, cls: type[_A], /) -> type[_A]: ...  # type: ignore[overload-overlap]
    @overload
    def __call__(self, cls: Callable[P, T], /) -> ActorClass[T, P]: ...


# For a type checker, a TypedActor class stays itself (TypedActor declares its `remote`
# and `options`), so that its name still names the type of its handles; mypy never
# applies class decorators anyway, pyright does. Other classes become ActorClass[T, P]:
# Callable[P, T] rather than type[T], so that `.remote` is checked against __init__.
@overload
def actor(cls: type[_A], /) -> type[_A]: ...  # type: ignore[overload-overlap]
@overload
def actor(cls: Callable[P, T], /) -> ActorClass[T, P]: ...
@overload
def actor(
    *,
    label: str | None = None,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    name: str | None = None,
    max_concurrency: int | None = None,
    get_if_exists: bool = False,
    max_restarts: int = 0,
    max_task_retries: int = 0,
    max_pending_calls: int = -1,
    concurrency_groups: Mapping[str, int] | None = None,
) -> _Decorator: ...


def actor(cls: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Turns a class into a remote class, bare (``@actor``) or with options.

    Args:
        cls: The class, when used bare.
        **options: ``label``, ``num_cpus``, ``num_gpus``, ``name``, ``max_concurrency``,
            ``get_if_exists``, ``max_restarts``, ``max_task_retries``,
            ``max_pending_calls``, ``concurrency_groups`` (see
            :class:`~actorrt.options.ActorOptions`). Bad options fail here.

    Returns:
        An :class:`ActorClass` (or a decorator making one). For typed calls, see
        :class:`TypedActor`.

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

    def decorate(c: Callable[P, T]) -> ActorClass[T, P]:
        return ActorClass(c, parsed)

    return decorate
