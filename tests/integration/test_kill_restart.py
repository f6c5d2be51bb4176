"""actorrt.kill(handle, no_restart=False), as Ray's: an actor with restarts left is
restarted (its calls in flight fail; its handles everywhere reach the new instance)."""

import asyncio
import threading
import time

import pytest

import actorrt

pytestmark = pytest.mark.timeout(120)


@actorrt.actor(max_restarts=1, max_concurrency=2)
class Counter:
    def __init__(self):
        self.n = 0
        self.gate = threading.Event()
        self.log = []
        self.holding = False

    def add(self, tag=None):
        self.n += 1
        self.log.append(tag)
        return self.n

    def hold(self):
        self.holding = True
        self.gate.wait(5)  # the old instance's: nobody opens it, so it runs 5 s
        return "held"

    def is_holding(self):
        return self.holding

    def state(self):
        ctx = actorrt.get_runtime_context()
        return self.n, self.log, ctx.was_current_actor_reconstructed


@actorrt.actor(max_restarts=1)
class Serial:  # one thread: a call queued behind a running one
    def __init__(self):
        self.ran = []

    def hold(self, path):
        open(path, "w").close()  # it has begun
        threading.Event().wait(2)  # runs on after the restart, its answer dropped
        return "held"

    def note(self, x):
        self.ran.append(x)
        return x

    def notes(self):
        return self.ran


@actorrt.actor(max_restarts=1, max_task_retries=2)
class Retrying:  # one thread; its calls are sent again after a restart, as in Ray
    def __init__(self):
        self.ran = []

    def hold(self, path):
        open(path, "w").close()
        threading.Event().wait(1)  # the old instance's runs on, its answer dropped
        self.ran.append("hold")
        return self.ran

    def note(self, x):
        self.ran.append(x)
        return list(self.ran)

    @actorrt.method(max_task_retries=0)
    def once(self, x):
        self.ran.append(x)
        return x


@actorrt.actor(max_restarts=1, concurrency_groups={"io": 1})
class InGroup:  # a call queued on a group's thread while the constructor runs on another
    def __init__(self):
        self.ran = []

    @actorrt.method(concurrency_group="io")
    def hold(self, path):
        open(path, "w").close()
        threading.Event().wait(1)
        return "held"

    @actorrt.method(concurrency_group="io")
    def note(self, x):
        self.ran.append(x)
        return x

    def notes(self):
        return self.ran


@actorrt.actor
class Caller:
    def __init__(self, counter):
        self.counter = counter

    def add(self, tag):
        return actorrt.get(self.counter.add.remote(tag), timeout=30)


@actorrt.actor(max_restarts=-1)
class AsyncCounter:
    def __init__(self):
        self.n = 0

    async def add(self):
        self.n += 1
        return self.n

    async def sleep(self):
        await asyncio.sleep(60)
        return "slept"


def _restarts(handle):
    (info,) = [a for a in actorrt.actors() if a.actor_id == handle.actor_id]
    return info.restarts, info.state


def test_a_restart_gives_a_new_instance_to_every_handle(cluster):
    c = Counter.remote()
    caller = Caller.remote(c)  # a handle in another process, with calls of its own
    assert actorrt.get([c.add.remote("driver"), caller.add.remote("caller")], timeout=30)
    running = c.hold.remote()
    deadline = time.monotonic() + 30
    while not actorrt.get(c.is_holding.remote(), timeout=30):  # on the actor's other thread
        assert time.monotonic() < deadline
        time.sleep(0.02)
    actorrt.kill(c, no_restart=False)
    with pytest.raises(actorrt.ActorDiedError, match="restarted by actorrt.kill"):
        actorrt.get(running, timeout=30)  # in flight: failed, as in Ray
    # the new instance: its state is new, and both handles' later calls reach it in order
    assert actorrt.get(caller.add.remote("caller"), timeout=30) == 1
    assert actorrt.get(c.add.remote("driver"), timeout=30) == 2
    assert actorrt.get(c.state.remote(), timeout=30) == (2, ["caller", "driver"], True)
    assert _restarts(c) == (1, "ALIVE")


