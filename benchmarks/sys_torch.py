"""Raw torch RPC: ``rpc_sync`` / ``rpc_async`` to module-level functions, a group we set up."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from typing import Any

import torch
import torch.distributed.rpc as rpc

from benchmarks.common import child_env, free_port, latency_stats, time_calls, transfer_sweep


def echo(x: Any = None) -> Any:
    return x


def nbytes(t: torch.Tensor) -> int:
    return t.nbytes


def _options(port: int, tcp_only: bool) -> rpc.TensorPipeRpcBackendOptions:
    kw: dict[str, Any] = {}
    if tcp_only:
        kw = {"_transports": ["uv"], "_channels": ["basic"]}
    return rpc.TensorPipeRpcBackendOptions(
        init_method=f"tcp://127.0.0.1:{port}", num_worker_threads=16, rpc_timeout=120, **kw
    )


def _spawn_workers(world: int, port: int, tcp_only: bool) -> list[subprocess.Popen]:
    procs = []
    for rank in range(1, world):
        cmd = [sys.executable, "-m", "benchmarks.sys_torch", str(rank), str(world), str(port)]
        cmd += ["tcp"] if tcp_only else []
        procs.append(subprocess.Popen(cmd, env=child_env()))
    return procs


def _join(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def start_group(world: int, tcp_only: bool = False) -> list[subprocess.Popen]:
    os.environ.setdefault("TP_SOCKET_IFNAME", "lo")
    port = free_port()
    procs = _spawn_workers(world, port, tcp_only)
    try:
        rpc.init_rpc("w0", rank=0, world_size=world, rpc_backend_options=_options(port, tcp_only))
    except BaseException:
        kill_all(procs)  # a group that did not form leaves no worker behind
        raise
    return procs


def kill_all(procs: list[subprocess.Popen]) -> None:
    """Kills the workers we spawned (by their pids) and reaps them."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait(10)


def stop_group(procs: list[subprocess.Popen]) -> None:
    rpc.shutdown(graceful=True, timeout=30)
    _join(procs)


def run(suite: str, cfg: dict) -> dict:
    if suite == "first_call":
        return first_call(cfg)
    tcp = suite == "tcp"
    procs = start_group(2, tcp_only=tcp)
    try:
        out: dict[str, Any] = {}
        if not tcp:
            out["sync"] = latency_stats(
                time_calls(lambda: rpc.rpc_sync("w1", echo, args=(1,)), cfg["sync_calls"])
            )
            rates = []
            n = cfg["async_calls"]
            for _ in range(cfg["async_rounds"]):
                t0 = time.perf_counter()
                futs = [rpc.rpc_async("w1", echo, args=(1,)) for _ in range(n)]
                torch.futures.wait_all(futs)
                rates.append(n / (time.perf_counter() - t0))
            out["async"] = {"calls_per_s": statistics.median(rates), "rounds": rates}
        out["xfer_tcp" if tcp else "xfer_local"] = transfer_sweep(
            lambda t: rpc.rpc_sync("w1", nbytes, args=(t,)),
            lambda size: torch.ones(size, dtype=torch.uint8),
            cfg,
        )
        return out
    finally:
        stop_group(procs)


def first_call(cfg: dict) -> dict:
    """A 4-worker group (+ this process): from spawning workers to the first call's reply."""
    t0 = time.perf_counter()
    procs = start_group(5)
    rpc.rpc_sync("w1", echo, args=(1,))
    seconds = time.perf_counter() - t0
    stop_group(procs)
    return {"first_call": {"seconds": seconds}}


def _worker(rank: int, world: int, port: int, tcp_only: bool) -> None:
    os.environ.setdefault("TP_SOCKET_IFNAME", "lo")
    rpc.init_rpc(
        f"w{rank}", rank=rank, world_size=world, rpc_backend_options=_options(port, tcp_only)
    )
    rpc.shutdown(graceful=True, timeout=600)


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:] == ["tcp"])
