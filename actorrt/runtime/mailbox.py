"""One actor's mailbox: per-caller ordering, bounded concurrency, its own event loop.

torch RPC runs requests on a thread pool, so two calls from one caller can arrive out
of order. Every call carries ``(caller, seq)``; the mailbox releases a caller's calls
strictly in ``seq`` order onto the actor's queue, whose ``max_concurrency`` threads
run them (one thread: one at a time, in order). RPC threads only hand calls over here
and never wait for an actor, so nested and callback calls cannot starve the RPC pool.

An actor with an ``async def`` method is an async actor, as in Ray: its constructor and
every method, plain ones too, run on its own event loop, each call a task started in
the order released; up to ``max_concurrency`` (by default 1000) run at once, and each
is answered when its task ends, so a call waiting in ``await`` holds no thread.

Concurrency groups (``concurrency_groups={"io": 2}``, methods marked
``@actorrt.method(concurrency_group="io")``): each group has threads of its own (an
async actor: a limit of its own on the loop), so its methods run while the others are
busy; calls are still released in each caller's order, but those of different groups
may then run in any order, as in Ray.

``actorrt.cancel`` reaches here as :meth:`Mailbox.cancel`: a call not yet begun is
answered "cancelled" and never runs (one that has not even arrived is marked, and
answered so when it comes, keeping its caller's order); an async actor's call that has
begun is cancelled as its asyncio task; a sync actor's running call runs on, as in Ray.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from actorrt.errors import ObjectLostError, TaskCancelledError
from actorrt.logs import get_logger
from actorrt.runtime import devices, interrupts, lineage, streams
from actorrt.runtime import trace as _trace
from actorrt.runtime.backpressure import close_sender, open_sender
from actorrt.runtime.exits import exit_asked, exit_reason, in_actor, in_method, take_exit
from actorrt.runtime.generators import Sender, Stream
from actorrt.runtime.objects import (
    Borrowing,
    resolve_args,
    resolve_args_async,
    unpack_arguments,
    with_kept,
)
from actorrt.runtime.payload import Wire, unpack
from actorrt.runtime.protocol import (
    CONCURRENCY_GROUP,
    LOST,
    OK,
    Returns,
    cancelled_reply,
    died_reply,
    error_reply,
    split_returns,
    task_name,
    unreadable,
    unsendable_reply,
)
from actorrt.runtime.threads import ActorThreads, current_pool

__all__ = ["Call", "Mailbox", "PackReply"]

log = get_logger("mailbox")

PackReply = Callable[[str, tuple[int, Any]], Wire]
"""``pack_reply(caller, reply)``: the payload pipeline's packing of a reply for ``caller``."""

# What a call cancelled while it ran raises when the cancel stops it: a remote function's
# interrupt, or, from a get() of a call it made, that call's cancel (a recursive one).
_CANCELS = (interrupts.Interrupted, TaskCancelledError)

ASYNC_MAX_CONCURRENCY = 1000
"""How many calls an async actor runs at once when ``max_concurrency`` is not set (Ray's)."""


