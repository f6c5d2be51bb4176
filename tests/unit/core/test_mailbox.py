"""The actor's mailbox and threads, in one process (no RPC): order, concurrency, kill."""

from __future__ import annotations

import asyncio
import pickle
import sys
import threading
import time

import pytest
import torch

import actorrt
from actorrt.runtime import lineage, payload
from actorrt.runtime.mailbox import Call, Mailbox
from actorrt.runtime.protocol import CANCELLED, DIED, OK
from actorrt.runtime.threads import ActorThreads


class Log:
    def __init__(self):
        self.seen = []
        self.thread = None

    def add(self, x):
        self.seen.append(x)
        self.thread = threading.current_thread().name
        return x

    def block(self, event):
        event.wait(10)
        return "unblocked"

    def spawn(self, children, gate):
        """Makes calls (``children``), then waits: whether its own call was cancelled."""
        for child in children:
            lineage.made(child)
        gate.wait(10)
        self.seen.append(("canceled", actorrt.get_runtime_context().is_canceled()))
        return self.seen[-1][1]

    def spawn_and_drop(self, gate):
        lineage.made(Child())  # a call whose ref it dropped at once
        gate.wait(10)
        return "done"

    def ask(self, box, questions, gate):
        """Whether a get here of each ``(caller, seq)`` call would wait for ever."""
        gate.wait(10)
        return [box.waits_on_itself(caller, seq) for caller, seq in questions]

    def wait_on_child(self, gate):
        gate.wait(10)  # then its get() of a child call cancelled with it raises
        raise actorrt.TaskCancelledError("Log.add was cancelled (actorrt.cancel) while it ran")


class Child:
    """Stands for the ref of a call a method made (runtime.lineage.Child)."""

    def __init__(self):
        self.cancelled = 0

    def _cancel_with_parent(self):
        self.cancelled += 1


class _Here:
    """Stands for an argument in a wire; unpacks as the live object (one process, no RPC)."""

    def __init__(self, index):
        self.index = index

    def __reduce__(self):
        return payload._from_side, (self.index,)


def _wire(args):
    # Arguments such as threading.Event cannot be pickled; in one process they travel by
    # reference through the wire's side list, as tensors and RRefs do between processes.
    return pickle.dumps((tuple(_Here(i) for i in range(len(args))), {})), list(args)


def _unpacked_reply(_caller, reply):
    return reply  # replies stay in this process: no packing


def _box(max_concurrency=1):
    ended = []
    box = Mailbox("a" * 32, lambda actor_id, why: ended.append(why), _unpacked_reply)
    box.open(Log, _wire(()), class_name="Log", max_concurrency=max_concurrency, gpu_ids=())
    return box, ended


def _call(seq, method, *args, caller="c"):
    return Call(caller, seq, method, _wire(args), torch.futures.Future())


def test_calls_run_in_seq_order_whatever_order_they_arrive_in():
    box, _ = _box()
    calls = [_call(i, "add", i) for i in range(50)]
    for call in reversed(calls):
        box.deliver(call)
    assert [c.future.wait() for c in calls] == [(OK, i) for i in range(50)]
    assert box._instance.seen == list(range(50))


def test_only_the_actors_own_thread_waits_on_itself_and_only_for_calls_still_to_run():
    """What get asks before it waits on a call to its own actor (refs.get): a one-thread
    actor's thread waits for ever on a call not yet run (held for its caller's order,
    queued behind it, or not arrived), not on one that ran (its reply on its way); no
    other thread does, nor a thread of an actor that runs two calls at once."""
    box, _ = _box()
    ran = _call(0, "add", 1, caller="ran")
    box.deliver(ran)
    assert ran.future.wait() == (OK, 1)
    box.deliver(_call(1, "add", 2, caller="held"))  # its caller's call 0 never came
    gate = threading.Event()
    questions = [("ran", 0), ("held", 1), ("c", 1), ("unsent", 0)]
    asking = _call(0, "ask", box, questions, gate)
    box.deliver(asking)
    queued = _call(1, "add", 3)  # behind the asking call
    box.deliver(queued)
    gate.set()
    assert asking.future.wait() == (OK, [False, True, True, True])
    assert queued.future.wait() == (OK, 3)
    assert not box.waits_on_itself("unsent", 0)  # asked from another thread
    roomy, _ = _box(max_concurrency=2)
    gate.set()
    asking = _call(0, "ask", roomy, [("unsent", 0)], gate)
    roomy.deliver(asking)
    assert asking.future.wait() == (OK, [False])


def test_a_number_given_up_after_its_call_came_is_answered_and_holds_nothing():
    """refs._close_gap gives up a number whose call may have run (its reply failed to
    pickle): the mailbox answers it at once instead of holding it for good."""
    box, _ = _box()
    first = _call(0, "add", 0)
    box.deliver(first)
    assert first.future.wait() == (OK, 0)
    late = Call("c", 0, None, None, torch.futures.Future())
    box.deliver(late)  # answered here, on the delivering thread, or never
    assert late.future.done() and late.future.wait() == (OK, None)
    assert not box._held.get("c"), "the stale number is held"
    after = _call(1, "add", 1)
    box.deliver(after)
    assert after.future.wait() == (OK, 1) and box._instance.seen == [0, 1]


