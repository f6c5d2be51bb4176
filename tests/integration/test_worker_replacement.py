"""Processes that come back (issue 12): a local worker that dies is forked again from the
zygote and joins the running RPC group under its name; 128-process worlds (issue 15).

Each test runs its driver as a script of its own (see scripts.run_script); every pid it
reports must be gone shortly after the script ends.
"""

import pytest
from scripts import run_script

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

HEADER = """
import os, signal, time
import actorrt

@actorrt.actor
class Counter:
    def __init__(self):
        self.n = 0

    def pid(self):
        return os.getpid()

    def add(self, k):
        self.n += k
        return self.n


def wait_for(what, bound):
    deadline = time.monotonic() + bound
    while not what():
        if time.monotonic() > deadline:
            raise TimeoutError("still waiting after %s s" % bound)
        time.sleep(0.1)
"""


def test_a_killed_local_worker_is_replaced_and_takes_actors_again(tmp_path):
    """One worker, killed: a new process joins under its name, the old actor's handle
    fails with ActorDiedError, and a new actor runs on the new process and answers calls
    from another actor too (the group knows it everywhere)."""
    (rep,) = run_script(
        tmp_path,
        HEADER,
        """
        rt = actorrt.start(num_workers=2, timeout=90, shutdown_timeout=10, max_worker_restarts=1)
        a, b = Counter.remote(), Counter.remote()
        if a.worker == b.worker:
            raise SystemExit("both actors on one worker: " + a.worker)
        pids = list(rt.local_worker_pids)
        victim = actorrt.get(a.pid.remote(), timeout=30)
        os.kill(victim, signal.SIGKILL)
        try:
            actorrt.get(a.add.remote(1), timeout=30)
            before = "none"
        except actorrt.ActorDiedError:
            before = "ActorDiedError"
        wait_for(lambda: a.worker not in rt.dead_workers, 120)  # replaced and admitted
        try:
            actorrt.get(a.add.remote(1), timeout=30)  # its handle predates the new process
            after = "none"
        except actorrt.ActorDiedError:
            after = "ActorDiedError"
        made = [Counter.remote()]
        while made[-1].worker != a.worker and len(made) < 10:  # the least loaded: the new one
            made.append(Counter.remote())
        c = made[-1]
        new_pid = actorrt.get(c.pid.remote(), timeout=30)

        @actorrt.actor
        class Caller:
            def call(self, h):
                return actorrt.get(h.add.remote(5), timeout=30)

        d = Caller.remote()
        from_actor = actorrt.get(d.call.remote(c), timeout=60)
        report(pids=pids + [new_pid], before=before, after=after, victim=victim,
               new_pid=new_pid, worker=a.worker, c_worker=c.worker, from_actor=from_actor,
               nodes=len(actorrt.nodes()))
        actorrt.shutdown()
        """,
        timeout=300,
    )
    assert rep["before"] == "ActorDiedError"
    assert rep["after"] == "ActorDiedError"
    assert rep["c_worker"] == rep["worker"]
    assert rep["new_pid"] != rep["victim"]
    assert rep["from_actor"] == 5
    assert rep["nodes"] == 3


def test_no_replacement_with_max_worker_restarts_zero(tmp_path):
    """max_worker_restarts=0: the dead worker stays dead (its name in dead_workers)."""
    (rep,) = run_script(
        tmp_path,
        HEADER,
        """
        rt = actorrt.start(num_workers=1, timeout=90, max_worker_restarts=0)
        pids = list(rt.local_worker_pids)
        a = Counter.remote()
        os.kill(actorrt.get(a.pid.remote(), timeout=30), signal.SIGKILL)
        wait_for(lambda: a.worker in rt.dead_workers, 60)
        time.sleep(3)  # a replacement would have joined by now
        report(pids=pids, dead=sorted(rt.dead_workers))
        actorrt.shutdown()
        """,
    )
    assert rep["dead"] == ["worker1"]


def test_a_local_cluster_of_128_workers_forms_answers_and_ends(tmp_path):
    """128 workers on one host (issue 15): was "_all_gather ... ECONNREFUSED" from 64 on.
    Every worker answers one call, shutdown ends them all, and none is left after."""
    (rep,) = run_script(
        tmp_path,
        HEADER,
        """
        t0 = time.monotonic()
        rt = actorrt.start(num_workers=128, timeout=400, num_worker_threads=4,
                           heartbeat_timeout=120, shutdown_timeout=60)
        up = time.monotonic() - t0
        pids = list(rt.local_worker_pids)
        actors = [Counter.remote() for _ in range(128)]
        answers = actorrt.get([c.pid.remote() for c in actors], timeout=300)
        report(pids=pids, up=up, workers=len({c.worker for c in actors}),
               answered=len(set(answers)), nodes=len(actorrt.nodes()))
        actorrt.shutdown()
        """,
        timeout=580,
        grace=30,
    )
    assert rep["nodes"] == 129
    assert rep["workers"] == 128
    assert rep["answered"] == 128
