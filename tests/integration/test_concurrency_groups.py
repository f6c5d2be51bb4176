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
    with pytest.raises(ValueError, match="must be a dict of names to threads"):
        actorrt.actor(concurrency_groups=["io"])
    with pytest.raises(TypeError, match="concurrency_group=3 must be the name"):
        actorrt.method(concurrency_group=3)
    assert grouped.default_options.concurrency_groups == (("io", 2),)
