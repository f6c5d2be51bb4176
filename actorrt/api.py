"""The public functions: ``start``, ``shutdown``, ``get_actor``, ``kill`` and introspection.

The driver logs what it does under ``actorrt.driver`` (start-up, workers that die, the
steps of shutdown); see :mod:`actorrt.logs` for the level.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from actorrt.actor_class import ActorHandle, TypedActor
from actorrt.cluster.launch_env import check_cuda_device_map, parse_tcp_init_method
from actorrt.errors import ActorRtError, ClusterError
from actorrt.logs import configure as _configure_logging
from actorrt.logs import get_logger, level_name
from actorrt.placement.clusterfile import dump_cluster as _dump_spec
from actorrt.placement.layout import Layout, parse_layout
from actorrt.runtime import runtime as rt_mod
from actorrt.runtime.context import current, current_or_none, install, is_initialized
from actorrt.runtime.directory import ActorInfo, ClusterDirectory, NodeInfo
from actorrt.runtime.runtime import Runtime

if TYPE_CHECKING:
    from actorrt.cluster.rendezvous import StoreServer
    from actorrt.runtime.local import LocalCluster

__all__ = [
    "actors",
    "dump_cluster",
    "get_actor",
    "is_initialized",
    "kill",
    "nodes",
    "plan",
    "shutdown",
    "start",
    "status",
]

LayoutArg = Mapping[str, Any] | str | os.PathLike[str] | Layout | None

_TRANSPORTS = ("auto", "cpu", "cuda")
log = get_logger("driver")
_start_lock = threading.Lock()
_started_before = False  # torch's RRef context stays bound to this process's first agent

_RESTART_WARNING = (
    "actorrt was already started once in this process. torch binds its RRef context to "
    "the first RPC agent of a process, so in this new cluster actor handles passed between "
    "processes and the release of unnamed actors can fail ('RPC is no longer running'). "
    "Start each cluster in a fresh process (e.g. one script run per cluster)."
)


def start(
    init_method: str | None = None,
    *,
    labels: LayoutArg = None,
    talks: Mapping[str, Any] | Iterable[Any] | None = None,
    strategy: str | None = None,
    num_workers: int | None = None,
    rank: int = 0,
    world_size: int | None = None,
    token: str | None = None,
    transport: str = "auto",
    cuda_device_map: str | None = None,
    local_cuda_devices: str | Sequence[int] | None = None,
    timeout: float = 60.0,
    shutdown_timeout: float = 10.0,
    rpc_timeout: float = 60.0,
    num_worker_threads: int = 16,
    log_level: str | int | None = None,
    log_to_driver: bool = True,
) -> Runtime:
    """Starts actorrt in this process, which becomes the driver (rank 0).

    With no ``init_method``, starts a local cluster: ``num_workers`` worker processes on
    this machine, joined with the driver in one torch RPC group over loopback only.
    With ``init_method="tcp://HOST:PORT"``, serves the rendezvous on HOST:PORT (an address
    of this machine) and waits for ``world_size - 1`` workers started with
    ``actorrt worker``, torchrun or srun.

    With a layout (``labels=``), the plan places every labelled slot before ``init_rpc``:
    which process (and, locally, how many processes), which GPU, and the device maps of
    the processes whose labels talk. ``Cls.remote()`` with a label then goes into a slot
    of that label. ``actorrt plan CLUSTER_FILE --labels LAYOUT`` shows the same plan for
    the cluster file that :func:`dump_cluster` writes.

    Args:
        init_method: ``tcp://HOST:PORT`` of a multi-node cluster; None for a local one.
        labels: The layout: ``{"learner": {"count": 1, "num_gpus": 1}, "collector":
            {"count": 8, "num_cpus": 1, "num_gpus": 0.25}}`` (keys optional, count
            defaults to 1), or a path to a TOML file with that ``[labels]`` table.
        talks: Label pairs that exchange data, e.g. ``[("collector", "learner")]``
            (default: every pair); device maps are planned for those pairs only.
        strategy: ``"spread"`` (default: slots of a label on different hosts), ``"pack"``
            (fewest hosts), ``"nearest"`` / ``"nearest:LABEL"`` (near the first / named
            label's slots).
        num_workers: Local worker processes (default: one per layout slot; without a
            layout, the CPU count, at most 8).
        rank: Must be 0: the driver is rank 0 (workers use ``actorrt worker``).
        world_size: Processes in all, the driver included (multi-node only).
        token: Shared secret workers must present (default: ``ACTORRT_TOKEN`` if set);
            a local cluster always makes its own.
        transport: ``"auto"`` (device maps where both ends have GPUs), ``"cuda"`` (require
            them), or ``"cpu"`` (no device maps; CUDA tensors are staged through host memory).
        cuda_device_map: DI-engine style override, ``"<peer rank>_<local gpu>_<peer gpu>,..."``.
        local_cuda_devices: GPUs this process (and each local worker) may use, e.g. ``"0,1"``.
        timeout: Seconds to wait for every process to join.
        shutdown_timeout: Bound on :func:`shutdown`.
        rpc_timeout: Default timeout of control messages (actor calls never time out).
        num_worker_threads: TensorPipe's RPC thread pool size per process.
        log_level: Level of the ``actorrt`` logger (``"debug"``, ``"info"``, ``"warning"``,
            ...); default: ``ACTORRT_LOG_LEVEL``, else warnings and errors only. Local
            workers use the same level; multi-node workers take ``ACTORRT_LOG_LEVEL`` or
            ``actorrt worker --log-level``.
        log_to_driver: Print what actors print (stdout and stderr, every worker) on this
            process's terminal, each line prefixed with where it came from, e.g.
            ``(Learner pid=1234 host=node1)``; False leaves it on the workers' terminals.

    Returns:
        The :class:`Runtime`; ``with actorrt.start(): ...`` shuts down at the end.

    Raises:
        RuntimeError: actorrt is already started in this process.
        ValueError: An argument is invalid (the message says which and how to fix it).
        ClusterError: The cluster could not be formed (missing ranks, bad port, ...).
        PlacementError: The layout is malformed or infeasible (raised before any local
            worker is started), or ``transport="cuda"`` meets a process without a GPU.
    """
    level = _configure_logging(log_level)
    if not isinstance(log_to_driver, bool):
        raise ValueError(f"log_to_driver={log_to_driver!r} must be True or False.")
    layout = parse_layout(labels, talks, strategy)
    if transport not in _TRANSPORTS:
        raise ValueError(f"transport={transport!r}: choose one of {', '.join(_TRANSPORTS)}.")
    if rank != 0:
        raise ValueError(
            f"rank={rank}: the process calling actorrt.start() is the driver, rank 0. Start "
            "the other ranks with `actorrt worker --init-method ... --rank N --world-size W`."
        )
    for name, value in (("timeout", timeout), ("shutdown_timeout", shutdown_timeout)):
        if not value > 0:
            raise ValueError(f"{name}={value!r} must be a number of seconds > 0.")
    gpus = _parse_gpus(local_cuda_devices)
    if init_method is None:
        if world_size is not None:
            raise ValueError(
                "world_size is for multi-node clusters (with init_method); a local cluster "
                "takes num_workers=N."
            )
        slots = sum(spec.count for spec in layout.specs)
        default = max(1, slots) if layout.specs else min(os.cpu_count() or 1, 8)
        n = num_workers if num_workers is not None else default
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"num_workers={num_workers!r} must be an int >= 1.")
        # a local cluster makes its own token and listens on loopback only
        host, port, world, local_workers, token = "127.0.0.1", 0, n + 1, n, None
    else:
        host, port = parse_tcp_init_method(init_method)
        if num_workers is not None:
            raise ValueError(
                "num_workers is for local clusters; with init_method, pass world_size=W and "
                "start W-1 workers with `actorrt worker`."
            )
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 2:
            raise ValueError(
                f"world_size={world_size!r}: a multi-node cluster needs world_size=W >= 2 "
                "(the driver plus at least one worker)."
            )
        world, local_workers = world_size, 0
        token = token if token is not None else os.environ.get("ACTORRT_TOKEN", "")
    check_cuda_device_map(cuda_device_map, rank=0, world_size=world, name="cuda_device_map")
    with _start_lock:
        if is_initialized():
            raise RuntimeError(
                "actorrt is already started in this process: call actorrt.shutdown() before "
                "starting again (or use `with actorrt.start(): ...`)."
            )
        return _start_driver(
            host=host,
            port=port,
            world_size=world,
            token=token,
            layout=layout,
            local_workers=local_workers,
            transport=transport,
            cuda_device_map=cuda_device_map,
            gpus=gpus,
            timeout=timeout,
            shutdown_timeout=shutdown_timeout,
            rpc_timeout=rpc_timeout,
            num_worker_threads=num_worker_threads,
            log_level=level_name(level),
            log_to_driver=log_to_driver,
        )


def _parse_gpus(value: str | Sequence[int] | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        if isinstance(value, str):
            return tuple(int(x) for x in value.split(",") if x.strip())
        return tuple(int(x) for x in value)
    except (TypeError, ValueError):
        raise ValueError(
            f"local_cuda_devices={value!r} must be GPU indices like '0,1' or [0, 1]."
        ) from None


def _start_driver(
    *,
    host: str,
    port: int,
    world_size: int,
    token: str | None,
    layout: Layout,
    local_workers: int,
    transport: str,
    cuda_device_map: str | None,
    gpus: tuple[int, ...] | None,
    timeout: float,
    shutdown_timeout: float,
    rpc_timeout: float,
    num_worker_threads: int,
    log_level: str,
    log_to_driver: bool,
) -> Runtime:
    from actorrt.cluster import planning, rendezvous
    from actorrt.runtime.local import LocalCluster

    if _started_before:
        warnings.warn(_RESTART_WARNING, RuntimeWarning, stacklevel=3)

    os.environ.setdefault("IBV_FORK_SAFE", "1")
    os.environ.setdefault("RDMAV_FORK_SAFE", "1")
    local = local_workers > 0
    socket_ifname = "lo" if local else None
    own = planning.describe_process((), gpus, cuda_device_map, hosts_actors=False)
    if local:
        visible = gpus if gpus is not None else tuple(range(_cuda_count()))
        if layout.specs:
            # Every worker sees the GPUs the driver may use; the plan says which one each
            # slot takes (capacity per physical GPU). Planned now, on the descriptions the
            # workers will report, so an infeasible layout fails before any is started.
            per_worker = [visible] * local_workers
            worker = {k: v for k, v in own.items() if k != "cuda_device_map"}
            predicted = [own, *({**worker, "hosts_actors": True} for _ in per_worker)]
            planning.cluster_spec(
                predicted, layout, transport=transport, socket_ifname=socket_ifname
            ).plan()
        else:
            per_worker = [
                (visible[i % len(visible)],) if visible else () for i in range(local_workers)
            ]
    started = time.monotonic()
    server = rendezvous.StoreServer(host, port, timeout)
    log.info(
        "starting %s: rendezvous on %s:%d, %d process(es) in all",
        "a local cluster" if local else "a multi-node cluster", host, server.port, world_size,
    )  # fmt: skip
    cluster: LocalCluster | None = None
    if local:
        token = rendezvous.new_token()
        cluster = LocalCluster(
            local_workers,
            server.port,
            token,
            gpus_per_worker=per_worker,
            labels_per_worker=[() for _ in range(local_workers)],
            timeout=timeout,
            rpc_timeout=rpc_timeout,
            num_worker_threads=num_worker_threads,
            log_level=log_level,
        )
    assert token is not None

    def abandon() -> None:
        if cluster is not None:
            cluster.stop(timeout=2.0)
        server.close()

    try:
        others = rendezvous.gather(
            server,
            world_size,
            token,
            timeout,
            cluster.check_alive if cluster else None,
            transport=transport,
        )
        descriptions = [own, *others]
        # Multi-node: every process keeps its own TP_SOCKET_IFNAME (interface names differ
        # between machines), so the plan sets none.
        spec = planning.cluster_spec(
            descriptions,
            layout,
            transport=transport,
            socket_ifname=socket_ifname,
            session=server.session,
        )
        the_plan = spec.plan()
    except BaseException as exc:
        reason = str(exc) if isinstance(exc, ActorRtError) else f"{type(exc).__name__}: {exc}"
        log.info("start failed, telling the workers: %s", reason)
        try:
            rendezvous.publish_abort(server.store, reason)
            if not local:
                time.sleep(0.3)  # let waiting workers read why before the store closes
        finally:
            abandon()
        raise
    graceful = rendezvous.graceful_shutdown_possible()
    published = the_plan.to_dict()
    published["graceful_shutdown"] = graceful  # workers read it (see the function's docstring)
    published["log_to_driver"] = log_to_driver  # workers send their output here, or keep it
    rendezvous.publish_plan(server.store, published)
    setup = planning.ProcessSetup(published, 0)
    setup.apply_env()
    from actorrt.cluster.netif import apply_socket_ifname

    # TensorPipe and init_rpc's Gloo group listen on TP_SOCKET_IFNAME / GLOO_SOCKET_IFNAME
    # (set here unless given): the interface holding HOST, so loopback for a local cluster.
    apply_socket_ifname(host, server.port, own_address=True)
    directory = ClusterDirectory(the_plan, spec.processes)
    state: dict[str, Any] = {"graceful": graceful, "log_to_driver": log_to_driver}
    rt = Runtime(
        name=setup.name,
        rank=0,
        world_size=world_size,
        driver_name=setup.name,
        directory=directory,
        device_maps=setup.device_maps,
        guard_tiny_cuda=setup.guard_tiny_cuda,
        on_shutdown=lambda: _stop_driver(rt, cluster, server, shutdown_timeout, state),
    )
    rt.plan = the_plan
    rt.spec = spec
    rt.descriptions = descriptions
    judge = getattr(server, "judge", None)
    rt.pids = {0: os.getpid(), **(judge.pids if judge is not None else {})}
    install(rt)
    log.info("every rank joined; plan made; starting RPC as %s", setup.name)
    try:
        rt_mod.init_rpc(
            setup.name,
            0,
            world_size,
            rendezvous.store_init_method(server.store),
            setup.backend_kwargs,
            num_worker_threads=num_worker_threads,
            rpc_timeout=rpc_timeout,
        )
    except BaseException as exc:
        install(None)
        abandon()
        raise ClusterError(f"init_rpc failed on the driver: {exc}") from exc
    _mark_started()
    state["workers"] = [p.name for p in setup.plan.processes if p.rank != 0]
    rendezvous.refuse_late_claims(server, rt.stopped)
    if cluster is not None:
        rt.local_worker_pids = cluster.pids
        _watch_local_workers(rt, cluster)
    atexit.register(shutdown)
    log.info(
        "cluster up in %.2f s: %d process(es) on %d host(s)",
        time.monotonic() - started, world_size, len({d.get("hostname") for d in descriptions}),
    )  # fmt: skip
    return rt


def _mark_started() -> None:
    global _started_before
    _started_before = True


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _watch_local_workers(rt: Runtime, cluster: LocalCluster) -> None:
    from actorrt.cluster.planning import process_name

    def watch() -> None:
        reported: set[int] = set()
        while not rt.stopped.wait(0.1):
            for rank in cluster.dead_ranks():
                if rank not in reported:
                    reported.add(rank)
                    name = process_name(rank)
                    rt.mark_worker_dead(name)
                    if rt.stopped.is_set():
                        return  # exits during shutdown are the expected ones
                    pid, code = cluster.exit_of(rank)
                    log.warning(
                        "%s (rank %d, pid %s) died: %s; calls to its actors fail with "
                        "ActorDiedError and no new actor is placed there",
                        name, rank, pid, _exit_text(code),
                    )  # fmt: skip

    threading.Thread(target=watch, name="actorrt-worker-watch", daemon=True).start()


def _exit_text(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _stop_driver(
    rt: Runtime,
    cluster: LocalCluster | None,
    server: StoreServer,
    timeout: float,
    state: dict[str, Any],
) -> None:
    import torch.distributed.rpc as rpc

    from actorrt.runtime.output import rpc_flush_output
    from actorrt.runtime.runtime import rpc_stop

    started = time.monotonic()
    live = [name for name in state.get("workers", []) if name not in rt.dead_workers]
    # What actors printed before shutdown reaches this terminal before shutdown returns.
    if state.get("log_to_driver"):
        log.info("shutdown: collecting the output of %d worker(s)", len(live))
        _call_all(rpc, live, rpc_flush_output, (2.0,), timeout=min(timeout, 5.0))
    log.info("shutdown: telling %d worker(s) to stop", len(live))
    _call_all(rpc, live, rpc_stop, (), timeout=min(timeout, 5.0))
    graceful = state["graceful"] and not rt.dead_workers
    if graceful:
        log.info("shutdown: graceful RPC shutdown (waits for every worker)")
    else:
        why = "a worker died" if rt.dead_workers else "not this process's first cluster"
        log.info("shutdown: ending RPC locally (%s)", why)
    went = rt_mod.shutdown_rpc(timeout, graceful=graceful)
    if graceful and not went:
        log.warning(
            "shutdown: the graceful RPC shutdown did not finish within %g s; RPC was ended locally",
            timeout,
        )
    if cluster is not None:
        log.info("shutdown: stopping the local workers")
        cluster.stop(timeout=timeout)
    server.close()
    log.info("shutdown: done in %.2f s", time.monotonic() - started)


def _call_all(
    rpc: Any, names: list[str], fn: Callable[..., Any], args: tuple[Any, ...], timeout: float
) -> None:
    """Calls ``fn`` on every process in ``names`` at once; waits for all (within ``timeout``)."""
    futures = []
    for name in names:
        try:
            futures.append(rpc.rpc_async(name, fn, args=args, timeout=timeout))
        except Exception:
            pass
    for fut in futures:
        try:
            fut.wait()
        except Exception:  # a dead worker cannot be told; it is killed later
            pass


def shutdown() -> None:
    """Stops every actor and worker process, and ends RPC; returns within a bound.

    Safe to call twice or when actorrt was never started.
    """
    rt = current_or_none()
    if rt is None or rt.rank != 0:
        return
    atexit.unregister(shutdown)
    rt.close()


def actors() -> list[ActorInfo]:
    """One record per actor in the cluster: id, class, name, label, process, host, GPUs, state.

    Example::

        for a in actorrt.actors():
            print(a.class_name, a.label, a.process, a.host, a.gpus, a.state)
    """
    return current("actorrt.actors()").actors()


def nodes() -> list[NodeInfo]:
    """One record per process of the cluster (the driver included): host, labels, GPUs, alive."""
    return current("actorrt.nodes()").nodes()


def status(max_actors: int = 50) -> str:
    """The cluster as a readable table, for ``print(actorrt.status())``.

    A summary line, then one row per process (rank, pid, host, labels, GPUs, its actors,
    the calls queued or running on them, alive / dead / unresponsive), then one row per
    actor. Built from :func:`nodes` and :func:`actors`, plus one short query to each live
    process (a process that does not answer within 2 s shows as unresponsive).

    Args:
        max_actors: Actor rows shown at most; the rest are counted.

    Returns:
        The table as text.

    Example::

        with actorrt.start(num_workers=2):
            learner = Learner.remote()
            print(actorrt.status())
    """
    return current("actorrt.status()").status(max_actors=max_actors)


def plan() -> dict[str, Any]:
    """The live plan, in the JSON form of ``actorrt plan --json``."""
    the_plan = current("actorrt.plan()").plan
    if the_plan is None:
        raise RuntimeError("this process has no plan yet; call it after actorrt.start()")
    return the_plan.to_dict()


def dump_cluster(path: str | os.PathLike[str] | None = None) -> str:
    """The live cluster as a cluster file (TOML): every process's node description and the layout.

    ``actorrt plan FILE --json`` on it prints exactly :func:`plan`, so a real cluster can
    be previewed offline, with other layouts (``--labels``). Driver only.

    Args:
        path: Also write the text to this file.

    Returns:
        The cluster file's text.
    """
    spec = current("actorrt.dump_cluster()").spec
    if spec is None:
        raise RuntimeError(
            "actorrt.dump_cluster() works on the driver, which holds every description"
        )
    text = _dump_spec(spec)
    if path is not None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return text


def get_actor(name: str) -> ActorHandle:
    """Returns the handle of the live actor registered as ``name``."""
    return current("actorrt.get_actor()").get_actor(name)


def kill(handle: ActorHandle | TypedActor) -> None:
    """Kills an actor now: its queued, running and later calls fail with ActorDiedError.

    Args:
        handle: The actor's handle (a :class:`~actorrt.actor_class.TypedActor`'s handle
            is typed as its class, hence the second type).
    """
    if not isinstance(handle, ActorHandle):
        raise TypeError(f"actorrt.kill takes an ActorHandle, got {type(handle)!r}.")
    current("actorrt.kill()").kill(handle)