def test_a_caller_forgotten_after_its_death_numbers_its_calls_from_zero_again():
    """A new process that took a dead caller's name numbers its calls from 0: the actor
    must not wait for the dead one's next number, nor run the dead one's calls not begun,
    nor answer any of them under the name once the new process may be listening."""
    box, _ = _box()
    gate = threading.Event()
    running = _call(0, "block", gate, caller="w1")
    queued = _call(1, "add", "queued", caller="w1")
    stranded = _call(3, "add", "stranded", caller="w1")  # number 2 never came: it waits
    for call in (running, queued, stranded):
        box.deliver(call)
    _until(lambda: running.started)
    box.forget_caller("w1")  # rank 0 said it died: answered now
    assert [c.future.wait()[0] for c in (running, queued, stranded)] == [DIED] * 3
    late = _call(0, "block", gate, caller="w2")
    box.deliver(late)
    box.forget_caller("w2", answer=False)  # a new process may have its name: no answer
    gate.set()
    fresh = [_call(seq, "add", 10 + seq, caller="w1") for seq in range(2)]
    for call in fresh:
        box.deliver(call)
    assert [c.future.wait() for c in fresh] == [(OK, 10), (OK, 11)]
    assert not late.future.done(), "a forgotten caller's call was answered under its name"
    assert box._instance.seen == [10, 11], "a call of the dead caller not begun ran"
    assert box.calls_in_flight() == 0


def test_a_call_numbered_for_another_instance_runs_instead_of_waiting_for_ever(caplog):
    """A number that has passed, or that a held call has, would never be released: such a
    call (its caller numbered it for an instance whose process died) runs at once."""
    box, _ = _box()
    for seq in range(3):
        box.deliver(_call(seq, "add", seq))
    passed = _call(1, "add", "passed")
    box.deliver(passed)
    assert passed.future.wait() == (OK, "passed")
    held = _call(5, "add", "held")
    twin = _call(5, "add", "twin")
    box.deliver(held)
    box.deliver(twin)
    assert twin.future.wait() == (OK, "twin") and not held.future.done()
    for seq in (3, 4):
        box.deliver(_call(seq, "add", seq))
    assert held.future.wait() == (OK, "held")
    assert box._instance.seen == [0, 1, 2, "passed", "twin", 3, 4, "held"]
    told = [r for r in caplog.records if "came after its turn" in r.getMessage()]
    assert len(told) == 1, "said once per caller"


def test_a_reply_being_sent_does_not_hold_up_new_calls():
    # Completing a call's future sends its reply from the actor thread (pickling, network
    # write). The mailbox lock must not be held meanwhile, or every RPC thread delivering
    # a call queues behind the send.
    box, _ = _box()
    sending = threading.Event()
    release = threading.Event()
    first = _call(0, "add", 1)

    def slow_send(_fut):
        sending.set()
        release.wait(10)

    first.future.add_done_callback(slow_send)
    box.deliver(first)
    assert sending.wait(10)
    t0 = time.monotonic()
    box.deliver(_call(1, "add", 2))
    took = time.monotonic() - t0
    release.set()
    assert took < 5, f"deliver waited {took:.1f} s for another call's reply to be sent"


def test_kill_answers_running_and_queued_calls_and_later_ones():
    box, ended = _box()
    gate = threading.Event()
    running = _call(0, "block", gate)
    queued = _call(1, "add", 1)
    box.deliver(running)
    box.deliver(queued)
    time.sleep(0.1)
    box.kill("stopped by the test")
    for call in (running, queued, _call(2, "add", 2)):
        if call is not running and call is not queued:
            box.deliver(call)
        assert call.future.wait() == (DIED, "stopped by the test")
    gate.set()
    assert ended == ["stopped by the test"]


def test_actor_threads_run_in_queue_order_on_their_own_threads():
    names = []
    threads = ActorThreads(1, "solo", initializer=lambda: names.append("init"))
    done = threading.Event()
    order = []
    for i in range(100):
        threads.submit(order.append, i)
    threads.submit(lambda _: (names.append(threading.current_thread().name), done.set()), None)
    assert done.wait(10)
    assert order == list(range(100))
    assert names == ["init", "solo_0"]
    threads.close()


