"""Cluster lifetime: worker death, shutdown bounds, restarts, scripts, a dying driver.

Each test runs its driver as a separate script: these tests start and stop clusters,
and a process that has started one cluster cannot start a second with full features
(torch binds its RRef context to the first RPC agent; see docs/architecture.md).
"""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from procutil import kill_pids
from scripts import run_script, run_script_with_stderr, wait_gone

pytestmark = pytest.mark.timeout(240)

HEADER = """
import json, os, signal, sys, time
import actorrt

@actorrt.actor
class Sleeper:          # defined in __main__: shipped to the workers with cloudpickle
    def pid(self):
        return os.getpid()

    def sleep(self, s):
        time.sleep(s)
        return s
"""


def run_driver(tmp_path, body, timeout=150, grace=10):
    """Runs HEADER + body as a driver script; returns its REPORT lines as dicts.

    Every pid a report lists must be gone ``grace`` seconds after the script exits.
    """
    return run_script(tmp_path, HEADER, body, timeout=timeout, grace=grace)


def test_dead_worker_fails_pending_and_new_calls_then_shutdown_is_bounded(tmp_path):
    (rep,) = run_driver(
        tmp_path,
        grace=5,
        body="""
        rt = actorrt.start(num_workers=2, timeout=90, shutdown_timeout=5)
        pids = list(rt.local_worker_pids)
        a = Sleeper.remote()
        b = Sleeper.remote()
        victim = actorrt.get(a.pid.remote(), timeout=30)
        pending = a.sleep.remote(60)
        rt.calls.outbox.fixed_window = 30.0  # what follows is a burst: calls go in a batch
        pending_no_timeout = a.sleep.remote(60)
        batched = [a.sleep.remote(60) for _ in range(3)]
        time.sleep(0.3)
        batches = rt.calls.outbox.batches_sent
        os.kill(victim, signal.SIGKILL)
        errors = []
        late = a.sleep.remote(0)
        waits = [(pending, 30), (late, 30), (pending_no_timeout, None)] + [(r, 30) for r in batched]
        for ref, timeout in waits:
            try:
                actorrt.get(ref, timeout=timeout)  # None: the direct road (the run is bounded)
                errors.append("no error")
            except actorrt.ActorDiedError:
                errors.append("ActorDiedError")
        other = actorrt.get(b.sleep.remote(0.01), timeout=30)
        deadline = time.monotonic() + 10
        while a.worker not in rt.dead_workers and time.monotonic() < deadline:
            time.sleep(0.05)
        c = Sleeper.remote()
        c_value = actorrt.get(c.sleep.remote(0), timeout=30)
        started = time.monotonic()
        actorrt.shutdown()
        report(pids=pids, victim=victim, a=a.worker, b=b.worker, c=c.worker, errors=errors,
               batches=batches,
               other=other, c_value=c_value, known_dead=sorted(rt.dead_workers),
               shutdown_s=time.monotonic() - started)
        """,
    )
    assert rep["a"] != rep["b"]  # the directory spreads actors over idle workers
    assert rep["victim"] in rep["pids"]
    assert rep["errors"] == ["ActorDiedError"] * 6
    assert rep["batches"] >= 1  # the burst's calls went out through the outbox
    assert rep["other"] == 0.01  # the rest of the cluster goes on
    assert rep["known_dead"] == [rep["a"]]
    assert rep["c"] == rep["b"] and rep["c_value"] == 0  # new actors avoid the dead worker
    assert rep["shutdown_s"] < 5 + 10, rep["shutdown_s"]


def test_a_shutdown_right_after_every_worker_was_killed_leaves_no_thread_in_torch(tmp_path):
    """Workers killed with calls in flight, and shutdown() before they are found dead:
    they never answer, so the driver does not join its agent (torch's join would wait
    for their calls past the bound, in a thread still inside torch as the process
    exits, which may abort it; it also cost every such shutdown its 3 s)."""
    (rep,) = run_driver(
        tmp_path,
        grace=5,
        body="""
        from actorrt.runtime import torch_threads

        @actorrt.actor(max_restarts=-1, max_task_retries=-1)
        class Retried(Sleeper):
            pass

        rt = actorrt.start(num_workers=2, timeout=90, shutdown_timeout=10)
        pids = list(rt.local_worker_pids)
        actors = [Retried.remote() for _ in range(4)]
        victims = {actorrt.get(a.pid.remote(), timeout=30) for a in actors}
        calls = [a.sleep.remote(5) for a in actors]
        time.sleep(0.3)
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        time.sleep(1)  # the calls go again to the actors restarted on the replacements
        now = list(rt.local_worker_pids)
        for pid in now:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        actorrt.shutdown()
        # The threads that end with the cluster go within a moment (the retries' thread
        # may still be failing the last calls); the agent's join stayed for seconds.
        left = [t.name for t in torch_threads.wait(1.0)]
        report(pids=pids + now, left=left)
        """,
    )
    assert rep["left"] == [], rep


