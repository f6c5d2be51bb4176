"""Concurrency groups on real processes, as Ray's: a group's methods run beside the rest."""

import threading

import pytest

import actorrt

pytestmark = pytest.mark.timeout(120)


@actorrt.actor(concurrency_groups={"io": 1})
class Learner:
    def __init__(self):
        self.gate = threading.Event()
        self.added = 0

    def train(self):
        self.gate.wait(30)  # holds the actor's one thread
        return self.added

    @actorrt.method(concurrency_group="io")
    def add(self, n):
        self.added += n
        return threading.current_thread().name

    @actorrt.method(concurrency_group="io")
    def open(self):
        self.gate.set()


def test_a_groups_calls_run_while_the_actors_own_thread_is_busy(cluster):
    learner = Learner.remote()
    training = learner.train.remote()
    names = actorrt.get([learner.add.remote(2), learner.add.remote(3)], timeout=30)
    assert all(name.startswith("Learner-") and "-io_" in name for name in names), names
    assert not training.done()
    actorrt.get(learner.open.remote(), timeout=30)
    assert actorrt.get(training, timeout=30) == 5


def test_bad_groups_fail_at_decoration_or_options():
    class Marked:
        @actorrt.method(concurrency_group="io")
        def add(self):
            return 1

    with pytest.raises(ValueError, match=r"Marked.add runs in concurrency group 'io'.*has none"):
        actorrt.actor(Marked)
    grouped = actorrt.actor(concurrency_groups={"io": 2})(Marked)
    with pytest.raises(ValueError, match=r"concurrency group 'io'.*its groups are \['cpu'\]"):
        grouped.options(concurrency_groups={"cpu": 1})
    with pytest.raises(ValueError, match="concurrency group 'io' has 0 threads"):
        actorrt.actor(concurrency_groups={"io": 0})
    with pytest.raises(ValueError, match="must be a Python identifier"):
        actorrt.actor(concurrency_groups={"bad name": 1})
    with pytest.raises(TypeError, match="must be a dict of names to threads"):  # as Ray's
        actorrt.actor(concurrency_groups=["io"])
    with pytest.raises(TypeError, match="concurrency_group=3 must be the name"):
        actorrt.method(concurrency_group=3)
    assert grouped.default_options.concurrency_groups == (("io", 2),)


@actorrt.actor(concurrency_groups={"io": 1, "spare": 2})
class Worker:
    def __init__(self):
        self.gate = threading.Event()

    def hold(self):
        self.gate.wait(30)  # holds the actor's one thread
        return "held"

    def where(self):
        return threading.current_thread().name

    def pair(self):
        return threading.current_thread().name, "second"

    def ticks(self, n):
        for i in range(n):
            yield i, threading.current_thread().name

    def release(self):
        self.gate.set()


@actorrt.actor(concurrency_groups={"io": 1})
class AsyncWorker:
    def __init__(self):
        self.gate = None

    async def hold(self):
        import asyncio

        self.gate = asyncio.Event()
        await self.gate.wait()
        return "held"

    async def where(self):
        return "ran"

    async def release(self):
        self.gate.set()


def test_a_call_can_choose_its_group(cluster):
    w = Worker.remote()
    holding = w.hold.remote()
    name = actorrt.get(w.where.options(concurrency_group="spare").remote(), timeout=30)
    assert "-spare_" in name, name  # ran on the group's threads: the actor's own is busy
    first, second = w.pair.options(num_returns=2, concurrency_group="io").remote()
    assert "-io_" in actorrt.get(first, timeout=30) and actorrt.get(second) == "second"
    values = list(w.ticks.options(concurrency_group="io").remote(2))
    assert [v[0] for v in actorrt.get(values, timeout=30)] == [0, 1]
    assert all("-io_" in v[1] for v in actorrt.get(values, timeout=30))
    assert not holding.done()
    actorrt.get(w.release.options(concurrency_group="io").remote(), timeout=30)
    assert actorrt.get(holding, timeout=30) == "held"
    assert "-io_" not in actorrt.get(w.where.remote(), timeout=30)  # its own group again


def test_an_async_actors_call_can_choose_its_group(cluster):
    w = AsyncWorker.options(max_concurrency=1).remote()
    holding = w.hold.remote()  # takes the actor's one slot
    assert actorrt.get(w.where.options(concurrency_group="io").remote(), timeout=30) == "ran"
    actorrt.get(w.release.options(concurrency_group="io").remote(), timeout=30)
    assert actorrt.get(holding, timeout=30) == "held"


def test_a_group_the_actor_lacks_fails_at_the_call(cluster):
    w = Worker.remote()
    with pytest.raises(ValueError, match=r"no concurrency group 'gpu'; its groups: io, spare"):
        w.where.options(concurrency_group="gpu")
    plain = Learner.options(concurrency_groups={"io": 1}).remote()
    with pytest.raises(ValueError, match="no concurrency group 'cpu'"):
        plain.train.options(concurrency_group="cpu")
    with pytest.raises(TypeError, match="takes num_returns=, concurrency_group="):
        w.where.options()
