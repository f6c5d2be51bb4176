"""InFlight: unanswered messages per worker, failed when the worker is marked dead."""

import gc
import time

import pytest
import torch

from actorrt.runtime.inflight import InFlight, WorkerMarkedDead, fail_future
from actorrt.runtime.lives import Lives


def test_marking_a_worker_dead_fails_only_its_unanswered_messages():
    inflight = InFlight()
    pending, answered, other = (torch.futures.Future() for _ in range(3))
    inflight.track("w1", pending)
    inflight.track("w1", answered)
    inflight.track("w2", other)
    answered.set_result("reply")
    assert inflight.unanswered("w1") == 1

    assert inflight.fail_worker("w1", "it answered no heartbeat for 2.0 s") == 1
    with pytest.raises(WorkerMarkedDead, match="no heartbeat for 2.0 s"):
        pending.wait()
    assert answered.wait() == "reply"
    assert not other.done()

    late = torch.futures.Future()  # sent after the worker was marked dead: fails at once
    inflight.track("w1", late)
    with pytest.raises(WorkerMarkedDead):
        late.value()


def test_a_reply_that_comes_first_is_kept_and_a_late_one_changes_nothing():
    answered = torch.futures.Future()
    answered.set_result(("OK", 1))
    assert not fail_future(answered, WorkerMarkedDead("x"))
    assert answered.value() == ("OK", 1)
    failed = torch.futures.Future()
    assert fail_future(failed, WorkerMarkedDead("x"))
    assert not fail_future(failed, WorkerMarkedDead("y"))  # failed once only
    with pytest.raises(WorkerMarkedDead, match="x"):
        failed.value()


def test_the_registry_holds_no_message_alive_and_stays_small():
    inflight = InFlight()
    kept = []
    for i in range(1000):
        fut = torch.futures.Future()
        inflight.track("w", fut)
        if i % 100 == 0:
            kept.append(fut)  # unanswered and still held by its caller
        else:
            fut.set_result(i)
    gc.collect()
    assert inflight.unanswered("w") == 10
    assert len(inflight._sent["w"]) < 200  # pruned as it grew
    assert inflight.fail_worker("w", "gone") == 10


def test_failing_soon_leaves_a_moment_for_the_connection_to_fail_them_first():
    inflight = InFlight()
    closed, stuck = torch.futures.Future(), torch.futures.Future()
    inflight.track("w", closed)
    inflight.track("w", stuck)
    inflight.fail_worker_soon("w", "gone", grace=0.2)
    closed.set_exception(RuntimeError("eof"))  # what TensorPipe does when the socket closes
    deadline = time.monotonic() + 10
    while not stuck.done() and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(WorkerMarkedDead, match="gone"):
        stuck.wait()
    with pytest.raises(RuntimeError, match="eof"):
        closed.wait()


def test_a_new_process_under_the_name_keeps_its_messages_when_the_old_one_is_failed():
    lives = Lives()
    inflight = InFlight(lives)
    old = torch.futures.Future()
    inflight.track("w", old)
    inflight.fail_worker_soon("w", "gone", grace=0.2)
    # A replacement joined under the name before the grace ran out (the runtime counts it).
    lives.bump("w")
    inflight.revive("w")
    new = torch.futures.Future()
    inflight.track("w", new)
    deadline = time.monotonic() + 5
    while not old.done() and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(WorkerMarkedDead, match="gone"):
        old.wait()
    time.sleep(0.1)
    assert not new.done()  # it went to the new process
    later = torch.futures.Future()
    inflight.track("w", later)
    assert not later.done() and inflight.unanswered("w") == 2
