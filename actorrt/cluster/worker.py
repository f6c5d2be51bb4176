"""A worker process: join the rendezvous, start RPC with the plan, host actors until told to stop.

Local clusters fork workers from a zygote (:mod:`actorrt.cluster.zygote`), which runs
:func:`run_config`; ``python -m actorrt.cluster.worker --config JSON`` runs one alone.
``actorrt worker`` (see :mod:`actorrt.cluster.worker_cli`) builds the same
:class:`WorkerConfig` from flags or from torchrun / SLURM variables.

A worker logs under ``actorrt.worker`` at ``ACTORRT_LOG_LEVEL`` (or ``--log-level``).
Once RPC is up, and unless the driver said ``log_to_driver=False``, what it prints goes
to the driver's terminal (:mod:`actorrt.runtime.output`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from actorrt.cluster.launch_env import heartbeat_interval, set_fork_safety
from actorrt.cluster.watchdog import Watchdog

if TYPE_CHECKING:
    from actorrt.runtime.output import Header, Line
    from actorrt.runtime.runtime import Runtime

__all__ = ["WorkerConfig", "run_config", "run_worker"]


@dataclasses.dataclass
class WorkerConfig:
    """Everything a worker needs to join a cluster."""

    host: str
    port: int
    rank: int
    world_size: int
    token: str
    labels: tuple[str, ...] = ()
    gpus: tuple[int, ...] | None = None
    # Index of the process on its node (a launcher's LOCAL_RANK, a child of `--nproc`):
    # with `gpus` None it offers visible GPU local_rank % count, not every visible one.
    local_rank: int | None = None
    timeout: float = 60.0
    watch_stdin: bool = False
    num_worker_threads: int = 16
    rpc_timeout: float = 60.0
    shutdown_timeout: float = 10.0
    transport: str | None = None  # None: whatever the driver uses
    cuda_device_map: str | None = None
    log_level: str | None = None  # None: ACTORRT_LOG_LEVEL, else warnings only
    # A local worker that replaces a dead one: the plan from the driver (no rendezvous)
    # and a fresh RPC id, to join the running group.
    plan: dict[str, Any] | None = None
    rpc_id: int | None = None
    # Join a running cluster as a new process (rank 0 gives it the next rank; ``rank`` and
    # ``world_size`` are unused).
    grow: bool = False

    @property
    def who(self) -> str:
        """How this worker names itself in its messages (a --grow one has no rank yet)."""
        return "actorrt worker --grow" if self.grow else f"actorrt worker rank {self.rank}"


def run_worker(cfg: WorkerConfig) -> int:
    """Runs a worker until the driver shuts the cluster down; returns the exit status."""
    set_fork_safety(os.environ)  # before torch loads ibverbs
    if not cfg.grow and not 0 < cfg.rank < cfg.world_size:
        raise SystemExit(
            f"actorrt worker: rank {cfg.rank} is out of range for world size {cfg.world_size}: "
            f"workers take ranks 1..{cfg.world_size - 1} (rank 0 is the driver)."
        )
    from actorrt.logs import configure, get_logger

    configure(cfg.log_level, what="--log-level")
    log = get_logger("worker")
    from actorrt.cluster import process_setup, rendezvous
    from actorrt.cluster.join import join
    from actorrt.runtime import context, group, output, stacks, trace

    stacks.install()  # SIGUSR1: every thread's stack on stderr (a hung one's, before its kill)
    if threading.current_thread() is threading.main_thread():
        # actorrt's own, as its other threads: actorrt.stacks() counts it with them.
        threading.current_thread().name = "actorrt-worker-main"
    who = "a new rank" if cfg.grow else f"rank {cfg.rank}"
    log.info("%s: joining the driver's rendezvous at %s:%d", who, cfg.host, cfg.port)
    store = rendezvous.connect_store(cfg.host, cfg.port, cfg.timeout)
    gpus = cfg.gpus if cfg.gpus is not None else _gpu_of_local_rank(cfg.local_rank)
    description = process_setup.describe_process(cfg.labels, gpus, cfg.cuda_device_map)
    if cfg.plan is not None:  # a replacement: the driver gave the plan through the zygote
        plan = cfg.plan
        log.info("rank %d: replacing a dead worker (RPC id %s)", cfg.rank, cfg.rpc_id)
    else:
        if cfg.transport is not None:
            description["transport"] = cfg.transport  # rank 0 refuses a mismatch
        claim = rendezvous.GROW_RANK if cfg.grow else cfg.rank
        plan = rendezvous.join(store, claim, cfg.world_size, cfg.token, description, cfg.timeout)
        joined = plan.get("join")
        if joined is not None:  # the cluster runs: this one replaces a dead rank, or grows it
            cfg = dataclasses.replace(cfg, rank=int(joined["rank"]), rpc_id=int(joined["rpc_id"]))
        log.info("rank %d: accepted; starting RPC", cfg.rank)
    trace.enable(bool(plan.get("trace", False)))  # the driver's choice, before any call
    forwarder: output.OutputForwarder | None = None

    def before_rpc(rt: Runtime) -> None:
        nonlocal forwarder
        rt.offered_labels = cfg.labels
        # A driver dying during start-up ends us too; one that stops pinging, later.
        _watch_driver(cfg, rt, float(plan.get("heartbeat_timeout", 0.0)))
        if not plan.get("driver_holds_rrefs", True):
            rt.driver_holds_no_rrefs()
        if plan.get("log_to_driver", True):
            # Installed before init_rpc, started after: the driver may call our actors as
            # soon as its own init_rpc returns, before ours does; their lines wait meanwhile.
            header = (rt.name, os.getpid(), str(description.get("hostname", "?")))
            forwarder = output.install(_sender(rt.driver_name), header)

    try:
        rt = join(
            plan,
            cfg.rank,
            store,
            rendezvous_address=(cfg.host, cfg.port),
            own_address=False,
            num_worker_threads=cfg.num_worker_threads,
            rpc_timeout=cfg.rpc_timeout,
            timeout=cfg.timeout,
            rpc_id=cfg.rpc_id,
            before_rpc=before_rpc,
        )
        if forwarder is not None:
            forwarder.start()
        rt.stop_requested.wait()
        log.info("rank %d: the driver asked us to stop", cfg.rank)
        rt.shutdown()
    finally:
        output.uninstall(timeout=2.0)  # while RPC still runs: the last lines go too
    # Quiesced, this agent takes a peer closing as no error; the driver says end once every
    # worker is, so nobody warns of anybody's closing (see Driver.stop).
    began = time.monotonic()
    let_go = group.lets_go(default=not rt.ever_lost_a_peer)
    if not let_go:  # as the driver does (Driver.stop): no leak of them is printed
        rt.objects.forks.drop_all()
    quiet = group.quiesce(cfg.shutdown_timeout / 2, let_go=let_go)
    log.debug("rank %d: quiesced (%s) in %.2f s", cfg.rank, quiet, time.monotonic() - began)
    told = group.await_end(cfg.shutdown_timeout)
    group.end_local(cfg.shutdown_timeout / 2)
    context.install(None)
    return 0 if quiet and told else 3


def _gpu_of_local_rank(local_rank: int | None) -> tuple[int, ...] | None:
    """The one visible GPU a node's ``local_rank``-th process offers (None: every one)."""
    if local_rank is None:
        return None
    from actorrt.placement.discovery import cuda_device_count

    count = cuda_device_count()
    return (local_rank % count,) if count else None


