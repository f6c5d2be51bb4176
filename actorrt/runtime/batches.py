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
from typing import Any, NamedTuple

import torch
import torch.distributed.rpc as rpc

from actorrt.runtime import context, quick_rpc, streams
from actorrt.runtime.host import give_up, post_call
from actorrt.runtime.mailbox import Call
from actorrt.runtime.outbox import MIN_BATCH, Outbox
from actorrt.runtime.payload import Wire
from actorrt.runtime.protocol import Target

__all__ = ["CallBatches", "ReplyBatches", "rpc_call_batch", "rpc_replies"]


class QueuedCall(NamedTuple):
    """A call waiting in the caller's outbox."""

    handle: Target  # kept until the reply: the actor outlives its calls
    seq: int
    method: str
    wire: Wire  # the packed arguments
    future: torch.futures.Future[Wire]  # what the reply completes


class BatchedCall(NamedTuple):
    """A call inside an ``rpc_call_batch`` (on the wire)."""

    actor_id: str
    seq: int
    method: str
    wire: Wire  # the packed arguments


class Reply(NamedTuple):
    """A reply inside ``rpc_replies`` (on the wire)."""

    actor_id: str
    seq: int
    wire: Wire  # the packed reply


class QueuedReply(NamedTuple):
    """A reply waiting in the callee's outbox."""

    actor_id: str
    seq: int
    wire: Wire  # the packed reply
    acked: Callable[[], None]  # runs once the reply is sent


