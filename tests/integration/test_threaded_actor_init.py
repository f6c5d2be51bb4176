"""A threaded actor's calls wait for its ``__init__``, on the shared local cluster.

With ``max_concurrency`` above one, a call may reach a second thread of the actor while
``__init__`` still runs on the first; it must run against the constructed instance, as
Ray's calls do (found with the DQN's learner, whose constructor allocates its replay).
"""

import threading

import pytest

import actorrt

pytestmark = pytest.mark.timeout(120)


@actorrt.actor(max_concurrency=4)
class SlowInit:
    def __init__(self, gate_s):
        threading.Event().wait(gate_s)  # a constructor that takes a while
        self.ready = True

    def is_ready(self):
        return self.ready


@actorrt.actor(max_concurrency=4)
class FailingInit:
    def __init__(self, gate_s):
        threading.Event().wait(gate_s)
        raise ValueError("no actor today")

    def is_ready(self):
        return True


def test_calls_made_during_init_run_after_it(cluster):
    actor = SlowInit.remote(1.0)
    # Sent at once, while __init__ sleeps: each would find no instance on another thread.
    assert actorrt.get([actor.is_ready.remote() for _ in range(4)], timeout=60) == [True] * 4


def test_calls_made_during_a_failing_init_fail_with_its_error(cluster):
    actor = FailingInit.remote(1.0)
    with pytest.raises(actorrt.ActorDiedError, match="no actor today"):
        actorrt.get(actor.is_ready.remote(), timeout=60)
