"""Runs a driver script in its own Python process and reads what it reports.

A process that has started one cluster cannot start a second with full features (torch
binds its RRef context to the first RPC agent; see docs/architecture.md), and a test
process may already hold the shared ``cluster`` fixture. So every test that starts or
fails to start a cluster of its own runs it here, in a fresh interpreter.

The script prints ``REPORT {json}`` lines (``report(**kw)`` in a header does that). Every
pid it lists under ``"pids"`` must be gone within ``grace`` seconds of the script's exit;
survivors are killed and fail the test.
"""

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from procutil import kill_pids, pid_alive

REPORT_HELPER = """
import json as _json

def report(**kw):
    print("REPORT", _json.dumps(kw), flush=True)

def outcomes(refs, timeout):
    # What getting each ref gave, sorted: "value", or "ActorDiedError" (anything else
    # is raised, and fails the script).
    import actorrt as _actorrt
    kinds = set()
    for ref in refs:
        try:
            _actorrt.get(ref, timeout=timeout)
            kinds.add("value")
        except _actorrt.ActorDiedError:
            kinds.add("ActorDiedError")
    return sorted(kinds)

def fork_holder(seconds):
    # A child that inherits the calling process's sockets and outlives it (as an
    # environment or data loader forked by an actor would): once that process died, its
    # connections stay open and answer nothing. The child's pid (report it, to be killed).
    import os as _os, time as _time
    child = _os.fork()
    if child == 0:
        _time.sleep(seconds)
        _os._exit(0)
    return child
"""


def wait_gone(pids, within: float) -> list[int]:
    """Waits up to ``within`` seconds for ``pids`` to exit; returns those still alive."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if pid_alive(p)]


def run_script(
    tmp_path: Path,
    header: str,
    body: str,
    *,
    timeout: float = 150,
    grace: float = 10,
    name: str = "driver_script.py",
) -> list[dict]:
    """Runs ``header + REPORT_HELPER + dedent(body)`` as a script; returns its reports.

    Fails the test when the script times out, exits non-zero, or leaves a reported pid
    running ``grace`` seconds after it exits.
    """
    return run_script_with_stderr(tmp_path, header, body, timeout=timeout, grace=grace, name=name)[
        0
    ]


def run_script_with_stderr(
    tmp_path: Path,
    header: str,
    body: str,
    *,
    timeout: float = 150,
    grace: float = 10,
    name: str = "driver_script.py",
) -> tuple[list[dict], str]:
    """:func:`run_script`, also returning what the script wrote on stderr."""
    script = tmp_path / name
    script.write_text(header + REPORT_HELPER + textwrap.dedent(body))
    try:
        out = subprocess.run(
            # -X faulthandler: a driver killed by a signal (SIGSEGV inside torch's agent)
            # prints every thread's Python stack, which the failure below shows
            [sys.executable, "-X", "faulthandler", str(script)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=tmp_path,
        )
    except subprocess.TimeoutExpired as exc:  # run() has killed the script itself
        kill_pids(p for rep in _reports(_text(exc.stdout)) for p in rep.get("pids", []))
        pytest.fail(f"the driver did not finish within {timeout} s: {exc.stdout}\n{exc.stderr}")
    reports = _reports(out.stdout)
    left = wait_gone([p for rep in reports for p in rep.get("pids", [])], grace)
    kill_pids(left)
    tail = 4000 if out.returncode >= 0 else 16000  # a crash: the threads' stacks too
    assert out.returncode == 0, (
        f"the driver exited with {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-tail:]}"
    )
    assert not left, f"processes left {grace} s after the driver exited: {left}"
    return reports, out.stderr


def _text(data: str | bytes | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def _reports(stdout: str) -> list[dict]:
    return [
        json.loads(line[len("REPORT ") :])
        for line in stdout.splitlines()
        if line.startswith("REPORT ")
    ]
