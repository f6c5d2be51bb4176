"""Calls and replies in batches: what a burst of calls becomes on the wire.

A call sent alone is ``rpc_async(worker, rpc_call)`` and its reply is that RPC's
response. A call made during a burst (see :mod:`actorrt.runtime.outbox`) is queued and
sent with others in one ``rpc_call_batch``. Its reply must not wait for the slowest call
of the batch (a later call may block until the caller acts on an earlier reply), so each
reply travels back on its own as soon as its method returns, in ``rpc_replies``, which
coalesces replies the same way.

A process that dies must still fail every call it was given: the batch's own response
completes only once every reply of the batch has been acknowledged by the caller, so if
it fails instead (the process died), the caller fails the calls still unanswered.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import torch.distributed.rpc as rpc

from actorrt.runtime.context import current
from actorrt.runtime.mailbox import Call
from actorrt.runtime.outbox import MIN_BATCH, Outbox
from actorrt.runtime.protocol import (
    PICKLING_ERRORS,
    LocalFailure,
    error_reply,
    unsendable_argument,
)

__all__ = ["CallBatches", "ReplyBatches", "rpc_call_batch", "rpc_replies"]


class CallBatches:
    """The caller's side: queues calls for busy workers, matches replies to them.

    Args:
        name: This process's RPC name (the callee sends replies here).
        skip: ``skip(handle, seq)`` tells the actor to move past a seq whose call could
            not be sent (see ``Runtime._skip``).
    """

    def __init__(self, name: str, skip: Callable[[Any, int], None]) -> None:
        self.name = name
        self.outbox = Outbox("actorrt-call-batches", self._send)
        self._skip = skip
        # (worker, actor id, seq) -> the torch future its ObjectRef waits on
        self._awaiting: dict[tuple[str, str, int], torch.futures.Future] = {}

    def queue(
        self, handle: Any, seq: int, method: str, args: tuple, kwargs: dict, what: str
    ) -> torch.futures.Future | None:
        """Queues a call; returns the future its reply will complete (None: closed)."""
        future: torch.futures.Future = torch.futures.Future()
        item = (handle, seq, method, args, kwargs, future, what)
        return future if self.outbox.put(handle.worker, item) else None

    def _send(self, worker: str, items: list[tuple]) -> Any:
        if len(items) < MIN_BATCH:  # cheaper alone (see runtime/outbox.py)
            for item in items:
                self._send_alone(worker, item)
            return None
        for handle, seq, _, _, _, future, _ in items:
            self._awaiting[(worker, handle.actor_id, seq)] = future
        calls = [(h.actor_id, seq, m, a, kw) for h, seq, m, a, kw, _, _ in items]
        try:
            sent = rpc.rpc_async(worker, rpc_call_batch, args=(self.name, calls), timeout=0)
        except PICKLING_ERRORS:
            for item in items:  # one call cannot be pickled: send each alone to find it
                self._forget(worker, item)
                self._send_alone(worker, item)
            return None
        except Exception as exc:  # the agent could not queue it: the worker is gone
            for item in items:
                self._forget(worker, item)
                item[5].set_exception(exc)
            return None
        # `items` (with the handles) lives until the batch is done: actors outlive calls.
        sent.add_done_callback(partial(self._batch_done, worker, items))
        return sent

    def _send_alone(self, worker: str, item: tuple) -> None:
        handle, seq, method, args, kwargs, future, what = item
        from actorrt.runtime.host import rpc_call

        try:
            alone = rpc.rpc_async(
                worker,
                rpc_call,
                args=(handle.actor_id, self.name, seq, method, args, kwargs),
                timeout=0,
            )
        except PICKLING_ERRORS as exc:
            self._skip(handle, seq)
            future.set_exception(LocalFailure(unsendable_argument(what, exc)))
            return
        except Exception as exc:
            future.set_exception(exc)
            return

        def relay(f: torch.futures.Future, _keep: Any = handle) -> None:
            try:
                future.set_result(f.value())
            except Exception as exc:
                future.set_exception(exc)

        alone.add_done_callback(relay)

    def _forget(self, worker: str, item: tuple) -> None:
        self._awaiting.pop((worker, item[0].actor_id, item[1]), None)

    def _batch_done(self, worker: str, items: list[tuple], sent: torch.futures.Future) -> None:
        try:
            sent.wait()
            return  # every reply was acknowledged, so every call is answered
        except Exception as exc:
            error = exc
        for item in items:
            future = self._awaiting.pop((worker, item[0].actor_id, item[1]), None)
            if future is not None and not future.done():
                future.set_exception(error)

    def resolve(self, worker: str, replies: list[tuple[str, int, Any]]) -> None:
        """Completes the calls ``worker`` answered (runs in ``rpc_replies``)."""
        for actor_id, seq, reply in replies:
            future = self._awaiting.pop((worker, actor_id, seq), None)
            if future is not None and not future.done():
                future.set_result(reply)

    def close(self, reason: str) -> None:
        """Fails calls never sent and calls still unanswered (the runtime is stopping)."""
        error = RuntimeError(reason)
        for _, item in self.outbox.close():
            item[5].set_exception(error)
        for key in list(self._awaiting):
            future = self._awaiting.pop(key, None)
            if future is not None and not future.done():
                future.set_exception(error)


class ReplyBatches:
    """The callee's side: runs a batch's calls and sends each reply as it is ready.

    Args:
        name: This process's RPC name (sent with the replies).
        deliver: ``deliver(actor_id, call)`` hands a call to its actor's mailbox.
    """

    def __init__(self, name: str, deliver: Callable[[str, Call], None]) -> None:
        self.name = name
        self._deliver = deliver
        self.outbox = Outbox("actorrt-reply-batches", self._send)

    def accept(self, caller: str, calls: list[tuple]) -> torch.futures.Future:
        """Delivers a batch; returns a future done once every reply was acknowledged."""
        batch_done: torch.futures.Future = torch.futures.Future()
        left = [len(calls)]
        lock = threading.Lock()

        def acked() -> None:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                batch_done.set_result(None)

        for actor_id, seq, method, args, kwargs in calls:
            answered: torch.futures.Future = torch.futures.Future()
            answered.add_done_callback(partial(self._post, caller, actor_id, seq, acked))
            self._deliver(actor_id, Call(caller, seq, method, args, kwargs, answered))
        return batch_done

    def _post(
        self, caller: str, actor_id: str, seq: int, acked: Callable[[], None], answered: Any
    ) -> None:
        # Runs where the call was answered (the actor's thread, usually).
        item = (actor_id, seq, answered.value(), acked)
        if self.outbox.busy(caller):
            if self.outbox.put(caller, item):
                return
        sent = self._send(caller, [item])
        if sent is not None:
            self.outbox.sent(caller, sent)

    def close(self) -> None:
        """Sends what is still queued, one message per caller, before RPC stops."""
        by_caller: dict[str, list[tuple]] = {}
        for caller, item in self.outbox.close():
            by_caller.setdefault(caller, []).append(item)
        for caller, items in by_caller.items():
            self._send(caller, items)

    def _send(self, caller: str, items: list[tuple]) -> Any:
        replies = [(actor_id, seq, reply) for actor_id, seq, reply, _ in items]
        try:
            sent = rpc.rpc_async(caller, rpc_replies, args=(self.name, replies), timeout=0)
        except PICKLING_ERRORS as exc:
            if len(items) > 1:  # find the reply that cannot be pickled
                for item in items:
                    self._send(caller, [item])
                return None
            actor_id, seq, _, acked = items[0]
            what = f"actor {actor_id}: the return value of call {seq}"
            bad = error_reply(
                what,
                TypeError(
                    f"cannot be sent back ({exc}). Return values travel through torch RPC's "
                    "pickler: use tensors, plain data and importable classes."
                ),
            )
            return self._send(caller, [(actor_id, seq, bad, acked)])
        except Exception:  # the caller is gone: nobody waits for these replies
            for item in items:
                item[3]()
            return None
        sent.add_done_callback(lambda _f: [item[3]() for item in items])
        return sent


# -- RPC entry points (module level so every process can resolve them by name) ---------


@rpc.functions.async_execution
def rpc_call_batch(caller: str, calls: list[tuple]) -> torch.futures.Future:
    """Runs on the callee: hands each call to its actor; replies go back one by one."""
    return current().replies.accept(caller, calls)


def rpc_replies(worker: str, replies: list[tuple[str, int, Any]]) -> None:
    """Runs on the caller: completes the calls ``worker`` answered."""
    current().calls.resolve(worker, replies)
