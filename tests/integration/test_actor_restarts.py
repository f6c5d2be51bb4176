"""Actor restarts (``max_restarts``, Ray's contract): an actor whose process died is
recreated on a live process, and its handles keep working (issue 12).

Each test runs its driver as a script of its own (see scripts.run_script): it kills
worker processes, and every worker pid it reports must be gone after it ends.
"""

import pytest
from scripts import run_script

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

HEADER = """
import os, signal, time
import actorrt

@actorrt.actor(max_restarts=1)
class Counter:
    def __init__(self, start):
        self.value = start
        # What Ray's runtime context says: a restarted instance would load a checkpoint.
        self.made_again = actorrt.get_runtime_context().was_current_actor_reconstructed

    def made_again_at_init_and_now(self):
        return self.made_again, actorrt.get_runtime_context().was_current_actor_reconstructed

    def add(self, k):
        self.value += k
        return self.value

    def pid(self):
        return os.getpid()

    def sleep(self, s):
        time.sleep(s)
        return s


@actorrt.actor
class Caller:  # holds a Counter handle on a worker: that process must find the new one
    def __init__(self, counter):
        self.counter = counter

    def add(self, k):
        try:
            return actorrt.get(self.counter.add.remote(k), timeout=60)
        except actorrt.ActorDiedError as exc:
            return "ActorDiedError: " + str(exc)


def start():
    rt = actorrt.start(num_workers=3, timeout=90, shutdown_timeout=5)
    return rt, list(rt.local_worker_pids)


def died(ref):
    try:
        actorrt.get(ref, timeout=60)
    except actorrt.ActorDiedError as exc:
        return str(exc)
    return None
"""


def test_a_restarted_actor_runs_its_constructor_again_and_its_handles_keep_working(tmp_path):
    (rep,) = run_script(
        tmp_path,
        HEADER,
        """
        rt, pids = start()
        c = Counter.remote(100)
        first_pid = actorrt.get(c.pid.remote(), timeout=30)
        first_made_again = actorrt.get(c.made_again_at_init_and_now.remote(), timeout=30)
        assert actorrt.get(c.add.remote(5), timeout=30) == 105
        caller = Caller.remote(c)  # another process's handle
        while caller.worker == c.worker:  # the caller must not die with the counter
            caller = Caller.remote(c)
        assert actorrt.get(caller.add.remote(1), timeout=30) == 106
        pending = c.sleep.remote(60)
        time.sleep(0.2)
        os.kill(first_pid, signal.SIGKILL)
        in_flight = died(pending)  # at most once: the call in flight is not retried
        after = actorrt.get(c.add.remote(1), timeout=60)  # the new instance: 100 + 1
        second_pid = actorrt.get(c.pid.remote(), timeout=30)
        second_made_again = actorrt.get(c.made_again_at_init_and_now.remote(), timeout=30)
        from_caller = actorrt.get(caller.add.remote(10), timeout=60)
        (info,) = [a for a in actorrt.actors() if a.actor_id == c.actor_id]
        # Its one restart is used: the next death is final, and the error says so.
        os.kill(second_pid, signal.SIGKILL)
        final = died(c.add.remote(1))
        again = died(c.add.remote(1))
        report(pids=pids, in_flight=in_flight, after=after, first_pid=first_pid,
               second_pid=second_pid, from_caller=from_caller, state=info.state,
               restarts=info.restarts, final=final, again=again,
               first_made_again=first_made_again, second_made_again=second_made_again)
        actorrt.shutdown()
        """,
    )
    assert rep["in_flight"] is not None
    assert rep["after"] == 101
    assert rep["first_made_again"] == [False, False]  # the first instance
    assert rep["second_made_again"] == [True, True]  # the restarted one, __init__ included
    assert rep["second_pid"] != rep["first_pid"] and rep["second_pid"] in rep["pids"]
    assert rep["from_caller"] == 111, rep["from_caller"]
    assert rep["state"] == "ALIVE" and rep["restarts"] == 1
    assert rep["final"] is not None
    assert "no restarts left (max_restarts=1)" in rep["again"], rep["again"]