class CallBatches:
    """The caller's side: queues calls for busy workers, matches replies to them.

    Calls are packed (see payload.py) before they queue, so a batch holds only bytes,
    tensors and RRefs, which always pickle: one bad argument fails its own call at
    ``.remote()`` and never the calls batched with it.

    Args:
        name: This process's RPC name (the callee sends replies here).
        track: ``track(worker, future)`` is told of every message sent (see
            :mod:`actorrt.runtime.inflight`: failed if the worker is marked dead).
    """

    def __init__(
        self, name: str, track: Callable[[str, torch.futures.Future[Any]], None] | None = None
    ) -> None:
        self.name = name
        self._track = track or (lambda worker, future: None)
        self.outbox = Outbox("actorrt-call-batches", self._send)
        # (worker, actor id, seq) -> the torch future its ObjectRef waits on
        self._awaiting: dict[tuple[str, str, int], torch.futures.Future[Wire]] = {}

    def queue(
        self, handle: Target, seq: int, method: str, wire: Wire
    ) -> torch.futures.Future[Wire] | None:
        """Queues a packed call; returns the future its reply will complete (None: closed)."""
        future: torch.futures.Future[Wire] = torch.futures.Future()
        item = QueuedCall(handle, seq, method, wire, future)
        return future if self.outbox.put(handle._worker, item) else None

    def _send(self, worker: str, items: list[QueuedCall]) -> torch.futures.Future[None] | None:
        if len(items) < MIN_BATCH:  # cheaper alone (see runtime/outbox.py)
            for item in items:
                self._send_alone(worker, item)
            return None
        keys = [(worker, handle._actor_id, seq) for handle, seq, _, _, _ in items]
        for key, item in zip(keys, items, strict=True):
            self._awaiting[key] = item.future
        calls = [BatchedCall(h._actor_id, seq, m, wire) for h, seq, m, wire, _ in items]
        try:
            sent: torch.futures.Future[None] = quick_rpc.rpc_async(
                worker, rpc_call_batch, (self.name, calls)
            )
        except Exception as exc:  # the agent could not queue it: the worker is gone
            for key, item in zip(keys, items, strict=True):
                self._awaiting.pop(key, None)
                give_up(worker, item.handle._actor_id, self.name, item.seq)  # if it is not
                _fail(item.future, exc)
            return None
        self._track(worker, sent)
        # The handles live until the batch is done, so actors outlive their calls; the
        # arguments do not (the caller may have dropped them). So does ``sent``: the
        # tracker holds it weakly, and a death notice must find it to fail its calls.
        handles = [item.handle for item in items]
        sent.add_done_callback(partial(self._batch_done, keys, handles, sent))
        return sent

    def _send_alone(self, worker: str, item: QueuedCall) -> None:
        handle, seq, method, wire, future = item
        try:
            alone = post_call(worker, handle._actor_id, self.name, seq, method, wire)
        except Exception as exc:
            give_up(worker, handle._actor_id, self.name, seq)  # as Runtime.call does
            _fail(future, exc)
            return
        self._track(worker, alone)

        # Holds ``alone`` until it is done: the tracker holds it weakly (see _send).
        def relay(
            _: object, sent: torch.futures.Future[Wire] = alone, _keep: Target = handle
        ) -> None:
            try:
                future.set_result(sent.value())
            except Exception as exc:
                _fail(future, exc)

        alone.add_done_callback(relay)

    def _batch_done(
        self,
        keys: list[tuple[str, str, int]],
        _handles: list[Target],
        sent: torch.futures.Future[None],
        _done: object,
    ) -> None:
        try:
            sent.wait()
            return  # every reply was acknowledged, so every call is answered
        except Exception as exc:
            error = exc
        for key in keys:
            future = self._awaiting.pop(key, None)
            if future is not None and not future.done():
                _fail(future, error)

    def resolve(self, worker: str, replies: list[Reply]) -> None:
        """Completes the calls ``worker`` answered (runs in ``rpc_replies``)."""
        for actor_id, seq, reply in replies:
            future = self._awaiting.pop((worker, actor_id, seq), None)
            if future is not None and not future.done():
                future.set_result(reply)

    def close(self, reason: str) -> None:
        """Fails calls never sent and calls still unanswered (the runtime is stopping)."""
        error = RuntimeError(reason)
        for _, item in self.outbox.close():
            _fail(item.future, error)
        for key in list(self._awaiting):
            future = self._awaiting.pop(key, None)
            if future is not None and not future.done():
                _fail(future, error)


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

    def accept(self, caller: str, calls: list[BatchedCall]) -> torch.futures.Future[None]:
        """Delivers a batch; returns a future done once every reply was acknowledged."""
        batch_done: torch.futures.Future[None] = torch.futures.Future()
        left = [len(calls)]
        lock = threading.Lock()

        def acked() -> None:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                batch_done.set_result(None)

        for actor_id, seq, method, wire in calls:
            answered: torch.futures.Future[Wire] = torch.futures.Future()
            answered.add_done_callback(partial(self._post, caller, actor_id, seq, acked))
            self._deliver(actor_id, Call(caller, seq, method, wire, answered))
        return batch_done

    def _post(
        self,
        caller: str,
        actor_id: str,
        seq: int,
        acked: Callable[[], None],
        answered: torch.futures.Future[Wire],
    ) -> None:
        # Runs where the call was answered (the actor's thread, usually).
        item = QueuedReply(actor_id, seq, answered.value(), acked)
        if self.outbox.busy(caller):
            if self.outbox.put(caller, item):
                return
        sent = self._send(caller, [item])
        if sent is not None:
            self.outbox.sent(caller, sent)

    def close(self) -> None:
        """Sends what is still queued, one message per caller, before RPC stops."""
        by_caller: dict[str, list[QueuedReply]] = {}
        for caller, item in self.outbox.close():
            by_caller.setdefault(caller, []).append(item)
        for caller, items in by_caller.items():
            self._send(caller, items)

    def _send(self, caller: str, items: list[QueuedReply]) -> torch.futures.Future[None] | None:
        # Replies were packed by the mailbox, so this send cannot fail on pickling.
        replies = [Reply(actor_id, seq, wire) for actor_id, seq, wire, _ in items]
        acks = [item.acked for item in items]
        try:
            sent: torch.futures.Future[None] = quick_rpc.rpc_async(
                caller, rpc_replies, (self.name, replies)
            )
        except Exception:  # the caller is gone: nobody waits for these replies
            for ack in acks:
                ack()
            return None

        def ack_all(_sent: torch.futures.Future[None]) -> None:
            for ack in acks:
                ack()

        # Only the acknowledgements wait for the send; the replies are not held.
        sent.add_done_callback(ack_all)
        return sent


def _fail(future: torch.futures.Future[Wire], error: Exception) -> None:
    # torch annotates set_exception's argument as the future's value type, not an exception
    future.set_exception(error)  # type: ignore[arg-type]


# -- RPC entry points (module level so every process can resolve them by name) ---------


@rpc.functions.async_execution  # type: ignore[untyped-decorator]  # torch leaves it unannotated
def rpc_call_batch(caller: str, calls: list[BatchedCall]) -> torch.futures.Future[None]:
    """Runs on the callee: hands each call to its actor; replies go back one by one."""
    streams.arrived(calls)
    return context.part(ReplyBatches).accept(caller, calls)


def rpc_replies(worker: str, replies: list[Reply]) -> None:
    """Runs on the caller: completes the calls ``worker`` answered."""
    streams.arrived(replies)
    context.part(CallBatches).resolve(worker, replies)
