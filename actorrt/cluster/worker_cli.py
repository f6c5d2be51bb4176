"""``actorrt worker``: join a multi-node cluster as one worker process, or as ``--nproc N``.

By hand::

    actorrt worker --init-method tcp://10.0.0.1:29500 --rank 1 --world-size 3 --labels collector

``--nproc N`` starts ranks ``--rank``..``--rank``+N-1 on this node instead, forked from
one zygote (see :mod:`actorrt.cluster.node`), each as if started by its own command.
Once the cluster runs, the same command replaces rank 1 if it died, and ``--grow`` in
place of ``--rank``/``--world-size`` adds a process (rank 0 gives it the next rank).

Under torchrun or srun, without flags: the rank, world size, local rank and the driver's
address come from the launcher's environment (see :mod:`actorrt.cluster.launch_env`;
launcher rank ``r`` of ``n`` is actorrt rank ``r + 1`` of ``n + 1``, rank 0 being the
driver). Flags win over the environment. The token comes from ``--token`` or
``ACTORRT_TOKEN`` (prefer the variable: command lines are visible to every user). The log
level comes from ``--log-level`` or ``ACTORRT_LOG_LEVEL``; what the worker's actors print
goes to the driver's terminal unless the driver was started with ``log_to_driver=False``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from actorrt.cluster.launch_env import (
    CUDA_DEVICE_MAP_FORM,
    LaunchEnv,
    check_cuda_device_map,
    from_environ,
    parse_tcp_init_method,
)
from actorrt.errors import PlacementError
from actorrt.logs import ENV_VAR, parse_level
from actorrt.placement.device_flags import parse_local_cuda_devices
from actorrt.placement.layout import check_label
from actorrt.placement.plan import TRANSPORT_MODES

if TYPE_CHECKING:
    from actorrt.cluster.worker import WorkerConfig

__all__ = ["add_arguments", "config_from_args", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds the ``actorrt worker`` flags to ``p``."""
    p.description = (
        "Join the cluster whose driver called actorrt.start(init_method=..., world_size=W). "
        "Without --rank/--world-size/--init-method, reads torchrun's or SLURM's environment "
        "(launcher rank r of n becomes rank r+1 of n+1; the driver is rank 0)."
    )
    p.add_argument(
        "--init-method",
        help="tcp://HOST:PORT of the driver's rendezvous (default: ACTORRT_INIT_METHOD, "
        "else MASTER_ADDR with ACTORRT_PORT or MASTER_PORT+1)",
    )
    p.add_argument(
        "--rank",
        type=int,
        help="this worker's rank, 1..W-1 (default: RANK+1); in a running cluster, a dead "
        "rank to replace",
    )
    p.add_argument(
        "--grow",
        action="store_true",
        help="join the running cluster as a new process, with the next rank (no --rank or "
        "--world-size)",
    )
    p.add_argument(
        "--nproc",
        type=int,
        default=1,
        help="worker processes to start on this node (like torchrun's --nproc-per-node): "
        "ranks --rank..--rank+N-1, forked from one process that imports torch once; each "
        "offers one GPU in turn of --gpus, else of the visible ones (default 1)",
    )
    p.add_argument(
        "--world-size", type=int, help="processes in all, driver included (default: WORLD_SIZE+1)"
    )
    p.add_argument(
        "--labels",
        action="append",
        default=[],
        help="labels this worker offers actors, comma-separated or repeated (default: any)",
    )
    p.add_argument(
        "--gpus",
        help="CUDA devices this worker offers, e.g. 0,1 (default: LOCAL_RANK's GPU under a "
        "launcher, else every visible GPU); '' for none",
    )
    p.add_argument(
        "--transport",
        choices=TRANSPORT_MODES,
        help="must match the driver's transport (default: follow the driver)",
    )
    p.add_argument("--token", help="the cluster token (default: ACTORRT_TOKEN)")
    p.add_argument(
        "--cuda-device-map",
        help=f"DI-engine style device map override, '{CUDA_DEVICE_MAP_FORM}' "
        "(e.g. 0_0_1: this worker's GPU 0 to GPU 1 of the driver)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds to wait for the driver's rendezvous and for the plan (default 60)",
    )
    p.add_argument(
        "--socket-ifname",
        help="interface TensorPipe listens on (sets TP_SOCKET_IFNAME; default: the "
        "environment's, else the interface that reaches the driver)",
    )
    p.add_argument(
        "--log-level",
        help="level of actorrt's log messages on this worker: debug, info, warning, error "
        "(default: ACTORRT_LOG_LEVEL, else warning)",
    )
    p.add_argument("--num-worker-threads", type=int, default=16, help=argparse.SUPPRESS)
    p.add_argument("--rpc-timeout", type=float, default=60.0, help=argparse.SUPPRESS)


