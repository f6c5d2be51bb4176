"""The worker's side of remote functions: an executor runs them as an actor's mailbox would.

An executor is a mailbox (per-caller order, its own threads, the payload road, results
kept here when large) whose instance is a :class:`FunctionExecutor`: the call's method
name is the function's name, and its first two arguments are the function itself, as a
cache key and cloudpickle bytes, unpickled once per process (the bytes are None once the
caller knows this process has it: see :mod:`actorrt.runtime.functions`); the third is what
each call of it takes (``{"CPU": 1.0}``), for :data:`in_function`. The host opens an
executor on the first call that names it; its id says how many threads it has and which
GPUs they use (:func:`actorrt.placement.functions.parse_executor_id`).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import itertools
import threading
from collections.abc import AsyncGenerator, Callable, Generator, Iterator
from functools import partial
from typing import Any

import cloudpickle

from actorrt.placement.functions import parse_executor_id
from actorrt.runtime import devices, interrupts
from actorrt.runtime.exits import in_actor, in_method
from actorrt.runtime.mailbox import Mailbox
from actorrt.runtime.payload import pack
from actorrt.runtime.protocol import FunctionNotLoaded
from actorrt.runtime.raised import ExitRefused
from actorrt.runtime.threads import may_lend

__all__ = ["FunctionExecutor", "in_function", "open_executor"]

in_function: contextvars.ContextVar[dict[str, float] | None] = contextvars.ContextVar(
    "actorrt_in_function", default=None
)
"""What the remote function running in this thread takes per call (its ``num_cpus`` and
``num_gpus`` as ``{"CPU": 1.0}``, zeros left out); None outside one."""

_functions: dict[str, Callable[..., Any]] = {}  # cache key -> the function, per process
_functions_lock = threading.Lock()


def _load(key: str, blob: bytes | None) -> Callable[..., Any]:
    """The function of ``key``: unpickled from ``blob`` the first time, then from the cache.

    Raises:
        FunctionNotLoaded: ``blob`` is None (the caller believed it loaded here) and it
            is not: the caller sends the call again with the bytes.
    """
    fn = _functions.get(key)
    if fn is None:
        with _functions_lock:
            fn = _functions.get(key)
            if fn is None:
                if blob is None:
                    raise FunctionNotLoaded(key)
                fn = _functions[key] = cloudpickle.loads(blob)
    return fn


class FunctionExecutor:
    """Runs remote functions: ``getattr(executor, name)`` is a runner for function ``name``.

    Args:
        groups: The GPU groups of its threads (thread ``i`` takes ``groups[i % len]`` as
            its current device); empty for CPU functions.
    """

    def __init__(self, groups: tuple[tuple[int, ...], ...]) -> None:
        self._actorrt_groups = groups
        self._actorrt_turn = itertools.count()
        self._actorrt_local = threading.local()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        # Any name is a function's: the mailbox looks the call's method name up here.
        if name.startswith("_actorrt_"):  # not set yet (a half-made instance)
            raise AttributeError(name)
        return partial(self._actorrt_run, name)

    def _actorrt_run(
        self,
        name: str,
        key: str,
        blob: bytes | None,
        takes: dict[str, float],
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        fn = _load(key, blob)
        if self._actorrt_groups and not getattr(self._actorrt_local, "gpu_set", False):
            groups = self._actorrt_groups
            devices.assign(groups[next(self._actorrt_turn) % len(groups)])
            self._actorrt_local.gpu_set = True
        token = in_method.set(None)  # a function is no actor method: exit_actor() refuses
        actor_token = in_actor.set(None)  # nor an actor (the executor's mailbox is not one)
        takes_token = in_function.set(takes)
        try:
            with may_lend():  # its get() of other calls lends this thread (nested functions)
                # actorrt.cancel() may interrupt it while it runs (see runtime.interrupts)
                return interrupts.run(partial(_call, fn, name, takes, args, kwargs))
        except SystemExit as exc:  # would end the executor, which other calls share
            raise _no_exit(name, exc) from None
        finally:
            in_method.reset(token)
            in_actor.reset(actor_token)
            in_function.reset(takes_token)


def _call(
    fn: Callable[..., Any], name: str, takes: dict[str, float], args: Any, kwargs: Any
) -> Any:
    result = fn(*args, **kwargs)
    if inspect.iscoroutine(result):  # an async def function runs to its end here
        return interrupts.run_coroutine(result)
    if inspect.isgenerator(result) or inspect.isasyncgen(result):
        return _function_values(result, name, takes)  # streamed by the mailbox
    return result


def _no_exit(name: str, exc: SystemExit) -> ExitRefused:
    return ExitRefused(
        f"{name} called sys.exit({exc.code!r}); a remote function cannot end its worker "
        "process: return, or raise an exception, instead"
    )


def _function_values(values: Any, name: str, takes: dict[str, float]) -> Iterator[Any]:
    """A generator function's values, each made as its call's own code runs.

    The mailbox iterates it after the function returned (see ``Mailbox._stream``), so
    each step sets up again what :meth:`FunctionExecutor._actorrt_run` sets up around
    the call: no actor method, no actor, waits that lend the thread; an async generator
    runs on an event loop of its own.
    """
    steps = _on_a_loop(values) if isinstance(values, AsyncGenerator) else values
    try:
        while True:
            token = in_method.set(None)
            actor_token = in_actor.set(None)
            takes_token = in_function.set(takes)
            try:
                with may_lend():
                    value = next(steps)
            except StopIteration:
                return
            except SystemExit as exc:
                raise _no_exit(name, exc) from None
            finally:
                in_method.reset(token)
                in_actor.reset(actor_token)
                in_function.reset(takes_token)
            yield value
    finally:
        steps.close()  # cancelled between values (actorrt.cancel): its cleanup runs


def _on_a_loop(values: AsyncGenerator[Any]) -> Generator[Any]:
    """An async generator's values, each awaited on an event loop of its own."""
    loop = asyncio.new_event_loop()
    try:
        while True:
            try:
                value = loop.run_until_complete(anext(values))
            except StopAsyncIteration:
                return
            yield value
    finally:
        loop.run_until_complete(values.aclose())
        loop.close()


def open_executor(box: Mailbox, executor: str) -> None:
    """Opens ``box`` as the executor ``executor`` names (threads and GPU groups).

    Raises:
        ValueError: ``executor`` is not an executor's id.
    """
    threads, groups = parse_executor_id(executor)
    box.open(
        FunctionExecutor,
        pack(((groups,), {})),
        class_name="remote function",
        max_concurrency=threads,
        gpu_ids=(),
        call_prefix="remote function ",
        interruptible=True,
    )