def test_a_named_actor_keeps_its_name_and_a_killed_one_is_not_restarted(tmp_path):
    (rep,) = run_script(
        tmp_path,
        HEADER,
        """
        rt, pids = start()
        named = Counter.options(name="counter", max_restarts=-1).remote(0)
        victim = actorrt.get(named.pid.remote(), timeout=30)
        os.kill(victim, signal.SIGKILL)
        died(named.sleep.remote(0)) or time.sleep(0.5)
        by_name = actorrt.get_actor("counter")
        value = actorrt.get(by_name.add.remote(7), timeout=60)
        moved = actorrt.get(by_name.pid.remote(), timeout=30) != victim
        killed = Counter.remote(0)
        killed_pid = actorrt.get(killed.pid.remote(), timeout=30)
        actorrt.kill(killed)
        after_kill = died(killed.add.remote(1))
        states = {a.actor_id: a.state for a in actorrt.actors()}
        # A recreated actor is killed where it lives now (its handle still names the
        # first, dead process): nothing of it is left running.
        k = Counter.remote(0)  # one worker died already: two are left
        k_pid = actorrt.get(k.pid.remote(), timeout=30)
        import pickle
        k_old = pickle.loads(pickle.dumps(k))  # a copy that names the first process
        os.kill(k_pid, signal.SIGKILL)
        died(k.sleep.remote(0))
        k_new_pid = actorrt.get(k.pid.remote(), timeout=60)
        stale = Caller.remote(k)  # a copy of the handle made after the restart
        actorrt.kill(k_old)
        time.sleep(0.5)
        k_calls = [a for a in actorrt.actors() if a.actor_id == k.actor_id and a.state != "DEAD"]
        k_after = actorrt.get(stale.add.remote(1), timeout=60)
        report(pids=pids, value=value, moved=moved, after_kill=after_kill,
               killed_state=states.get(killed.actor_id, "gone"),
               k_moved=k_new_pid != k_pid, k_left=len(k_calls), k_after=k_after)
        actorrt.shutdown()
        """,
    )
    assert rep["value"] == 7 and rep["moved"]
    assert rep["after_kill"] is not None and rep["killed_state"] == "DEAD"
    assert rep["k_moved"] and rep["k_left"] == 0, rep
    assert rep["k_after"].startswith("ActorDiedError") and "killed" in rep["k_after"], rep


@pytest.mark.parametrize("replaced", [False, True])
def test_a_restart_whose_constructor_failed_says_so_to_an_old_handle(tmp_path, replaced):
    """The restarted instance's constructor raised: a call through a handle that still
    names the dead process says so, and actors() keeps its row, DEAD with that cause; a
    killed actor's row says it was killed. Was: "its process died (it has no
    max_restarts)" for an actor with max_restarts=1 (rank 0 had forgotten its recipe and
    why), or, once a new process had replaced the dead one, "its process died and was
    replaced by a new one"; and the row of an actor that ended otherwise than with its
    process was dropped from actors()."""
    (rep,) = run_script(
        tmp_path,
        """
import os, signal, time
import actorrt

@actorrt.actor(max_restarts=1)
class Once:
    def __init__(self, flag):
        if os.path.exists(flag):
            raise RuntimeError("made a second time")
        open(flag, "w").close()

    def pid(self):
        return os.getpid()
""",
        """
        rt = actorrt.start(num_workers=2, timeout=90, shutdown_timeout=5,
                           max_worker_restarts=REPLACEMENTS)
        pids = list(rt.local_worker_pids)
        a = Once.remote(os.path.abspath("flag"))
        k = Once.options(max_restarts=0).remote(os.path.abspath("flag-k"))
        pid = actorrt.get(a.pid.remote(), timeout=30)
        actorrt.kill(k)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while (any(x.actor_id == a.actor_id and x.state != "DEAD" for x in actorrt.actors())
               and time.monotonic() < deadline):  # restarted, then ended by its __init__
            time.sleep(0.1)
        if REPLACEMENTS:
            deadline = time.monotonic() + 60
            while rt.dead_workers and time.monotonic() < deadline:
                time.sleep(0.1)
        try:
            actorrt.get(a.pid.remote(), timeout=30)
            error = "none"
        except actorrt.ActorDiedError as exc:
            error = str(exc)
        rows = {x.actor_id: (x.state, x.death_cause) for x in actorrt.actors()}
        report(pids=pids + list(rt.local_worker_pids), error=error, a=rows.get(a.actor_id),
               k=rows.get(k.actor_id), dead=sorted(rt.dead_workers))
        actorrt.shutdown()
        """.replace("REPLACEMENTS", "1" if replaced else "0"),
    )
    assert "failed in __init__: RuntimeError: made a second time" in rep["error"], rep
    assert rep["a"][0] == "DEAD", rep
    assert "failed in __init__: RuntimeError: made a second time" in rep["a"][1], rep
    assert "Traceback" not in rep["a"][1], rep  # the first paragraph only
    assert rep["k"][0] == "DEAD" and rep["k"][1].endswith("was killed by actorrt.kill()"), rep
    if replaced:  # the call went through the new process's name
        assert rep["dead"] == [], rep
