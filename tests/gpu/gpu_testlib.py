"""Helpers for the CUDA tests: skip marks, bounded driver scripts, torch's device-map check.

Every test under tests/gpu skips with a reason on a machine without CUDA (the CPU build
of torch, or no GPU), and runs unchanged on a machine with one or two GPUs. Tests that
start a cluster run its driver as a separate script (a process that started one cluster
cannot start a second with working actor handles: torch binds its RRef context to the
first RPC agent): the script's life is bounded by ``signal.alarm``, and every process it
started is killed by pid when the test ends, whatever happened.
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import actorrt

# The placement tests' helpers (torch's validator over a plan) serve the GPU tests too.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "placement"))
import placement_testlib  # noqa: E402

# ... and the integration tests' process helpers (liveness and kills, by pid).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from procutil import kill_pids, pid_alive  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def cuda_count() -> int:
    """GPUs torch sees here (0 on a CPU build or a machine without GPUs)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


#: Module mark: every test of the file skips, with this reason, where CUDA is absent.
requires_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason=f"needs CUDA: torch {torch.__version__} sees no GPU here "
    "(torch.cuda.is_available() is False)",
)


def requires_gpus(n: int) -> pytest.MarkDecorator:
    """Skips a test, with a reason, on a machine with fewer than ``n`` GPUs."""
    have = cuda_count()
    return pytest.mark.skipif(have < n, reason=f"needs CUDA: {n} GPUs, this machine has {have}")


def need_gpus(n: int) -> None:
    """Inside a (parametrized) test: skip with a reason when fewer than ``n`` GPUs exist."""
    have = cuda_count()
    if have < n:
        pytest.skip(f"needs CUDA: {n} GPUs, this machine has {have}")


def need_start_option(name: str) -> None:
    """Skip with a reason when ``actorrt.start`` does not take ``name`` yet."""
    if name not in inspect.signature(actorrt.start).parameters:
        pytest.skip(f"needs actorrt.start({name}=...), which this build of actorrt lacks")


def need_api(*names: str) -> None:
    """Skip with a reason when a public function of actorrt does not exist yet."""
    missing = [n for n in names if not callable(getattr(actorrt, n, None))]
    if missing:
        pytest.skip(f"needs actorrt.{', actorrt.'.join(missing)}(), missing in this build")


# -- processes ------------------------------------------------------------------------


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children first), read from /proc."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            for kid in kids:
                if kid not in out:
                    out.append(kid)
                    todo.append(kid)
    return out


def wait_gone(pids, within: float) -> list[int]:
    """Waits up to ``within`` seconds for ``pids`` to end; returns those still alive."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if pid_alive(p)]


def run_bounded(argv: list[str], *, timeout: float, cwd: Path, env: dict | None = None):
    """Runs ``argv``; on timeout kills it and everything it started, by pid.

    Returns:
        ``(returncode or None on timeout, stdout, stderr)``.
    """
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    family: list[int] = []
    try:
        try:
            out, err = proc.communicate(timeout=timeout)
            return proc.returncode, out, err
        except subprocess.TimeoutExpired:
            family = descendants(proc.pid)
            kill_pids([proc.pid, *family])
            out, err = proc.communicate(timeout=30)
            return None, out, err
    finally:
        if proc.poll() is None:
            family = family or descendants(proc.pid)
            kill_pids([proc.pid, *family])
            proc.wait(timeout=30)
        kill_pids(p for p in family if pid_alive(p))


DRIVER_HEADER = """
import json, os, signal, sys, time
signal.alarm(@ALARM@)  # this driver's life is bounded even if a wait below hangs
import torch
import actorrt


def report(**kw):
    print("REPORT", json.dumps(kw, default=str), flush=True)


def started(rt):
    # first report: the pids of the workers and of this driver's children (the zygote), so
    # the test kills them even if this driver hangs or dies later
    children = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/children") as f:
            children += [int(p) for p in f.read().split()]
    report(pids=sorted(set(rt.local_worker_pids) | set(children)), driver_pid=os.getpid())


def field(record, key):
    # actors() / nodes() records: dicts or objects with attributes
    value = record[key] if isinstance(record, dict) else getattr(record, key)
    return list(value) if isinstance(value, (tuple, list, set, frozenset)) else value
"""


def run_driver(tmp_path: Path, body: str, *, prelude: str = "", alarm: int = 240) -> dict[str, Any]:
    """Runs ``DRIVER_HEADER + prelude + body`` as a driver script; returns its reports merged.

    The script dies by ``SIGALRM`` after ``alarm`` seconds; the test kills it (and every
    process it started) by pid after ``alarm + 30`` seconds at the latest. Worker pids
    the script reported are killed at the end whatever happened.
    """
    script = tmp_path / "gpu_driver.py"
    text = DRIVER_HEADER.replace("@ALARM@", str(int(alarm))) + textwrap.dedent(prelude)
    script.write_text(text + textwrap.dedent(body))
    rc, out, err = run_bounded([sys.executable, str(script)], timeout=alarm + 30, cwd=tmp_path)
    merged: dict[str, Any] = {}
    for line in out.splitlines():
        if line.startswith("REPORT "):
            merged.update(json.loads(line[len("REPORT ") :]))
    pids = merged.get("pids", [])
    kill_pids(p for p in pids if pid_alive(p))
    why = "timed out" if rc is None else f"exited with {rc}"
    if rc == -signal.SIGALRM:
        why = f"ran past its {alarm} s alarm"
    assert rc == 0, f"the driver script {why}\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-6000:]}"
    assert wait_gone(pids, 15) == [], "worker processes outlived the driver's shutdown"
    return merged


# -- device maps -------------------------------------------------------------------------


def check_with_torch(plan: Any, device_counts: dict[str, int]) -> None:
    """Feeds the plan to torch's own group-wide validator, as init_rpc would.

    Args:
        plan: An :class:`actorrt.placement.Plan`.
        device_counts: ``torch.cuda.device_count()`` of each process, by name.
    """
    placement_testlib.check_with_torch(plan, [], device_counts)
