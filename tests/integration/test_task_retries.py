"""Call retries (``max_task_retries``, Ray's contract): a call in flight when its actor's
process died is sent again to the recreated actor, in the order the calls were made, and
fails with ``ActorDiedError`` saying what was used up once retries or restarts are
(issue 12).

Each test runs its driver as a script of its own (see scripts.run_script): it kills
worker processes by pid, and every worker pid it reports must be gone after it ends.
"""

import pytest
from scripts import run_script

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

HEADER = """
import os, signal, time
import actorrt

@actorrt.actor(max_restarts=1)
class Log:
    def __init__(self):
        self.seen = []
        self.started = 0

    def pid(self):
        return os.getpid()

    def block(self, path, s):
        # Runs until `path` exists (or `s` seconds); the instance that runs it to its end
        # says who it is.
        self.started += 1
        open(path + ".running", "a").close()
        deadline = time.monotonic() + s
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.02)
        return os.getpid()

    def record(self, i):
        self.seen.append(i)
        return i

    def block_then_read(self, path, s, box):
        self.block(path, s)
        return os.getpid(), int(actorrt.get(box["ref"], timeout=30).sum())

    def log(self):
        return self.seen

    def running(self):
        return self.started

    @actorrt.method(max_task_retries=0)  # as Ray's: this one must never run twice
    def once(self, path, s):
        return self.block(path, s)


@actorrt.actor
class Caller:  # a caller in another process than the driver
    def __init__(self, target):
        self.target = target

    def block(self, path):
        return actorrt.get(self.target.block.remote(path, 60), timeout=90)


def start(num_workers):
    rt = actorrt.start(num_workers=num_workers, timeout=90, shutdown_timeout=5)
    return rt, list(rt.local_worker_pids)


def start_retried(num_workers):
    # A cluster, and a Log whose calls are retried twice, one call at a time.
    rt, pids = start(num_workers)
    return rt, pids, Log.options(max_task_retries=2, max_concurrency=1).remote()


def kill_once_running(victim, gate):
    # SIGKILLs the process `victim` once a call of `block` has begun there.
    deadline = time.monotonic() + 30
    while not os.path.exists(gate + ".running") and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(victim, signal.SIGKILL)


GATE = os.path.abspath("gate")  # the scripts run in the test's tmp_path; made on cue


def died(ref):
    try:
        return "value: %r" % (actorrt.get(ref, timeout=90),)
    except (actorrt.ActorDiedError, actorrt.ActorError) as exc:  # ActorError: a Caller raised
        return type(exc).__name__ + ": " + str(exc)


def on(worker, make, *args):
    # An actor made by make(*args) on `worker` (None: on another process than the
    # actor args[0]); the ones made on the way are killed.
    spare = []
    for _ in range(12):
        h = make(*args)
        if (h.worker == worker) if worker else (h.worker != args[0].worker):
            for s in spare:
                actorrt.kill(s)
            return h
        spare.append(h)
    raise AssertionError("no actor landed where it was wanted")


def wait_running(handle, old_pid, n=1):
    # Until the actor runs on a process other than old_pid with n calls of `block` begun.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if actorrt.get(handle.pid.remote(), timeout=30) != old_pid:
                if actorrt.get(handle.running.remote(), timeout=30) >= n:
                    return actorrt.get(handle.pid.remote(), timeout=30)
        except actorrt.ActorDiedError:
            pass
        time.sleep(0.05)
    raise AssertionError("the actor did not come back with its call running")
"""


