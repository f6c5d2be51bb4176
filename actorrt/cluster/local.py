"""The embedded local cluster: worker processes started from the driver, on loopback only.

Workers are not forks of the driver: the driver may hold CUDA or ibverbs state that a
fork would corrupt, and the user's script must not run again in them. One fresh
interpreter, the zygote (:mod:`actorrt.cluster.zygote`), imports torch once and forks
every worker, which saves each worker the import (most of its start-up).

Workers inherit the driver's terminal (stdout and stderr file descriptors) and its log
level (``ACTORRT_LOG_LEVEL``); what their actors print is sent to the driver's Python
streams when ``log_to_driver`` is on (:mod:`actorrt.runtime.output`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from actorrt.cluster.launch_env import set_fork_safety
from actorrt.errors import ClusterError
from actorrt.logs import get_logger

__all__ = ["LocalCluster"]

log = get_logger("local")


class LocalCluster:
    """Starts, watches and stops the worker processes of a local cluster.

    Args:
        num_workers: Worker processes to start (ranks 1..num_workers).
        port: Port of the driver's store on 127.0.0.1.
        token: The cluster token (passed through the environment, not argv).
        gpus_per_worker: GPU indices each worker offers, by worker (empty: none).
        labels_per_worker: Labels each worker offers, by worker (empty: any label).
        timeout: Seconds a worker waits for the rendezvous.
        rpc_timeout: Default timeout of the workers' control messages.
        num_worker_threads: TensorPipe's RPC thread pool size per worker.
        log_level: The workers' ``ACTORRT_LOG_LEVEL`` (None: the driver's environment's).
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
        log_level: str | None = None,
    ) -> None:
        # Called with a worker's rank when the zygote reports its exit (on the reader thread).
        self.on_exit: Callable[[int], None] | None = None
        env = dict(os.environ)
        if log_level is not None:
            env["ACTORRT_LOG_LEVEL"] = log_level
        env["ACTORRT_TOKEN"] = token
        env["ACTORRT_SYS_PATH"] = json.dumps([p for p in sys.path if p])
        env["TP_SOCKET_IFNAME"] = "lo"  # TensorPipe listens on loopback only
        # Workers share the machine's cores; without this each would start one
        # OpenMP thread per core and they would fight over them.
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // num_workers)))
        # Tensors TensorPipe receives land in fresh memory; transparent huge pages cut the
        # page faults of large ones (docs/performance.md). torch reads this once, at its
        # first allocation, so it must be set at exec.
        env.setdefault("THP_MEM_ALLOC_ENABLE", "1")
        set_fork_safety(env)
        configs = [
            {
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
            for i in range(num_workers)
        ]
        self.num_workers = num_workers
        self._configs = {c["rank"]: c for c in configs}
        self._cond = threading.Condition()
        self._pids: dict[int, int] = {}  # rank -> pid
        self._exits: dict[int, int] = {}  # rank -> exit code
        self._zygote_done = False
        report_r, report_w = os.pipe()
        config_r, config_w = os.pipe()
        try:
            self._zygote = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "actorrt.cluster.zygote",
                    "--report-fd",
                    str(report_w),
                    "--config-fd",
                    str(config_r),
                ],  # fmt: skip
                stdin=subprocess.PIPE,  # our end closing (we died) tells everyone to go
                pass_fds=(report_w, config_r),
                env=env,
                cwd=os.getcwd(),
            )
        finally:
            os.close(report_w)
            os.close(config_r)
        self._config_pipe: BinaryIO | None = os.fdopen(config_w, "wb")
        log.info(
            "local cluster: forking %d worker(s) from a zygote (pid %d)",
            num_workers, self._zygote.pid,
        )  # fmt: skip
        self._send_configs(configs)
        threading.Thread(
            target=self._read_reports, args=(report_r,), name="actorrt-zygote-reports", daemon=True
        ).start()

    def _send_configs(self, configs: list[dict[str, Any]]) -> None:
        with self._cond:
            if self._config_pipe is None:
                raise ClusterError("the local cluster is stopping; no worker is started")
            self._config_pipe.write(json.dumps(configs).encode() + b"\n")
            self._config_pipe.flush()

    def respawn(self, rank: int, **extra: Any) -> None:
        """Forks a new worker for ``rank``, whose process has exited, with ``extra`` config.

        Raises:
            ClusterError: The cluster is stopping, or ``rank``'s worker has not exited.
        """
        with self._cond:
            if rank not in self._exits:
                raise ClusterError(f"local worker rank {rank} is still running")
            del self._exits[rank]
            self._pids.pop(rank, None)
        self._send_configs([{**self._configs[rank], **extra}])

    def _read_reports(self, fd: int) -> None:
        with os.fdopen(fd) as reports:
            for line in reports:
                kind, rank, value = line.split()
                with self._cond:
                    (self._pids if kind == "pid" else self._exits)[int(rank)] = int(value)
                    self._cond.notify_all()
                    on_exit = self.on_exit
                if kind == "exit" and on_exit is not None:
                    on_exit(int(rank))
        with self._cond:
            self._zygote_done = True
            self._cond.notify_all()

    def is_gone(self, rank: int) -> bool:
        """Whether worker ``rank`` has ended, asked of the system now (not the reports).

        A worker the zygote has not reaped yet is a zombie: gone too.
        """
        with self._cond:
            if rank in self._exits:
                return True
            pid = self._pids.get(rank)
        if pid is None:
            return False
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        return state in ("Z", "X")

    def kill_rank(self, rank: int) -> None:
        """SIGKILLs worker ``rank`` (a hung one: its calls then fail, and it is reaped)."""
        with self._cond:
            pid = self._pids.get(rank) if rank not in self._exits else None
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    @property
    def pids(self) -> list[int]:
        """Worker pids by rank (waits briefly for the zygote to report forks in flight)."""
        with self._cond:
            self._cond.wait_for(
                lambda: len(self._pids) == self.num_workers or self._zygote_done, timeout=10.0
            )
            return [self._pids[r] for r in sorted(self._pids)]

    def check_alive(self) -> None:
        """Raises ``ClusterError`` naming a worker that exited while the cluster started."""
        with self._cond:
            exits = dict(self._exits)
            pids = dict(self._pids)
            forked_all = len(pids) == self.num_workers
        for rank, code in sorted(exits.items()):
            raise ClusterError(
                f"local worker rank {rank} (pid {pids.get(rank)}) exited with code {code} "
                "while the cluster was starting; its error is printed above."
            )
        zygote_code = self._zygote.poll()
        if zygote_code is not None and not forked_all:
            raise ClusterError(
                f"the local cluster's zygote (pid {self._zygote.pid}) exited with code "
                f"{zygote_code} before it started every worker; its error is printed above."
            )

    def dead_ranks(self) -> list[int]:
        """Ranks of the workers that have exited so far."""
        with self._cond:
            return sorted(self._exits)

    def exit_of(self, rank: int) -> tuple[int | None, int | None]:
        """(pid, exit code) of a worker; None for what is not known (yet)."""
        with self._cond:
            return self._pids.get(rank), self._exits.get(rank)

    def stop(self, timeout: float) -> None:
        """Ends every worker and the zygote within ``timeout`` s (at least about 1 s).

        The workers get most of ``timeout`` to exit by themselves, then SIGTERM, then
        SIGKILL (which also ends a stopped or hung one); the zygote goes last.
        """
        deadline = time.monotonic() + max(timeout, 1.0)

        def left(reserve: float = 0.0) -> float:
            return max(0.0, deadline - time.monotonic() - reserve)

        with self._cond:
            self._cond.wait_for(self._all_exited, timeout=left(reserve=min(1.0, timeout / 2)))
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with self._cond:
                alive = [pid for rank, pid in self._pids.items() if rank not in self._exits]
            if not alive or self._zygote_done:
                break
            for pid in alive:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            with self._cond:
                self._cond.wait_for(self._all_exited, timeout=min(0.5, left()))
        with self._cond:
            pipes = [self._config_pipe, self._zygote.stdin]
            self._config_pipe = None
        for pipe in pipes:
            if pipe is not None:
                try:
                    pipe.close()  # the zygote ends once its workers have
                except OSError:
                    pass
        try:
            self._zygote.wait(max(0.2, left()))
        except subprocess.TimeoutExpired:
            self._zygote.kill()
            self._zygote.wait(5.0)  # SIGKILL: reaped at once

    def _all_exited(self) -> bool:
        return self._zygote_done or all(r in self._exits for r in self._pids)