def test_context_manager_restart_and_shutdown_with_calls_in_flight(tmp_path):
    reports = run_driver(
        tmp_path,
        """
        with actorrt.start(num_workers=1, shutdown_timeout=5) as rt:
            first = list(rt.local_worker_pids)
            s = Sleeper.remote()
            v = actorrt.get(s.sleep.remote(0), timeout=30)
            s.sleep.remote(30)  # still running when the cluster goes down
            t0 = time.monotonic()
        down_s = time.monotonic() - t0
        report(pids=first, v=v, initialized=actorrt.is_initialized(), down_s=down_s)
        with actorrt.start(num_workers=1) as rt:  # the same process can start again
            second = list(rt.local_worker_pids)
            v2 = actorrt.get(Sleeper.remote().sleep.remote(0), timeout=30)
        report(pids=second, v=v2, initialized=actorrt.is_initialized())
        """,
    )
    first, second = reports
    assert first["v"] == 0 and second["v"] == 0
    assert not first["initialized"] and not second["initialized"]
    assert first["down_s"] < 5 + 10


RESTARTS = """
import time
import actorrt

@actorrt.actor
class Counter:
    def __init__(self):
        self.n = 0

    def add(self):
        self.n += 1
        return self.n

@actorrt.actor
class Holder:
    def __init__(self, other):
        self.other = other

    def ask(self):  # an actor calling the driver's actor through a handle it was given
        return actorrt.get(self.other.add.remote(), timeout=30)

    def give(self):  # the driver's handle, back to the driver
        return self.other

    def make(self):  # an actor of its own, used and kept inside (not sent to the driver)
        self.mine = Counter.remote()
        return actorrt.get(self.mine.add.remote(), timeout=30)

    def make_for_driver(self):  # an actor of its own whose only handle goes to the driver
        return Counter.remote()
"""

# What torch prints when a process ends its agent with RRefs still held somewhere, or
# when a peer's agent ends before it: torch's C++ log lines (c10's "[W1126 ...]" form),
# whatever their text, and the two that issue 26 quotes.
TORCH_NOISE = re.compile(
    r"^\[[WE]\d{4} |Detected RRef Leaks|encountered error when reading incoming request",
    re.MULTILINE,
)


def test_three_restarts_in_one_process_print_nothing_with_handles_kept(tmp_path):
    # start / shutdown three times in one process (a notebook, a pytest session), every
    # handle kept alive across: stderr must hold none of torch's shutdown noise.
    reports, stderr = run_script_with_stderr(
        tmp_path,
        RESTARTS,
        """
        kept = []  # every handle of every round, alive to the script's end
        for round in range(3):
            rt = actorrt.start(num_workers=2, timeout=90)
            pids = list(rt.local_worker_pids)
            c = Counter.remote()
            named = Counter.options(name=f"c{round}").remote()
            h = Holder.remote(c)
            got = [
                actorrt.get(c.add.remote(), timeout=30),
                actorrt.get(h.ask.remote(), timeout=30),
                actorrt.get(actorrt.get(h.give.remote(), timeout=30).add.remote(), timeout=30),
                actorrt.get(h.make.remote(), timeout=30),
                actorrt.get(actorrt.get_actor(f"c{round}").add.remote(), timeout=30),
            ]
            made = actorrt.get(h.make_for_driver.remote(), timeout=30)
            time.sleep(0.5)  # time for the actor to be released, were nothing holding it
            got.append(actorrt.get(made.add.remote(), timeout=30))
            stale = None
            for old in kept[:1]:  # a handle of the first cluster: refused, not left waiting
                try:
                    old.add.remote()
                    stale = "no error"
                except actorrt.ActorDiedError as exc:
                    stale = str(exc)
            kept += [c, named, h, made]
            actorrt.shutdown()
            import threading
            left = sum(t.name == "actorrt-release" for t in threading.enumerate())
            report(round=round, got=got, pids=pids, release_threads=left, stale=stale)
        """,
        timeout=240,
    )
    assert [r["got"] for r in reports] == [[1, 2, 3, 1, 1, 1]] * 3
    assert reports[0]["stale"] is None, reports
    assert all("cluster that was shut down" in r["stale"] for r in reports[1:]), reports
    # Each round's thread ends with it: it kept the whole ended runtime alive before.
    assert max(r["release_threads"] for r in reports) <= 1, reports
    noise = TORCH_NOISE.findall(stderr)
    assert not noise, f"stderr of three start/shutdown rounds holds {noise}:\n{stderr[-6000:]}"
    # Nothing else either, but start()'s warning about the second cluster's limits (its
    # message and the source line Python shows with it, once: one call site).
    rest = [
        line
        for line in stderr.splitlines()
        if line.strip()
        and "RuntimeWarning: actorrt was already started" not in line
        and line.strip() != "rt = actorrt.start(num_workers=2, timeout=90)"
    ]
    assert not rest, stderr