def test_calls_in_flight_are_sent_again_in_order_to_the_restarted_actor(tmp_path):
    """With retries (set by .options), every call in flight or queued when the process
    is SIGKILLed runs on the recreated actor, in the order it was made, also one made by
    another process; without retries (the class's default) the call in flight fails."""
    (rep,) = run_script(
        tmp_path,
        HEADER,
        """
        rt, pids, r = start_retried(3)
        gate = GATE
        plain = on(r.worker, Log.remote)  # max_restarts=1, no retries: on the victim too
        caller = on(None, Caller.remote, r)  # elsewhere: it must outlive the victim
        victim = actorrt.get(r.pid.remote(), timeout=30)
        first = r.block.remote(gate, 60)  # running when the process dies
        queued = [r.record.remote(i) for i in range(10)]  # queued behind it (a burst)
        plain_call = plain.block.remote(gate, 60)
        from_caller = caller.block.remote(gate)
        kill_once_running(victim, gate)
        after = r.record.remote(100)  # made after the death: runs after the retried ones
        open(gate, "w").close()  # the retried `block` calls return at once
        first_value = died(first)
        values = [died(q) for q in queued] + [died(after)]
        report(pids=pids, victim=victim, first=first_value, values=values,
               log=actorrt.get(r.log.remote(), timeout=60),
               new_pid=actorrt.get(r.pid.remote(), timeout=30),
               plain_call=died(plain_call), from_caller=died(from_caller),
               plain_after=died(plain.record.remote(1)))
        actorrt.shutdown()
        """,
    )
    new_pid = rep["new_pid"]
    assert new_pid != rep["victim"] and new_pid in rep["pids"]
    assert rep["first"] == f"value: {new_pid}", rep["first"]  # ran again, on the new one
    assert rep["values"] == [f"value: {i}" for i in [*range(10), 100]], rep["values"]
    assert rep["log"] == [*range(10), 100], rep["log"]  # in the order they were made
    assert rep["from_caller"] == f"value: {new_pid}", rep["from_caller"]
    assert rep["plain_call"].startswith("ActorDiedError"), rep["plain_call"]
    assert rep["plain_after"] == "value: 1", rep["plain_after"]  # restarted all the same


def test_a_ref_in_a_retried_calls_arguments_is_held_until_its_last_attempt_answers(tmp_path):
    """A ref nested in the arguments travels borrowed (no lease): the call keeps it until
    answered, so the attempt sent again after the process died still reads it, though
    the driver dropped its own ref at once; then the object goes."""
    (rep,) = run_script(
        tmp_path,
        HEADER,
        """
        import torch
        rt, pids, r = start_retried(2)
        victim = actorrt.get(r.pid.remote(), timeout=30)
        ref = actorrt.put(torch.ones(2 << 20, dtype=torch.uint8))
        call = r.block_then_read.remote(GATE, 60, {"ref": ref})
        direct = ref._direct  # no lease was made for the call
        del ref
        kill_once_running(victim, GATE)
        open(GATE, "w").close()
        got = died(call)
        deadline = time.monotonic() + 20
        while rt.objects.stats()[0] and time.monotonic() < deadline:
            time.sleep(0.05)
        report(pids=pids, victim=victim, got=got, direct=direct,
               new_pid=actorrt.get(r.pid.remote(), timeout=30), left=rt.objects.stats()[0])
        actorrt.shutdown()
        """,
    )
    assert rep["direct"], rep
    assert rep["got"] == f"value: ({rep['new_pid']}, {2 << 20})", rep
    assert rep["new_pid"] != rep["victim"]
    assert rep["left"] == 0, rep  # freed once the call answered


def test_retries_or_restarts_used_up_fail_the_call_and_say_which(tmp_path):
    """Two deaths with the call in flight: one retry is used up (the actor itself comes
    back), or, with unlimited retries, the one restart is."""
    (rep,) = run_script(
        tmp_path,
        HEADER,
        """
        rt, pids = start(4)
        gate = GATE  # never made here: `block` runs until its process is killed
        x = Log.options(max_restarts=2, max_task_retries=1, max_concurrency=2).remote()
        y = on(x.worker, Log.options(max_restarts=1, max_task_retries=-1, max_concurrency=2).remote)
        x_pid = actorrt.get(x.pid.remote(), timeout=30)
        y_pid = actorrt.get(y.pid.remote(), timeout=30)
        x_call, y_call = x.block.remote(gate, 120), y.block.remote(gate, 120)
        wait_running(x, None)
        wait_running(y, None)
        os.kill(x_pid, signal.SIGKILL)  # y's process too
        x_pid2 = wait_running(x, x_pid)  # the retry runs on the second instance
        y_pid2 = wait_running(y, y_pid)
        # One at a time: x is recreated once y is gone for good, not onto y's process
        # while it dies.
        os.kill(y_pid2, signal.SIGKILL)
        y_value = died(y_call)
        if x_pid2 != y_pid2:
            os.kill(x_pid2, signal.SIGKILL)
        report(pids=pids, x=died(x_call), y=y_value,
               x_after=died(x.pid.remote()), y_after=died(y.pid.remote()))
        actorrt.shutdown()
        """,
    )
    x, y = rep["x"], rep["y"]
    assert x.startswith("ActorDiedError") and "max_task_retries=1" in x, x
    assert "retries are used up" in x and "recreated on" in x, x
    assert rep["x_after"].startswith("value: "), rep["x_after"]  # its second restart
    assert y.startswith("ActorDiedError") and "no restarts left (max_restarts=1)" in y, y
    assert rep["y_after"].startswith("ActorDiedError"), rep["y_after"]