def test_actor_threads_run_max_concurrency_at_once_and_close_after_queued_work():
    threads = ActorThreads(3, "trio")
    inside = threading.Semaphore(0)
    go = threading.Event()
    finished = []

    def work(i):
        inside.release()
        go.wait(10)
        finished.append(i)

    for i in range(4):
        threads.submit(work, i)
    for _ in range(3):
        assert inside.acquire(timeout=10)
    assert not inside.acquire(timeout=0.2), "a fourth call ran with max_concurrency=3"
    threads.close()  # work queued before close still runs
    go.set()
    deadline = time.monotonic() + 10
    while len(finished) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(finished) == [0, 1, 2, 3]
    with pytest.raises(RuntimeError, match="closed"):
        threads.submit(work, 5)


def test_kill_answers_a_running_call_that_arrived_before_the_constructor():
    # RPC threads race: a call may reach the mailbox before the creation request.
    box = Mailbox("b" * 32, lambda actor_id, why: None, _unpacked_reply)
    gate = threading.Event()
    early = _call(0, "block", gate)
    box.deliver(early)
    box.open(Log, _wire(()), class_name="Log", max_concurrency=1, gpu_ids=())
    time.sleep(0.1)  # `block` is running now
    box.kill("killed early")
    t0 = time.monotonic()
    assert early.future.wait() == (DIED, "killed early")
    assert time.monotonic() - t0 < 5, "the kill waited for the running method"
    gate.set()


# -- async actors ----------------------------------------------------------------------


class AsyncLog:
    def __init__(self):
        self.seen = []
        self.inside = 0
        self.peak = 0
        self.arrived = 0
        self.all_here = asyncio.Event()
        self.init_thread = threading.get_ident()

    async def gather(self, n):
        # Ray's batching pattern: every caller waits for one event that the n-th one sets.
        self.arrived += 1
        if self.arrived == n:
            self.all_here.set()
        await self.all_here.wait()
        return self.arrived

    async def hold(self, event):
        self.inside += 1
        self.peak = max(self.peak, self.inside)
        while not event.is_set():
            await asyncio.sleep(0.01)
        self.inside -= 1
        return self.peak

    async def add_async(self, x):
        self.seen.append(x)
        await asyncio.sleep(0)
        return x

    def add(self, x):
        self.seen.append(x)
        return x

    def where(self):
        asyncio.get_running_loop()  # raises off the loop thread
        return threading.get_ident(), self.init_thread

    async def where_async(self):
        return threading.get_ident()

    async def shrug_off_cancel(self, started):
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "caught"
        return "slept"

    def open_gate(self):
        self.all_here.set()  # a plain method may touch the loop's objects: it runs there

    async def stop(self):
        await asyncio.sleep(0)
        actorrt.exit_actor()

    async def sys_exit(self):
        sys.exit(3)


class Exits:
    def stop(self):
        actorrt.exit_actor()
        return "never"

    def sys_exit(self):
        sys.exit(0)

    def swallow(self):
        try:
            raise SystemExit(1)
        except SystemExit:
            return "caught"

    def block(self, event):
        event.wait(10)
        return "unblocked"

    def ping(self):
        return "pong"


def _async_box(max_concurrency=None, cls=AsyncLog):
    ended = []
    box = Mailbox("d" * 32, lambda actor_id, why: ended.append(why), _unpacked_reply)
    box.open(cls, _wire(()), class_name=cls.__name__, max_concurrency=max_concurrency, gpu_ids=())
    return box, ended


def _deliver(box, *calls):
    for call in calls:
        box.deliver(call)
    return calls


def _until(predicate, what="the condition never held", timeout=10):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _reply(call, timeout=10):
    done = threading.Event()
    call.future.add_done_callback(lambda _: done.set())
    assert done.wait(timeout), f"call {call.method} #{call.seq} got no reply in {timeout} s"
    return call.future.wait()


def test_async_actor_runs_calls_concurrently_by_default():
    # 50 callers each wait for an event the 50th sets: with one call at a time, a deadlock.
    box, _ = _async_box(max_concurrency=None)
    calls = _deliver(box, *[_call(i, "gather", 50) for i in range(50)])
    assert [_reply(c) for c in calls] == [(OK, 50)] * 50


def test_async_actor_runs_at_most_max_concurrency_calls_at_once():
    box, _ = _async_box(max_concurrency=2)
    _two_at_once(box, 5)


def _two_at_once(box, n):
    """``n`` calls of ``hold``: at most two are inside at once, and all end."""
    gate = threading.Event()
    calls = _deliver(box, *[_call(i, "hold", gate) for i in range(n)])
    _until(lambda: box._instance is not None and box._instance.inside == 2)
    time.sleep(0.2)  # a third call, if let in, would be inside by now
    assert box._instance.inside == 2
    gate.set()
    assert [_reply(c)[1] for c in calls] == [2] * n


def test_plain_methods_of_an_async_actor_run_on_its_loop_in_order():
    box, _ = _async_box()
    calls = []
    for i in range(40):
        method = "add" if i % 2 else "add_async"
        calls.append(_call(i, method, i))
    where, where_async = _call(40, "where"), _call(41, "where_async")
    _deliver(box, *reversed(calls), where_async, where)
    assert [_reply(c) for c in calls] == [(OK, i) for i in range(40)]
    assert box._instance.seen == list(range(40))
    (status, (thread, init_thread)), (_, loop_thread) = _reply(where), _reply(where_async)
    assert status == OK and thread == loop_thread == init_thread


