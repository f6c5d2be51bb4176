"""Start-up time and memory against world size (one size per child process).

World size N is the number of processes in the RPC group, the driver included:

- ``actorrt``: ``actorrt.start(num_workers=N-1)``, then one actor per worker, each
  answering one call with its pid (the scheduler spreads unlabelled actors over the
  workers; the row says how many distinct workers answered).
- ``torch``: N-1 worker processes spawned and ``init_rpc`` of a static group of N with
  default TensorPipe options, then one ``rpc_async(os.getpid)`` to every worker.
- ``ray``: ``ray.init(num_cpus=<cores>)`` and N-1 actors (``num_cpus=0``), each
  answering one call, waited for no longer than the time budget; the row says how many
  answered in it.

Start-up is from the first line of that (``start``, spawning, ``ray.init``) to the last
answer. Memory, read once every member answered: the driver's RSS, the median RSS and
PSS of the members, and the PSS summed over the driver and every process under it
(actorrt's zygote, Ray's raylet and GCS). PSS splits pages shared between processes
(forked or mapped from the same file) among them, so the sum does not count torch's
libraries once per process as the RSS sum would.

A world that does not form is a row too: ``failed`` holds the first line of the error.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from typing import Any

MB = 1024 * 1024

# The first line of a Python exception (``RuntimeError: ...``, ``actorrt.errors.X: ...``).
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*)?(Error|Exception|Interrupt|Exit)\b[^:\s]*: \S")


def first_error_line(text: str) -> str | None:
    """The first line of ``text`` that starts a Python exception message, else None."""
    for line in text.splitlines():
        if _EXC_LINE.match(line.strip()):
            return line.strip()
    return None


def failure(world: int, message: str, seconds: float | None = None) -> dict[str, Any]:
    """The row of a world that did not form: the first non-empty line of ``message``."""
    lines = [ln.strip() for ln in str(message).splitlines() if ln.strip()]
    row: dict[str, Any] = {"world": world, "failed": lines[0] if lines else "(no message)"}
    if seconds is not None:
        row["seconds"] = seconds
    return row


def summarize_memory(
    driver: tuple[int, int], members: list[tuple[int, int]], tree_pss: list[int]
) -> dict[str, float]:
    """MB figures from (rss, pss) of the driver and of each member, and the tree's PSS."""
    out = {
        "driver_rss_mb": driver[0] / MB,
        "tree_pss_mb": sum(tree_pss) / MB,
        "processes": len(tree_pss),
    }
    if members:
        out["member_rss_mb"] = statistics.median(r for r, _ in members) / MB
        out["member_pss_mb"] = statistics.median(p for _, p in members) / MB
    return out


def measure_memory(member_pids: list[int]) -> dict[str, float]:
    """:func:`summarize_memory` of this process, ``member_pids`` and every descendant."""
    import psutil

    me = psutil.Process()

    def rss_pss(p: Any) -> tuple[int, int] | None:
        try:
            m = p.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None
        return m.rss, m.pss

    tree = {p.pid: p for p in [me, *me.children(recursive=True)]}
    for pid in member_pids:
        if pid not in tree:
            try:
                tree[pid] = psutil.Process(pid)
            except psutil.NoSuchProcess:
                pass
    figures = {pid: rss_pss(p) for pid, p in tree.items()}
    driver = figures[me.pid] or (0, 0)
    members = [f for pid in member_pids if (f := figures.get(pid)) is not None]
    return summarize_memory(driver, members, [f[1] for f in figures.values() if f])


# Memory one member may take (MB), a little above the PSS measured on the 2-core VM
# (actorrt ~52 forked from the zygote, raw torch ~175 each with its own torch import, Ray
# ~45): a world that would not fit in the memory available is not started at all.
MEMBER_MB = {"actorrt": 80, "torch": 200, "ray": 70}
RESERVE_MB = 2048  # left to the rest of the machine


def memory_check(system: str, world: int, available_mb: float) -> str | None:
    """Why a world of this size is not started here (too little memory), or None."""
    need = world * MEMBER_MB[system] + RESERVE_MB
    if need <= available_mb:
        return None
    return (
        f"not run: {world} processes need about {need / 1024:.1f} GB "
        f"({MEMBER_MB[system]} MB each + {RESERVE_MB // 1024} GB reserve), "
        f"{available_mb / 1024:.1f} GB available"
    )


def run(system: str, cfg: dict) -> dict:
    import psutil

    world = int(cfg["world"])
    budget = float(cfg["world_budget_s"])
    runner = {"actorrt": _actorrt, "torch": _torch, "ray": _ray}[system]
    why_not = memory_check(system, world, psutil.virtual_memory().available / MB)
    if why_not:
        return {"world_size": {str(world): {"world": world, "skipped": why_not}}}
    t0 = time.perf_counter()
    try:
        row = runner(world, budget)
    except Exception as exc:  # noqa: BLE001 - a world that does not form is the result
        row = failure(world, f"{type(exc).__name__}: {exc}", time.perf_counter() - t0)
    return {"world_size": {str(world): row}}


def _formed(world: int, seconds: float, pids: list[int]) -> dict[str, Any]:
    return {
        "world": world,
        "seconds": seconds,
        "answered": len(set(pids)),
        "members": world - 1,
        **measure_memory(sorted(set(pids))),
    }


def _actorrt(world: int, budget: float) -> dict:
    import actorrt

    @actorrt.actor
    class Member:
        def pid(self) -> int:
            return os.getpid()

    t0 = time.perf_counter()
    with actorrt.start(num_workers=world - 1, timeout=budget):
        members = [Member.remote() for _ in range(world - 1)]
        pids = actorrt.get([m.pid.remote() for m in members], timeout=budget)
        return _formed(world, time.perf_counter() - t0, pids)


def _torch(world: int, budget: float) -> dict:
    import torch
    import torch.distributed.rpc as rpc

    from benchmarks import sys_torch

    t0 = time.perf_counter()
    procs = sys_torch.start_group(world)
    try:
        futs = [rpc.rpc_async(f"w{r}", os.getpid, timeout=budget) for r in range(1, world)]
        pids = torch.futures.wait_all(futs)
        row = _formed(world, time.perf_counter() - t0, pids)
    except BaseException:
        sys_torch.kill_all(procs)
        raise
    _stop_torch(procs)
    return row


def _stop_torch(procs: list) -> None:
    """A bounded shutdown: the graceful one, then whatever is left killed by pid."""
    import torch.distributed.rpc as rpc

    from benchmarks import sys_torch

    try:
        rpc.shutdown(graceful=True, timeout=30)
    except Exception:  # noqa: BLE001 - the figures are taken; the workers die below
        pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.1)
    sys_torch.kill_all(procs)


def _ray(world: int, budget: float) -> dict:
    import ray

    class Member:
        def pid(self) -> int:
            return os.getpid()

    t0 = time.perf_counter()
    ray.init(
        num_cpus=os.cpu_count() or 1,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        remote = ray.remote(num_cpus=0)(Member)
        # Held until the end: Ray ends an actor whose last handle is dropped.
        members = [remote.remote() for _ in range(world - 1)]
        refs = [m.pid.remote() for m in members]
        left = max(0.0, budget - (time.perf_counter() - t0))
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=left)
        row = _formed(world, time.perf_counter() - t0, ray.get(ready))
        if len(ready) < len(refs):
            row["budget_s"] = budget  # stopped by the budget: seconds is the budget spent
        return row
    finally:
        ray.shutdown()