def _sender(driver: str) -> Callable[[Header, list[Line]], None]:
    """Sends a batch of output lines to the driver (a plain RPC, in order: one at a time)."""
    import torch.distributed.rpc as rpc

    from actorrt.runtime.output import SEND_TIMEOUT_S, rpc_print

    def send(header: Header, batch: list[Line]) -> None:
        rpc.rpc_sync(driver, rpc_print, args=(header, batch), timeout=SEND_TIMEOUT_S)

    return send


#: A worker the driver has not pinged for this many heartbeat timeouts exits: the driver
#: marked it dead long before (after one), and it must not linger cut off on its node.
#: More than one, so a driver whose heartbeat thread waited on the GIL a while does not
#: lose its workers.
HEARTBEAT_EXIT_FACTOR = 3.0


def _watch_driver(cfg: WorkerConfig, rt: Runtime, heartbeat_timeout: float = 0.0) -> None:
    """Ends this process when the driver is gone, so no worker outlives its cluster.

    Args:
        cfg: The worker's configuration (the driver's address).
        rt: This worker's runtime (a stop it requested is not a loss).
        heartbeat_timeout: The driver's (from the plan); 0: pings are not watched.
    """

    def exit_now(why: str) -> None:
        if rt.stop_requested.is_set():
            return  # a normal shutdown is under way; the store closing is expected
        # The real stderr: lines queued for the driver would never leave now.
        print(f"{cfg.who}: {why}; exiting.", file=sys.__stderr__, flush=True)
        sys.stdout.flush()
        os._exit(1)

    # A duplicate of fd 0, read with os.read: reading sys.stdin itself would hold its
    # lock, and `exit()` in an actor method (which closes sys.stdin) would hang on it.
    stdin_fd = os.dup(0)

    def watch_stdin() -> None:
        # Our stdin pipe is held by the process that started us (a local cluster's driver,
        # or `actorrt worker --nproc`): EOF means it died.
        while os.read(stdin_fd, 1):
            pass
        exit_now("the process that started it (the driver or actorrt worker --nproc) ended")

    def watch_store() -> None:
        # A plain connection to the store's port, not a TCPStore client polling it: when
        # the driver dies, its end closes and recv returns at once, where a failing store
        # call first prints torch's C++ stack trace, which reads like a crash of ours.
        # Keepalive notices a driver host that vanished without closing anything.
        try:
            sock = socket.create_connection((cfg.host, cfg.port), timeout=cfg.timeout)
        except OSError:
            exit_now("lost the driver's rendezvous store")
            return
        _keepalive(sock)
        sock.settimeout(None)
        try:
            while sock.recv(1):
                pass
        except OSError:
            pass
        exit_now("lost the connection to the driver")

    beat_ok = [time.monotonic()]  # when a store heartbeat last went through

    def beat() -> None:
        # Liveness on a path of its own (issue 25): a counter in the driver's store, on a
        # connection of its own. RPC pings share the one TensorPipe pipe per pair, where
        # they wait behind a bulk transfer (minutes on a slow link); this does not.
        from actorrt.cluster.rendezvous import alive_key, connect_store

        try:
            client = connect_store(cfg.host, cfg.port, max(heartbeat_timeout, 5.0))
        except Exception:  # the store is gone: watch_store ends this process
            return
        key = alive_key(rt.name)
        while not rt.stop_requested.wait(heartbeat_interval(heartbeat_timeout)):
            try:
                client.add(key, 1)
                beat_ok[0] = time.monotonic()
            except Exception:  # slow or cut off: the next beat tries again
                pass

    def watch_pings() -> None:
        # The store connection notices a dead driver host only after TCP keepalive gives
        # up, and a cut link may never; the driver's pings and our store heartbeats both
        # stopping says it sooner (either one going through: the driver is there).
        from actorrt.runtime.host import last_ping

        bound = heartbeat_timeout * HEARTBEAT_EXIT_FACTOR
        # Where no Python thread runs (C code holding the GIL), this loop cannot end the
        # process: a kernel timer does, one heartbeat timeout after this loop would have.
        # Left armed at stop: a process whose teardown hangs that long ends too.
        dog = Watchdog.arm(bound + heartbeat_timeout)
        since = time.monotonic()
        while not rt.stop_requested.wait(heartbeat_interval(heartbeat_timeout)):
            if dog is not None:
                dog.pet()
            silent = time.monotonic() - max(since, last_ping(), beat_ok[0])
            if silent > bound:
                exit_now(f"no heartbeat from the driver for {silent:.0f} s (cut off?)")

    if heartbeat_timeout > 0:
        threading.Thread(target=beat, name="actorrt-heartbeat", daemon=True).start()
        threading.Thread(target=watch_pings, name="actorrt-ping-watch", daemon=True).start()
    if cfg.watch_stdin:
        threading.Thread(target=watch_stdin, name="actorrt-parent-watch", daemon=True).start()
    threading.Thread(target=watch_store, name="actorrt-driver-watch", daemon=True).start()