def test_a_plain_method_sets_the_event_async_calls_wait_on():
    box, _ = _async_box()
    waiters = _deliver(box, *[_call(i, "gather", 1000) for i in range(3)])
    (opener,) = _deliver(box, _call(3, "open_gate"))
    assert _reply(opener) == (OK, None)
    assert [_reply(c) for c in waiters] == [(OK, 3)] * 3


def test_a_released_async_actor_finishes_its_calls_then_ends():
    box, ended = _async_box()
    gate = threading.Event()
    held = _call(0, "hold", gate)
    box.deliver(held)
    box.release("no handle refers to the actor any more")
    time.sleep(0.1)
    assert not ended and not held.future.done()
    gate.set()
    assert _reply(held) == (OK, 1)
    _until(lambda: ended)
    assert ended == ["no handle refers to the actor any more"]
    _until(lambda: not box._loop.is_running(), "the actor's event loop runs on after its end")


def test_a_killed_async_actor_answers_its_waiting_calls_at_once():
    box, ended = _async_box(max_concurrency=1)
    gate = threading.Event()
    calls = _deliver(box, _call(0, "hold", gate), _call(1, "add", 1))  # the 2nd waits its turn
    _until(lambda: box._instance is not None and box._instance.inside == 1)
    box.kill("killed by the test")
    assert [_reply(c) for c in calls] == [(DIED, "killed by the test")] * 2
    _until(lambda: not box._loop.is_running(), "the actor's event loop runs on after a kill")
    assert box._instance is None and ended == ["killed by the test"]


@pytest.mark.parametrize("method", ["stop", "sys_exit"])
def test_exit_in_an_async_method_ends_the_actor(method):
    box, ended = _async_box()
    gate = threading.Event()
    held = _call(0, "hold", gate)
    ender, later = _call(1, method), _call(2, "add", 1)
    _deliver(box, held, ender)
    for call in (ender, held):
        status, reason = _reply(call)
        assert status == DIED and "exited" in reason, reason
    box.deliver(later)
    assert _reply(later)[0] == DIED
    gate.set()
    _until(lambda: ended)  # the calls are answered first, then the actor is let go
    assert len(ended) == 1 and "exited" in ended[0]
    _until(lambda: not box._loop.is_running(), "the actor's event loop runs on after its exit")


@pytest.mark.parametrize(
    "method, why", [("stop", "exit_actor() was called"), ("sys_exit", "SystemExit(0)")]
)
def test_exit_in_a_method_ends_the_actor_and_fails_queued_and_later_calls(method, why):
    box, ended = _box_of(Exits)
    ender, queued = _call(0, method), _call(1, "ping")
    _deliver(box, ender, queued)
    for call in (ender, queued):
        status, reason = _reply(call)
        assert status == DIED and why in reason and "Exits actor" in reason, reason
    later = _call(2, "ping")
    box.deliver(later)
    assert _reply(later)[0] == DIED
    _until(lambda: ended)
    assert len(ended) == 1 and why in ended[0]


def test_exit_fails_the_calls_running_beside_it():
    box, _ = _box_of(Exits, max_concurrency=2)
    gate = threading.Event()
    running = _call(0, "block", gate)
    box.deliver(running)
    ender = _call(1, "stop")
    box.deliver(ender)
    assert _reply(ender)[0] == DIED
    assert _reply(running)[0] == DIED  # answered at once: the exit does not wait for it
    gate.set()


def test_a_caught_system_exit_is_an_ordinary_return():
    box, _ = _box_of(Exits)
    calls = _deliver(box, _call(0, "swallow"), _call(1, "ping"))
    assert [_reply(c) for c in calls] == [(OK, "caught"), (OK, "pong")]


def test_exit_actor_outside_an_actor_is_a_clear_error():
    with pytest.raises(TypeError, match="inside an actor method"):
        actorrt.exit_actor()


def _box_of(cls, max_concurrency=1):
    ended = []
    box = Mailbox("e" * 32, lambda actor_id, why: ended.append(why), _unpacked_reply)
    box.open(cls, _wire(()), class_name=cls.__name__, max_concurrency=max_concurrency, gpu_ids=())
    return box, ended


def test_max_concurrency_none_runs_a_sync_actor_one_call_at_a_time():
    box, _ = _box_of(Log, max_concurrency=None)
    gate = threading.Event()
    blocked, queued = _call(0, "block", gate), _call(1, "add", 1)
    _deliver(box, blocked, queued)
    time.sleep(0.2)
    assert not queued.future.done(), "a second call ran beside the first"
    gate.set()
    assert [_reply(c) for c in (blocked, queued)] == [(OK, "unblocked"), (OK, 1)]


