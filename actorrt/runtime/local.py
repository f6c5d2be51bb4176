"""The embedded local cluster: worker processes started from the driver, on loopback only.

Workers are fresh interpreters (``python -m actorrt.runtime.worker``), not forks: the
driver may already hold CUDA or ibverbs state that a fork would corrupt, and a fresh
process does not re-run the user's script the way multiprocessing's spawn does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from actorrt.errors import ClusterError

__all__ = ["LocalCluster"]


class LocalCluster:
    """Starts, watches and stops the worker processes of a local cluster.

    Args:
        num_workers: Worker processes to start (ranks 1..num_workers).
        port: Port of the driver's store on 127.0.0.1.
        token: The cluster token (passed through the environment, not argv).
        gpus_per_worker: GPU indices each worker offers, by worker (empty: none).
        labels_per_worker: Labels each worker offers, by worker (empty: any label).
        timeout: Seconds a worker waits for the rendezvous.
    """

    def __init__(
        self,
        num_workers: int,
        port: int,
        token: str,
        *,
        gpus_per_worker: list[tuple[int, ...]],
        labels_per_worker: list[tuple[str, ...]],
        timeout: float,
        rpc_timeout: float,
        num_worker_threads: int,
    ) -> None:
        env = dict(os.environ)
        env["ACTORRT_TOKEN"] = token
        env["ACTORRT_SYS_PATH"] = json.dumps([p for p in sys.path if p])
        env["TP_SOCKET_IFNAME"] = "lo"  # TensorPipe listens on loopback only
        # Workers share the machine's cores; without this each would start one
        # OpenMP thread per core and they would fight over them.
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // num_workers)))
        # Tensors TensorPipe receives land in fresh memory; transparent huge pages cut the
        # page faults of large ones (256 MB: 1.4 -> 5.7 GB/s measured on a 2-core box).
        # torch reads this once, at its first allocation, so it must be set at exec.
        env.setdefault("THP_MEM_ALLOC_ENABLE", "1")
        self.procs: list[subprocess.Popen] = []
        for i in range(num_workers):
            config = {
                "host": "127.0.0.1",
                "port": port,
                "rank": i + 1,
                "world_size": num_workers + 1,
                "labels": list(labels_per_worker[i]),
                "gpus": list(gpus_per_worker[i]),
                "timeout": timeout,
                "watch_stdin": True,
                "num_worker_threads": num_worker_threads,
                "rpc_timeout": rpc_timeout,
            }
            self.procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "actorrt.runtime.worker",
                        "--config",
                        json.dumps(config),
                    ],
                    stdin=subprocess.PIPE,  # our end closing (we died) tells the worker to go
                    env=env,
                    cwd=os.getcwd(),
                )
            )

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def check_alive(self) -> None:
        """Raises ``ClusterError`` naming a worker that exited while the cluster started."""
        for rank, proc in enumerate(self.procs, start=1):
            code = proc.poll()
            if code is not None:
                raise ClusterError(
                    f"local worker rank {rank} (pid {proc.pid}) exited with code {code} while "
                    "the cluster was starting; its error is printed above."
                )

    def dead_ranks(self) -> list[int]:
        return [r for r, p in enumerate(self.procs, start=1) if p.poll() is not None]

    def stop(self, timeout: float) -> None:
        """Waits up to ``timeout`` s for the workers to exit, then kills them by pid."""
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            alive = [p for p in self.procs if p.poll() is None]
            if not alive:
                break
            for proc in alive:
                try:
                    os.kill(proc.pid, sig)
                except ProcessLookupError:
                    pass
            for proc in alive:
                try:
                    proc.wait(2.0)
                except subprocess.TimeoutExpired:
                    pass
        for proc in self.procs:
            if proc.stdin is not None:
                proc.stdin.close()