@dataclass(eq=False)
class Call:
    """One method call waiting for, or running on, an actor."""

    caller: str
    seq: int
    method: str | None  # None: the caller skips this seq (its call could not be sent)
    wire: Wire | None  # the packed ``(args, kwargs)``
    future: torch.futures.Future[Wire]  # completed with the packed reply
    done: bool = field(default=False)
    # actorrt.cancel(): set (under the mailbox lock) before `started` is read there, and
    # `started` is set on the actor's thread before it reads this, so a cancel and the
    # start of the call cannot both miss each other (see Mailbox.cancel and _run).
    cancel_asked: bool = field(default=False)
    started: bool = field(default=False)
    began: float = field(default=0.0)  # time.monotonic() as its method began (status)
    task: asyncio.Task[None] | None = field(default=None)  # an async actor's, once made
    # A remote function's call (see runtime.interrupts): the thread running it, and
    # whether actorrt.cancel() interrupted it.
    thread: int = field(default=0)
    fired: bool = field(default=False)
    waker: Callable[[], object] | None = field(default=None)  # an async function's
    # The calls it made while it ran, by their refs (see runtime.lineage): a recursive
    # actorrt.cancel() cancels them with it.
    children: weakref.WeakSet[lineage.Child] | None = field(default=None)
    # The refs its arguments brought, borrowed for the call (see objects.Borrowing)
    borrowed: Borrowing | None = field(default=None)

    def arguments(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Unpacks the arguments (on the actor's thread: a failure fails this call only)."""
        try:
            (args, kwargs), self.borrowed = unpack_arguments(self.wire)  # type: ignore[arg-type]
        except Exception as exc:
            raise unreadable("the arguments", exc) from exc
        return args, kwargs


class Mailbox:
    """Receives calls for one actor and runs them on the actor's own threads."""

    def __init__(
        self,
        actor_id: str,
        on_ended: Callable[[str, str], None],
        pack_reply: PackReply,
    ) -> None:
        self.actor_id = actor_id
        self._pack_reply = pack_reply
        self.what = f"actor {actor_id}"
        self._class_name = "actor"
        self._prefix = f"{self.what}."  # what a call's errors are said of: prefix + method
        self._lock = threading.Lock()
        self._next_seq: dict[str, int] = {}
        self._held: dict[str, dict[int, Call]] = {}
        self._before_open: list[Call] = []  # released before the constructor was queued
        self._opened = False  # the constructor is queued: calls may follow it
        self._threads: ActorThreads | None = None  # a sync actor's threads
        # Concurrency groups: method name -> the threads (sync) or the limit (async) of
        # its group; empty for an actor without groups (the common case: no lookup).
        self._group_threads: dict[str, ActorThreads] = {}
        self._group_slots: dict[str, asyncio.Semaphore] = {}
        # Group name -> its threads (sync, made on first use) or limit (async), for calls
        # that choose their group (handle.m.options(concurrency_group=...)).
        self._groups: dict[str, int] = {}
        self._pools: dict[str, ActorThreads] = {}
        self._limits: dict[str, asyncio.Semaphore] = {}
        self._gpu_ids: tuple[int, ...] = ()
        # Set once __init__ has returned or failed: with max_concurrency > 1, a call can
        # reach another of the actor's threads while __init__ still runs on the first.
        # _ready mirrors it as a plain attribute: one read per call, no method call.
        self._constructed = threading.Event()
        self._ready = False
        self._constructing = 0.0  # time.monotonic() as __init__ began; 0: not running
        self._interruptible = False  # a remote functions' executor (see open)
        self._loop: asyncio.AbstractEventLoop | None = None  # an async actor's loop
        self._slots: asyncio.Semaphore | None = None  # an async actor's max_concurrency
        self._tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references
        self._accepted: set[Call] = set()  # handed to the actor's threads, not answered
        self._cancel_first: set[tuple[str, int]] = set()  # (caller, seq) cancelled unarrived
        self._out_of_order: set[str] = set()  # callers told of a call run out of turn
        # caller -> (the last number it took before it restarted this actor in place, why):
        # a call it numbered before, reaching its turn after, fails as those in flight did.
        self._restarted_before: dict[str, tuple[int, str]] = {}
        self._instance: Any = None
        self._dead: str | None = None
        self._on_ended = on_ended

    # -- set-up ----------------------------------------------------------------
    def open(
        self,
        cls: type,
        wire: Wire,
        *,
        class_name: str,
        max_concurrency: int | None,
        gpu_ids: tuple[int, ...],
        call_prefix: str | None = None,
        concurrency_groups: tuple[tuple[str, int], ...] = (),
        interruptible: bool = False,
    ) -> None:
        """Queues the constructor first, then every call that arrived before it.

        Args:
            cls: The actor's class.
            wire: The packed constructor arguments.
            class_name: For messages and thread names.
            max_concurrency: How many calls may run at once; None: 1, or
                :data:`ASYNC_MAX_CONCURRENCY` for a class with an ``async def`` method.
            gpu_ids: The actor's GPUs; the first is the current device of its threads.
            call_prefix: What a call's errors name before the method's name (default:
                ``"<class_name> actor <id>."``).
            concurrency_groups: ``(name, threads)`` of the actor's groups; a method
                marked with one runs on that group's threads (or within its limit).
            interruptible: Its calls run remote functions, which ``actorrt.cancel``
                interrupts while they run (:mod:`actorrt.runtime.interrupts`).
        """
        self.what = f"{class_name} actor {self.actor_id}"
        self._class_name = class_name
        self._prefix = call_prefix if call_prefix is not None else f"{self.what}."
        name = f"{class_name}-{self.actor_id[:8]}"
        members = inspect.getmembers(cls)
        is_async = any(
            inspect.iscoroutinefunction(m) or inspect.isasyncgenfunction(m) for _, m in members
        )
        groups = dict(concurrency_groups)
        # routines only: getattr on any other class attribute could run its code
        marked = {
            n: getattr(m, CONCURRENCY_GROUP, None) for n, m in members if inspect.isroutine(m)
        }
        in_group = {n: g for n, g in marked.items() if g in groups}
        with self._lock:
            if self._dead is not None:
                return
            self._opened = True
            self._groups = groups
            self._gpu_ids = gpu_ids
            self._interruptible = interruptible
            if is_async:
                self._slots = asyncio.Semaphore(max_concurrency or ASYNC_MAX_CONCURRENCY)
                limits = self._limits = {g: asyncio.Semaphore(n) for g, n in groups.items()}
                self._group_slots = {n: limits[g] for n, g in in_group.items()}
                self._loop = asyncio.new_event_loop()
                threading.Thread(
                    target=self._serve, args=(gpu_ids,), name=f"{name}-loop", daemon=True
                ).start()
                self._loop.call_soon_threadsafe(self._construct, (cls, wire))
            else:
                self._threads = ActorThreads(
                    max_concurrency or 1, name, initializer=lambda: _set_gpu(gpu_ids)
                )
                # only groups with methods now: a pool starts a thread at once (another
                # group's pool is made when a call first chooses it: see _pool)
                for g in sorted(set(in_group.values())):
                    self._pool(g)
                self._group_threads = {n: self._pools[g] for n, g in in_group.items()}
                self._threads.submit(self._construct, (cls, wire))
            waiting, self._before_open = self._before_open, []
            for call in waiting:
                self._accepted.add(call)
                self._queue(call)

    def _construct(self, what: tuple[type, Wire]) -> None:
        try:
            self._construct_now(what)
        finally:
            self._ready = True
            self._constructed.set()

    def _construct_now(self, what: tuple[type, Wire]) -> None:
        cls, wire = what
        token = in_method.set(f"{self._class_name}.__init__")
        actor_token = in_actor.set(self.actor_id)
        self._constructing = time.monotonic()
        try:
            try:
                args, kwargs = unpack(wire)
            except Exception as exc:
                raise unreadable("the constructor arguments", exc) from exc
            # Ref arguments of a constructor travel unresolved (Cls.remote() returns at
            # once, as in Ray): the actor's thread gets their values before __init__ runs.
            args, kwargs = resolve_args(args, kwargs)
            self._instance = cls(*args, **kwargs)
        except BaseException as exc:  # the actor never existed: every call reports why
            _, (_, summary, text, _) = error_reply(self.what, exc)
            self.kill(f"{self.what} failed in __init__: {summary}\n\nRemote traceback:\n{text}")
        finally:
            self._constructing = 0.0
            in_method.reset(token)
            in_actor.reset(actor_token)
        asked = take_exit()  # cleared either way: an async actor's calls copy this context
        if asked is not None:  # __init__ caught its exit_actor(); after a failure, a no-op
            self.kill(exit_reason(self.what, "__init__", asked))

    def _serve(self, gpu_ids: tuple[int, ...]) -> None:
        """The async actor's loop thread."""
        _set_gpu(gpu_ids)
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        except BaseException as exc:  # e.g. sys.exit() in a task the actor made itself
            self.kill(f"{self.what} ended: its event loop raised {type(exc).__name__}: {exc}")
        finally:
            loop.close()

    # -- calls -----------------------------------------------------------------
    def deliver(self, call: Call) -> None:
        """Accepts a call from an RPC thread; never blocks on the actor."""
        if _trace.ON:
            _trace.arrived(call)
        answers: list[tuple[Call, tuple[int, Any]]] = []
        late: tuple[int, str, int] | None = None  # (seq, caller, expected) to tell of
        with self._lock:
            if self._dead is not None:
                call.done = True  # nobody else has seen this call yet
                answers.append((call, died_reply(self._dead)))
            else:
                if self._cancel_first:  # its cancel came first: answered when released
                    key = (call.caller, call.seq)
                    if key in self._cancel_first:
                        self._cancel_first.discard(key)
                        call.cancel_asked = True
                expected = self._next_seq.get(call.caller, 0)
                if call.seq != expected:
                    if call.seq > expected:
                        waiting = self._held.setdefault(call.caller, {})
                        if call.seq not in waiting:
                            waiting[call.seq] = call
                            return
                    if call.method is None:
                        # a number given up after its call came (refs._close_gap): passed
                        call.done = True
                        answers.append((call, (OK, None)))
                    else:
                        # Its number has passed, or another call holds it: its caller
                        # numbered it for another instance of the actor (its process died
                        # meanwhile). Nothing would ever release it: it runs now.
                        if call.caller not in self._out_of_order:  # told once per caller
                            self._out_of_order.add(call.caller)
                            late = (call.seq, call.caller, expected)
                        self._release(call, answers)
                else:
                    held = self._held.get(call.caller)
                    if (
                        not held
                        and self._threads is not None
                        and type(call.method) is str  # not a skipped seq, nor a group chosen
                        and not call.cancel_asked
                        and not self._group_threads
                        and not self._restarted_before
                    ):
                        # The common call, next in order with none held behind it: _release's
                        # work for a sync actor, without its calls.
                        self._next_seq[call.caller] = expected + 1
                        self._accepted.add(call)
                        self._threads.submit(self._run, call)
                        return
                    while True:
                        self._release(call, answers)
                        expected += 1
                        if not held or expected not in held:
                            break
                        call = held.pop(expected)
                    self._next_seq[call.caller] = expected
        for done, reply in answers:
            self._answer(done, reply)
        if late is not None:
            log.warning(
                "%s: call %d of %s came after its turn (expected %d) and runs now, out of "
                "its caller's order: its caller numbered it for an instance of the actor "
                "whose process died. Said once per caller.",
                self.what,
                *late,
            )

    def _release(self, call: Call, answers: list[tuple[Call, tuple[int, Any]]]) -> None:
        restarted = self._restarted_before and self._made_before_restart(call)
        if restarted:
            call.done = True
            answers.append((call, died_reply(restarted, restarted=True)))
        elif call.method is None:  # a skipped seq only advances the order
            call.done = True
            answers.append((call, (OK, None)))
        elif call.cancel_asked:  # cancelled before it was released: it only advances the order
            call.done = True
            answers.append((call, self._cancelled(call, "before it ran")))
        elif not self._opened:
            self._before_open.append(call)
        else:
            self._accepted.add(call)
            self._queue(call)

    def _made_before_restart(self, call: Call) -> str:
        """Under the lock: why ``call`` fails, if numbered before its caller's restart.

        Such a call fails as the calls then in flight did (a skipped number does not: it
        only advances the order). The rule ends with the last of them.

        Returns:
            The restart's reason, or "" (it runs).
        """
        before = self._restarted_before.get(call.caller)
        if before is None or call.seq > before[0]:
            return ""
        if call.seq == before[0]:  # the last of them: the rule has done its work
            del self._restarted_before[call.caller]
        return before[1] if call.method is not None else ""

    def _queue(self, call: Call) -> None:
        # Under the lock, so calls reach the threads or the loop in the order released.
        if self._loop is None:
            name = call.method
            group = None if type(name) is str else name.group  # type: ignore[union-attr]
            if group is not None and group in self._groups:  # chosen by the call
                threads = self._pool(group)
            else:
                threads = self._group_threads.get(name, self._threads)  # type: ignore[arg-type,assignment]
            threads.submit(self._run, call)
        else:
            self._loop.call_soon_threadsafe(self._start_task, call)

    def _pool(self, group: str) -> ActorThreads:
        """Under the lock: the threads of concurrency group ``group`` (made on first use)."""
        pool = self._pools.get(group)
        if pool is None:
            gpu_ids = self._gpu_ids
            name = f"{self._class_name}-{self.actor_id[:8]}-{group}"
            pool = ActorThreads(self._groups[group], name, initializer=lambda: _set_gpu(gpu_ids))
            self._pools[group] = pool
        return pool

    def _run(self, call: Call) -> None:
        """Runs a call on one of a sync actor's threads."""
        name = call.method
        assert name is not None  # a skipped seq is never queued (see _release)
        if not self._ready:  # a second thread, __init__ still running
            if call.done:  # answered already (a restart failed it while it was queued)
                return
            self._constructed.wait()
        if self._dead is not None and not self._begin(call):  # read first: no call per call
            return
        call.started = True  # before cancel_asked is read: see Call
        call.began = time.monotonic()
        if call.cancel_asked and self._dropped(call):
            return
        if _trace.ON:
            _trace.started(call)
        # .options(name=...): the call's own name, as get_task_name() gives it
        token = in_method.set(task_name(name) or f"{self._class_name}.{name}")
        actor_token = in_actor.set(self.actor_id)
        serving_token = lineage.serving.set(call)  # also what interrupts.run reads
        try:
            method = getattr(self._instance, name)
            wire = call.wire
            if wire is not None and wire[0] is None:  # plain: unpack()'s work, without its call
                args, kwargs = wire[1][0]
                reply = (OK, method(*args, **kwargs))
            else:  # top-level refs: fetched here, from their owners, before the method runs
                reply = _with_arguments(method, call)
            if call.cancel_asked and not self._interruptible and type(name) is not Stream:
                # Ray's semantics: a plain actor's method runs to its end (stopping it half
                # way would leave the actor's state half changed), and its get raises.
                reply = self._cancelled(call, "while it ran")
            elif type(name) is not str:  # num_returns, or a streaming generator
                reply = self._shape(call, name, reply)
        except SystemExit as exc:  # exit_actor(), sys.exit(), exit(): the actor ends
            take_exit()  # this thread's context outlives the call
            self.kill(exit_reason(self.what, name, exc))
            return
        except BaseException as exc:
            if call.cancel_asked and isinstance(exc, _CANCELS):
                # a remote function's interrupt, or a child call cancelled with this one
                reply = self._cancelled(call, "while it ran")
            else:
                reply = error_reply(self._said_of(name), exc)
        finally:
            in_method.reset(token)
            in_actor.reset(actor_token)
            lineage.serving.reset(serving_token)
        asked = exit_asked.get()  # not take_exit(): one read per call on this road
        if asked is not None:  # the method caught its exit_actor(): end anyway
            exit_asked.set(None)
            self.kill(exit_reason(self.what, name, asked))
            return
        self._finish(call, reply)

    def _start_task(self, call: Call) -> None:
        # On the loop, in release order: tasks take their first step in this order too.
        task = self._loop.create_task(self._run_async(call))  # type: ignore[union-attr]
        self._tasks.add(task)
        call.task = task
        task.add_done_callback(partial(self._task_done, call))

    def _task_done(self, call: Call, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        call.task = None
        if task.cancelled() and call.cancel_asked:  # actorrt.cancel() ended it
            self._finish(call, self._cancelled(call, "while it awaited"))

    async def _run_async(self, call: Call) -> None:
        """Runs a call of an async actor as a task on its loop (plain methods too)."""
        name = call.method
        assert name is not None  # a skipped seq is never queued (see _release)
        slots = self._group_slots.get(name, self._slots) if self._group_slots else self._slots
        if type(name) is not str and name.group in self._limits:  # type: ignore[attr-defined]
            slots = self._limits[name.group]  # type: ignore[attr-defined]  # chosen by the call
        async with slots:  # type: ignore[union-attr]
            if not self._begin(call):
                return
            call.began = time.monotonic()
            if _trace.ON:
                _trace.started(call)
            # the task runs in its own copy of the context
            in_method.set(task_name(name) or f"{self._class_name}.{name}")
            in_actor.set(self.actor_id)
            lineage.serving.set(call)
            try:
                method = getattr(self._instance, name)
                try:
                    args, kwargs = await resolve_args_async(*call.arguments())
                except ObjectLostError as exc:  # an argument's object is gone
                    reply = (LOST, str(exc))
                else:
                    result = method(*args, **kwargs)
                    del args, kwargs  # refs borrowed for the call, unless kept, go now
                    if inspect.iscoroutine(result):  # not any awaitable: a ref is a value
                        result = await result
                    if type(name) is Stream:
                        reply = await self._stream_async(call, name, result)
                    elif type(name) is not str:  # num_returns
                        reply = self._shape(call, name, (OK, result))
                    else:
                        reply = (OK, result)
            except SystemExit as exc:  # caught here: out of a task it would stop the loop
                self.kill(exit_reason(self.what, name, exc))
                return
            except asyncio.CancelledError as exc:
                if call.cancel_asked:  # actorrt.cancel(): the task ends cancelled (_task_done)
                    raise
                reply = error_reply(self._said_of(name), exc)
            except BaseException as exc:
                if call.cancel_asked and isinstance(exc, TaskCancelledError):
                    reply = self._cancelled(call, "while it awaited")  # a child cancelled with it
                else:
                    reply = error_reply(self._said_of(name), exc)
            asked = take_exit()  # the task's own context: set only by its own method
            if asked is not None:  # the method caught its exit_actor(): end anyway
                self.kill(exit_reason(self.what, name, asked))
                return
        self._finish(call, reply)

    # -- num_returns and streaming generators ------------------------------------------
    def _shape(self, call: Call, name: str, reply: tuple[int, Any]) -> tuple[int, Any]:
        """A method's reply for ``num_returns``: one per value, or streamed (:class:`Stream`)."""
        if type(name) is Stream:
            return self._stream(call, name, reply[1]) if reply[0] == OK else reply
        if type(name) is Returns:
            return split_returns(self._said_of(name), name.n, reply)
        return reply  # a name that only chose its group

    def _stream(self, call: Call, name: Stream, values: Any) -> tuple[int, Any]:
        """Sends each value ``values`` yields to the caller as it comes; the call's reply.

        The reply is how many values went (an exception the generator raised is one more,
        whose ref raises it). ``actorrt.cancel`` stops it between two values, and so does
        the end of the actor or of its caller. With backpressure, the next value is not
        asked for while ``name.backpressure`` values are not taken by the caller.
        """
        if not isinstance(values, Iterator):
            return self._not_a_generator(name, values)
        sender = open_sender(call.caller, name)

        def stopped() -> bool:  # actorrt.cancel(), a kill, or the caller gone
            return call.cancel_asked or self._dead is not None or sender.gone

        index = 0
        try:
            while True:
                if sender.limit and not sender.wait_room(index, stopped):
                    return self._stop(call, name, values, sender, index)
                try:
                    value = next(values)
                except StopIteration:
                    break
                self._send_value(sender, call, name, index, (OK, value))
                index += 1
                if stopped():
                    return self._stop(call, name, values, sender, index)
        except SystemExit:  # exit_actor() in the generator: the actor ends (see _run)
            raise
        except BaseException as exc:
            self._send_value(sender, call, name, index, error_reply(self._said_of(name), exc))
            index += 1
        finally:
            close_sender(call.caller, name, sender)
        return (OK, index)

    def _stop(
        self, call: Call, name: Stream, values: Any, sender: Sender, index: int
    ) -> tuple[int, Any]:
        """Ends a plain generator stopped between values; the call's reply."""
        close = getattr(values, "close", None)
        if close is not None:
            close()  # its finally blocks run
        if self._dead is not None or sender.gone or call.done:
            # nobody reads it: a kill or a restart answered the call, or the caller is gone
            return (OK, index)
        self._send_value(sender, call, name, index, self._cancelled(call, "between values"))
        return (OK, index + 1)

    async def _stream_async(self, call: Call, name: Stream, values: Any) -> tuple[int, Any]:
        """:meth:`_stream` on an async actor's loop: an async generator is awaited."""
        if not isinstance(values, AsyncIterator):
            return self._stream(call, name, values)  # a plain generator runs on the loop
        sender = open_sender(call.caller, name)
        index = 0
        try:
            while True:
                await sender.wait_room_async(index)  # backpressure: the loop runs on
                try:
                    value = await anext(values)
                except StopAsyncIteration:
                    break
                self._send_value(sender, call, name, index, (OK, value))
                index += 1
                if sender.gone:  # the caller is gone: it stops here
                    close = getattr(values, "aclose", None)
                    if close is not None:
                        await close()
                    break
        except SystemExit:
            raise
        except BaseException as exc:
            if call.cancel_asked and isinstance(exc, asyncio.CancelledError):
                reply = self._cancelled(call, "while it awaited")  # actorrt.cancel(): last
            else:  # the method's own error (a CancelledError of its own too)
                reply = error_reply(self._said_of(name), exc)
            self._send_value(sender, call, name, index, reply)
            index += 1
        finally:
            close_sender(call.caller, name, sender)
        return (OK, index)

    def _said_of(self, name: str) -> str:
        """What a call's error names: the method, and its task name if it was given one."""
        task = task_name(name)
        return self._prefix + name if task is None else f"{self._prefix}{name} (task {task!r})"

    def _not_a_generator(self, name: Stream, values: Any) -> tuple[int, Any]:
        return error_reply(
            self._said_of(name),
            TypeError(
                f"it was called with num_returns='streaming' and returned "
                f"{type(values).__name__}, not a generator; make it yield its values, or "
                "call it with num_returns=1."
            ),
        )

    def _send_value(
        self, sender: Sender, call: Call, name: Stream, index: int, reply: tuple[int, Any]
    ) -> None:
        """Packs one streamed value for the caller (large: kept here) and sends it."""
        begin = _trace.clock() if _trace.ON else 0
        try:
            wire = self._pack_reply(call.caller, reply)
        except Exception as exc:  # it cannot be pickled: its ref raises why
            what = f"{self._prefix}{name}: the value it yielded"
            wire = self._pack_reply(call.caller, error_reply(what, unsendable_reply(exc)))
        streams.leaving(wire)
        sender.send(index, wire)
        if begin:
            _trace.value(self._class_name, self.actor_id, call, index, begin, wire)

    def _begin(self, call: Call) -> bool:
        """False (the call answered, if nobody did) when the actor died before it ran."""
        if self._dead is None:
            # Read without the lock: a kill that lands after this answers the call itself
            # (it claims every accepted call), as for a kill while the method runs.
            return True
        with self._lock:
            dead = self._dead
            claimed = dead is not None and _claim(call)
        if dead is not None:
            if claimed:  # else a kill answered it while it was queued
                self._answer(call, died_reply(dead))
            return False
        return True

    def _finish(self, call: Call, reply: tuple[int, Any]) -> None:
        with self._lock:
            self._accepted.discard(call)
            claimed = not call.done  # _claim(call), without its call
            call.done = True
        if claimed:  # else a kill answered it while it ran
            self._answer(call, reply)

    # -- actorrt.cancel ------------------------------------------------------------
    def cancel(self, caller: str, seq: int, recursive: bool = True) -> None:
        """Cancels ``caller``'s call ``seq`` unless it has begun.

        An async actor's call is cancelled even then (its task), and a remote function's
        is interrupted where it runs (:mod:`actorrt.runtime.interrupts`). A call that
        runs on (a plain actor's) reads the cancel with ``is_canceled()``. With
        ``recursive``, the calls a running call made are cancelled too
        (:mod:`actorrt.runtime.lineage`).

        Called on an RPC thread; never waits for the actor. A call answered already is left
        as it is; one that has not arrived yet (its cancel overtook it) is answered
        "cancelled" when it comes, and still takes its place in the caller's order.
        """
        answer: Call | None = None
        loop: asyncio.AbstractEventLoop | None = None
        running: Call | None = None
        with self._lock:
            if self._dead is not None:
                return
            if seq >= self._next_seq.get(caller, 0):  # not released yet
                held = self._held.get(caller, {}).get(seq)
                if held is not None:
                    held.cancel_asked = True
                else:
                    self._cancel_first.add((caller, seq))
                return
            call = _find(self._before_open, caller, seq) or _find(self._accepted, caller, seq)
            if call is None or call.done:
                return  # answered already
            call.cancel_asked = True  # before started is read: see Call
            if call in self._before_open:
                self._before_open.remove(call)
                call.done = True
                answer = call
            elif self._loop is not None:
                loop = self._loop  # its task is cancelled on the loop, begun or not
            elif not call.started:
                self._accepted.discard(call)
                call.done = True  # its thread finds it answered (_dropped) and skips it
                answer = call
            elif self._interruptible:
                running = call  # a remote function's: interrupted where it runs
        if answer is not None:
            self._answer(answer, self._cancelled(answer, "before it ran"))
            return
        if recursive and call.children is not None:  # it ran, and made calls
            lineage.cancel_children(call)
        if running is not None:
            interrupts.interrupt(running)
        elif loop is not None:
            try:
                loop.call_soon_threadsafe(_cancel_task, call)
            except RuntimeError:  # the loop is closed: the actor ended, its calls answered
                pass

    def forget_caller(self, caller: str, answer: bool = True) -> None:
        """``caller``'s process died, or a new one took its name: its order begins afresh.

        The new process numbers its calls from 0, so the dead one's next number must not
        be waited for (every call of the new one would wait for ever). The dead one's
        streaming calls are cancelled (their values would go to the new process), and
        its other calls held, queued or running are answered now, or, once the new
        process may be listening (``answer`` False), never: a reply sent under the name
        would complete the new process's call of the same number. Those not begun never
        run; those running run on, their answers dropped.
        """
        with self._lock:
            streaming = [
                call.seq
                for call in (*self._before_open, *self._accepted)
                if call.caller == caller and type(call.method) is Stream
            ]
        for seq in streaming:  # while its number still reads as released
            self.cancel(caller, seq, recursive=False)
        with self._lock:
            self._next_seq.pop(caller, None)
            self._restarted_before.pop(caller, None)
            self._cancel_first = {key for key in self._cancel_first if key[0] != caller}
            pending = list(self._held.pop(caller, {}).values())
            pending += [c for c in (*self._before_open, *self._accepted) if c.caller == caller]
            orphans = []
            for call in pending:
                if not _claim(call):  # answered already (a stream cancelled above)
                    continue
                call.cancel_asked = True  # one not begun is skipped by its thread (_dropped)
                if call in self._before_open:
                    self._before_open.remove(call)
                elif not call.started:
                    self._accepted.discard(call)
                orphans.append(call)
        if answer:
            why = f"its caller {caller!r} died before it was answered"
            for call in orphans:
                self._answer(call, died_reply(why))

    def _dropped(self, call: Call) -> bool:
        """On the actor's thread, for a call whose cancel was asked: whether it was answered."""
        with self._lock:  # waits for a cancel deciding right now
            return call.done

    def _cancelled(self, call: Call, when: str) -> tuple[int, Any]:
        return cancelled_reply(f"{self._prefix}{call.method}", when)

    @property
    def opened(self) -> bool:
        """Whether the constructor is queued (calls may follow it)."""
        return self._opened

    def waits_on_itself(self, caller: str, seq: int) -> bool:
        """Whether the calling thread, waiting for call ``seq`` of ``caller``, waits for ever.

        True when the thread runs this actor's calls and no other thread can run that
        one: a sync actor's only thread (one call at a time, no concurrency groups), or
        an async actor's event loop, blocked in ``get``. And only while the call has not
        finished here: it may have answered already, its reply still on its way.
        """
        with self._lock:
            if self._loop is not None:
                if asyncio._get_running_loop() is not self._loop:
                    return False
            elif (
                self._threads is None
                or self._groups
                or self._threads.size != 1
                or current_pool() is not self._threads
            ):
                return False
            if seq < self._next_seq.get(caller, 0):  # released: queued, or run already
                queued = _find(self._accepted, caller, seq) or _find(self._before_open, caller, seq)
                return queued is not None
            return True  # not arrived yet, or held behind an earlier call of its caller

    def calls_in_flight(self) -> int:
        """Calls received and not yet answered: held for order, queued or running."""
        with self._lock:
            held = sum(len(calls) for calls in self._held.values())
            return len(self._accepted) + len(self._before_open) + held

    def running(self) -> list[tuple[str, float]]:
        """The calls whose methods run now, and the constructor while it runs.

        Returns:
            ``(name, began)`` per call: its method's name (its task name, if the call was
            given one; ``__init__`` for the constructor) and ``time.monotonic()`` as it
            began.
        """
        constructing = self._constructing
        with self._lock:
            calls = [c for c in self._accepted if c.began and not c.done]
        out = [(task_name(c.method) or str(c.method), c.began) for c in calls]  # type: ignore[arg-type]
        return [("__init__", constructing), *out] if constructing else out

    # -- end of life -------------------------------------------------------------
    def kill(self, reason: str) -> None:
        """Fails every queued and running call with ``reason``; later calls fail too."""
        with self._lock:
            if self._dead is not None:
                return
            self._dead = reason
            doomed = list(self._accepted) + self._before_open
            for held in self._held.values():
                doomed.extend(held.values())
            self._held.clear()
            self._before_open = []
            doomed = [call for call in doomed if _claim(call)]
        for call in doomed:
            self._answer(call, died_reply(reason))
        self._close()

    def restart(
        self, reason: str, cls: type, wire: Wire, numbered: dict[str, int] | None = None
    ) -> bool:
        """Makes a new instance in place of this one (``actorrt.kill(no_restart=False)``).

        Calls queued or running fail with ``reason`` (a running one runs on in its thread,
        its answer dropped, as with a kill); the constructor runs again, and calls held
        for order and later ones run on the new instance: a caller's order goes on, so
        its handle needs no move.

        Args:
            reason: Why the calls in flight fail.
            cls: The actor's class.
            wire: The constructor's arguments, packed.
            numbered: Per caller (the one that asked for the restart), the last number
                it took before: its calls up to that number fail too, also those still
                on their way (torch hands messages to its threads in parallel, so a call
                sent before the restart may be handled after it).

        Returns:
            False when the actor ended (or never began) here.
        """
        with self._lock:
            if self._dead is not None or not self._opened:
                return False
            for caller, last in (numbered or {}).items():
                if last >= self._next_seq.get(caller, 0):  # some not released yet
                    self._restarted_before[caller] = (last, reason)
            doomed = []
            for call in [*self._accepted, *self._before_open]:
                if _claim(call):
                    call.cancel_asked = True  # a queued one is skipped when its turn comes
                    doomed.append(call)
            self._accepted.clear()
            self._before_open = []
            self._ready = False
            self._constructed.clear()
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._reopen, (cls, wire), doomed)
            else:
                self._threads.submit(self._construct, (cls, wire))  # type: ignore[union-attr]
        for call in doomed:
            self._answer(call, died_reply(reason, restarted=True))
        return True

    def _reopen(self, what: tuple[type, Wire], doomed: list[Call]) -> None:
        # On the async actor's loop: the failed calls' tasks end, then the new instance.
        for call in doomed:
            _cancel_task(call)
        self._construct(what)

    def mark_dead(self, reason: str) -> None:
        """Makes a mailbox that only answers "gone" (for an actor already ended)."""
        self._dead = reason

    def release(self, reason: str) -> None:
        """No handle refers to the actor any more: let queued calls finish, then free it."""
        try:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._release_when_idle, reason)
            elif self._threads is not None:
                self._threads.submit(self.kill, reason)
            else:
                self.kill(reason)
        except RuntimeError:  # already shut down (killed, or the cluster is stopping)
            self.kill(reason)

    def _release_when_idle(self, reason: str) -> None:
        # On the loop: every call released before this one has its task by now.
        tasks = list(self._tasks)
        if not tasks:
            self.kill(reason)
            return

        async def kill_after() -> None:
            await asyncio.wait(tasks)
            self.kill(reason)

        task = self._loop.create_task(kill_after())  # type: ignore[union-attr]
        self._tasks.add(task)

    def _close(self) -> None:
        if self._threads is not None:
            self._threads.close()
        for threads in self._pools.values():
            threads.close()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop_loop)
        self._instance = None
        self._on_ended(self.actor_id, self._dead or "the actor ended")

    def _stop_loop(self) -> None:
        # Every call is answered already; cancelling runs the tasks' cleanup before the stop.
        for task in self._tasks:
            task.cancel()
        self._loop.call_soon(self._loop.stop)  # type: ignore[union-attr]

    def _answer(self, call: Call, reply: tuple[int, Any]) -> None:
        # Outside the lock: completing the future sends the reply from this thread (pickling,
        # TensorPipe write), and RPC threads delivering new calls must not queue behind it
        # (how that was found: docs/performance.md, "Why the code is shaped this way").
        if _trace.ON:
            _trace.ran(call)
        call.wire = None  # drop argument tensors as soon as possible
        try:
            wire = self._pack_reply(call.caller, reply)
        except Exception as exc:  # the return value cannot be pickled: the caller hears why
            what = f"{self._prefix}{call.method}: its return value"
            wire = self._pack_reply(call.caller, error_reply(what, unsendable_reply(exc)))
        streams.leaving(wire)  # the agent sends it on streams that do not wait for ours
        if call.borrowed is not None:  # refs borrowed for it and kept: the reply says which
            wire = with_kept(wire, call.borrowed)
        call.future.set_result(wire)
        if _trace.ON:
            _trace.answered(self._class_name, self.actor_id, call, wire)