# -- threads on demand -----------------------------------------------------------------


def _threads_named(prefix):
    return [t for t in threading.enumerate() if t.name.startswith(prefix + "_")]


def test_actor_threads_start_only_when_work_waits_and_none_is_idle():
    threads = ActorThreads(100_000, "lazy")
    done = threading.Event()
    for _ in range(50):  # one at a time: the first thread takes them all
        step = threading.Event()
        threads.submit(threading.Event.set, step)
        assert step.wait(10)
        _until(lambda: threads._idle == 1)  # the thread is back at the queue
    assert len(_threads_named("lazy")) == 1
    gate = threading.Event()
    inside = threading.Semaphore(0)

    def block(_):
        inside.release()
        gate.wait(10)

    for _ in range(5):
        threads.submit(block, None)
    for _ in range(5):
        assert inside.acquire(timeout=10), "a call waited although threads were allowed"
    assert len(_threads_named("lazy")) == 5
    gate.set()
    threads.submit(lambda _: done.set(), None)
    assert done.wait(10)
    threads.close()


def test_actor_threads_go_on_with_the_threads_they_have_when_none_can_start(monkeypatch):
    threads = ActorThreads(4, "capped")
    real_start = threading.Thread.start

    def refuse(self):
        if self.name.startswith("capped_"):
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", refuse)
    gate = threading.Event()
    order = []
    threads.submit(lambda _: gate.wait(10), None)
    for i in range(3):
        threads.submit(order.append, i)  # no thread can start: they wait for the first
    gate.set()
    done = threading.Event()
    threads.submit(lambda _: done.set(), None)
    assert done.wait(10)
    assert order == [0, 1, 2]
    threads.close()


class Loser:
    def lose(self, x):
        raise actorrt.ObjectLostError(f"object {x} is lost (raised by the method)")

    async def lose_async(self, x):
        raise actorrt.ObjectLostError(f"object {x} is lost (raised by the method)")


@pytest.mark.parametrize("method", ["lose", "lose_async"])
def test_an_object_lost_error_the_method_raises_is_its_error_not_a_lost_argument(method):
    from actorrt.runtime.protocol import ERROR, decode_reply

    box, _ = _async_box(cls=Loser) if method == "lose_async" else _box_of(Loser)
    (call,) = _deliver(box, _call(0, method, 7))
    status, _ = reply = _reply(call)
    assert status == ERROR, reply  # was LOST: the caller got a bare ObjectLostError
    with pytest.raises(actorrt.ActorError, match=f"{method} raised ObjectLostError") as e:
        decode_reply(reply)
    assert isinstance(e.value.cause, actorrt.ObjectLostError)
    assert "raised by the method" in e.value.remote_traceback


@pytest.mark.parametrize("asynchronous", [False, True])
def test_an_argument_whose_object_is_lost_answers_lost(monkeypatch, asynchronous):
    from actorrt.runtime import mailbox
    from actorrt.runtime.protocol import LOST

    real = mailbox.resolve_args

    def lost(args, kwargs):
        if not args:  # the constructor's
            return real(args, kwargs)
        raise actorrt.ObjectLostError("object 1 is lost: its owner process is unreachable")

    async def lost_async(args, kwargs):
        lost(args, kwargs)

    monkeypatch.setattr(mailbox, "resolve_args", lost)
    monkeypatch.setattr(mailbox, "resolve_args_async", lost_async)
    box, _ = _async_box(cls=Loser) if asynchronous else _box_of(Loser)
    (call,) = _deliver(box, _call(0, "lose_async" if asynchronous else "lose", 1))
    assert _reply(call) == (LOST, "object 1 is lost: its owner process is unreachable")


# -- actorrt.cancel ----------------------------------------------------------------------


def _cancelled(call):
    status, why = _reply(call)
    assert status == CANCELLED, (status, why)
    return why


def test_a_cancelled_queued_call_never_runs_and_the_calls_after_it_do():
    box, _ = _box()
    gate = threading.Event()
    running, doomed, later = _deliver(
        box, _call(0, "block", gate), _call(1, "add", 1), _call(2, "add", 2)
    )
    box.cancel("c", 1)
    assert "Log actor" in _cancelled(doomed) and "before it ran" in doomed.future.wait()[1]
    gate.set()
    assert _reply(running) == (OK, "unblocked")
    assert _reply(later) == (OK, 2)
    assert box._instance.seen == [2]
    assert box.calls_in_flight() == 0


def test_a_cancel_that_overtakes_its_call_answers_it_on_arrival_in_the_callers_order():
    box, _ = _box()
    box.cancel("c", 1)  # sent alone, while the call waited in a batch
    (second,) = _deliver(box, _call(1, "add", 1))  # held: seq 0 has not come
    assert not second.future.done()
    first, third = _deliver(box, _call(0, "add", 0), _call(2, "add", 2))
    assert _reply(first) == (OK, 0)
    _cancelled(second)
    assert _reply(third) == (OK, 2)
    assert box._instance.seen == [0, 2]
    assert not box._cancel_first, "the cancel was kept after its call came"


