"""``ObjectRef``, ``get`` and ``wait`` without a cluster: awaiting, cancelling, bad arguments."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

import actorrt
from actorrt.refs import ObjectRef
from actorrt.runtime import payload
from actorrt.runtime.protocol import OK


def _sent_ref() -> tuple[ObjectRef, torch.futures.Future]:
    """A ref whose call went out; completing the returned future is its reply arriving."""
    ref = ObjectRef("Fake.method")
    reply: torch.futures.Future = torch.futures.Future()
    ref.attach(reply, "worker1", None, 0)
    return ref, reply


def _arrive(reply: torch.futures.Future, value: object) -> None:
    reply.set_result(payload.pack((OK, value)))


def test_a_timed_out_await_leaves_the_ref_usable():
    ref, reply = _sent_ref()

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(ref, 0.05)
        threading.Timer(0.05, _arrive, (reply, 7)).start()
        return await asyncio.wait_for(ref, 10)

    assert asyncio.run(main()) == 7
    assert actorrt.get(ref, timeout=10) == 7
    assert ref.future().result(timeout=10) == 7


def test_a_cancelled_await_of_a_ref_not_yet_sent_leaves_it_usable():
    ref = ObjectRef("Fake.method")  # e.g. waiting for its ObjectRef arguments

    async def main():
        task = asyncio.ensure_future(ref)
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    ref._set_result("late")
    assert actorrt.get(ref, timeout=10) == "late"
    assert asyncio.run(asyncio.wait_for(_await(ref), 10)) == "late"


async def _await(ref: ObjectRef) -> object:
    return await ref


def test_cancelling_the_future_of_a_ref_does_not_cancel_the_ref():
    ref, reply = _sent_ref()
    assert ref.future().cancel() is False
    _arrive(reply, 3)
    assert actorrt.get(ref, timeout=10) == 3
    assert ref.future().result(timeout=10) == 3


def test_wait_on_no_refs_returns_two_empty_lists():
    assert actorrt.wait([]) == ([], [])
    assert actorrt.wait([], timeout=0) == ([], [])


@pytest.mark.parametrize("timeout", [-2, -0.5, -1.5, float("nan")])
def test_a_negative_timeout_is_a_value_error(timeout):
    ref, reply = _sent_ref()
    with pytest.raises(ValueError, match="timeout"):
        actorrt.get(ref, timeout=timeout)
    with pytest.raises(ValueError, match="timeout"):
        actorrt.get([ref], timeout=timeout)
    with pytest.raises(ValueError, match="timeout"):
        actorrt.wait([ref], timeout=timeout)
    _arrive(reply, None)


@pytest.mark.parametrize("timeout", [-1, -1.0])
def test_get_takes_a_timeout_of_minus_one_as_none_and_wait_refuses_it_as_rays(timeout):
    ref, reply = _sent_ref()
    with pytest.raises(ValueError, match="timeout"):  # Ray's wait refuses every negative
        actorrt.wait([ref], timeout=timeout)
    threading.Timer(0.2, _arrive, (reply, 9)).start()  # arrives while get waits
    assert actorrt.get(ref, timeout=timeout) == 9
    assert actorrt.get([ref], timeout=timeout) == [9]


@pytest.mark.parametrize("timeout", ["5", True, [1]])
def test_a_timeout_that_is_not_a_number_is_a_type_error(timeout):
    ref, reply = _sent_ref()
    with pytest.raises(TypeError, match="timeout"):
        actorrt.get(ref, timeout=timeout)
    with pytest.raises(TypeError, match="timeout"):
        actorrt.wait([ref], timeout=timeout)
    _arrive(reply, None)


def test_zero_and_infinite_timeouts_are_numbers():
    ref, reply = _sent_ref()
    with pytest.raises(actorrt.GetTimeoutError):
        actorrt.get(ref, timeout=0)
    assert actorrt.wait([ref], timeout=0) == ([], [ref])
    _arrive(reply, 5)
    assert actorrt.get(ref, timeout=float("inf")) == 5
    assert actorrt.wait([ref], timeout=float("inf")) == ([ref], [])


def test_get_gives_the_value_or_raises_what_the_reply_stands_for():
    from actorrt.errors import ActorDiedError, ActorError
    from actorrt.runtime.protocol import died_reply, error_reply

    for value in (7, "text", None, (1, [2.5]), torch.ones(2)):
        ref, reply = _sent_ref()
        _arrive(reply, value)
        got = actorrt.get(ref)
        assert torch.equal(got, value) if isinstance(value, torch.Tensor) else got == value
    ref, reply = _sent_ref()
    reply.set_result(payload.pack(error_reply("Fake.method", ValueError("bad"))))
    with pytest.raises(ActorError, match="ValueError: bad"):
        actorrt.get(ref)
    ref, reply = _sent_ref()
    reply.set_result(payload.pack(died_reply("it was killed")))
    with pytest.raises(ActorDiedError, match="it was killed"):
        actorrt.get(ref)


@pytest.fixture
def no_cyclic_gc():
    import gc

    was = gc.isenabled()
    gc.disable()  # an idle process may never run it: a cycle would keep the ref
    yield
    if was:
        gc.enable()


def test_a_ready_callback_that_holds_its_ref_lets_it_go_once_run(no_cyclic_gc):
    # A lender's answer to a borrower holds the lent ref: before, the ref's ready future
    # kept the callback after running it, and ref, future and callback made a cycle.
    import weakref

    ref = ObjectRef("Leaf.big")
    ran = []

    def answer(ref=ref):
        ran.append(ref._call)

    ref._when_ready(answer)
    ref.fail(RuntimeError("answered"))
    assert ran == ["Leaf.big"]
    alive = weakref.ref(ref)
    del ref, answer
    assert alive() is None


def test_refs_a_call_waited_for_are_let_go_when_one_failed(no_cyclic_gc):
    import weakref

    from actorrt.refs import when_ready

    first, second = ObjectRef("A.make"), ObjectRef("B.make")
    failed = []
    when_ready((first, second), {}, lambda a, kw, now: None, failed.append)
    first.fail(RuntimeError("first"))
    second.fail(RuntimeError("second"))
    assert len(failed) == 1
    alive = [weakref.ref(first), weakref.ref(second)]
    del first, second
    assert [r() for r in alive] == [None, None]