def test_a_shutdown_after_a_worker_died_prints_no_rref_leaks(tmp_path):
    """Was: after any death nobody lets go of its RRefs at shutdown (torch's deletes would
    reach for the dead process), and every owner's torch printed each fork still
    registered with it as a leak ("Detected RRef Leaks", "Leaking RRef ..."): a page of
    alarm at the end of a run whose only fault was one crashed worker. Owners now drop,
    locally, the forks that holders (rank 0 too) told them of."""
    reports, stderr = run_script_with_stderr(
        tmp_path,
        RESTARTS
        + """
import os, signal
import torch

@actorrt.actor
class Maker:
    def put(self):  # a ref made here: its lease is made here too (rpc.remote)
        return [actorrt.put(torch.ones(2 << 20, dtype=torch.uint8))]
    def pid(self):
        return os.getpid()

@actorrt.actor
class Keeper:
    def keep(self, box):
        self.box = box
        return os.getpid()
""",
        """
        rt = actorrt.start(num_workers=3, heartbeat_timeout=3, timeout=90)
        report(pids=list(rt.local_worker_pids))
        m = Maker.remote()
        maker = actorrt.get(m.pid.remote(), timeout=30)
        boxes = [actorrt.get(m.put.remote(), timeout=30) for _ in range(3)]
        mine = [actorrt.put(torch.ones(2 << 20, dtype=torch.uint8)) for _ in range(2)]
        keepers = [Keeper.remote() for _ in range(4)]  # handles the driver holds to the end
        pids = [
            actorrt.get(k.keep.remote(box), timeout=30)
            for k, box in zip(keepers, [*boxes, [mine[0]]], strict=True)
        ]
        victim = next(p for p in pids if p != maker)
        time.sleep(1)  # each holder has told the owners what it holds
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not rt.dead_workers and time.monotonic() < deadline:
            time.sleep(0.1)
        report(dead=sorted(rt.dead_workers))
        actorrt.shutdown()
        """,
        timeout=180,
    )
    assert reports[-1]["dead"], reports
    leaks = re.findall(r"Detected RRef Leaks|Leaking RRef .*", stderr)
    assert not leaks, f"a shutdown after a death printed {leaks}:\n{stderr[-6000:]}"


