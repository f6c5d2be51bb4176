"""The caller's side of remote functions: ``@actorrt.remote`` and :class:`RemoteFunction`.

As in Ray, ``@actorrt.remote`` on a function makes a remote function, whose
``f.remote(...)`` runs it on a worker process and returns an :class:`ObjectRef` at once;
on a class it does what :func:`~actorrt.actor_class.actor` does. Nothing here touches the
network: decoration validates the options, ``.remote()`` checks that the arguments bind
and hands the call to the process's runtime (``runtime/functions.py`` picks the process,
``runtime/executor.py`` runs it there).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable
from typing import Any, Generic, NoReturn, ParamSpec, Protocol, TypeVar, cast, overload

from actorrt.actor_class import ActorClass, TypedActor, actor
from actorrt.binding import Binder, params_of, signature_of
from actorrt.options import FunctionOptions, check_backpressure, no_stream_retry
from actorrt.ref_generator import streaming_refs
from actorrt.refs import ObjectRef, new_refs, when_ready
from actorrt.runtime import lineage, shipping
from actorrt.runtime.functions import FunctionCall, Shape
from actorrt.runtime.generators import STREAMING
from actorrt.runtime.protocol import ReplySlot
from actorrt.runtime.raised import retry_on
from actorrt.runtime.runtime import current

__all__ = ["RemoteFunction", "remote"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
_A = TypeVar("_A", bound=TypedActor)


class RemoteFunction(Generic[P, R]):
    """A function turned into a remote function by :func:`remote`.

    ``f.remote(*args, **kwargs)`` runs it on a worker process (one the function's label
    and resources allow, the least busy) and returns an :class:`ObjectRef` of its result
    at once; ``f.options(...)`` gives it other options for the calls made through it.

    Arguments and results take the road of actor calls: tensors out of band, over the
    plan's device maps; ``ObjectRef`` arguments are waited for, then fetched by the
    worker from their owners; a large result stays on the worker as an object. A call
    whose process dies is sent again to another, up to ``max_retries`` times; an
    exception the function raises reaches ``get`` as :class:`~actorrt.ActorError`
    naming the function, with the remote traceback.

    For type checkers it is generic in the function's parameters ``P`` and its result
    ``R``, so that ``.remote(...)`` is checked against the function's signature.
    """

    def __init__(self, fn: Callable[P, R], options: FunctionOptions) -> None:
        if inspect.isclass(fn) or not callable(fn):
            raise TypeError(
                f"RemoteFunction wraps functions, not {type(fn).__name__} {fn!r}; for a class "
                "use @actorrt.remote or @actorrt.actor."
            )
        self._fn = fn
        self._options = options
        self._shape = Shape(options.label, options.resources)  # once: options are frozen
        self._takes = options.resources.as_dict()  # the executor's get_assigned_resources()
        self._shipped: tuple[str, bytes] | None = None
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
        self._name = name
        self._what = f"remote function {name}"
        self._is_generator = inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)
        returns = options.num_returns
        self._returns = returns if returns is not None else STREAMING if self._is_generator else 1
        self._backpressure = check_backpressure(options._generator_backpressure_num_objects)
        if self._backpressure and self._returns != STREAMING:
            raise TypeError(
                f"{name}: _generator_backpressure_num_objects is for streaming calls: a "
                "generator function, or num_returns='streaming'."
            )
        if options.retry_exceptions and self._returns == STREAMING:
            raise TypeError(no_stream_retry(name))
        self._retry_on = retry_on(options.retry_exceptions)  # as names: one rule (raised.py)
        functools.update_wrapper(self, fn)  # __name__, __doc__, __wrapped__...

    @functools.cached_property
    def _binder(self) -> Binder | None:
        sig = signature_of(self._fn, drop_self=False)
        return None if sig is None else Binder(params_of(sig))

    @property
    def default_options(self) -> FunctionOptions:
        """The options given to ``@actorrt.remote``; ``.options(...)`` overrides them."""
        return self._options

    def options(self, **options: Any) -> RemoteFunction[P, R]:
        """The function with some options replaced, e.g. ``f.options(num_gpus=1)``.

        Args:
            **options: ``label``, ``num_cpus``, ``num_gpus``, ``num_returns``,
                ``max_retries``, ``retry_exceptions`` (see
                :class:`~actorrt.options.FunctionOptions`).

        Raises:
            TypeError: An unknown option, or a value of the wrong type (as Ray's).
            ValueError: A value out of range.
        """
        other: RemoteFunction[P, R] = RemoteFunction(
            self._fn, FunctionOptions.from_kwargs(options, self._options)
        )
        other._shipped = self._shipped  # the same function: pickled once
        return other

    def remote(self, *args: P.args, **kwargs: P.kwargs) -> ObjectRef[R]:
        """Runs the function on a worker process; returns an :class:`ObjectRef` at once.

        With ``num_returns=N`` (N other than 1), a list of N refs instead, one per value
        it returns; with ``num_returns=0`` (as Ray's) None: it runs for its effect, and an
        error it raises is logged as unhandled. A generator function (or
        ``num_returns="streaming"``) gives an
        :class:`~actorrt.ref_generator.ObjectRefGenerator` of the values it yields, each
        as soon as it is made.

        Raises:
            TypeError: The arguments do not bind to the function's signature, or one
                cannot be sent.
            PlacementError: No live process can run it (its label, or the GPUs asked).
        """
        binder = self._binder
        if binder is not None and not binder.binds(args, kwargs):
            binder.fail(f"{self._name}.remote()", args, kwargs)
        rt = current(f"{self._name}.remote()")
        options = self._options
        key, blob = self.shipment()
        returns = self._returns  # as Ray: a generator function streams its values
        out: Any
        slot: ReplySlot
        method: str
        task = options.name
        if returns == STREAMING:
            out, slot, method = streaming_refs(
                rt, self._what, None, self._name, self._backpressure, task=task
            )
        else:
            # num_returns=0 (as Ray's): made for its effect, its one ref dropped below
            count = cast("int", returns) or 1
            out, slot, method = new_refs(self._what, None, self._name, count, task=task)
        call = FunctionCall(
            rt.functions,
            rt,
            self._shape,
            self._what,
            method,
            options.max_retries,
            self._retry_on,
        )
        slot.attach(call.reply, "", None, call.cancel)
        lineage.made(slot if type(slot) is ObjectRef else out[0])  # see refs.send_call
        when_ready((key, blob, self._takes, *args), kwargs, call.send, call.give_up)
        return cast("ObjectRef[R]", None if returns == 0 else out)

    def shipment(self) -> tuple[str, bytes]:
        """The function as cloudpickle bytes (by value when defined in ``__main__``) and its key."""
        if self._shipped is None:
            blob = shipping.dumps(self._fn)
            self._shipped = (hashlib.sha1(blob).hexdigest()[:20], blob)
        return self._shipped

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Always raises: run it with ``f.remote(...)``, as in Ray.

        Raises:
            TypeError: Always, showing the ``.remote()`` form.
        """
        raise TypeError(
            f"remote functions are run with .remote(): use {self._name}.remote(...) and "
            f"actorrt.get() the result (the plain function is {self._name}.__wrapped__)."
        )

    def __reduce__(
        self,
    ) -> tuple[type[RemoteFunction[P, R]], tuple[Callable[P, R], FunctionOptions]]:
        # the function and options travel, not the cached bytes
        return (RemoteFunction, (self._fn, self._options))

    def __repr__(self) -> str:
        return f"RemoteFunction({self._name})"


class _RemoteDecorator(Protocol):
    """What ``@actorrt.remote(option=...)`` returns, for a type checker."""

    @overload
    def __call__(self, target: type[_A], /) -> type[_A]: ...  # type: ignore[overload-overlap]
    @overload
    def __call__(self, target: type[T], /) -> ActorClass[T]: ...  # type: ignore[overload-overlap]
    @overload
    def __call__(self, target: Callable[P, R], /) -> RemoteFunction[P, R]: ...


@overload
def remote(target: type[_A], /) -> type[_A]: ...  # type: ignore[overload-overlap]
@overload
def remote(target: type[T], /) -> ActorClass[T]: ...  # type: ignore[overload-overlap]
@overload
def remote(target: Callable[P, R], /) -> RemoteFunction[P, R]: ...
@overload
def remote(**options: Any) -> _RemoteDecorator: ...


def remote(target: Any = None, /, **options: Any) -> Any:
    """Makes a remote function of a function, or a remote class of a class, as Ray's.

    Bare (``@actorrt.remote``) or with options (``@actorrt.remote(num_gpus=1)``). On a
    class it is :func:`~actorrt.actor_class.actor` (its options are actor options).

    Args:
        target: The function or class, when used bare.
        **options: For a function: ``label``, ``num_cpus`` (1), ``num_gpus`` (0),
            ``num_returns`` (1), ``max_retries`` (3), ``retry_exceptions`` (False) (see
            :class:`~actorrt.options.FunctionOptions`). Bad options fail here.

    Returns:
        A :class:`RemoteFunction`, an :class:`~actorrt.actor_class.ActorClass`, or a
        decorator making one.

    Raises:
        TypeError: Bare and with options at once, an unknown option, or neither a
            function nor a class.

    Example::

        @actorrt.remote(num_returns=2)
        def split(batch):
            return batch[: len(batch) // 2], batch[len(batch) // 2 :]

        left, right = split.remote(list(range(10)))
        print(actorrt.get([left, right]))
    """
    if target is not None:
        if options:
            raise TypeError("use @actorrt.remote or @actorrt.remote(option=...), not both.")
        return _make(target, {})
    return functools.partial(_make, options=options)


def _make(target: Any, options: dict[str, Any]) -> Any:
    if inspect.isclass(target):
        return actor(**options)(target) if options else actor(target)
    if callable(target):
        return RemoteFunction(target, FunctionOptions.from_kwargs(options))
    raise TypeError(
        f"@actorrt.remote decorates functions and classes, not {type(target).__name__} {target!r}."
    )
