"""The actor's mailbox and threads, in one process (no RPC): order, concurrency, kill."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from actorrt.runtime.mailbox import Call, Mailbox
from actorrt.runtime.protocol import DIED, OK
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


def _box(max_concurrency=1):
    ended = []
    box = Mailbox("a" * 32, lambda actor_id, why: ended.append(why))
    box.open(Log, (), {}, class_name="Log", max_concurrency=max_concurrency, gpu_ids=())
    return box, ended


def _call(seq, method, *args, caller="c"):
    return Call(caller, seq, method, args, {}, torch.futures.Future())


def test_calls_run_in_seq_order_whatever_order_they_arrive_in():
    box, _ = _box()
    calls = [_call(i, "add", i) for i in range(50)]
    for call in reversed(calls):
        box.deliver(call)
    assert [c.future.wait() for c in calls] == [(OK, i) for i in range(50)]
    assert box._instance.seen == list(range(50))


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
    box = Mailbox("b" * 32, lambda actor_id, why: None)
    gate = threading.Event()
    early = _call(0, "block", gate)
    box.deliver(early)
    box.open(Log, (), {}, class_name="Log", max_concurrency=1, gpu_ids=())
    time.sleep(0.1)  # `block` is running now
    box.kill("killed early")
    t0 = time.monotonic()
    assert early.future.wait() == (DIED, "killed early")
    assert time.monotonic() - t0 < 5, "the kill waited for the running method"
    gate.set()
