"""max_pending_calls, as Ray's: a handle sends at most N unanswered calls; one more raises."""

import threading
import time

import pytest

import actorrt

pytestmark = pytest.mark.timeout(120)


@actorrt.actor(max_pending_calls=2)
class Slow:
    def __init__(self):
        self.ran = 0

    def slow(self, s):
        time.sleep(s)
        self.ran += 1
        return s

    def pair(self):
        return 1, 2

    def count(self):
        return self.ran


@actorrt.actor
class Caller:
    def call_twice(self, handle):
        return actorrt.get([handle.slow.remote(0.5), handle.slow.remote(0.5)], timeout=30)


def _until(predicate, what, timeout=10):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_one_call_more_than_the_limit_raises_and_is_not_sent(cluster):
    slow = Slow.remote()
    first, second = slow.slow.remote(0.5), slow.slow.remote(0.5)
    with pytest.raises(actorrt.PendingCallsLimitExceeded, match=r"Slow\.slow\.remote\(\): 2 calls"):
        slow.slow.remote(0.5)
    assert isinstance(actorrt.PendingCallsLimitExceeded("x"), actorrt.ActorRtError)
    assert actorrt.get([first, second], timeout=30) == [0.5, 0.5]
    _until(lambda: slow._pending.count == 0, "answered calls still count")
    assert actorrt.get(slow.count.remote(), timeout=30) == 2  # the refused call never ran
    ones = [slow.pair.options(num_returns=2).remote() for _ in range(2)]  # a call each
    assert actorrt.get([r for refs in ones for r in refs], timeout=30) == [1, 2, 1, 2]


def test_each_copy_of_a_handle_counts_its_own_calls(cluster):
    slow = Slow.options(name="pending-calls-test").remote()
    mine = [slow.slow.remote(1.0), slow.slow.remote(1.0)]
    assert actorrt.get(Caller.remote().call_twice.remote(slow), timeout=30) == [0.5, 0.5]
    found = actorrt.get_actor("pending-calls-test")  # the limit comes with the record
    assert found.max_pending_calls == 2
    extra = [found.slow.remote(0.1), found.slow.remote(0.1)]
    with pytest.raises(actorrt.PendingCallsLimitExceeded):
        found.slow.remote(0.1)
    actorrt.get(mine + extra, timeout=30)
    actorrt.kill(slow)


def test_a_call_that_cannot_be_sent_does_not_count(cluster):
    slow = Slow.remote()
    for _ in range(3):
        with pytest.raises(TypeError, match="cannot be sent"):
            slow.slow.remote(threading.Lock())
    assert slow._pending.count == 0
    assert actorrt.get([slow.slow.remote(0), slow.slow.remote(0)], timeout=30) == [0, 0]


def test_without_a_limit_a_handle_counts_nothing(cluster):
    plain = Slow.options(max_pending_calls=-1).remote()
    assert plain._pending is None
    refs = [plain.slow.remote(0) for _ in range(20)]
    assert actorrt.get(refs, timeout=30) == [0] * 20