def test_unlimited_retries_follow_the_actor_through_two_deaths(tmp_path):
    (rep,) = run_script(
        tmp_path,
        HEADER,
        """
        rt, pids = start(3)
        gate = GATE
        a = Log.options(max_restarts=-1, max_task_retries=-1, max_concurrency=2).remote()
        pid1 = actorrt.get(a.pid.remote(), timeout=30)
        call = a.block.remote(gate, 120)
        wait_running(a, None)
        os.kill(pid1, signal.SIGKILL)
        pid2 = wait_running(a, pid1)
        os.kill(pid2, signal.SIGKILL)
        pid3 = wait_running(a, pid2)
        open(gate, "w").close()
        report(pids=pids, pid1=pid1, pid2=pid2, pid3=pid3, value=died(call))
        actorrt.shutdown()
        """,
    )
    assert len({rep["pid1"], rep["pid2"], rep["pid3"]}) == 3
    assert rep["value"] == f"value: {rep['pid3']}", rep


def test_a_call_retried_onto_the_new_process_that_took_its_dead_ones_name_comes_back(tmp_path):
    """One worker, SIGKILLed mid-call: the actor comes back on the process that replaced
    it under the same name, and the call is sent there at once (it used to wait rank 0's
    30 s for the actor to leave "worker1", then fail falsely); so is the call after it."""
    (rep,) = run_script(
        tmp_path,
        HEADER,
        """
        rt, pids = start(1)
        gate = GATE
        a = Log.options(max_restarts=-1, max_task_retries=-1, max_concurrency=2).remote()
        pid1 = actorrt.get(a.pid.remote(), timeout=30)
        call = a.block.remote(gate, 60)
        later = a.record.remote(7)
        wait_running(a, None)
        os.kill(pid1, signal.SIGKILL)
        open(gate, "w").close()
        def within(ref):  # well below rank 0's 30 s wait for the actor to move
            try:
                return "value: %r" % (actorrt.get(ref, timeout=20),)
            except Exception as exc:
                return type(exc).__name__ + ": " + str(exc)
        value, after = within(call), within(later)
        pid2 = actorrt.get(a.pid.remote(), timeout=30)
        report(pids=pids + [pid2], pid1=pid1, pid2=pid2, worker=a.worker, value=value,
               after=after)
        actorrt.shutdown()
        """,
    )
    assert rep["pid1"] != rep["pid2"] and rep["worker"] == "worker1", rep
    assert rep["value"] == f"value: {rep['pid2']}", rep
    assert rep["after"] == "value: 7", rep


def test_a_methods_or_a_calls_own_max_task_retries_overrides_the_actors(tmp_path):
    """As Ray's @ray.method(max_task_retries=) and .options(max_task_retries=): on an
    actor with retries, a method marked 0 and a call made with 0 fail when the process
    dies with them in flight; the others run again on the recreated actor, in order."""
    (rep,) = run_script(
        tmp_path,
        HEADER,
        """
        rt, pids, r = start_retried(2)
        gate = GATE
        victim = actorrt.get(r.pid.remote(), timeout=30)
        first = r.block.remote(gate, 60)  # running when the process dies: retried
        marked = r.once.remote(gate, 60)  # queued: its method says 0
        chosen = r.record.options(max_task_retries=0).remote(1)  # queued: this call says 0
        kept = r.record.remote(2)  # queued: the actor's retries
        kill_once_running(victim, gate)
        open(gate, "w").close()
        report(pids=pids, victim=victim, first=died(first), marked=died(marked),
               chosen=died(chosen), kept=died(kept),
               log=actorrt.get(r.log.remote(), timeout=60),
               new_pid=actorrt.get(r.pid.remote(), timeout=30),
               again=died(r.once.remote(gate, 1)))  # the recreated actor runs it as ever
        actorrt.shutdown()
        """,
    )
    new_pid = rep["new_pid"]
    assert new_pid != rep["victim"] and new_pid in rep["pids"]
    assert rep["first"] == f"value: {new_pid}", rep["first"]
    for ref in ("marked", "chosen"):
        assert rep[ref].startswith("ActorDiedError"), rep[ref]
        assert "its retries are used up (max_task_retries=0)" in rep[ref], rep[ref]
    assert rep["kept"] == "value: 2", rep["kept"]
    assert rep["log"] == [2], rep["log"]
    assert rep["again"] == f"value: {new_pid}", rep["again"]
