"""Ray: the same measurements through Ray actors (local ``ray.init``, no dashboard)."""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import ray
import torch

from benchmarks.common import latency_stats, time_calls, transfer_sweep


class Target:
    def ping(self, x: Any = None) -> Any:
        return x

    def nbytes(self, t: Any) -> int:
        return t.nbytes


class Caller:
    def run(self, targets: list, n: int) -> float:
        t0 = time.perf_counter()
        ray.get([targets[i % len(targets)].ping.remote(i) for i in range(n)])
        return time.perf_counter() - t0

    def ping(self, x: Any = None) -> Any:
        return x


# Actors ask for no CPU so any number fit on a 2-core machine (as actorrt's do).
RTarget = ray.remote(num_cpus=0)(Target)
RCaller = ray.remote(num_cpus=0)(Caller)


def init(num_cpus: int) -> None:
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )


def run(suite: str, cfg: dict) -> dict:
    if suite == "first_call":
        return first_call(cfg)
    init(8 if suite == "nn" else 2)
    try:
        if suite == "nn":
            return nn_calls(cfg)
        t = RTarget.remote()
        ray.get(t.ping.remote())
        out: dict[str, Any] = {}
        out["sync"] = latency_stats(
            time_calls(lambda: ray.get(t.ping.remote(1)), cfg["sync_calls"])
        )
        rates = []
        n = cfg["async_calls"]
        for _ in range(cfg["async_rounds"]):
            t0 = time.perf_counter()
            ray.get([t.ping.remote(1) for _ in range(n)])
            rates.append(n / (time.perf_counter() - t0))
        out["async"] = {"calls_per_s": statistics.median(rates), "rounds": rates}
        out["create"] = creation(cfg)
        # Default: a torch tensor passed as an argument (Ray serialises it for you).
        out["xfer_local"] = transfer_sweep(
            lambda x: ray.get(t.nbytes.remote(x)),
            lambda size: torch.ones(size, dtype=torch.uint8),
            cfg,
        )
        # Zero-copy object store: ray.put of a numpy array, the actor maps it read-only.
        out["xfer_local_zerocopy"] = transfer_sweep(
            lambda x: ray.get(t.nbytes.remote(ray.put(x))),
            lambda size: np.ones(size, dtype=np.uint8),
            cfg,
        )
        return out
    finally:
        ray.shutdown()


def creation(cfg: dict) -> dict:
    # Each Ray actor is a new worker process (about 2 s each here): fewer of them.
    n = min(cfg["create_actors"], 8 if cfg["quick"] else 16)
    t0 = time.perf_counter()
    actors = [RTarget.remote() for _ in range(n)]
    ray.get([a.ping.remote() for a in actors])
    seconds = time.perf_counter() - t0
    for a in actors:
        ray.kill(a)
    return {"actors_per_s": n / seconds, "n": n}


def nn_calls(cfg: dict) -> dict:
    targets = [RTarget.remote() for _ in range(4)]
    callers = [RCaller.remote() for _ in range(4)]
    ray.get([a.ping.remote() for a in targets + callers])
    n = cfg["nn_calls"]
    ray.get([c.run.remote(targets, 50) for c in callers])
    rates = []
    for _ in range(3):
        t0 = time.perf_counter()
        ray.get([c.run.remote(targets, n) for c in callers])
        rates.append(4 * n / (time.perf_counter() - t0))
    return {"nn": {"calls_per_s": statistics.median(rates), "rounds": rates}}


def first_call(cfg: dict) -> dict:
    t0 = time.perf_counter()
    init(4)
    try:
        t = RTarget.remote()
        ray.get(t.ping.remote(1))
        seconds = time.perf_counter() - t0
    finally:
        ray.shutdown()
    return {"first_call": {"seconds": seconds}}