def _with_arguments(method: Any, call: Call) -> tuple[int, Any]:
    """Runs ``method`` on the call's arguments once their refs are fetched from their owners.

    An argument whose object is gone answers the call with ``LOST`` (the caller's ``get``
    raises :class:`~actorrt.errors.ObjectLostError`, as Ray's does); an
    ``ObjectLostError`` the method itself raises is its error like any other (an
    ``ActorError`` naming the method, with the cause and the traceback).
    """
    try:
        args, kwargs = resolve_args(*call.arguments())
    except ObjectLostError as exc:
        return (LOST, str(exc))
    return (OK, method(*args, **kwargs))


def _find(calls: Iterable[Call], caller: str, seq: int) -> Call | None:
    """The call ``seq`` of ``caller`` among ``calls`` (a cancel is rare: a scan will do)."""
    for call in calls:
        if call.seq == seq and call.caller == caller:
            return call
    return None


def _cancel_task(call: Call) -> None:
    # On the async actor's loop: a task not yet begun never runs its method.
    task = call.task
    if task is not None and not task.done():
        task.cancel()


def _claim(call: Call) -> bool:
    """Under the mailbox lock: True for the one answer a call gets (a kill may race a run)."""
    if call.done:
        return False
    call.done = True
    return True


def _set_gpu(gpu_ids: tuple[int, ...]) -> None:
    # Each actor thread makes its first GPU current, so the actor's CUDA work lands there.
    devices.assign(gpu_ids)
