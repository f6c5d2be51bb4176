"""``actorrt worker --nproc N`` on loopback: N ranks from one command, forked from a zygote.

The driver is ``multinode_driver.py`` (a script of its own); the node is one real
``python -m actorrt worker --nproc 3`` process. Its zygote runs in a session of its
own, so besides ``Procs.close()`` (the command's group) each test kills what is left
under the command by pid. Every wait is bounded.
"""

import os
import signal

import pytest
from netns import driver_argv, free_port, pids_gone, worker_argv
from procutil import descendants, kill_pids

pytestmark = pytest.mark.timeout(150)

TOKEN = "nproc-test-token"
ENV = {"ACTORRT_TOKEN": TOKEN}


def _start(procs, scenario, world=4, nproc=3):
    init = f"tcp://127.0.0.1:{free_port()}"
    procs.start("driver", driver_argv({"init": init, "world": world, "scenario": scenario}), ENV)
    return procs.start("node", worker_argv(init, 1, world, "--nproc", str(nproc)), ENV)


def _cleanup(procs, node):
    kill_pids(descendants(node.pid))  # the zygote's group is not the command's
    procs.close()


def test_nproc_3_makes_three_ranks_that_each_answer_and_the_command_exits_0(procs):
    node = _start(procs, "simple")
    try:
        res = procs.result("driver", 90)
        assert procs.wait("driver", 30) == 0, procs.logs()
        assert procs.wait("node", 30) == 0, procs.logs()
    finally:
        _cleanup(procs, node)
    where = sorted(res["where"], key=lambda w: w["rank"])
    assert [w["rank"] for w in where] == [1, 2, 3]
    assert len({w["pid"] for w in where}) == 3 and node.pid not in {w["pid"] for w in where}
    # one zygote forked all three; it is not the command itself
    (zygote,) = {w["ppid"] for w in where}
    assert zygote != node.pid
    assert res["echo_ok"]
    assert pids_gone([w["pid"] for w in where] + [zygote], 10) == []


@pytest.mark.parametrize(
    ("sig", "ended"),
    # a SIGINT is a KeyboardInterrupt in the worker: it ends quietly with 128+2
    [(signal.SIGTERM, "killed by SIGTERM"), (signal.SIGINT, "exit code 130")],
)
def test_a_killed_child_is_named_and_a_signal_reaches_the_others(procs, sig, ended):
    """One child SIGKILLed: the command names it at once and goes on; a SIGTERM (SIGINT)
    to the command reaches the two others, and it exits 128+15 (128+2) with nothing
    left under it."""
    node = _start(procs, "idle")
    try:
        pids = [int(p) for p in procs.wait_for_line("driver", "READY ", 90).strip("[]").split(",")]
        below = descendants(node.pid)
        assert set(pids) < set(below), (pids, below)  # the workers, and their zygote
        victim = pids[1]
        os.kill(victim, signal.SIGKILL)
        line = procs.wait_for_line("node", "actorrt worker: rank ", 30)
        assert line.endswith(f"(pid {victim}) failed: killed by SIGKILL"), line
        dead = int(line.split()[0])
        assert node.poll() is None, procs.logs()  # the others still serve the cluster
        os.kill(node.pid, sig)
        assert procs.wait("node", 30) == 128 + sig, procs.logs()
        assert pids_gone(below, 10) == [], procs.logs()
    finally:
        _cleanup(procs, node)
    others = ", ".join(str(r) for r in (1, 2, 3) if r != dead)
    # the two others ended by the signal passed on, not by a kill after the grace
    summary = procs.wait_for_line("node", f"actorrt worker: stopped by {sig.name}: ", 1)
    assert summary == f"killed by SIGKILL: ranks {dead}; {ended}: ranks {others}" or (
        summary == f"{ended}: ranks {others}; killed by SIGKILL: ranks {dead}"
    ), summary
    assert "Traceback" not in procs.log("node"), procs.log("node")


def test_children_and_zygote_end_when_the_command_is_killed(procs):
    node = _start(procs, "idle", world=3, nproc=2)
    try:
        procs.wait_for_line("driver", "READY ", 90)
        below = descendants(node.pid)
        assert len(below) == 3, below  # the zygote and two workers
        os.kill(node.pid, signal.SIGKILL)
        # Their stdin's other end closed: workers exit at once, the zygote after them.
        assert pids_gone(below, 15) == [], procs.logs()
    finally:
        _cleanup(procs, node)
