"""Worker processes forked on this host from one zygote: a local cluster, or a node's share.

Two users: the driver's embedded local cluster (``actorrt.start(num_workers=N)``, ranks
1..N on loopback only), and ``actorrt worker --nproc N`` (:mod:`actorrt.cluster.node`),
which starts ranks R..R+N-1 of a multi-node cluster on its node; there the workers find
their own interface towards the driver, as a single ``actorrt worker`` does.

Workers are not forks of the driver: the driver may hold CUDA or ibverbs state that a
fork would corrupt, and the user's script must not run again in them. One fresh
interpreter, the zygote (:mod:`actorrt.cluster.zygote`), imports torch once and forks
every worker, which saves each worker the import (most of its start-up).

Workers inherit their parent's terminal (stdout and stderr file descriptors) and its log
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
from collections.abc import Callable, Mapping, Sequence
from typing import Any, BinaryIO

from actorrt.cluster import watchdog, zygote
from actorrt.cluster.launch_env import set_fork_safety
from actorrt.errors import ClusterError
from actorrt.logs import get_logger
from actorrt.runtime import stacks

__all__ = ["LocalCluster", "exit_text"]

log = get_logger("local")


class LocalCluster:
    """Starts, watches and stops worker processes forked on this host from one zygote.

    Args:
        num_workers: Worker processes to start (ranks ``first_rank..first_rank+num_workers-1``).
        port: Port of the driver's store on ``host``.
        token: The cluster token (passed through the environment, not argv).
        gpus_per_worker: GPU indices each worker offers, by worker (empty: none; None:
            every visible GPU, or the one ``options["local_rank"]`` picks).
        labels_per_worker: Labels each worker offers, by worker (empty: any label).
        timeout: Seconds a worker waits for the rendezvous.
        rpc_timeout: Default timeout of the workers' control messages.
        num_worker_threads: TensorPipe's RPC thread pool size per worker.
        log_level: The workers' ``ACTORRT_LOG_LEVEL`` (None: this process's environment's).
        host: The driver's address (its store).
        first_rank: The first worker's rank.
        world_size: Processes in the cluster, driver included (default: ``num_workers + 1``).
        socket_ifname: ``TP_SOCKET_IFNAME`` of the workers. None: the environment's if
            set, else each worker finds the interface that reaches ``host``.
        options: Further :class:`~actorrt.cluster.worker.WorkerConfig` fields, the same
            for every worker (``transport``, ``log_level``), except ``local_rank``,
            which counts up from the given one, by worker.
        own_session: Start the zygote, and so every worker, in a session (and process
            group) of its own: a terminal's Ctrl-C then reaches this process only, which
            passes it on once (``actorrt worker --nproc``); the driver's local cluster
            shares its group.
    """

    def __init__(
        self,
        num_workers: int,
        port: int,
        token: str,
        *,
        gpus_per_worker: Sequence[tuple[int, ...] | None],
        labels_per_worker: Sequence[tuple[str, ...]],
        timeout: float,
        rpc_timeout: float,
        num_worker_threads: int,
        log_level: str | None = None,
        host: str = "127.0.0.1",
        first_rank: int = 1,
        world_size: int | None = None,
        socket_ifname: str | None = "lo",
        options: Mapping[str, Any] | None = None,
        own_session: bool = False,
    ) -> None:
        # Called with a worker's rank when the zygote reports its exit (on the reader thread).
        self.on_exit: Callable[[int], None] | None = None
        env = dict(os.environ)
        if log_level is not None:
            env["ACTORRT_LOG_LEVEL"] = log_level
        env["ACTORRT_TOKEN"] = token
        env["ACTORRT_SYS_PATH"] = json.dumps([p for p in sys.path if p])
        if socket_ifname is not None:  # "lo": a local cluster listens on loopback only
            env["TP_SOCKET_IFNAME"] = socket_ifname
        # Workers share the machine's cores; without this each would start one
        # OpenMP thread per core and they would fight over them.
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // num_workers)))
        # Tensors TensorPipe receives land in fresh memory; transparent huge pages cut the
        # page faults of large ones (docs/performance.md). torch reads this once, at its
        # first allocation, so it must be set at exec.
        env.setdefault("THP_MEM_ALLOC_ENABLE", "1")
        set_fork_safety(env)
        options = dict(options or {})
        local_rank = options.pop("local_rank", None)
        gpus = [None if g is None else list(g) for g in gpus_per_worker]
        configs = [
            {
                **options,
                "host": host,
                "port": port,
                "rank": first_rank + i,
                "world_size": num_workers + 1 if world_size is None else world_size,
                "labels": list(labels_per_worker[i]),
                "gpus": gpus[i],
                "local_rank": None if local_rank is None else local_rank + i,
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
                zygote.command(report_w, config_r),
                stdin=subprocess.PIPE,  # our end closing (we died) tells everyone to go
                pass_fds=(report_w, config_r),
                env=env,
                cwd=os.getcwd(),
                start_new_session=own_session,
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
        return _proc_state(pid) in (None, "Z", "X")

    def is_stopped(self, rank: int) -> bool:
        """Whether worker ``rank`` is stopped (SIGSTOP, a debugger): it runs no handler."""
        pid = self._unreaped_pid(rank)
        return pid is not None and _proc_state(pid) in ("T", "t")

    def kill_rank(self, rank: int, *, stacks_first: bool = False) -> None:
        """SIGKILLs worker ``rank`` (a hung one: its calls then fail, and it is reaped).

        Args:
            rank: The worker's rank.
            stacks_first: First ask it for its threads' stacks (:func:`stacks.request`,
                written to its stderr, this terminal) and give it
                :data:`~actorrt.runtime.stacks.DUMP_GRACE_S` to write them.
        """
        pid = self._unreaped_pid(rank)
        if pid is not None:
            if stacks_first:
                stacks.request(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _unreaped_pid(self, rank: int) -> int | None:
        """Worker ``rank``'s pid while no exit of it was reported (a pid then may be reused)."""
        with self._cond:
            return self._pids.get(rank) if rank not in self._exits else None

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
            if not self.signal_all(sig):
                break
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

    def signal_all(self, sig: int) -> list[int]:
        """Sends ``sig`` to every worker still running; the ranks it was sent to."""
        with self._cond:
            if self._zygote_done:
                return []
            alive = {r: pid for r, pid in self._pids.items() if r not in self._exits}
            for pid in alive.values():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        return sorted(alive)

    def wait(self, timeout: float | None = None) -> dict[int, int] | None:
        """Waits until every worker has exited; their exit codes by rank (None: timed out).

        A worker the zygote never reported an exit for (the zygote itself ended) counts
        as killed (-9); once this process's end of their stdin closes, such orphans exit.
        """
        with self._cond:
            if not self._cond.wait_for(self._ended, timeout):
                return None
            return {r: self._exits.get(r, -signal.SIGKILL) for r in self._configs}

    def _ended(self) -> bool:
        forked_all = len(self._pids) == self.num_workers
        return self._zygote_done or (forked_all and self._all_exited())

    def _all_exited(self) -> bool:
        return self._zygote_done or all(r in self._exits for r in self._pids)


def _proc_state(pid: int) -> str | None:
    """Process ``pid``'s state letter from ``/proc`` (``R``, ``S``, ``T``, ``Z``...); None: gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def exit_text(code: int | None) -> str:
    """A worker's exit status in words: ``exit code 1``, ``killed by SIGKILL``."""
    if code is None:
        return "exit status unknown"
    if code == -watchdog.SIGNAL:
        return (
            f"killed by {watchdog.SIGNAL.name}: its watchdog, as no Python thread of it ran "
            "(stuck in C code holding the GIL, or deadlocked); its stacks are above"
        )
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
