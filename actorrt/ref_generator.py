"""``ObjectRefGenerator``: the refs of a streaming call's values, as its method yields them.

As Ray's: calling a generator method or function (or any method with
``num_returns="streaming"``) gives an ``ObjectRefGenerator`` at once; iterating it gives
one :class:`~actorrt.refs.ObjectRef` per value, as soon as the method has yielded it,
while the method goes on. How the values travel: :mod:`actorrt.runtime.generators`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import heapq
import threading
import weakref
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar

import torch

from actorrt.errors import ObjectLostError
from actorrt.refs import ObjectRef, failed
from actorrt.runtime.backpressure import ALL, Reporter
from actorrt.runtime.generators import FAILED, Inbox, Lost, Stream
from actorrt.runtime.threads import lender

if TYPE_CHECKING:
    from collections.abc import Callable

    from actorrt.runtime.runtime import Runtime

__all__ = ["ObjectRefGenerator", "streaming_refs"]

R_co = TypeVar("R_co", covariant=True)


class ObjectRefGenerator(Generic[R_co]):
    """The refs of a streaming call's values, in the order its method yields them.

    ``for ref in gen`` (or ``async for``) gives each value's :class:`~actorrt.ObjectRef`
    as soon as the method has yielded it; ``actorrt.get(ref)`` is the value. A value of
    1 MiB or more stays at the actor as an object, fetched in one hop, like a result.
    An exception the method raises is one more ref, whose ``get`` raises it as
    :class:`~actorrt.ActorError`; so does the error of a call that failed as a whole
    (``ActorDiedError`` when the actor died, ``TaskCancelledError`` when cancelled). Then
    the iteration ends.

    It cannot be sent to other actors (as in Ray): send the refs it gives.
    ``actorrt.cancel(gen)`` stops the method between two values (an async one where it
    awaits); the values yielded before stay good. With
    ``_generator_backpressure_num_objects=N`` (Ray's option) the method is not asked for
    its next value while N of its values are not taken here.

    Several threads or tasks may iterate one generator: each value's ref goes to one of
    them (which one, as each is ready to take it), and every one of them ends.

    Example::

        @actorrt.actor
        class Collector:
            def rollouts(self, n):
                for _ in range(n):
                    yield self.run_episode()

        for ref in collector.rollouts.remote(8):  # each as soon as it is made
            learner.add.remote(ref)
    """

    __slots__ = (
        "_call",
        "_inbox",
        "_stream_id",
        "_inboxes",
        "_next",
        "_returned",
        "_taken",
        "_claims",
        "_ended",
        "_reporter",
        "__weakref__",
    )

    def __init__(self, what: str, actor_id: str | None, rt: Runtime, backpressure: int = 0) -> None:
        # The call's own ref: its reply is how many values there were (completed()).
        self._call: ObjectRef[int] = ObjectRef(what, actor_id)
        self._inboxes = rt.generators
        self._stream_id, self._inbox = rt.generators.open()
        # Consumers claim an index each under _claims, so that two iterating one generator
        # (threads, asyncio tasks) never get the same value, nor skip one: an index
        # claimed and not given (a cancelled await) is returned for the next claim.
        self._next = 0  # the lowest index never claimed
        self._returned: list[int] = []  # a heap of indices claimed and given back
        self._taken = 0  # how many values' refs were given
        self._claims = threading.Lock()
        self._ended = False
        # Backpressure: tells the process running the call how many values were taken.
        self._reporter: Reporter | None = None
        if backpressure:
            self._reporter = Reporter(rt.name, self._stream_id, backpressure)
            self._inbox.on_run = self._reporter.run_began
            self._inbox.on_values = self._reporter.received
            rt.generators.start_later()  # for __del__'s report
        # weakly: the call's ref would otherwise hold itself through its own callback
        self._call._when_ready(partial(_answered, weakref.ref(self._call), self._inbox))

    def __del__(self) -> None:
        try:
            if self._reporter is not None and not self._ended:
                # nobody takes more: the method need not wait (told from another thread)
                self._inboxes.later(partial(self._reporter.took, ALL))
            self._inboxes.close(self._stream_id)  # values not taken are let go
        except Exception:  # interpreter teardown
            pass

    def __iter__(self) -> ObjectRefGenerator[R_co]:
        return self

    def __next__(self) -> ObjectRef[R_co]:
        """The ref of the next value, once the method has yielded it (this blocks).

        Raises:
            StopIteration: The method returned, or the last ref raised its error.
        """
        if self._ended:
            raise StopIteration
        index = self._claim()
        try:
            slot = self._inbox.slot(index)
            pool = lender()
            if pool is not None and not slot.done():  # in a remote function: lend its thread
                with pool.lending():
                    item = slot.result()
            else:
                item = slot.result()
        except BaseException:  # an interrupt: the value goes to the next claim
            self._give_back(index)
            raise
        return self._ref(item, index)

    def __aiter__(self) -> ObjectRefGenerator[R_co]:
        return self

    async def __anext__(self) -> ObjectRef[R_co]:
        """As :meth:`__next__`, in a coroutine; never blocks the event loop.

        Cancelling the awaiting task cancels the wait only: the next ``__anext__`` gives
        the same value's ref.
        """
        if self._ended:
            raise StopAsyncIteration
        index = self._claim()
        try:
            item = await asyncio.shield(asyncio.wrap_future(self._inbox.slot(index)))
        except BaseException:  # cancelled: the value goes to the next claim
            self._give_back(index)
            raise
        try:
            return self._ref(item, index)
        except StopIteration:
            raise StopAsyncIteration from None

    def _claim(self) -> int:
        """The index of the value this consumer gives next (each index to one consumer)."""
        with self._claims:
            if self._returned:
                return heapq.heappop(self._returned)
            index = self._next
            self._next += 1
            return index

    def _give_back(self, index: int) -> None:
        with self._claims:
            heapq.heappush(self._returned, index)

    def _unclaimed(self) -> int:
        """The index the next claim gets."""
        with self._claims:
            return self._returned[0] if self._returned else self._next

    def completed(self) -> ObjectRef[int]:
        """A ref ready once the method has ended: its value is how many refs it gave.

        That is how many values it yielded, plus one for an exception it raised (which
        has a ref of its own) or for a cancel that stopped it between values.

        Its ``get`` raises the call's error when the call failed as a whole (the actor
        died, the call was cancelled before it began), as Ray's ``completed()``.
        """
        return self._call

    def _ref(self, item: Any, index: int) -> ObjectRef[R_co]:
        """The ref of value ``index`` (the inbox gave ``item``), or the end of the iteration."""
        if item is None:  # the method yielded no more
            self._ended = True
            raise StopIteration
        if type(item) is str and item == FAILED:  # the call failed: its own ref says why
            self._ended = True
            return self._call  # type: ignore[return-value]  # get() raises
        if type(item) is Lost:  # its producer died before it arrived
            self._ended = True
            what = self._call._call
            return failed(what, ObjectLostError(f"value {index} of {what} is lost: {item}."))
        self._inbox.take(index)
        with self._claims:
            self._taken += 1
            taken = self._taken
        if self._reporter is not None:
            self._reporter.took(taken)
        ref: ObjectRef[R_co] = ObjectRef(self._call._call, self._call._actor_id)
        arrived: torch.futures.Future[Any] = torch.futures.Future()
        arrived.set_result(item)
        ref.attach(arrived, self._call._worker, None, _answered_already)
        return ref

    def _next_ready(self) -> bool:
        # What actorrt.wait() reads: next() would give a ref, or end, without waiting.
        return self._ended or self._inbox.slot(self._unclaimed()).done()

    def _ready_future(self) -> cf.Future[Any]:
        # The future actorrt.wait() waits on; done once _next_ready() is.
        if self._ended:
            done: cf.Future[Any] = cf.Future()
            done.set_result(None)
            return done
        return self._inbox.slot(self._unclaimed())

    def _when_ready(self, fn: Callable[[], None]) -> None:
        # What PendingCalls reads of a call's refs: the call answered (all values sent).
        self._call._when_ready(fn)

    def __repr__(self) -> str:
        state = "done" if self._ended else f"{self._taken} taken"
        return f"ObjectRefGenerator({self._call._call}, {state})"

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            f"{self!r} cannot be sent to another process (as in Ray): iterate it here and "
            "send the refs it gives, or send the actor's handle and call the method there."
        )


def streaming_refs(
    rt: Runtime,
    what: str,
    actor_id: str | None,
    method: str,
    backpressure: int = 0,
    group: str | None = None,
    task: str | None = None,
) -> tuple[ObjectRefGenerator[Any], ObjectRef[Any], Stream]:
    """What a streaming call's ``.remote()`` returns, where its reply goes, and its name.

    ``backpressure``: how many values not taken yet the method may run ahead by (0: any);
    ``group``: the concurrency group the call chose (None: the method's own); ``task``:
    its task name (``.options(name=...)``; None: the method's).
    """
    gen: ObjectRefGenerator[Any] = ObjectRefGenerator(what, actor_id, rt, backpressure)
    name = Stream(method, gen._stream_id, backpressure, group)
    name.task = task
    return gen, gen._call, name


def _answered(call_ref: weakref.ref[ObjectRef[int]], inbox: Inbox) -> None:
    # The call answered (on torch's RPC thread, or where it failed unsent): its count.
    call = call_ref()
    if call is None:  # the generator is gone, and its inbox closed
        return
    sent = call._sent
    if sent is None:  # it failed before it was sent
        inbox.finish(None)
        return
    try:
        # the reply itself, not get(): get() may read a future completed after this runs
        _, count = call._reply_value(sent)
    except BaseException:  # noqa: BLE001  # the call failed: the inbox ends with its error
        inbox.finish(None)
        return
    inbox.producer = call._worker  # whose death loses the values still on their way
    inbox.finish(count if type(count) is int else None)


def _answered_already(recursive: bool) -> None:
    """A streamed value's ref cancels nothing: its value is here."""
