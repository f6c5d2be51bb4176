"""cluster.watchdog: a kernel timer ends a process none of whose Python threads runs."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

from actorrt.cluster import watchdog
from actorrt.cluster.local import exit_text

_HEADER = """
import ctypes, os, sys, time
from actorrt.cluster.watchdog import Watchdog
dog = Watchdog.arm({period})
print("armed", dog is not None, flush=True)
"""


def _run(
    body: str, period: float, timeout: float = 30
) -> tuple[subprocess.CompletedProcess[str], float]:
    """Runs ``body`` in a fresh interpreter whose watchdog (``dog``) fires after ``period``."""
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _HEADER.format(period=period) + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done, time.monotonic() - began


def test_a_process_stuck_in_c_with_the_gil_writes_its_stacks_and_ends():
    done, took = _run(
        """
        def stuck_here():
            ctypes.PyDLL(None).sleep(20)  # C code that keeps the GIL: no thread can pet

        stuck_here()
        print("ran on", flush=True)
        """,
        period=0.5,
    )
    assert done.stdout.splitlines() == ["armed True"], done
    assert done.returncode == -signal.SIGUSR2, done
    assert took < 15, "it waited for the sleep"
    frames = [ln.strip() for ln in done.stderr.splitlines() if ln.strip().startswith('File "')]
    assert any(f.endswith(" in stuck_here") for f in frames), done.stderr


def test_a_petted_watchdog_lets_the_process_run_and_a_fork_inherits_no_timer():
    done, _ = _run(
        """
        child = os.fork()
        if child == 0:  # an environment or a data loader forked by an actor
            time.sleep(4.5)  # over twice the parent's watchdog period: nobody pets here
            os._exit(0)
        while True:  # the parent pets, as the heartbeat thread does (20 times a period)
            pid, status = os.waitpid(child, os.WNOHANG)
            if pid:
                break
            dog.pet()
            time.sleep(0.1)
        print("child", os.waitstatus_to_exitcode(status), flush=True)
        dog.disarm()
        time.sleep(2.5)  # disarmed: nothing ends it
        print("ran on", flush=True)
        """,
        period=2.0,
    )
    assert done.stdout.splitlines() == ["armed True", "child 0", "ran on"], done
    assert done.returncode == 0, done


def test_the_exit_status_names_the_watchdog():
    said = exit_text(-watchdog.SIGNAL)
    assert "SIGUSR2" in said and "watchdog" in said and "GIL" in said
    assert exit_text(-signal.SIGKILL) == "killed by SIGKILL"