def test_a_held_call_that_is_cancelled_keeps_its_place_in_the_order():
    box, _ = _box()
    (held,) = _deliver(box, _call(2, "add", 2))
    box.cancel("c", 2)
    calls = _deliver(box, _call(0, "add", 0), _call(1, "add", 1), _call(3, "add", 3))
    assert [_reply(c) for c in calls] == [(OK, 0), (OK, 1), (OK, 3)]
    _cancelled(held)
    assert box._instance.seen == [0, 1, 3]


def _running(box, method, *args):
    """Call 0 of ``method``, once its actor's thread began it."""
    (call,) = _deliver(box, _call(0, method, *args))
    _until(lambda: call.started)
    return call


def test_a_running_call_of_a_sync_actor_runs_to_its_end():
    box, _ = _box()
    gate = threading.Event()
    running = _running(box, "block", gate)
    box.cancel("c", 0)
    time.sleep(0.1)
    assert not running.future.done()
    gate.set()
    assert "while it ran" in _cancelled(running)  # as Ray's: its value is dropped


def _spawning(box, gate, children):
    """Call 0 of ``spawn``, once it has made its calls (``children``) and waits on ``gate``."""
    (running,) = _deliver(box, _call(0, "spawn", children, gate))
    _until(lambda: running.children is not None and len(running.children) == len(children))
    return running


def test_a_recursive_cancel_of_a_running_call_cancels_the_calls_it_made():
    box, _ = _box()
    gate = threading.Event()
    children = [Child(), Child()]
    running = _spawning(box, gate, children)
    box.cancel("c", 0)  # recursive, as actorrt.cancel's default
    assert [c.cancelled for c in children] == [1, 1]
    assert not running.future.done()  # a sync actor's method runs on
    gate.set()
    assert "while it ran" in _cancelled(running)
    assert box._instance.seen == [("canceled", True)]  # it could read that it was cancelled


def test_a_cancel_that_is_not_recursive_leaves_the_calls_it_made():
    box, _ = _box()
    gate = threading.Event()
    child = Child()
    running = _spawning(box, gate, [child])
    box.cancel("c", 0, recursive=False)
    gate.set()
    assert "while it ran" in _cancelled(running)
    assert box._instance.seen == [("canceled", True)]
    assert child.cancelled == 0
    (uncancelled,) = _deliver(box, _call(1, "spawn", [], gate))  # the same thread, next
    assert _reply(uncancelled) == (OK, False)  # reads its own call's cancel, not the last


def test_a_call_made_and_dropped_is_not_held_by_the_call_that_made_it():
    box, _ = _box()
    gate = threading.Event()
    (running,) = _deliver(box, _call(0, "spawn_and_drop", gate))
    _until(
        lambda: running.children is not None and len(running.children) == 0,
        "the call it made was held after its ref was dropped",
    )
    gate.set()
    assert _reply(running) == (OK, "done")


def test_a_method_that_a_cancelled_child_call_stops_answers_cancelled():
    box, _ = _box()
    gate = threading.Event()
    cancelled = _running(box, "wait_on_child", gate)
    box.cancel("c", 0)
    gate.set()
    assert ".wait_on_child was cancelled (actorrt.cancel) while it ran" in _cancelled(cancelled)
    gate.clear()
    (failed,) = _deliver(box, _call(1, "wait_on_child", gate))
    gate.set()  # not cancelled: the method's own error, as any other
    status, _ = _reply(failed)
    assert status != CANCELLED


def test_cancelling_an_answered_call_or_another_callers_changes_nothing():
    box, _ = _box()
    (done,) = _deliver(box, _call(0, "add", 0))
    assert _reply(done) == (OK, 0)
    box.cancel("c", 0)
    box.cancel("c", -5)
    gate = threading.Event()
    (other,) = _deliver(box, _call(0, "block", gate, caller="d"))
    box.cancel("c", 0)  # caller c's seq 0, not d's
    gate.set()
    assert _reply(other) == (OK, "unblocked")
    assert _reply(_deliver(box, _call(1, "add", 1))[0]) == (OK, 1)
    assert not box._cancel_first


def test_a_call_cancelled_before_the_constructor_was_queued_never_runs():
    box = Mailbox("e" * 32, lambda actor_id, why: None, _unpacked_reply)
    doomed, kept = _deliver(box, _call(0, "add", 0), _call(1, "add", 1))
    box.cancel("c", 0)
    _cancelled(doomed)
    box.open(Log, _wire(()), class_name="Log", max_concurrency=1, gpu_ids=())
    assert _reply(kept) == (OK, 1)
    assert box._instance.seen == [1]