def _keepalive(sock: socket.socket) -> None:
    """TCP keepalive probes after 10 s of silence, every 5 s, 3 unanswered: gone (Linux)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, option):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
            except OSError:  # not settable here: the system's defaults apply
                pass


def run_config(fields: dict[str, Any]) -> int:
    """Runs a local worker from its JSON config (token and import path from the env)."""
    fields = dict(fields)
    for key in ("labels", "gpus"):
        if fields.get(key) is not None:
            fields[key] = tuple(fields[key])
    # Local workers see the driver's import path, so classes defined in its modules
    # (tests, scripts next to it) import here too, as with multiprocessing's spawn.
    for entry in reversed(json.loads(os.environ.pop("ACTORRT_SYS_PATH", "[]"))):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    cfg = WorkerConfig(token=os.environ.pop("ACTORRT_TOKEN", ""), **fields)
    try:
        return run_worker(cfg)
    except Exception as exc:
        from actorrt.errors import ActorRtError

        if not isinstance(exc, ActorRtError):
            raise
        print(f"{cfg.who}: {exc}", file=sys.stderr, flush=True)
        return 2


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m actorrt.cluster.worker`` (one worker, one config)."""
    p = argparse.ArgumentParser(prog="python -m actorrt.cluster.worker")
    p.add_argument("--config", required=True, help="WorkerConfig as JSON (token from env)")
    args = p.parse_args(argv)
    code = run_config(json.loads(args.config))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown: actor threads may still be blocked


if __name__ == "__main__":
    main()
