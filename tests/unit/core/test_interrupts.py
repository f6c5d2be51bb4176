"""runtime.interrupts without a cluster: a running function is interrupted, nothing else."""

from __future__ import annotations

import asyncio
import random
import sys
import threading
import time
from dataclasses import dataclass
from functools import partial

import pytest

from actorrt.runtime import interrupts, lineage
from actorrt.runtime.interrupts import Interrupted


@dataclass
class Slot:
    cancel_asked: bool = False
    thread: int = 0
    fired: bool = False
    waker: object = None


def _in_thread(target):
    """Runs ``target()`` on a thread; its outcome ("value", x) or ("raised", exc)."""
    out = []

    def body():
        try:
            out.append(("value", target()))
        except BaseException as exc:  # what the executor's thread would see
            out.append(("raised", exc))

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, out


def _serve(call, work):
    token = lineage.serving.set(call)  # as the mailbox does around each call
    try:
        return interrupts.run(work)
    finally:
        lineage.serving.reset(token)


def test_a_running_function_is_interrupted_and_its_finally_runs():
    call, started, cleaned = Slot(), threading.Event(), []

    def busy():
        started.set()
        try:
            while True:  # Python code: it stops at once
                pass
        finally:
            cleaned.append(True)

    thread, out = _in_thread(lambda: _serve(call, busy))
    assert started.wait(5)
    call.cancel_asked = True
    assert interrupts.interrupt(call)
    assert not interrupts.interrupt(call)  # once per call
    thread.join(5)
    assert out and out[0][0] == "raised" and isinstance(out[0][1], Interrupted), out
    assert isinstance(out[0][1], KeyboardInterrupt)  # as Ray's interrupted task
    assert cleaned == [True] and call.thread == 0


def test_a_function_that_catches_it_gives_its_value():
    call, started = Slot(), threading.Event()

    def shrug():
        started.set()
        try:
            while True:
                time.sleep(0.001)  # blocked in C: raised when the sleep returns
        except KeyboardInterrupt:
            return "caught"

    thread, out = _in_thread(lambda: _serve(call, shrug))
    assert started.wait(5)
    call.cancel_asked = True
    interrupts.interrupt(call)
    thread.join(5)
    assert out == [("value", "caught")]


def test_a_call_cancelled_before_its_function_began_does_not_run_it():
    ran = []
    call = Slot(cancel_asked=True)
    thread, out = _in_thread(lambda: _serve(call, lambda: ran.append(1)))
    thread.join(5)
    assert ran == [] and out[0][0] == "raised" and isinstance(out[0][1], Interrupted)


def test_nothing_is_fired_outside_a_function_or_without_a_call():
    call = Slot(cancel_asked=True)
    assert not interrupts.interrupt(call)  # not running: nothing to interrupt
    assert interrupts.run(lambda: 7) == 7  # no call served: just runs


@pytest.fixture
def fast_switching():
    """The threads take turns every few bytecodes, so interrupts land everywhere."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_interrupts_racing_the_end_of_calls_never_escape_the_runner(fast_switching):
    """Fired at any moment around a call's end, an interrupt is raised inside the call
    (its outcome: Interrupted) or taken back, never later in the thread's own loop."""
    outcomes, escaped, current = [], [], [None]
    go, stop = threading.Event(), threading.Event()

    def loop():
        for _ in range(400):
            try:
                call = Slot()
                current[0] = call
                go.set()
                try:
                    value = _serve(call, partial(sum, range(random.randint(0, 3000))))
                except Interrupted:
                    value = "interrupted"
                outcomes.append(value)
                for _ in range(50):  # the thread's own code between calls
                    pass
            except BaseException as exc:  # raised outside the call: reported below
                escaped.append(repr(exc))
        current[0] = None
        try:  # bytecode enough for a pending exception to show itself
            deadline = time.monotonic() + 0.2
            while time.monotonic() < deadline:
                pass
        except BaseException as exc:
            escaped.append(f"after the calls: {exc!r}")
        stop.set()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    assert go.wait(5)
    fired = 0
    while not stop.is_set():
        call = current[0]
        if call is not None:
            call.cancel_asked = True
            fired += interrupts.interrupt(call)
        time.sleep(random.random() * 0.0002)
    thread.join(10)
    assert not escaped, escaped
    assert len(outcomes) == 400 and "interrupted" in outcomes and fired > 0


def test_a_function_blocked_in_c_stops_when_it_returns_to_python():
    call, started = Slot(), threading.Event()

    def nap():
        started.set()
        time.sleep(1.0)
        return "woke"  # not reached: raised as the sleep returned

    thread, out = _in_thread(lambda: _serve(call, nap))
    assert started.wait(5)
    call.cancel_asked = True
    assert interrupts.interrupt(call)  # during the sleep: pending until it returns
    thread.join(5)
    assert out[0][0] == "raised" and isinstance(out[0][1], Interrupted), out


def test_an_async_function_is_cancelled_where_it_awaits():
    """Its loop waits in C for its next timer: the task is cancelled, which wakes it."""
    call, started, seen = Slot(), threading.Event(), []

    async def waits():
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "slept"

    thread, out = _in_thread(lambda: _serve(call, lambda: interrupts.run_coroutine(waits())))
    assert started.wait(5)
    call.cancel_asked = True
    assert interrupts.interrupt(call)
    thread.join(5)
    assert seen == ["cancelled"] and out and isinstance(out[0][1], Interrupted), out
    assert call.waker is None and call.thread == 0

    shrugs, started2 = Slot(), threading.Event()

    async def catches():
        started2.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            return "caught"

    thread, out = _in_thread(lambda: _serve(shrugs, lambda: interrupts.run_coroutine(catches())))
    assert started2.wait(5)
    shrugs.cancel_asked = True
    interrupts.interrupt(shrugs)
    thread.join(5)
    assert out == [("value", "caught")]
