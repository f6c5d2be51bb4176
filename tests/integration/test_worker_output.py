"""What actors print reaches the driver's terminal, tagged; logs; ``actorrt.status()``.

The local-cluster tests run their driver as a script (``scripts.run_script``): it points
its own file descriptors 1 and 2 at a file before starting the cluster (the workers
inherit them, as they inherit a terminal), so the file holds everything that reached the
driver's terminal, from the driver and from the workers, in the order it was written.
"""

import os
import re
import signal
import time

import pytest
from netns import driver_argv, free_port, worker_argv
from scripts import run_script

import actorrt

pytestmark = pytest.mark.timeout(180)

HEADER = """
import os, sys, threading, time
import actorrt

@actorrt.actor
class Learner:
    def talk(self, n):
        for i in range(n):
            print(f"learner out {i}")
            print(f"learner err {i}", file=sys.stderr)
        print("partial ", end="")
        print("line", flush=True)
        return os.getpid()

    def from_a_thread(self):
        # A thread the method starts is not the actor's: its lines carry the process name.
        t = threading.Thread(target=lambda: print("from a thread of my own"))
        t.start()
        t.join()
        return os.getpid()

@actorrt.actor
class Waiter:
    async def talk(self):
        print("async actor line")
        return os.getpid()

def capture_terminal(path):
    # fds 1 and 2 (the workers inherit them) go to `path`; returns a restore function.
    saved = os.dup(1), os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)

    def restore():
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)  # what goes wrong after this reaches the test's message
        return open(path, errors="replace").read()

    return restore
"""


def _run(tmp_path, body, name):
    (rep,) = run_script(tmp_path, HEADER, body, timeout=120, grace=10, name=name)
    return rep


def _positions(text: str, lines: list[str]) -> list[int]:
    """Where each of ``lines`` starts in ``text`` (fails for a missing one)."""
    found = []
    for line in lines:
        pos = text.find(line + "\n")
        assert pos >= 0, f"{line!r} not in the driver's output:\n{text[-4000:]}"
        found.append(pos)
    return found


def test_actor_prints_reach_the_driver_tagged_and_in_order(tmp_path):
    rep = _run(
        tmp_path,
        """
        restore = capture_terminal("terminal.txt")
        rt = actorrt.start(num_workers=2, timeout=90, log_level="info")
        pids = list(rt.local_worker_pids)
        learner, waiter = Learner.remote(), Waiter.remote()
        learner_pid = actorrt.get(learner.talk.remote(10), timeout=60)
        waiter_pid = actorrt.get(waiter.talk.remote(), timeout=60)
        thread_pid = actorrt.get(learner.from_a_thread.remote(), timeout=60)
        host = open("/proc/sys/kernel/hostname").read().strip()
        actorrt.shutdown()
        text = restore()
        report(pids=pids, learner=learner_pid, waiter=waiter_pid, thread=thread_pid,
               host=host, text=text, worker=learner.worker)
        """,
        "driver_output.py",
    )
    text, host = rep["text"], rep["host"]
    tag = f"(Learner pid={rep['learner']} host={host})"
    expected = []
    for i in range(10):
        expected += [f"{tag} learner out {i}", f"{tag} learner err {i}"]
    positions = _positions(text, [*expected, f"{tag} partial line"])
    assert positions == sorted(positions), "lines from one actor came out of order"
    # every line went through the driver once: none printed bare by the worker as well
    assert not re.search(r"^learner (out|err) \d", text, re.M), text[-4000:]
    _positions(text, [f"(Waiter pid={rep['waiter']} host={host}) async actor line"])
    # printed on the worker, not in an actor's method: the process's name
    assert rep["thread"] == rep["learner"]
    _positions(text, [f"({rep['worker']} pid={rep['thread']} host={host}) from a thread of my own"])
    # log_level="info": the driver tells how the cluster came up and went down
    assert re.search(r"actorrt INFO: rank [12] joined from host .+ 3 of 3 processes", text), text
    assert "actorrt INFO: shutdown: done" in text, text[-4000:]


def test_log_to_driver_false_leaves_worker_output_as_it_is(tmp_path):
    rep = _run(
        tmp_path,
        """
        restore = capture_terminal("terminal.txt")
        rt = actorrt.start(num_workers=1, timeout=90, log_to_driver=False)
        pids = list(rt.local_worker_pids)
        learner = Learner.remote()
        actorrt.get(learner.talk.remote(3), timeout=60)
        # nothing waits for the worker's own (unforwarded) writes: give them a moment
        time.sleep(0.5)
        os.kill(pids[0], 9)  # a worker death is a warning: shown at the default level
        deadline = time.monotonic() + 10
        while learner.worker not in rt.dead_workers and time.monotonic() < deadline:
            time.sleep(0.05)
        actorrt.shutdown()
        report(pids=pids, text=restore())
        """,
        "driver_no_output.py",
    )
    text = rep["text"]
    for i in range(3):  # the worker writes to the terminal it inherited, untagged
        assert re.search(rf"^learner out {i}$", text, re.M), text
        assert re.search(rf"^learner err {i}$", text, re.M), text
    assert "(Learner pid=" not in text, text
    assert "actorrt INFO" not in text, "quiet by default: warnings and up only"
    died = f"actorrt WARNING: worker1 (rank 1, pid {rep['pids'][0]}) died: killed by SIGKILL"
    assert died in text, text


