"""An actor method's ``retry_exceptions``, as Ray's: a call that raises is sent again to
the actor, spending the call's ``max_task_retries``, and raises once they are used up."""

import time

import pytest

import actorrt

pytestmark = pytest.mark.timeout(120)


class Flaky(ConnectionError):
    pass


class Other(Exception):
    pass


@actorrt.actor(max_restarts=1, max_task_retries=3)
class Service:
    def __init__(self):
        self.tries = {}

    def _raise_until(self, key, times, kind):
        self.tries[key] = self.tries.get(key, 0) + 1
        if self.tries[key] <= times:
            raise kind(f"{key}: try {self.tries[key]}")
        return self.tries[key]

    @actorrt.method(retry_exceptions=[ConnectionError])  # Flaky is one: a subclass
    def flaky(self, key, times, other=False):
        return self._raise_until(key, times, Other if other else Flaky)

    @actorrt.method(retry_exceptions=True, max_task_retries=1)
    def once_more(self, key, times):
        return self._raise_until(key, times, Other)

    def plain(self, key, times):
        return self._raise_until(key, times, Flaky)

    @actorrt.method(retry_exceptions=True, max_task_retries=-1)
    def forever(self, key):
        time.sleep(0.02)
        return self._raise_until(key, 10**9, Other)

    def tries_of(self, key):
        return self.tries.get(key, 0)


def raised(ref):
    """What the call raised at the actor, and its message's first line."""
    with pytest.raises(actorrt.ActorError) as info:
        actorrt.get(ref, timeout=60)
    cause = info.value.cause
    return type(cause).__name__, str(cause)


@actorrt.actor
class Caller:
    def __init__(self, service):
        self.service = service

    def call(self, key, times):
        return actorrt.get(self.service.flaky.remote(key, times), timeout=60)


def test_a_call_that_raises_is_sent_again_until_it_returns(cluster):
    s = Service.remote()
    assert actorrt.get(s.flaky.remote("a", 2), timeout=60) == 3  # two raised, the third ran
    assert actorrt.get(s.once_more.remote("b", 1), timeout=60) == 2


def test_retries_used_up_raise_the_last_exception(cluster):
    s = Service.remote()
    assert raised(s.flaky.remote("c", 10)) == ("Flaky", "c: try 4")  # 1 + the actor's 3
    assert raised(s.once_more.remote("d", 10)) == ("Other", "d: try 2")  # 1 + the method's 1
    assert actorrt.get([s.tries_of.remote("c"), s.tries_of.remote("d")], timeout=30) == [4, 2]


def test_only_the_listed_exceptions_and_the_chosen_calls_are_retried(cluster):
    s = Service.remote()
    # not a ConnectionError, a method without, a call that says no, a call without retries
    assert raised(s.flaky.remote("e", 1, other=True)) == ("Other", "e: try 1")
    assert raised(s.plain.remote("f", 1)) == ("Flaky", "f: try 1")
    assert actorrt.get(s.plain.options(retry_exceptions=True).remote("g", 2), timeout=60) == 3
    assert raised(s.flaky.options(retry_exceptions=False).remote("h", 1)) == ("Flaky", "h: try 1")
    assert raised(s.flaky.options(max_task_retries=0).remote("i", 1)) == ("Flaky", "i: try 1")
    assert actorrt.get([s.tries_of.remote(k) for k in "efghi"], timeout=30) == [1, 1, 3, 1, 1]


def test_a_handle_in_another_process_retries_by_the_class_names(cluster):
    s = Service.remote()
    c = Caller.remote(s)
    assert actorrt.get(c.call.remote("j", 3), timeout=60) == 4


def test_a_cancel_stops_a_call_that_raises_for_ever(cluster):
    s = Service.remote()
    ref = s.forever.remote("k")
    deadline = time.monotonic() + 30
    while actorrt.get(s.tries_of.remote("k"), timeout=30) < 5:
        assert time.monotonic() < deadline, "the call was not sent again"
        time.sleep(0.05)
    actorrt.cancel(ref)
    # A plain actor's running attempt runs to its end (its exception is the call's); an
    # attempt not yet running, or one about to be sent, is cancelled: either way, no more.
    with pytest.raises((actorrt.TaskCancelledError, actorrt.ActorError)) as info:
        actorrt.get(ref, timeout=30)
    if isinstance(info.value, actorrt.ActorError):
        assert type(info.value.cause).__name__ == "Other"
    settled = actorrt.get(s.tries_of.remote("k"), timeout=30)
    time.sleep(0.5)
    assert actorrt.get(s.tries_of.remote("k"), timeout=30) == settled  # no longer sent
