"""Remote functions (``@actorrt.remote`` on a function, issue 26), as Ray's tasks.

The in-process tests use the shared 3-worker cluster; the ones that kill workers or
need a layout run their own cluster in a script (see scripts.run_script).
"""

import asyncio
import os
import sys
import time

import pytest
import torch
from scripts import run_script

import actorrt
from actorrt.errors import PlacementError
from actorrt.placement.resources import Resources
from actorrt.runtime.functions import Shape

pytestmark = pytest.mark.timeout(180)

MB = 1 << 20


@actorrt.remote
def square(x, plus=0):
    return x * x + plus


@actorrt.remote
def pid_of(_=None):
    return os.getpid()


@actorrt.remote
def boom(x):
    raise ValueError(f"bad input {x}")


@actorrt.remote(num_returns=2)
def halves(xs):
    return xs[: len(xs) // 2], xs[len(xs) // 2 :]


@actorrt.remote
def ones(n):
    return torch.ones(n, dtype=torch.uint8)


@actorrt.remote
def total(t):
    return int(t.sum())


@actorrt.remote
def fib(n):
    if n < 2:
        return n
    return sum(actorrt.get([fib.remote(n - 1), fib.remote(n - 2)], timeout=120))


@actorrt.remote
def first_ready(n):
    refs = [square.remote(i) for i in range(n)]
    ready, _ = actorrt.wait(refs, num_returns=n, timeout=120)
    return sorted(actorrt.get(ready, timeout=120))


@actorrt.remote
async def async_double(x):
    await asyncio.sleep(0)
    return 2 * x


@actorrt.remote(num_cpus=0.25)
def interval(s):
    start = time.monotonic()
    time.sleep(s)
    return os.getpid(), start, time.monotonic()


@actorrt.remote
def flaky(path, failures, kind):
    # Fails the first `failures` times it runs (counted in the file at `path`).
    with open(path, "a") as f:
        f.write("x")
    with open(path) as f:
        runs = len(f.read())
    if runs <= failures:
        raise {"value": ValueError, "key": KeyError}[kind](f"run {runs}")
    return runs


@actorrt.remote
def gpu_ids():
    return actorrt.get_gpu_ids()


@actorrt.remote
def ends_actor():
    actorrt.exit_actor()


@actorrt.remote
def exits():
    sys.exit(3)


@actorrt.remote(retry_exceptions=True, max_retries=2)
def exits_counted(tally):
    actorrt.get(tally.add.remote(1))
    sys.exit(3)


@actorrt.remote
def get_within(refs, timeout):
    """A ``get`` inside a function (it waits in slices): what it gives or raises."""
    try:
        return actorrt.get(refs[0], timeout=timeout)
    except Exception as exc:
        return type(exc).__name__


@actorrt.actor
class Tally:
    def __init__(self):
        self.n = 0

    def add(self, k):
        self.n += k
        return self.n


@actorrt.actor
class Holder:
    def total(self, t):
        return int(t.sum())

    def make(self, n):
        return torch.ones(n, dtype=torch.uint8)

    def call_square(self, x):
        return actorrt.get(square.remote(x), timeout=60)

    def gpu_ids(self):
        return actorrt.get_gpu_ids()


def test_a_remote_function_runs_on_a_worker_and_gives_a_ref(cluster):
    ref = square.remote(7, plus=1)
    assert isinstance(ref, actorrt.ObjectRef)
    assert actorrt.get(ref, timeout=30) == 50
    assert actorrt.get([square.remote(i) for i in range(6)], timeout=30) == [0, 1, 4, 9, 16, 25]
    pids = set(actorrt.get([pid_of.remote(i) for i in range(12)], timeout=30))
    assert os.getpid() not in pids
    assert pids <= set(cluster.local_worker_pids)
    assert actorrt.get(async_double.remote(21), timeout=30) == 42


def test_a_function_that_raises_names_itself_with_the_remote_traceback(cluster):
    with pytest.raises(actorrt.ActorError) as info:
        actorrt.get(boom.remote(3), timeout=30)
    err = info.value
    assert "remote function boom raised ValueError: bad input 3" in str(err)
    assert isinstance(err.cause, ValueError)
    assert "in boom\n" in err.remote_traceback  # the function's own frame, on the worker
    assert err.remote_traceback.endswith("ValueError: bad input 3\n")
    assert err.actor_id is None
    assert actorrt.get(square.remote(2), timeout=30) == 4  # its executor goes on


def test_num_returns_gives_a_ref_per_value(cluster):
    left, right = halves.remote([1, 2, 3, 4])
    assert actorrt.get([right, left], timeout=30) == [[3, 4], [1, 2]]
    three = halves.options(num_returns=3).remote([1, 2])
    assert len(three) == 3
    for ref in three:  # it returned 2 values: every ref fails and says so
        with pytest.raises(actorrt.ActorError, match="num_returns=3 and returned 2 values"):
            actorrt.get(ref, timeout=30)


def test_a_functions_ref_goes_to_an_actor_producer_to_consumer(cluster):
    """A 40 MB result (above ACTORRT_PULL_BYTES: no copy comes back with the reply) stays
    on the function's worker and goes from there to the actor: the driver receives under
    1 MB; refs between actors and functions go either way."""
    before = cluster.payload_bytes_in
    made = ones.remote(40 * MB)
    holder = Holder.remote()
    assert actorrt.get(holder.total.remote(made), timeout=60) == 40 * MB
    assert actorrt.get(total.remote(made), timeout=60) == 40 * MB  # a function takes it too
    from_actor = holder.make.remote(36 * MB)
    assert actorrt.get(total.remote(from_actor), timeout=60) == 36 * MB
    assert cluster.payload_bytes_in - before < MB, cluster.payload_bytes_in - before
    assert actorrt.get(square.remote(square.remote(3)), timeout=30) == 81  # a small one
    assert actorrt.get(holder.call_square.remote(5), timeout=60) == 25  # called by an actor
    assert actorrt.get(made, timeout=60).numel() == 40 * MB  # the driver's own get


def test_ten_thousand_small_functions_in_flight_none_lost(cluster):
    refs = [square.remote(i) for i in range(10_000)]
    ready, _ = actorrt.wait(refs, num_returns=len(refs), timeout=150)
    assert len(ready) == 10_000
    assert actorrt.get(refs, timeout=60) == [i * i for i in range(10_000)]


def test_nested_functions_lend_their_thread_while_they_wait(cluster):
    """fib(10) waits in 88 nested functions at once, on processes with one thread each
    for them: without lending, it would wait for ever."""
    assert actorrt.get(fib.remote(10), timeout=150) == 55
    assert actorrt.get(first_ready.remote(5), timeout=60) == [0, 1, 4, 9, 16]


def test_a_process_runs_as_many_at_once_as_its_cpu_share_allows(cluster):
    """Each process runs as many calls of num_cpus=0.25 at once as its share of the
    host's CPUs holds (3 workers on 2 CPUs: 0.67 each, so 2), never more."""
    spots = cluster.function_spots(Shape(None, Resources(0.25, 0)))
    (threads,) = {s.threads for s in spots}  # one host: the same share each
    cpus = len(os.sched_getaffinity(0))
    assert threads == max(1, int(cpus / len(cluster.local_worker_pids) / 0.25))
    runs = actorrt.get([interval.remote(0.6) for _ in range(2 * threads * len(spots))], timeout=60)
    most = 0
    for pid in {r[0] for r in runs}:
        spans = [(s, e) for p, s, e in runs if p == pid]
        at_once = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
        most = max(most, at_once)
        assert at_once <= threads, (pid, spans)
    assert most == threads, runs


def test_retry_exceptions_sends_a_raising_call_again(cluster, tmp_path):
    """As Ray's retry_exceptions: True retries any exception, a list only those; the
    retries count against max_retries; without it an exception is never retried."""
    again = flaky.options(retry_exceptions=True, max_retries=3)
    assert actorrt.get(again.remote(str(tmp_path / "a"), 2, "value"), timeout=60) == 3
    listed = flaky.options(retry_exceptions=[KeyError], max_retries=3)
    assert actorrt.get(listed.remote(str(tmp_path / "b"), 1, "key"), timeout=60) == 2
    with pytest.raises(actorrt.ActorError, match="ValueError: run 1"):
        actorrt.get(listed.remote(str(tmp_path / "c"), 1, "value"), timeout=60)
    once = again.options(max_retries=1)
    with pytest.raises(actorrt.ActorError, match="ValueError: run 2"):  # 1 retry, then done
        actorrt.get(once.remote(str(tmp_path / "d"), 5, "value"), timeout=60)
    with pytest.raises(actorrt.ActorError, match="ValueError: run 1"):  # the default: none
        actorrt.get(flaky.remote(str(tmp_path / "e"), 1, "value"), timeout=60)
    assert [len((tmp_path / n).read_text()) for n in "abcde"] == [3, 2, 1, 2, 1]
    with pytest.raises(ValueError, match="retry_exceptions=.* must be True, False or a list"):
        flaky.options(retry_exceptions=[42])


def test_get_gpu_ids_is_empty_without_gpus(cluster):
    """As ray.get_gpu_ids(): [] on the driver and in actors and functions without GPUs
    (tests/gpu/test_gpu_functions.py checks the ids of those with GPUs)."""
    assert actorrt.get_gpu_ids() == []
    assert actorrt.get(gpu_ids.remote(), timeout=30) == []
    assert actorrt.get(Holder.remote().gpu_ids.remote(), timeout=30) == []


def test_exit_actor_and_sys_exit_in_a_function_fail_only_that_call(cluster):
    with pytest.raises(actorrt.ActorError, match="only inside an actor method"):
        actorrt.get(ends_actor.remote(), timeout=30)
    with pytest.raises(actorrt.ActorError, match=r"called sys.exit\(3\)"):
        actorrt.get(exits.remote(), timeout=30)
    assert actorrt.get([square.remote(i) for i in range(6)], timeout=30)[-1] == 25
    tally = Tally.remote()  # retry_exceptions=True does not run it again: it asked to exit
    with pytest.raises(actorrt.ActorError, match=r"called sys.exit\(3\)"):
        actorrt.get(exits_counted.remote(tally), timeout=30)
    assert actorrt.get(tally.add.remote(0), timeout=30) == 1


def test_remote_on_a_class_makes_an_actor_class(cluster):
    @actorrt.remote(max_concurrency=2)
    class Counter:
        def __init__(self, start):
            self.n = start

        def add(self, k):
            self.n += k
            return self.n

    assert isinstance(Counter, actorrt.ActorClass)
    c = Counter.remote(10)
    assert actorrt.get(c.add.remote(5), timeout=30) == 15
    Plain = actorrt.remote(type("Plain", (), {"f": lambda self: 1}))
    assert isinstance(Plain, actorrt.ActorClass)


def test_bad_input_fails_at_the_call_site(cluster):
    with pytest.raises(TypeError, match=r"square.remote\(\): too many positional"):
        square.remote(1, 2, 3)
    with pytest.raises(TypeError, match=r"use square.remote\(...\)"):
        square(3)
    with pytest.raises(TypeError, match="unknown remote function option.*'nmu_cpus'"):
        actorrt.remote(nmu_cpus=1)(lambda: 1)
    with pytest.raises(TypeError, match="not both"):
        actorrt.remote(lambda: 1, num_cpus=1)
    with pytest.raises(ValueError, match="max_retries=-2 must be an int >= 0"):
        square.options(max_retries=-2)
    with pytest.raises(ValueError, match="num_returns=-1 must be >= 0"):
        square.options(num_returns=-1)
    with pytest.raises(TypeError, match="decorates functions and classes"):
        actorrt.remote(3)
    with pytest.raises(PlacementError, match=r"remote function square: .*num_gpus=1.*GPUs"):
        square.options(num_gpus=1).remote(2)
    with pytest.raises(PlacementError, match="more CPUs than any host has"):
        square.options(num_cpus=4096).remote(2)
    with pytest.raises(TypeError, match="cannot be sent"):
        square.remote(__import__("threading").Lock())


HEADER = """
import os, signal, time
import actorrt

@actorrt.remote
def block(gate, s):
    # Runs until `gate` exists (or `s` seconds); says which process ran it to its end.
    open(gate + ".%d.running" % os.getpid(), "a").close()
    deadline = time.monotonic() + s
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)
    return os.getpid()

@actorrt.remote
def pid_of(_=None):
    return os.getpid()

def outcome(ref):
    try:
        return "value: %r" % (actorrt.get(ref, timeout=90),)
    except actorrt.ActorRtError as exc:
        return type(exc).__name__ + ": " + str(exc)

def running_on(gate, pid):
    return os.path.exists(gate + ".%d.running" % pid)
"""


@pytest.mark.slow
def test_functions_on_a_killed_worker_are_retried_on_another(tmp_path):
    """kill -9 of a worker with functions running on it: they run again elsewhere (the
    default max_retries=3); one with max_retries=0 fails with ActorDiedError saying so."""
    (rep,) = run_script(
        tmp_path,
        HEADER,
        """
        rt = actorrt.start(num_workers=3, timeout=90, shutdown_timeout=5)
        pids = list(rt.local_worker_pids)
        gate = os.path.abspath("gate")
        calls = [block.options(num_cpus=0.1).remote(gate, 60) for _ in range(12)]
        once = block.options(num_cpus=0.1, max_retries=0).remote(gate, 60)
        victim = pids[0]
        deadline = time.monotonic() + 60
        while not running_on(gate, victim) and time.monotonic() < deadline:
            time.sleep(0.02)
        ran_on_victim = running_on(gate, victim)
        os.kill(victim, signal.SIGKILL)
        time.sleep(1.5)  # the retries go out, and block again on the live ones
        open(gate, "w").close()
        values = [outcome(c) for c in calls]
        report(pids=pids, victim=victim, ran_on_victim=ran_on_victim, values=values,
               once=outcome(once), after=outcome(pid_of.remote()))
        actorrt.shutdown()
        """,
    )
    assert rep["ran_on_victim"]
    victim = rep["victim"]
    live = {p for p in rep["pids"] if p != victim}
    assert all(v.startswith("value: ") for v in rep["values"]), rep["values"]
    assert {int(v.split()[1]) for v in rep["values"]} <= live, rep["values"]
    once = rep["once"]
    assert once.startswith("value: ") or (
        once.startswith("ActorDiedError") and "max_retries=0" in once
    ), once
    assert int(rep["after"].split()[1]) in live, rep["after"]


@pytest.mark.slow
def test_retries_used_up_fail_the_call_and_say_so(tmp_path):
    """max_retries=1 and two deaths under the call: ActorDiedError naming the function."""
    (rep,) = run_script(
        tmp_path,
        HEADER,
        """
        rt = actorrt.start(num_workers=3, timeout=90, shutdown_timeout=5)
        pids = list(rt.local_worker_pids)
        gate = os.path.abspath("gate")  # never made: block runs until it is killed
        call = block.options(max_retries=1).remote(gate, 120)
        killed = []
        for _ in range(2):
            deadline = time.monotonic() + 60
            on = []
            while not on and time.monotonic() < deadline:
                on = [p for p in pids if p not in killed and running_on(gate, p)]
                time.sleep(0.02)
            killed.append(on[0])
            os.kill(on[0], signal.SIGKILL)
        report(pids=pids, value=outcome(call), after=outcome(pid_of.remote()))
        actorrt.shutdown()
        """,
    )
    value = rep["value"]
    assert value.startswith("ActorDiedError: remote function block: the process running it")
    assert "retries are used up (max_retries=1)" in value, value
    assert rep["after"].startswith("value: "), rep["after"]


@pytest.mark.slow
def test_a_label_sends_functions_to_that_labels_processes(tmp_path):
    (rep,) = run_script(
        tmp_path,
        HEADER,
        """
        rt = actorrt.start(labels={"learner": {"count": 1}, "collector": {"count": 2}},
                           timeout=90, shutdown_timeout=5)
        pids = list(rt.local_worker_pids)
        plan = actorrt.plan()
        collectors = [p["name"] for p in plan["processes"] if "collector" in p["labels"]]
        got = actorrt.get([pid_of.options(label="collector").remote(i) for i in range(20)],
                          timeout=60)
        try:
            pid_of.options(label="evaluator").remote()
            missing = "no error"
        except actorrt.PlacementError as exc:
            missing = str(exc)
        ranks = [p["rank"] for p in plan["processes"] if p["name"] in collectors]
        report(pids=pids, got=sorted(set(got)), missing=missing,
               collector_pids=sorted(rt.pids[r] for r in ranks))
        actorrt.shutdown()
        """,
    )
    assert len(rep["collector_pids"]) == 2, rep
    assert rep["got"] == rep["collector_pids"], rep
    assert "label 'evaluator' is not in the cluster's layout" in rep["missing"], rep["missing"]


def test_a_function_and_what_it_uses_of_main_go_once_per_process(tmp_path):
    """A function of ``__main__`` travels by value with what it uses (here 4 MB): sent
    with every call, each call carried it. Now the calls after the first answer carry
    its key alone; a process that lost it (as one replaced under the same name would)
    gets that call again with the bytes."""
    (rep,) = run_script(
        tmp_path,
        HEADER,
        """
        import torch
        W = torch.ones(1 << 20)  # 4 MB that the function uses

        @actorrt.remote
        def first(x):
            return float(W[0]) + x

        @actorrt.remote
        def forget_functions():
            from actorrt.runtime import executor
            executor._functions.clear()
            return os.getpid()

        with actorrt.start(num_workers=1, trace=True, timeout=60) as rt:
            pids = list(rt.local_worker_pids)
            values = [actorrt.get(first.remote(i), timeout=60) for i in range(5)]
            forgot = actorrt.get(forget_functions.remote(), timeout=60)
            again = actorrt.get(first.remote(10), timeout=60)
            after = actorrt.get(first.remote(20), timeout=60)
            # a round trip is recorded just after its reply is handed over: wait for all
            deadline = time.monotonic() + 10
            while True:
                trips = sorted(
                    (ev["ts"], ev["args"]["bytes_out"]) for ev in actorrt.timeline()["traceEvents"]
                    if ev.get("cat") == "call" and ev["ph"] == "b" and "first" in ev["name"]
                )
                if len(trips) >= 8 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            report(pids=pids, forgot=forgot, values=values, again=again, after=after,
                   sent=[b for _, b in trips])
        """,
    )
    assert rep["values"] == [1.0, 2.0, 3.0, 4.0, 5.0] and rep["forgot"] in rep["pids"]
    assert (rep["again"], rep["after"]) == (11.0, 21.0)
    big, small = 4 * MB, 64 << 10
    sent = rep["sent"]
    # the first call; four with the key alone; the key alone to the process that had lost
    # it, then that call again with the bytes; then the key alone again
    assert len(sent) == 8, sent
    assert sent[0] >= big and sent[6] >= big, sent
    assert all(b < small for i, b in enumerate(sent) if i not in (0, 6)), sent


@actorrt.actor
class Slow:
    def sleep(self, s):
        time.sleep(s)
        return s

    def fail(self):
        raise ValueError("failed")


@pytest.mark.parametrize("timeout", [0, 0.05])
def test_a_get_in_a_function_raises_a_failure_before_its_timeout_as_the_drivers(cluster, timeout):
    slow, failing = Slow.remote(), Slow.remote()
    failed = failing.fail.remote()
    actorrt.wait([failed], timeout=30)
    refs = [slow.sleep.remote(3), failed]  # one never ready in time, one failed already
    with pytest.raises(actorrt.ActorError, match="failed"):
        actorrt.get(refs, timeout=timeout)  # the driver's
    # the function's get, which waits in slices, raises the same (was: GetTimeoutError)
    assert actorrt.get(get_within.remote([refs], timeout), timeout=60) == "ActorError(ValueError)"


def test_a_get_in_a_function_takes_a_timeout_of_minus_one_as_none_as_rays(cluster):
    slow = Slow.remote()
    ref = slow.sleep.remote(0.5)  # not ready when the function's get starts
    assert actorrt.get(get_within.remote([ref], -1), timeout=60) == 0.5  # was: "ValueError"
    assert actorrt.get(get_within.remote([ref], -2), timeout=60) == "ValueError"
