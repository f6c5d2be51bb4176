"""actorrt: the same measurements through actors on a local cluster."""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import torch

import actorrt
from benchmarks import breakdown
from benchmarks.common import latency_stats, time_calls, transfer_sweep


@actorrt.actor
class Target:
    def ping(self, x: Any = None) -> Any:
        return x

    def nbytes(self, t: torch.Tensor) -> int:
        return t.nbytes


@actorrt.actor
class Caller:
    def run(self, targets: list, n: int) -> float:
        t0 = time.perf_counter()
        refs = [targets[i % len(targets)].ping.remote(i) for i in range(n)]
        actorrt.get(refs, timeout=300)
        return time.perf_counter() - t0

    def ping(self, x: Any = None) -> Any:
        return x


# process_setup.py's override: TensorPipe over TCP only (uv transport, basic channel);
# forcing transports without shm also turns actorrt's shared-memory road off, and
# ACTORRT_SHM=0 says so outright. Workers inherit it from the driver.
TCP_ONLY_ENV = {"ACTORRT_TP_TRANSPORTS": "uv", "ACTORRT_TP_CHANNELS": "basic", "ACTORRT_SHM": "0"}


def use_tcp_only() -> None:
    """Makes the next ``actorrt.start`` in this process use TCP only (set before it)."""
    os.environ.update(TCP_ONLY_ENV)


def _ready(handles: list) -> None:
    actorrt.get([h.ping.remote() for h in handles], timeout=120)


def run(suite: str, cfg: dict) -> dict:
    if suite == "first_call":
        return first_call(cfg)
    if suite == "tcp":
        use_tcp_only()
        with actorrt.start(num_workers=1):
            t = Target.remote()
            _ready([t])
            return {"xfer_tcp": _xfer(t, cfg)}
    if suite == "nn":
        with actorrt.start(num_workers=8):
            return nn_calls(cfg)
    with actorrt.start(num_workers=2):
        t = Target.remote()
        _ready([t])
        out: dict[str, Any] = {}
        out["sync"] = latency_stats(
            time_calls(lambda: actorrt.get(t.ping.remote(1)), cfg["sync_calls"])
        )
        # The same against raw torch RPC on this very worker, in interleaved rounds.
        out["sync_interleaved"] = breakdown.interleaved(
            t, rounds=cfg["interleaved_rounds"], n=cfg["interleaved_calls"]
        )
        rates = []
        n = cfg["async_calls"]
        for _ in range(cfg["async_rounds"]):
            t0 = time.perf_counter()
            actorrt.get([t.ping.remote(1) for _ in range(n)], timeout=300)
            rates.append(n / (time.perf_counter() - t0))
        out["async"] = {"calls_per_s": statistics.median(rates), "rounds": rates}
        out["create"] = creation(cfg)
        out["xfer_local"] = _xfer(t, cfg)
        return out


def _xfer(t: Any, cfg: dict) -> dict:
    return transfer_sweep(
        lambda x: actorrt.get(t.nbytes.remote(x), timeout=120),
        lambda size: torch.ones(size, dtype=torch.uint8),
        cfg,
    )


def creation(cfg: dict) -> dict:
    """Actors created and answering a first call, per second (on the running cluster)."""
    n = cfg["create_actors"]
    t0 = time.perf_counter()
    actors = [Target.remote() for _ in range(n)]
    _ready(actors)
    seconds = time.perf_counter() - t0
    for a in actors:
        actorrt.kill(a)
    return {"actors_per_s": n / seconds, "n": n}


def nn_calls(cfg: dict) -> dict:
    """4 caller actors each send n async calls round-robin to 4 target actors."""
    targets = [Target.remote() for _ in range(4)]
    callers = [Caller.remote() for _ in range(4)]
    _ready(targets + callers)
    n = cfg["nn_calls"]
    actorrt.get([c.run.remote(targets, 50) for c in callers], timeout=120)  # warm-up
    rates = []
    for _ in range(3):
        t0 = time.perf_counter()
        actorrt.get([c.run.remote(targets, n) for c in callers], timeout=300)
        rates.append(4 * n / (time.perf_counter() - t0))
    return {"nn": {"calls_per_s": statistics.median(rates), "rounds": rates}}


def first_call(cfg: dict) -> dict:
    t0 = time.perf_counter()
    with actorrt.start(num_workers=4):
        t = Target.remote()
        actorrt.get(t.ping.remote(1), timeout=120)
        seconds = time.perf_counter() - t0
    return {"first_call": {"seconds": seconds}}