def config_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> WorkerConfig:
    """The :class:`~actorrt.cluster.worker.WorkerConfig` for ``args`` and the environment.

    Everything the user wrote is checked before torch is imported or anything connects.

    Raises:
        ValueError: Something needed is missing or malformed (the message says what).
    """
    environ = os.environ if environ is None else environ
    launch = from_environ(environ)
    where = f" (from {launch.launcher}'s environment)" if launch else ""
    rank, world = args.rank, args.world_size
    grow = bool(getattr(args, "grow", False))
    if grow and (rank is not None or world is not None):
        raise ValueError(
            "--grow takes the next rank of the running cluster: leave --rank and "
            "--world-size out (or, to replace a dead rank, leave --grow out)."
        )
    if grow:
        launch = None  # a launcher's ranks are those of the start, not of growing
    if launch is not None:
        rank = launch.rank if rank is None else rank
        world = launch.world_size if world is None else world
    init, init_name = args.init_method, "--init-method"
    if not init:
        explicit = environ.get("ACTORRT_INIT_METHOD", "").strip() or None
        # Under a launcher, MASTER_ADDR also gives the address (see launch_env).
        init = launch.init_method if launch is not None else explicit
        init_name = (
            "ACTORRT_INIT_METHOD" if explicit else "MASTER_ADDR:(ACTORRT_PORT or MASTER_PORT+1)"
        )
    if grow:
        rank, world = 0, 0
    elif rank is None or world is None:
        raise ValueError(
            "--rank and --world-size are needed (or run under torchrun / srun, whose RANK / "
            "SLURM_PROCID and WORLD_SIZE / SLURM_NTASKS give them)."
        )
    if init is None:
        raise ValueError(
            "the driver's address is needed: --init-method tcp://HOST:PORT, or "
            "ACTORRT_INIT_METHOD, or MASTER_ADDR (+ ACTORRT_PORT, else MASTER_PORT+1)."
        )
    if not grow and not 0 < rank < world:
        raise ValueError(
            f"rank {rank}{where} is out of range for world size {world}: workers take ranks "
            f"1..{world - 1} (rank 0 is the driver)."
        )
    nproc = getattr(args, "nproc", 1)
    _check_nproc(nproc, rank, world, args, launch, grow)
    if args.timeout is None or not args.timeout > 0:
        raise ValueError(f"--timeout {args.timeout} must be a number of seconds > 0.")
    log_level = getattr(args, "log_level", None)
    if log_level is not None:
        parse_level(log_level, "--log-level")
    elif environ.get(ENV_VAR, "").strip():
        parse_level(environ[ENV_VAR], ENV_VAR)
    host, port = parse_tcp_init_method(init, init_name)
    # Checked here, not by rank 0 once every rank has joined: a typo fails this worker now.
    if grow and args.cuda_device_map:
        raise ValueError(
            "--cuda-device-map cannot be used with --grow: a process added to a running "
            "cluster has no device maps (its tensors travel through CPU memory)."
        )
    check_cuda_device_map(args.cuda_device_map, rank=rank, world_size=world)
    labels = tuple(x.strip() for item in args.labels for x in item.split(",") if x.strip())
    for label in labels:  # one the plan cannot name would be offered, and never match
        try:
            check_label(label, "--labels")
        except PlacementError as exc:
            raise ValueError(str(exc)) from None
    gpus = _gpus(args.gpus)
    # Under a launcher each process offers its LOCAL_RANK's GPU, resolved where torch is
    # imported anyway: in the worker (`--nproc` children count from 0 instead).
    local_rank = launch.local_rank if launch is not None and gpus is None else None
    token = args.token if args.token is not None else environ.get("ACTORRT_TOKEN", "")
    from actorrt.cluster.worker import WorkerConfig  # imports torch: after the checks

    return WorkerConfig(
        host=host,
        port=port,
        rank=rank,
        world_size=world,
        token=token,
        labels=labels,
        gpus=gpus,
        local_rank=local_rank,
        timeout=args.timeout,
        num_worker_threads=args.num_worker_threads,
        rpc_timeout=args.rpc_timeout,
        transport=args.transport,
        cuda_device_map=args.cuda_device_map,
        log_level=log_level,
        grow=grow,
    )


