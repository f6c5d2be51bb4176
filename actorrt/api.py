"""The public functions: ``start``, ``shutdown``, ``get_actor``, ``kill`` and introspection.

Only validation lives here: :func:`start` checks its arguments and hands them to
:meth:`actorrt.cluster.driver.Driver.launch`, which forms the cluster; the rest ask the
process's runtime.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from actorrt.actor_class import ActorHandle, TypedActor, handle_of
from actorrt.cluster.driver import Driver
from actorrt.cluster.launch_env import check_cuda_device_map, parse_tcp_init_method
from actorrt.errors import PlacementError
from actorrt.logs import configure as _configure_logging
from actorrt.logs import level_name
from actorrt.options import check_actor_name
from actorrt.placement.clusterfile import dump_cluster as _dump_spec
from actorrt.placement.device_flags import parse_local_cuda_devices
from actorrt.placement.layout import Layout, parse_layout
from actorrt.placement.plan import TRANSPORT_MODES
from actorrt.runtime import trace as _trace
from actorrt.runtime.context import ensure_not_started, is_initialized
from actorrt.runtime.directory import ActorInfo, NodeInfo
from actorrt.runtime.runtime import Runtime, current, current_or_none
from actorrt.runtime_context import get_runtime_context

__all__ = [
    "actors",
    "available_resources",
    "cluster_resources",
    "dump_cluster",
    "get_actor",
    "is_initialized",
    "kill",
    "list_named_actors",
    "nodes",
    "plan",
    "shutdown",
    "stacks",
    "start",
    "status",
    "timeline",
]

LayoutArg = Mapping[str, Any] | str | os.PathLike[str] | Layout | None

_start_lock = threading.Lock()


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
    heartbeat_timeout: float = 10.0,
    max_worker_restarts: int = 10,
    rpc_timeout: float = 60.0,
    num_worker_threads: int = 16,
    log_level: str | int | None = None,
    log_to_driver: bool = True,
    trace: bool | None = None,
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
        heartbeat_timeout: The driver pings every worker (every second, or a quarter of
            this when shorter); a worker that answers none for this many seconds is marked
            dead: no new actor goes there and calls to its actors fail with
            ``ActorDiedError``. A local worker marked so is also killed (it is hung),
            which fails the calls it holds.
        max_worker_restarts: A local cluster replaces a worker process that died (forked
            again from the zygote; it joins the running RPC group under the dead one's
            name and plan slot) at most this many times per worker (default 10); 0:
            never. A worker whose processes keep dying within a minute of their start is
            replaced after a delay (0.5 s, doubling, at most 10 s). Each replacement is
            logged with the cause of death. Actors with ``max_restarts`` are recreated at
            once on a live process, or on the replacement when no live process can host
            them; new actors may go to the replacement once it is up, and one made when
            no live process can host it waits (at most 30 s) for it. Multi-node workers
            are not replaced (start ``actorrt worker`` again, or under a supervisor).
        rpc_timeout: Default timeout of control messages (actor calls never time out).
        num_worker_threads: TensorPipe's RPC thread pool size per process.
        log_level: Level of the ``actorrt`` logger (``"debug"``, ``"info"``, ``"warning"``,
            ...); default: ``ACTORRT_LOG_LEVEL``, else warnings and errors only. Local
            workers use the same level; multi-node workers take ``ACTORRT_LOG_LEVEL`` or
            ``actorrt worker --log-level``.
        log_to_driver: Print what actors print (stdout and stderr, every worker) on this
            process's terminal, each line prefixed with where it came from, e.g.
            ``(Learner pid=1234 host=node1)``; False leaves it on the workers' terminals.
        trace: Record a timeline in every process (each call's round trip, its wait in
            the mailbox, its run and its reply, with bytes); :func:`timeline` gathers it
            into one Chrome trace / Perfetto file. Default: ``ACTORRT_TRACE`` (``1``
            turns it on), else off. Off, it costs nothing measurable.

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
    if trace is None:
        trace = _trace.env_enabled()
    elif not isinstance(trace, bool):
        raise ValueError(f"trace={trace!r} must be True, False or None (ACTORRT_TRACE).")
    layout = parse_layout(labels, talks, strategy)
    if transport not in TRANSPORT_MODES:
        raise ValueError(f"transport={transport!r}: choose one of {', '.join(TRANSPORT_MODES)}.")
    if rank != 0:
        raise ValueError(
            f"rank={rank}: the process calling actorrt.start() is the driver, rank 0. Start "
            "the other ranks with `actorrt worker --init-method ... --rank N --world-size W`."
        )
    bounds = (
        ("timeout", timeout),
        ("shutdown_timeout", shutdown_timeout),
        ("heartbeat_timeout", heartbeat_timeout),
    )
    for name, value in bounds:
        if not value > 0:
            raise ValueError(f"{name}={value!r} must be a number of seconds > 0.")
    if (
        isinstance(max_worker_restarts, bool)
        or not isinstance(max_worker_restarts, int)
        or max_worker_restarts < 0
    ):
        raise ValueError(
            f"max_worker_restarts={max_worker_restarts!r} must be an int >= 0 (0: a dead "
            "local worker is not replaced)."
        )
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
        ensure_not_started()
        rt = Driver.launch(
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
            heartbeat_timeout=heartbeat_timeout,
            max_worker_restarts=max_worker_restarts,
            trace=trace,
        )
    atexit.register(shutdown)
    return rt


def _parse_gpus(value: str | Sequence[int] | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else ",".join(str(x) for x in value)
    try:
        return parse_local_cuda_devices(text, name="local_cuda_devices")
    except PlacementError as exc:  # a bad argument: ValueError, as for the others
        raise ValueError(f"{exc}; pass GPU indices like '0,1' or [0, 1].") from None


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


def cluster_resources() -> dict[str, float]:
    """The CPUs and GPUs of the cluster's live worker processes, as ``ray.cluster_resources()``.

    ``{"CPU": 16.0, "GPU": 1.0}``: each host's (or container's) CPUs counted once, however
    many worker processes it runs, and each physical GPU once; ``"GPU"`` is left out when
    there are none, as in Ray. A process that dies no longer counts.

    Example::

        with actorrt.start():
            n = int(actorrt.cluster_resources()["CPU"]) - 1
            collectors = [Collector.remote() for _ in range(n)]
    """
    return current("actorrt.cluster_resources()").resources()[0]


def available_resources() -> dict[str, float]:
    """What :func:`cluster_resources` holds less what is reserved, as Ray's.

    Reserved: the ``num_cpus`` and ``num_gpus`` of the live actors placed outside a
    layout, and every slot of a layout (``actorrt.start(labels=...)``), taken whole when
    the cluster starts. Unlike Ray, running remote functions reserve nothing here.
    """
    return current("actorrt.available_resources()").resources()[1]


def status(max_actors: int = 50) -> str:
    """The cluster as a readable table, for ``print(actorrt.status())``.

    A summary line, then one row per process (rank, pid, host, labels, GPUs, its actors,
    the calls queued or running on them, alive / dead / unresponsive), then one row per
    actor, with the method it has run longest right now and for how long (where a
    program seems stuck, :func:`stacks` then shows where that method waits). Built from
    :func:`nodes` and :func:`actors`, plus one short query to each live process (a
    process that does not answer within 2 s shows as unresponsive).

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