@pytest.mark.parametrize("cls", ["Serial", "InGroup"])
def test_a_queued_call_fails_and_never_runs_on_the_new_instance(cluster, tmp_path, cls):
    # Serial: queued behind hold() on the actor's one thread; InGroup: on its group's one
    # thread, while the new instance is made on the actor's own
    s = (Serial if cls == "Serial" else InGroup).remote()
    begun = tmp_path / "begun"
    running = s.hold.remote(str(begun))
    queued = s.note.remote("queued")
    deadline = time.monotonic() + 30
    while not begun.exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    actorrt.kill(s, no_restart=False)
    for ref in (running, queued):
        with pytest.raises(actorrt.ActorDiedError):
            actorrt.get(ref, timeout=30)
    assert actorrt.get(s.note.remote("after"), timeout=30) == "after"
    assert actorrt.get(s.notes.remote(), timeout=30) == ["after"]


def test_calls_with_retries_are_sent_again_in_order_to_the_restarted_instance(cluster, tmp_path):
    r = Retrying.remote()
    begun = tmp_path / "begun"
    running = r.hold.remote(str(begun))
    queued = [r.note.remote(i) for i in range(3)]
    never = r.once.remote("once")  # its own max_task_retries=0: it fails
    deadline = time.monotonic() + 30
    while not begun.exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    actorrt.kill(r, no_restart=False)
    # as in Ray: the running call and the queued ones run again on the new instance,
    # in the order they were made
    assert actorrt.get(running, timeout=30) == ["hold"]
    assert actorrt.get(queued, timeout=30) == [["hold", 0], ["hold", 0, 1], ["hold", 0, 1, 2]]
    with pytest.raises(actorrt.ActorDiedError, match="restarted by actorrt.kill"):
        actorrt.get(never, timeout=30)
    assert actorrt.get(r.note.remote("after"), timeout=30) == ["hold", 0, 1, 2, "after"]
    assert _restarts(r) == (1, "ALIVE")


def test_without_restarts_left_the_actor_is_killed_for_good(cluster):
    c = Counter.remote()
    actorrt.kill(c, no_restart=False)  # its one restart
    assert actorrt.get(c.add.remote(), timeout=30) == 1
    actorrt.kill(c, no_restart=False)  # none left: killed
    with pytest.raises(actorrt.ActorDiedError, match="killed by actorrt.kill"):
        actorrt.get(c.add.remote(), timeout=30)
    plain = Caller.remote(c)  # no max_restarts at all
    actorrt.kill(plain, no_restart=False)
    with pytest.raises(actorrt.ActorDiedError):
        actorrt.get(plain.add.remote("x"), timeout=30)


def test_an_async_actor_restarts_and_its_awaiting_calls_fail(cluster):
    a = AsyncCounter.remote()
    assert actorrt.get(a.add.remote(), timeout=30) == 1
    sleeping = a.sleep.remote()
    for _ in range(3):  # max_restarts=-1: as often as asked
        actorrt.kill(a, no_restart=False)
        assert actorrt.get(a.add.remote(), timeout=30) == 1
    with pytest.raises(actorrt.ActorDiedError):
        actorrt.get(sleeping, timeout=30)
    assert _restarts(a) == (3, "ALIVE")


@actorrt.actor(max_restarts=1)
class Ticker:
    def ticks(self):
        i = 0
        while True:
            yield i
            i += 1
            threading.Event().wait(0.01)

    def ping(self):
        return "pong"


def test_a_restart_ends_a_running_stream_with_actor_died(cluster):
    t = Ticker.remote()
    gen = t.ticks.remote()
    assert actorrt.get(next(gen), timeout=30) == 0
    actorrt.kill(t, no_restart=False)
    refs = list(gen)  # ends: the values before the restart, then why it ended
    values = actorrt.get(refs[:-1], timeout=30)
    assert values == list(range(1, len(refs)))  # values only: no cancel among them
    with pytest.raises(actorrt.ActorDiedError, match="restarted"):
        actorrt.get(refs[-1], timeout=30)
    assert actorrt.get(t.ping.remote(), timeout=30) == "pong"


def test_a_killed_actors_call_numbers_go_and_its_old_handle_still_says_why(cluster):
    """Was: the caller kept one counter per actor it ever called, killed ones included."""
    from actorrt.runtime.runtime import current

    seqs = current()._seqs
    c = Counter.options(max_restarts=0).remote()
    assert actorrt.get([c.add.remote() for _ in range(3)], timeout=30) == [1, 2, 3]
    assert any(key[0] == c.actor_id for key in seqs)
    actorrt.kill(c)
    assert not any(key[0] == c.actor_id for key in seqs)
    with pytest.raises(actorrt.ActorDiedError, match="killed by actorrt.kill"):
        actorrt.get(c.add.remote(), timeout=30)