def _gpus(flag: str | None) -> tuple[int, ...] | None:
    if flag is None:
        return None
    try:
        return parse_local_cuda_devices(flag, "--gpus")
    except PlacementError as exc:
        raise ValueError(str(exc)) from None


def _check_nproc(
    nproc: int,
    rank: int,
    world: int,
    args: argparse.Namespace,
    launch: LaunchEnv | None,
    grow: bool,
) -> None:
    """Checks ``--nproc`` against the ranks it takes, the launcher, --grow and a device map."""
    if nproc < 1:
        raise ValueError(f"--nproc {nproc} must be at least 1 (the worker processes to start).")
    if nproc == 1:
        return
    if grow:
        raise ValueError(
            f"--nproc {nproc} with --grow: a growing process takes whatever rank comes "
            "next, one command each; start that many `actorrt worker --grow` commands."
        )
    if launch is not None and (args.rank is None or args.world_size is None):
        raise ValueError(
            f"--nproc {nproc} under {launch.launcher}: the launcher already gives each "
            "process it starts one rank; start more processes with it (torchrun "
            "--nproc-per-node, srun --ntasks-per-node), or give --rank and --world-size "
            "to start this node's workers with --nproc instead."
        )
    last = rank + nproc - 1
    if last >= world:
        raise ValueError(
            f"--nproc {nproc} from --rank {rank} takes ranks {rank}..{last}, but world size "
            f"{world} has workers 1..{world - 1} only: use --nproc {world - rank} or less, "
            "or a larger --world-size."
        )
    if args.cuda_device_map:
        raise ValueError(
            f"--cuda-device-map with --nproc {nproc}: a device map belongs to one process; "
            "start that worker with its own `actorrt worker` command (no --nproc)."
        )


def run(args: argparse.Namespace) -> int:
    """Runs the worker; returns 2 on a configuration or cluster error (printed)."""
    from actorrt.cluster.worker import run_worker
    from actorrt.errors import ActorRtError

    try:
        cfg = config_from_args(args)
    except ValueError as exc:
        print(f"actorrt worker: {exc}", file=sys.stderr, flush=True)
        return 2
    if args.socket_ifname:
        from actorrt.cluster.netif import unknown_interface

        why = unknown_interface(args.socket_ifname)
        if why is not None:
            print(f"actorrt worker: {why}", file=sys.stderr, flush=True)
            return 2
        os.environ["TP_SOCKET_IFNAME"] = args.socket_ifname
    if args.nproc > 1:
        from actorrt.cluster.node import run_node

        try:
            return run_node(cfg, args.nproc)
        except (ActorRtError, OSError) as exc:  # the zygote could not be started
            print(f"actorrt worker --nproc {args.nproc}: {exc}", file=sys.stderr, flush=True)
            return 2
    try:
        code = run_worker(cfg)
    except KeyboardInterrupt:  # Ctrl-C while it waited (its claim was withdrawn)
        print(f"{cfg.who}: interrupted", file=sys.stderr, flush=True)
        code = 130
    except (ActorRtError, ValueError) as exc:
        print(f"{cfg.who}: {exc}", file=sys.stderr, flush=True)
        code = 2
    except SystemExit as exc:
        print(exc, file=sys.stderr, flush=True)
        code = 2
    except Exception as exc:
        print(
            f"{cfg.who}: {type(exc).__name__}: {exc}",
            file=sys.stderr,
            flush=True,
        )
        code = 2
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown: actor threads may still be blocked