def stacks(timeout: float = 5.0, *, all_threads: bool = False) -> str:
    """What every thread of every live process is doing, for ``print(actorrt.stacks())``.

    Like ``ray stack``: for a program that seems stuck while every process still answers
    (an actor waiting for a result that never comes, two actors waiting on each other, a
    lock taken twice), where the heartbeat sees nothing wrong. Each process is asked at
    once; its section lists each thread by name (an actor's threads are named
    ``<Class>-<first 8 hex of its id>_<n>``) with its frames, innermost last, and the
    source lines. A process that does not answer within ``timeout`` is named instead: it
    may be hung, and ``kill -USR1 PID`` on its host prints its stacks on its terminal.

    Args:
        timeout: Seconds to wait for the answers.
        all_threads: Also actorrt's own threads (``actorrt-*``: heartbeats, output,
            releases), which only wait for their work; by default they are counted.

    Returns:
        One section per process, headed ``=== worker1 (rank 1, pid 1234, host h) ===``.

    Raises:
        ValueError: ``timeout`` is not positive.

    Example::

        ref = learner.train.remote(steps)
        if not actorrt.wait([ref], timeout=600)[0]:
            print(actorrt.stacks())  # where is it waiting?
    """
    if not timeout > 0:
        raise ValueError(f"timeout={timeout!r} must be > 0 seconds")
    return current("actorrt.stacks()").stacks(timeout, all_threads)


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


def get_actor(name: str, namespace: str | None = None) -> ActorHandle:
    """Returns the handle of the live actor registered as ``name``.

    Args:
        name: The actor's name.
        namespace: Ray's argument. actorrt has no namespaces but the cluster's own
            (``get_runtime_context().namespace``, its id), so None or that one, as Ray
            code passes it (``get_actor(n, namespace=ctx.namespace)``).

    Raises:
        TypeError: ``name`` or ``namespace`` is not a string.
        ValueError: ``name`` is not a valid actor name, or no live actor has it; or
            ``namespace`` is not the cluster's (as Ray's, no actor is found there).
    """
    if namespace is not None and not isinstance(namespace, str):
        _no_namespaces("actorrt.get_actor", "namespace", namespace, None)
    check_actor_name(name)  # before the cluster is asked, as for Cls.options(name=...)
    rt = current("actorrt.get_actor()")
    if namespace is not None:
        ours = get_runtime_context().namespace
        if namespace != ours:
            raise ValueError(
                f"actorrt.get_actor({name!r}, namespace={namespace!r}): no actor is in "
                f"that namespace; actorrt has none but the cluster's own, {ours!r} "
                "(get_runtime_context().namespace). Drop namespace= or pass that one."
            )
    return handle_of(rt.get_actor(name))