def test_refs_of_a_cluster_shut_down_say_so_in_the_next_one(tmp_path):
    """Objects do not outlive their cluster: a ref of one shut down since says so when
    read or passed in the next cluster of the process (was: "its owner process died
    ('worker1' is now a new process ...)", or "could not find destination"), and one
    whose value came with its reply still gives that value, also to an actor."""
    (rep,) = run_driver(
        tmp_path,
        """
        import warnings, torch
        warnings.simplefilter("ignore", RuntimeWarning)  # the second cluster's limit

        @actorrt.actor
        class Maker:
            def make(self, n):
                return torch.ones(n)

            def total(self, x):  # a ref inside a value stays a ref (as Ray's)
                x = actorrt.get(x[0], timeout=30) if isinstance(x, list) else x
                return float(x.sum())

        rt = actorrt.start(num_workers=2, timeout=90)
        pids = list(rt.local_worker_pids)
        m = Maker.remote()
        kept = m.make.remote(10 << 20)  # 40 MiB: over ACTORRT_PULL_BYTES, kept at its owner
        copied = m.make.remote(1 << 19)  # 2 MiB: its reply brought the driver a copy
        put = actorrt.put(torch.ones(8))
        assert actorrt.wait([kept, copied], num_returns=2, timeout=60)[1] == []
        actorrt.get(copied, timeout=30)
        actorrt.shutdown()
        rt = actorrt.start(num_workers=2, timeout=90)
        pids += list(rt.local_worker_pids)
        m = Maker.remote()
        def outcome(fn):
            try:
                return fn()
            except Exception as exc:
                return type(exc).__name__ + ": " + str(exc)
        got = {}
        for name, ref in (("kept", kept), ("copied", copied), ("put", put)):
            got[name] = [
                outcome(lambda: float(actorrt.get(ref, timeout=30).sum())),
                outcome(lambda: actorrt.get(m.total.remote(ref), timeout=30)),
                outcome(lambda: actorrt.get(m.total.remote([ref]), timeout=30)),
            ]
        report(pids=pids, got=got)
        actorrt.shutdown()
        """,
        timeout=200,
    )
    got = rep["got"]
    assert got["copied"] == [float(1 << 19)] * 3, got
    for name in ("kept", "put"):
        for said in got[name]:
            assert "ObjectLostError" in said and "the cluster was shut down" in said, (name, got)


def test_shutdown_twice_and_calls_after_shutdown(tmp_path):
    (rep,) = run_driver(
        tmp_path,
        """
        with actorrt.start(num_workers=1) as rt:
            s = Sleeper.remote()
            pids = list(rt.local_worker_pids)
        actorrt.shutdown()  # a second shutdown is a no-op
        try:
            s.sleep.remote(0)
            error = None
        except actorrt.NotInitializedError as exc:
            error = str(exc)
        report(pids=pids, error=error)
        """,
    )
    assert "call actorrt.start() first" in rep["error"]


def test_no_thread_that_sends_outlives_shutdown(tmp_path):
    """The threads that send while the cluster runs end with it: one still sending as
    the interpreter ends aborts the process (see runtime/torch_threads.py)."""
    (rep,) = run_driver(
        tmp_path,
        """
        import torch
        from actorrt.runtime import torch_threads

        @actorrt.actor
        class Streams:
            def count(self, n):
                for i in range(n):
                    yield i

            def big(self):
                return torch.zeros(1 << 19)  # 2 MiB: kept where it is made

        with actorrt.start(num_workers=1) as rt:
            s, other = Streams.remote(), Streams.remote()  # `count` waits on s's thread
            gen = s.count.options(_generator_backpressure_num_objects=1).remote(10)
            first = actorrt.get(next(gen), timeout=60)
            big = other.big.remote()
            actorrt.wait([big], timeout=60)
            del big, gen  # let-goes and a generator's report, on their threads
            names = sorted({t.name for t in torch_threads.running()})
            pids = list(rt.local_worker_pids)
        t0 = time.monotonic()
        left = [t.name for t in torch_threads.wait(5)]
        report(pids=pids, first=first, names=names, left=left, waited=time.monotonic() - t0)
        """,
    )
    assert rep["first"] == 0
    assert {"actorrt-objects", "actorrt-streams"} <= set(rep["names"]), rep
    assert rep["left"] == [], rep