def test_worker_waiting_for_its_driver_prints_no_stack_trace(procs, tmp_path):
    """A worker started before its driver retries quietly; its actor's lines reach the driver.

    Multi-node on loopback: the worker is an ``actorrt worker`` process of its own, so its
    output reaches the driver only through the forwarding.
    """
    port = free_port()
    init = f"tcp://127.0.0.1:{port}"
    env = {"ACTORRT_TOKEN": "output-test"}
    procs.start("worker1", worker_argv(init, 1, 2, "--timeout", "60", "--log-level", "info"), env)
    time.sleep(2.0)  # the worker retries meanwhile
    cfg = {"init": init, "world": 2, "scenario": "output", "tag": "loopback"}
    procs.start("driver", driver_argv(cfg), env)
    res = procs.result("driver", 90)
    assert procs.wait("driver", 30) == 0, procs.logs()
    assert procs.wait("worker1", 20) == 0, procs.logs()

    worker_log = procs.log("worker1")
    assert "does not answer yet" in worker_log, worker_log  # it did retry
    for trace in ("Exception raised from", "frame #", "failed to connect"):
        assert trace not in worker_log, worker_log  # what torch's own retries print
    talker = res["talker"]
    tag = f"(Talker pid={talker['pid']} host={talker['host']})"
    driver_log = procs.log("driver")
    expected = [f"{tag} loopback {kind} {i}" for i in range(3) for kind in ("out", "err")]
    positions = _positions(driver_log, expected)
    assert positions == sorted(positions), driver_log
    assert "loopback out" not in worker_log, "the worker printed the lines it forwarded"
    assert "Talker" in res["status"] and "worker1" in res["status"], res["status"]


def test_refused_claims_are_logged_and_a_dead_driver_brings_no_stack_trace(procs):
    """A claim of another job (another token) is refused and the driver says why, by default;
    then the driver dies, and its worker says so in one line, with no C++ stack trace."""
    port = free_port()
    init = f"tcp://127.0.0.1:{port}"
    env = {"ACTORRT_TOKEN": "output-test"}
    procs.start("driver", driver_argv({"init": init, "world": 2, "scenario": "idle"}), env)
    procs.start("worker1", worker_argv(init, 1, 2), env)
    procs.wait_for_line("driver", "READY ", 60)
    stranger = procs.start("stranger", worker_argv(init, 1, 2), {"ACTORRT_TOKEN": "other"})
    assert procs.wait("stranger", 30) == 2, procs.logs()
    assert "refused by the cluster: wrong cluster token" in procs.log("stranger"), procs.logs()
    driver_log = procs.log("driver")
    refused = f"actorrt WARNING: refused a claim for rank 1 from pid {stranger.pid} on "
    assert refused in driver_log and "wrong cluster token" in driver_log, driver_log

    os.kill(procs.procs["driver"].pid, signal.SIGKILL)
    assert procs.wait("worker1", 20) == 1, procs.logs()
    log = procs.log("worker1")
    assert "lost the connection to the driver" in log, log
    for trace in ("Exception raised from", "frame #"):
        assert trace not in log, log


def test_status_shows_processes_actors_and_calls_in_flight(cluster):
    @actorrt.actor
    class StatusProbe:
        def sleep(self, s):
            time.sleep(s)
            return s

    probe = StatusProbe.options(name="status-probe").remote()
    assert actorrt.get(probe.sleep.remote(0), timeout=30) == 0
    busy = probe.sleep.remote(2.0)

    def probe_row(table: str) -> str:
        return next(line for line in table.splitlines() if "status-probe" in line)

    deadline = time.monotonic() + 10
    table = actorrt.status()
    running = r"\b1\s+sleep \d+\.\ds\s+alive$"  # one call in flight, sleep() running
    while not re.search(running, probe_row(table)) and time.monotonic() < deadline:
        time.sleep(0.05)
        table = cluster.status()  # Runtime.status(): the same table
    actorrt.get(busy, timeout=30)
    lines = table.splitlines()
    assert lines[0].startswith("actorrt cluster: 4 process(es) on 1 host(s)"), table
    header = next(line for line in lines if line.startswith("PROCESS"))
    for column in ("RANK", "PID", "HOST", "LABELS", "GPUS", "ACTORS", "CALLS", "STATE"):
        assert column in header, header
    rows = {line.split()[0]: line for line in lines if line.startswith(("driver", "worker"))}
    assert set(rows) >= {cluster.name, "worker1", "worker2", "worker3"}, table
    assert "alive (driver)" in rows[cluster.name]
    for worker, pid in zip(
        ("worker1", "worker2", "worker3"), cluster.local_worker_pids, strict=True
    ):
        assert f" {pid} " in rows[worker], table
    actor_row = probe_row(table)
    assert "StatusProbe" in actor_row, table
    assert probe.actor_id in actor_row and probe.worker in actor_row, table
    assert re.search(running, actor_row), f"one call in flight, sleep running:\n{table}"
    actorrt.kill(probe)
