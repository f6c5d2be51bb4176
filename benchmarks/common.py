"""Timing helpers and the shared configuration of one benchmark run."""

from __future__ import annotations

import os
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

KB = 1024
MB = 1024 * KB

FULL_SIZES = [1 * KB, 16 * KB, 256 * KB, 1 * MB, 4 * MB, 16 * MB, 64 * MB, 256 * MB]
QUICK_SIZES = [1 * KB, 64 * KB, 1 * MB, 16 * MB, 256 * MB]

# DI-engine's latency-by-size table (seed 002): float32 tensors of 5 x N elements,
# 1.25 KB, 20 KB, 1.25 MB, 10 MB, 40 MB, 640 MB, 1.25 GB and 2.5 GB.
SEED_SIZES = [5 * 4 * n for n in (64, 1024, 64 * KB, 512 * KB, 2 * MB, 32 * MB, 64 * MB, 128 * MB)]
# The world-size suite's ladders (processes in the RPC group, the driver included).
WORLD_SIZES = [2, 8, 32, 64, 128]
WORLD_SIZES_QUICK = [2, 8, 32]


def config(quick: bool) -> dict[str, Any]:
    """Iteration counts for a quick or a full run (one dict, passed to every child)."""
    if quick:
        return {
            "quick": True,
            "sync_calls": 400,
            "interleaved_rounds": 4,
            "interleaved_calls": 200,
            "async_calls": 2000,
            "async_rounds": 3,
            "nn_calls": 300,
            "create_actors": 16,
            "first_call_reps": 1,
            "sizes": QUICK_SIZES,
            "xfer_time": 0.4,
            "dqn_frames": 4000,
            "dqn_throughput_frames": 8000,
            "dqn_throughput_raw_s": 4.0,
            "latency_max_bytes": SEED_SIZES[4],  # 40 MB
            "latency_rounds": 3,
            "latency_time": 0.6,
            "latency_min_reps": 2,
            "world_sizes": WORLD_SIZES_QUICK,
            "world_budget_s": 120.0,
            "objects_reps": 2,
            "tasks_calls": 100,
            "tasks_burst": 1000,
            "tasks_stream": 500,
        }
    return {
        "quick": False,
        "sync_calls": 3000,
        "interleaved_rounds": 10,
        "interleaved_calls": 300,
        "async_calls": 5000,
        "async_rounds": 5,
        "nn_calls": 1500,
        "create_actors": 48,
        "first_call_reps": 3,
        "sizes": FULL_SIZES,
        "xfer_time": 1.5,
        "dqn_frames": 12000,
        "dqn_throughput_frames": 40000,
        "dqn_throughput_raw_s": 10.0,
        # 2.5 GB is left out: pynng holds about 8 copies of a payload at its peak, and
        # that one size would take minutes per system on 2 cores.
        "latency_max_bytes": SEED_SIZES[6],  # 1.25 GB
        "latency_rounds": 3,
        "latency_time": 1.5,
        "latency_min_reps": 2,
        "world_sizes": WORLD_SIZES_QUICK,
        "world_budget_s": 120.0,
        "objects_reps": 3,
        "tasks_calls": 300,
        "tasks_burst": 2000,
        "tasks_stream": 1000,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_calls(fn: Callable[[], Any], n: int, warmup: int = 20) -> list[float]:
    """Per-call wall times (seconds) of ``n`` calls of ``fn`` after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    out = []
    pc = time.perf_counter
    for _ in range(n):
        t0 = pc()
        fn()
        out.append(pc() - t0)
    return out


def median_time(fn: Callable[[], Any], reps: int) -> float:
    """The median of ``reps`` timings of ``fn()`` in seconds, after one warm-up call."""
    return statistics.median(time_calls(fn, reps, warmup=1))


def time_for(
    fn: Callable[[], Any], seconds: float, min_iters: int = 3, warmup: int = 2
) -> list[float]:
    """Per-call times of ``fn`` repeated for about ``seconds`` (at least ``min_iters``)."""
    for _ in range(warmup):
        fn()
    out: list[float] = []
    start = time.perf_counter()
    while len(out) < min_iters or (time.perf_counter() - start < seconds and len(out) < 10_000):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def latency_stats(samples: list[float]) -> dict[str, float]:
    """Median / p10 / p90 / mean in microseconds."""
    s = sorted(samples)
    return {
        "median_us": statistics.median(s) * 1e6,
        "mean_us": statistics.fmean(s) * 1e6,
        "p10_us": s[len(s) // 10] * 1e6,
        "p90_us": s[(len(s) * 9) // 10] * 1e6,
        "n": len(s),
    }


def transfer_sweep(send: Callable[[Any], Any], make: Callable[[int], Any], cfg: dict) -> dict:
    """GB/s per size: median time of ``send(payload)`` for each size in ``cfg['sizes']``."""
    out = {}
    for size in cfg["sizes"]:
        payload = make(size)
        samples = time_for(lambda p=payload: send(p), cfg["xfer_time"], min_iters=5, warmup=3)
        med = statistics.median(samples)
        out[str(size)] = {"gbps": size / med / 1e9, "median_us": med * 1e6, "n": len(samples)}
        del payload
    return out


def child_env() -> dict[str, str]:
    """Environment of benchmark child processes: the repo root importable, 1 OpenMP thread."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env