def test_each_call_racing_its_cancel_runs_or_is_cancelled_never_both_nor_neither():
    # The cancel and the actor's thread each write their flag before reading the other's:
    # a call the caller hears was cancelled must not have run, and each gets one answer.
    box, _ = _box(max_concurrency=4)
    calls = [_call(i, "add", i) for i in range(300)]
    canceller = threading.Thread(target=lambda: [box.cancel("c", c.seq) for c in calls])
    canceller.start()
    _deliver(box, *calls)
    canceller.join(30)
    replies = [_reply(c) for c in calls]
    # Every call may be cancelled before the constructor (queued first, on one of the
    # four threads) has even returned: only the calls that ran need the instance.
    _until(lambda: box._instance is not None, "the constructor never ran")
    ran = sorted(box._instance.seen)
    assert ran == [c.seq for c, r in zip(calls, replies, strict=True) if r == (OK, c.seq)]
    assert all(r[0] in (OK, CANCELLED) for r in replies)


def test_an_async_call_is_cancelled_where_it_awaits_and_the_actor_goes_on():
    box, _ = _async_box()
    gate = threading.Event()
    (waiting,) = _deliver(box, _call(0, "hold", gate))
    _until(lambda: box._instance is not None and box._instance.inside == 1)
    box.cancel("c", 0)
    assert "while it awaited" in _cancelled(waiting)
    assert _reply(_deliver(box, _call(1, "add_async", 7))[0]) == (OK, 7)


def test_an_async_call_waiting_for_a_slot_is_cancelled_before_it_runs():
    box, _ = _async_box(max_concurrency=1)
    gate = threading.Event()
    holding, doomed = _deliver(box, _call(0, "hold", gate), _call(1, "add_async", 5))
    _until(lambda: box._instance is not None and box._instance.inside == 1)
    box.cancel("c", 1)
    _cancelled(doomed)
    gate.set()
    assert _reply(holding) == (OK, 1)
    assert box._instance.seen == []


def test_an_async_method_that_catches_the_cancel_returns_its_value():
    box, _ = _async_box()
    started = threading.Event()
    (call,) = _deliver(box, _call(0, "shrug_off_cancel", started))
    assert started.wait(10)
    box.cancel("c", 0)
    assert _reply(call) == (OK, "caught")


def test_a_killed_async_actor_answers_died_not_cancelled():
    box, _ = _async_box()
    gate = threading.Event()
    (waiting,) = _deliver(box, _call(0, "hold", gate))
    _until(lambda: box._instance is not None and box._instance.inside == 1)
    box.kill("killed by the test")
    box.cancel("c", 0)
    assert _reply(waiting) == (DIED, "killed by the test")


def test_a_call_cancelled_while_its_answer_is_still_being_sent_does_not_run(monkeypatch):
    # The cancel answers outside the lock; the actor's thread may reach the call first.
    box, _ = _box()
    gate, answering, go_on = threading.Event(), threading.Event(), threading.Event()
    answer = box._answer

    def slow_answer(call, reply):
        if reply[0] == CANCELLED:
            answering.set()
            go_on.wait(10)
        answer(call, reply)

    monkeypatch.setattr(box, "_answer", slow_answer)
    running, doomed = _deliver(box, _call(0, "block", gate), _call(1, "add", 1))
    canceller = threading.Thread(target=box.cancel, args=("c", 1))
    canceller.start()
    assert answering.wait(10)
    gate.set()
    assert _reply(running) == (OK, "unblocked")
    time.sleep(0.2)  # the actor's thread takes the cancelled call now
    go_on.set()
    canceller.join(10)
    _cancelled(doomed)
    assert box._instance.seen == []


# -- concurrency groups --------------------------------------------------------------------


class Grouped:
    def __init__(self):
        self.inside = 0
        self.peak = 0
        self.lock = threading.Lock()

    def block(self, event):
        event.wait(10)
        return "unblocked"

    @actorrt.method(concurrency_group="io")
    def ping(self):
        return threading.current_thread().name

    @actorrt.method(concurrency_group="compute")
    def hold(self, event):
        with self.lock:
            self.inside += 1
            self.peak = max(self.peak, self.inside)
        event.wait(10)
        with self.lock:
            self.inside -= 1
        return self.peak


def _grouped_box(cls, groups, max_concurrency=None):
    box = Mailbox("f" * 32, lambda actor_id, why: None, _unpacked_reply)
    box.open(
        cls,
        _wire(()),
        class_name=cls.__name__,
        max_concurrency=max_concurrency,
        gpu_ids=(),
        concurrency_groups=tuple(groups.items()),
    )
    return box


def test_a_groups_method_runs_on_its_own_threads_while_the_actors_are_busy():
    box = _grouped_box(Grouped, {"io": 1, "compute": 2})
    gate = threading.Event()
    blocked, ping = _deliver(box, _call(0, "block", gate), _call(1, "ping"))
    status, thread = _reply(ping)
    assert status == OK and thread.startswith("Grouped-ffffffff-io_"), thread
    assert not blocked.future.done()  # the actor's one thread is still in `block`
    gate.set()
    assert _reply(blocked) == (OK, "unblocked")
    box.kill("done")