def test_class_defined_in_main_script(tmp_path):
    (rep,) = run_driver(
        tmp_path,
        """
        import torch

        @actorrt.actor
        class Accumulator:          # no main guard needed, unlike multiprocessing
            def __init__(self, scale):
                self.scale = scale
                self.total = torch.zeros(3)

            def add(self, t):
                self.total += t * self.scale
                return self.total

            def divide(self, by):
                return float(self.total.sum()) / by  # the line a remote traceback must show

            def apply(self, fn):
                return fn(self.total)

        @actorrt.remote
        def check_positive(x):
            if x <= 0:
                raise ValueError(f"{x} is not positive")  # and this one
            return x

        with actorrt.start(num_workers=2) as rt:
            acc = Accumulator.remote(2.0)
            acc.add.remote(torch.ones(3))
            result = actorrt.get(acc.add.remote(torch.arange(3.0)), timeout=60).tolist()
            tracebacks = []
            bad = lambda t: int("not a number")  # a lambda's line, sent as an argument
            for ref in (acc.divide.remote(0), check_positive.remote(-1), acc.apply.remote(bad)):
                try:
                    actorrt.get(ref, timeout=60)
                except actorrt.ActorError as err:
                    tracebacks.append(err.remote_traceback)
            report(pids=list(rt.local_worker_pids), result=result, tracebacks=tracebacks)
        """,
    )
    assert rep["result"] == [2.0, 4.0, 6.0]
    # The script's file and source lines, not cloudpickle's "<dynamic-code>" (its code
    # travelled by value; actorrt.runtime.shipping keeps the file name).
    method, function, argument = rep["tracebacks"]
    script = str(tmp_path / "driver_script.py")
    assert f'File "{script}"' in method and "in divide" in method, method
    assert "return float(self.total.sum()) / by  # the line" in method, method
    assert f'File "{script}"' in function and "in check_positive" in function, function
    assert 'raise ValueError(f"{x} is not positive")  # and this one' in function, function
    assert f'File "{script}"' in argument and "in <lambda>" in argument, argument
    assert "# a lambda's line, sent as an argument" in argument, argument
    assert "<dynamic-code>" not in method + function + argument


DRIVER = """
import sys, time, actorrt
rt = actorrt.start(num_workers=2)
print("PIDS", *rt.local_worker_pids, flush=True)
time.sleep(600)
"""


def test_workers_exit_when_the_driver_is_killed(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    pids = []
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("PIDS"):
                pids = [int(x) for x in line.split()[1:]]
                break
            if proc.poll() is not None:
                break
        assert len(pids) == 2, "driver did not start its workers"
        # Workers are forked by one zygote, a fresh interpreter: not the driver, not forks of it.
        parents = {_ppid(p) for p in pids}
        assert len(parents) == 1 and proc.pid not in parents, parents
        zygote = parents.pop()
        with open(f"/proc/{zygote}/cmdline", "rb") as f:
            assert b"actorrt.cluster.zygote" in f.read()
        assert _ppid(zygote) == proc.pid
        pids.append(zygote)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        left = wait_gone(pids, 20)
        assert left == [], "workers (or their zygote) outlived their driver"
    finally:
        kill_pids([proc.pid, *pids])
        proc.wait(10)


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().split(")")[-1].split()[1])


FAKE_NVIDIA_SMI = """#!/bin/sh
# Kills the local worker that runs it (a worker's command line is its zygote's); the
# driver, which runs it too, just sees a failing nvidia-smi.
if grep -q actorrt.cluster.zygote /proc/$PPID/cmdline 2>/dev/null; then kill -9 $PPID; fi
exit 1
"""


def test_a_worker_dying_during_start_up_fails_start_at_once(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (fake / "nvidia-smi").chmod(0o755)
    script = tmp_path / "driver.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, time, actorrt
            t0 = time.monotonic()
            try:
                actorrt.start(num_workers=2, timeout=120)
                print("REPORT", json.dumps({"error": None}))
            except actorrt.ClusterError as exc:
                print("REPORT", json.dumps({"error": str(exc), "s": time.monotonic() - t0}))
            """
        )
    )
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=150,
        env=env,
        cwd=tmp_path,
    )
    left = wait_gone(_pids_in(tmp_path), 10)  # the zygote and the other worker went too
    kill_pids(left)
    assert left == [], "processes of the failed start outlived it"
    lines = [json.loads(x[7:]) for x in out.stdout.splitlines() if x.startswith("REPORT ")]
    assert lines, out.stdout[-2000:] + out.stderr[-3000:]
    rep = lines[0]
    assert rep["error"] is not None, "start() succeeded although its workers were killed"
    assert "exited with code -9 while the cluster was starting" in rep["error"]
    assert rep["s"] < 60, rep  # at once, not at the 120 s rendezvous timeout


def _pids_in(directory) -> list[int]:
    """Pids of processes whose working directory is ``directory`` (ours are started there)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/cwd") == str(directory):
                    found.append(int(entry))
            except OSError:
                pass
    return found
