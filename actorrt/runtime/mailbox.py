"""One actor's mailbox: per-caller ordering, bounded concurrency, its own event loop.

torch RPC runs requests on a thread pool, so two calls from one caller can arrive out
of order. Every call carries ``(caller, seq)``; the mailbox releases a caller's calls
strictly in ``seq`` order onto the actor's queue, whose ``max_concurrency`` threads
run them (one thread: one at a time, in order). RPC threads only hand calls over here
and never wait for an actor, so nested and callback calls cannot starve the RPC pool.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from actorrt.runtime.protocol import OK, died_reply, error_reply
from actorrt.runtime.threads import ActorThreads

__all__ = ["Call", "Mailbox"]


@dataclass(eq=False)
class Call:
    """One method call waiting for, or running on, an actor."""

    caller: str
    seq: int
    method: str | None  # None: the caller skips this seq (its arguments never arrived)
    args: tuple
    kwargs: dict
    future: torch.futures.Future
    done: bool = field(default=False)


class Mailbox:
    """Receives calls for one actor and runs them on the actor's own threads."""

    def __init__(
        self,
        actor_id: str,
        on_ended: Callable[[str, str], None],
        reply_filter: Callable[[str, Any], Any] | None = None,
    ) -> None:
        self.actor_id = actor_id
        self._reply_filter = reply_filter
        self.what = f"actor {actor_id}"
        self._lock = threading.Lock()
        self._next_seq: dict[str, int] = {}
        self._held: dict[str, dict[int, Call]] = {}
        self._before_open: list[Call] = []  # released before the constructor was queued
        self._threads: ActorThreads | None = None
        self._accepted: set[Call] = set()  # handed to the actor's threads, not answered
        self._instance: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dead: str | None = None
        self._on_ended = on_ended

    # -- set-up ----------------------------------------------------------------
    def open(
        self,
        cls: type,
        args: tuple,
        kwargs: dict,
        *,
        class_name: str,
        max_concurrency: int,
        gpu_ids: tuple[int, ...],
    ) -> None:
        """Queues the constructor first, then every call that arrived before it."""
        self.what = f"{class_name} actor {self.actor_id}"
        has_async = any(inspect.iscoroutinefunction(m) for _, m in inspect.getmembers(cls))
        if has_async:
            self._loop = asyncio.new_event_loop()
            threading.Thread(
                target=self._loop.run_forever, name=f"{class_name}-loop", daemon=True
            ).start()
        self._threads = ActorThreads(
            max_concurrency,
            f"{class_name}-{self.actor_id[:8]}",
            initializer=lambda: _set_gpu(gpu_ids),
        )
        with self._lock:
            if self._dead is not None:
                return
            self._threads.submit(self._construct, (cls, args, kwargs))
            waiting, self._before_open = self._before_open, []
            for call in waiting:
                self._accepted.add(call)
                self._threads.submit(self._run, call)

    def _construct(self, what: tuple[type, tuple, dict]) -> None:
        cls, args, kwargs = what
        try:
            self._instance = cls(*args, **kwargs)
        except BaseException as exc:  # the actor never existed: every call reports why
            _, (_, summary, text, _) = error_reply(self.what, exc)
            self.kill(f"{self.what} failed in __init__: {summary}\n\nRemote traceback:\n{text}")

    # -- calls -----------------------------------------------------------------
    def deliver(self, call: Call) -> None:
        """Accepts a call from an RPC thread; never blocks on the actor."""
        answers: list[tuple[Call, tuple[int, Any]]] = []
        with self._lock:
            if self._dead is not None:
                call.done = True  # nobody else has seen this call yet
                answers.append((call, died_reply(self._dead)))
            else:
                expected = self._next_seq.get(call.caller, 0)
                if call.seq != expected:
                    self._held.setdefault(call.caller, {})[call.seq] = call
                    return
                held = self._held.get(call.caller)
                while True:
                    self._release(call, answers)
                    expected += 1
                    if not held or expected not in held:
                        break
                    call = held.pop(expected)
                self._next_seq[call.caller] = expected
        for done, reply in answers:
            _answer(done, reply)

    def _release(self, call: Call, answers: list[tuple[Call, tuple[int, Any]]]) -> None:
        if call.method is None:  # a skipped seq only advances the order
            call.done = True
            answers.append((call, (OK, None)))
        elif self._threads is None:
            self._before_open.append(call)
        else:
            self._accepted.add(call)
            self._threads.submit(self._run, call)

    def _run(self, call: Call) -> None:
        with self._lock:
            dead = self._dead
            claimed = dead is not None and _claim(call)
        if dead is not None:
            if claimed:  # else a kill answered it while it was queued
                _answer(call, died_reply(dead))
            return
        try:
            method = getattr(self._instance, call.method)
            result = method(*call.args, **call.kwargs)
            if inspect.iscoroutine(result):
                result = asyncio.run_coroutine_threadsafe(result, self._loop).result()
            if self._reply_filter is not None:
                result = self._reply_filter(call.caller, result)
            reply = (OK, result)
        except BaseException as exc:
            reply = error_reply(f"{self.what}.{call.method}", exc)
        with self._lock:
            self._accepted.discard(call)
            claimed = _claim(call)
        if claimed:
            _answer(call, reply)

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
            _answer(call, died_reply(reason))
        self._close()

    def mark_dead(self, reason: str) -> None:
        """Makes a mailbox that only answers "gone" (for an actor already ended)."""
        self._dead = reason

    def release(self, reason: str) -> None:
        """No handle refers to the actor any more: let queued calls finish, then free it."""
        if self._threads is None:
            self.kill(reason)
            return
        try:
            self._threads.submit(self.kill, reason)
        except RuntimeError:  # already shut down (killed, or the cluster is stopping)
            self.kill(reason)

    def _close(self) -> None:
        if self._threads is not None:
            self._threads.close()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._instance = None
        self._on_ended(self.actor_id, self._dead or "the actor ended")

    @property
    def dead_reason(self) -> str | None:
        return self._dead


def _claim(call: Call) -> bool:
    """Under the mailbox lock: True for the one answer a call gets (a kill may race a run)."""
    if call.done:
        return False
    call.done = True
    return True


def _answer(call: Call, reply: tuple[int, Any]) -> None:
    # Outside the lock: completing the future sends the reply from this thread (pickling,
    # TensorPipe write), and RPC threads delivering new calls must not queue behind it.
    call.args = call.kwargs = None  # drop argument tensors as soon as possible
    call.future.set_result(reply)


def _set_gpu(gpu_ids: tuple[int, ...]) -> None:
    # Each actor thread makes its first GPU current, so the actor's CUDA work lands there.
    if gpu_ids and torch.cuda.is_available():
        torch.cuda.set_device(gpu_ids[0])