def test_a_group_runs_at_most_its_threads_at_once():
    box = _grouped_box(Grouped, {"io": 1, "compute": 2})
    _two_at_once(box, 4)
    box.kill("done")


class AsyncGrouped(AsyncLog):
    @actorrt.method(concurrency_group="io")
    async def hold(self, event):
        return await super().hold(event)

    async def ping(self):
        return "pong"


def test_an_async_actors_group_has_a_limit_of_its_own_on_the_loop():
    box = _grouped_box(AsyncGrouped, {"io": 1})
    gate = threading.Event()
    calls = _deliver(box, *[_call(i, "hold", gate) for i in range(3)])
    _until(lambda: box._instance is not None and box._instance.inside == 1)
    (ping,) = _deliver(box, _call(3, "ping"))
    assert _reply(ping) == (OK, "pong")  # the actor's own limit (1000) is not the group's
    assert box._instance.inside == 1
    gate.set()
    assert [_reply(c)[1] for c in calls] == [1] * 3
    box.kill("done")


def test_calls_numbered_before_a_restart_in_place_fail_as_those_in_flight_even_arriving_after():
    """kill(no_restart=False): torch hands a process's messages to its threads in
    parallel, so a call sent before the restart may reach the mailbox after it. Was: such
    a call ran on the new instance, before the failed calls its caller sent again (CI saw
    ``[1, 2, 'once', 'hold']`` where ``['hold']`` was due); and one that must not run twice
    ran. The restart now takes the last number its caller took: those up to it fail as
    the calls in flight did, and later ones run on the new instance in order."""
    from actorrt.runtime.protocol import RESTARTED

    box, _ = _box()
    gate = threading.Event()
    running = _call(0, "block", gate)
    queued = _call(1, "add", "queued")
    box.deliver(running)
    box.deliver(queued)
    _until(lambda: running.started)
    late = [_call(2, "add", "late"), _call(3, "add", "late too")]  # on their way
    assert box.restart("restarted by kill", Log, _wire(()), numbered={"c": 3, "other": 0})
    for call in reversed(late):  # the last first: held for order, then released
        box.deliver(call)
    after = _call(4, "add", "after")
    box.deliver(after)
    gate.set()
    statuses = [c.future.wait() for c in (running, queued, *late)]
    assert statuses == [(RESTARTED, "restarted by kill")] * 4, statuses
    assert after.future.wait() == (OK, "after")
    _until(lambda: box._instance.seen == ["after"], f"ran: {box._instance.seen}")
    assert list(box._restarted_before) == ["other"]  # c's rule ended with its last call
    stale, fresh = _call(0, "add", "stale", caller="other"), _call(1, "add", 1, caller="other")
    box.deliver(fresh)
    box.deliver(stale)
    assert stale.future.wait() == (RESTARTED, "restarted by kill")
    assert fresh.future.wait() == (OK, 1) and box._instance.seen == ["after", 1]
    assert not box._restarted_before


@pytest.mark.parametrize("asynchronous", [False, True])
def test_running_lists_the_calls_whose_methods_run_now_not_those_queued(asynchronous):
    # actorrt.status()'s RUNNING column: what each actor runs, since when.
    box, _ = _async_box(max_concurrency=2) if asynchronous else _box()
    gate = threading.Event()
    first = _call(0, "hold" if asynchronous else "block", gate)
    queued = _call(1, "add", 1)  # behind it (sync), or run beside it (async)
    before = time.monotonic()
    _deliver(box, first)
    _until(lambda: box.running(), "the method never showed as running")
    _deliver(box, queued)
    if asynchronous:
        assert _reply(queued) == (OK, 1)  # it ran beside the held one, and ended
    else:
        time.sleep(0.1)  # queued behind it: it never shows
    (name, began), *others = box.running()
    assert name == ("hold" if asynchronous else "block") and others == []
    assert before <= began <= time.monotonic()
    gate.set()
    _reply(first)
    _reply(queued)
    assert box.running() == []


class SlowStart:
    def __init__(self, gate):
        gate.wait(10)

    def add(self, x):
        return x


def test_running_lists_the_constructor_while_it_runs():
    # A learner stuck loading its model shows as __init__ in actorrt.status(), not idle.
    box = Mailbox("e" * 32, lambda actor_id, why: None, _unpacked_reply)
    gate = threading.Event()
    box.open(SlowStart, _wire((gate,)), class_name="SlowStart", max_concurrency=1, gpu_ids=())
    _until(lambda: box.running(), "the constructor never showed as running")
    ((name, _),) = box.running()
    assert name == "__init__"
    gate.set()
    assert _reply(_deliver(box, _call(0, "add", 1))[0]) == (OK, 1)
    assert box.running() == []