def list_named_actors(all_namespaces: bool = False) -> list[str]:
    """The names of the cluster's live named actors, sorted, as ``ray.util.list_named_actors()``.

    An actor being recreated after its process died (``max_restarts``) keeps its name and
    is listed; a dead or killed one is not. actorrt has no namespaces: every name is
    listed.

    Args:
        all_namespaces: Ray's argument, taken only as False (every name is listed).

    Raises:
        TypeError: ``all_namespaces`` is not False.

    Example::

        for name in actorrt.list_named_actors():
            print(name, actorrt.get_actor(name))
    """
    _no_namespaces("actorrt.list_named_actors", "all_namespaces", all_namespaces, False)
    infos = current("actorrt.list_named_actors()").actors()
    return sorted(a.name for a in infos if a.name is not None and a.state != "DEAD")


def _no_namespaces(call: str, argument: str, value: object, default: object) -> None:
    """Refuses Ray's namespace arguments other than their defaults, saying why."""
    if value is not default:
        raise TypeError(
            f"{call}({argument}={value!r}): actorrt has no namespaces; an actor's name is "
            "unique in its cluster and every name is listed by actorrt.list_named_actors(). "
            f"Drop {argument}=."
        )


def kill(handle: ActorHandle | TypedActor, *, no_restart: bool = True) -> None:
    """Kills an actor now: its queued, running and later calls fail with ActorDiedError.

    With ``no_restart=False`` (as Ray's), an actor with ``max_restarts`` left is
    restarted instead: its calls in flight fail with ``ActorDiedError`` (those with
    ``max_task_retries`` left are sent again to the new instance, in the order they were
    made, as Ray retries them), its constructor runs again on the same process
    (``was_current_actor_reconstructed`` is then True), and later calls, through any of
    its handles, reach the new instance; it counts as one restart. An actor without
    restarts left is killed for good.

    Args:
        handle: The actor's handle (a :class:`~actorrt.actor_class.TypedActor`'s handle
            is typed as its class, hence the second type).
        no_restart: False: restart it if it has ``max_restarts`` left.
    """
    if not isinstance(handle, ActorHandle):
        raise TypeError(f"actorrt.kill takes an ActorHandle, got {type(handle)!r}.")
    rt = current("actorrt.kill()")
    if not no_restart and rt.restart(handle) is None:
        return
    rt.kill(handle)


def timeline(
    path: str | os.PathLike[str] | None = None, *, timeout: float = 30.0
) -> dict[str, Any]:
    """Gathers every process's timeline into one Chrome trace / Perfetto file (``ray timeline``).

    Needs ``actorrt.start(trace=True)`` (or ``ACTORRT_TRACE=1``). Each process is a row
    (named by its RPC name, rank, host and pid), each thread a track (an actor's thread
    carries the actor's class and id). A call shows as its round trip on the caller
    (``cat`` ``call``, with ``bytes_out`` and ``bytes_back``), and on the actor's
    process as its wait in the mailbox (``wait``), its run (``run``) and its reply
    (``reply``, with ``bytes``); the four share the key ``args.call``
    (``caller/actor id/seq``; a remote function's, ``caller/fn/N@process/seq``). A call
    whose reply was read before this is in it. Spans marked with ``actorrt.profile``
    (:class:`~actorrt.runtime.trace.profile`) lie on their threads (``cat`` ``span``).
    Records are kept, not cleared: a later call gathers everything since the start.
    Driver only.

    Args:
        path: Write the trace here as JSON (open it in https://ui.perfetto.dev or
            ``chrome://tracing``).
        timeout: Seconds each process has to send its records; one that does not is
            left out and named under ``otherData.missing_processes``.

    Returns:
        The trace: a dict with ``traceEvents`` (the Chrome trace event format).

    Raises:
        RuntimeError: Called on a worker, or actorrt was started without ``trace``.
    """
    rt = current("actorrt.timeline()")
    if rt.rank != 0:
        raise RuntimeError("actorrt.timeline() gathers from the driver; call it there")
    if not _trace.ON:
        raise RuntimeError(
            "actorrt.timeline(): nothing was recorded; start with actorrt.start(trace=True) "
            "or ACTORRT_TRACE=1."
        )
    alive = [n.process for n in rt.nodes() if n.alive]
    result = _trace.gather(alive, rt.name, timeout)
    if path is not None:
        _trace.write(result, path)
    return result
