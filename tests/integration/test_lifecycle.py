"""Cluster lifetime: worker death, shutdown bounds, restarts, scripts, a dying driver."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import kill_pids, pid_alive

import actorrt

pytestmark = pytest.mark.timeout(180)


@actorrt.actor
class Sleeper:
    def pid(self):
        return os.getpid()

    def sleep(self, s):
        time.sleep(s)
        return s


def _wait_gone(pids, within):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if pid_alive(p)]


def test_dead_worker_fails_pending_and_new_calls_then_shutdown_is_bounded():
    rt = actorrt.start(num_workers=2, timeout=90, shutdown_timeout=5)
    pids = list(rt.local_worker_pids)
    try:
        a = Sleeper.remote()
        b = Sleeper.remote()
        assert a.worker != b.worker  # the directory spreads actors over idle workers
        victim = actorrt.get(a.pid.remote(), timeout=30)
        assert victim in pids
        pending = a.sleep.remote(60)
        time.sleep(0.3)
        os.kill(victim, signal.SIGKILL)
        with pytest.raises(actorrt.ActorDiedError):
            actorrt.get(pending, timeout=30)
        with pytest.raises(actorrt.ActorDiedError):
            actorrt.get(a.sleep.remote(0), timeout=30)
        assert actorrt.get(b.sleep.remote(0.01), timeout=30) == 0.01  # the rest goes on
        # once the runtime knows the worker is dead, new actors avoid it
        deadline = time.monotonic() + 10
        while a.worker not in rt.dead_workers and time.monotonic() < deadline:
            time.sleep(0.05)
        assert a.worker in rt.dead_workers
        c = Sleeper.remote()
        assert c.worker == b.worker
        assert actorrt.get(c.sleep.remote(0), timeout=30) == 0
    finally:
        started = time.monotonic()
        actorrt.shutdown()
        took = time.monotonic() - started
        left = _wait_gone(pids, 5)
        kill_pids(left)
    assert not actorrt.is_initialized()
    assert took < 5 + 5 + 10, f"shutdown took {took:.1f} s"
    assert left == []


def test_context_manager_restart_and_shutdown_with_calls_in_flight():
    with actorrt.start(num_workers=1, shutdown_timeout=5) as rt:
        pids = list(rt.local_worker_pids)
        s = Sleeper.remote()
        assert actorrt.get(s.sleep.remote(0), timeout=30) == 0
        s.sleep.remote(30)  # still running when the cluster goes down
    assert not actorrt.is_initialized()
    left = _wait_gone(pids, 10)
    kill_pids(left)
    assert left == []
    with actorrt.start(num_workers=1) as rt2:  # the same process can start again
        assert actorrt.get(Sleeper.remote().sleep.remote(0), timeout=30) == 0
        pids = list(rt2.local_worker_pids)
    kill_pids(_wait_gone(pids, 10))


def test_shutdown_twice_and_calls_after_shutdown():
    with actorrt.start(num_workers=1) as rt:
        s = Sleeper.remote()
        pids = list(rt.local_worker_pids)
    actorrt.shutdown()  # a second shutdown is a no-op
    with pytest.raises(actorrt.NotInitializedError):
        s.sleep.remote(0)
    kill_pids(_wait_gone(pids, 10))


SCRIPT = """
import actorrt, torch

@actorrt.actor
class Accumulator:          # defined in __main__: shipped to workers with cloudpickle
    def __init__(self, scale):
        self.scale = scale
        self.total = torch.zeros(3)

    def add(self, t):
        self.total += t * self.scale
        return self.total

if __name__ == "__main__" or True:   # no main guard needed, unlike multiprocessing
    with actorrt.start(num_workers=2):
        acc = Accumulator.remote(2.0)
        acc.add.remote(torch.ones(3))
        print("RESULT", actorrt.get(acc.add.remote(torch.arange(3.0)), timeout=60).tolist())
"""


def test_class_defined_in_main_script(tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "RESULT [2.0, 4.0, 6.0]" in out.stdout


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
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        left = _wait_gone(pids, 20)
        assert left == [], "workers outlived their driver"
    finally:
        kill_pids([proc.pid, *pids])
        proc.wait(10)
