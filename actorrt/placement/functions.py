"""Where remote functions run: pure functions over the processes and the plan.

A remote function asks for CPUs and GPUs per running call (``num_cpus``, ``num_gpus``)
and may name a label. Every process that can run it gets one *executor* for that shape:
a pool of threads, as many as the process's share of its host allows at once, each
thread on its own GPU group when the function needs GPUs. Callers spread their calls
over the executors (:class:`FunctionSpot`), and each executor's id says how it is made,
so the process it lives on opens it from the id alone on the first call.

The shares: a host's CPUs and GPUs are split among its processes that host actors (the
driver hosts none), GPU ``k`` of a host going to the ``k mod P``-th of its ``P``
processes, so that no GPU is handed out twice. Functions reserve nothing: they share
their process's CPUs and GPUs with the actors there.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import NamedTuple

from actorrt.errors import PlacementError
from actorrt.placement.node import ProcessInfo
from actorrt.placement.plan import Plan
from actorrt.placement.resources import GPU_UNIT, Resources
from actorrt.placement.topology import container_key

__all__ = [
    "EXECUTOR_PREFIX",
    "FREE_THREADS",
    "FunctionSpot",
    "executor_id",
    "function_spots",
    "parse_executor_id",
]

EXECUTOR_PREFIX = "fn/"
"""How an executor's id begins (actor ids are 32 hex digits: the two never meet)."""

FREE_THREADS = 64
"""Threads of an executor for functions with ``num_cpus=0`` (Ray bounds those by nothing)."""

GpuGroups = tuple[tuple[int, ...], ...]


class FunctionSpot(NamedTuple):
    """One executor that can run a function: its process and its id there."""

    worker: str
    executor: str
    threads: int


def executor_id(threads: int, groups: GpuGroups = ()) -> str:
    """The id of an executor of ``threads`` threads; thread ``i`` uses ``groups[i % len]``.

    E.g. ``fn/4`` (four threads, no GPU), ``fn/2/0.1`` (GPU 0 and GPU 1, one thread
    each), ``fn/1/0+1`` (one thread using GPUs 0 and 1).
    """
    if not groups:
        return f"{EXECUTOR_PREFIX}{threads}"
    gpus = ".".join("+".join(str(g) for g in group) for group in groups)
    return f"{EXECUTOR_PREFIX}{threads}/{gpus}"


def parse_executor_id(executor: str) -> tuple[int, GpuGroups]:
    """The threads and GPU groups :func:`executor_id` put into ``executor``.

    Raises:
        ValueError: ``executor`` is not such an id.
    """
    if not executor.startswith(EXECUTOR_PREFIX):
        raise ValueError(f"{executor!r} is not a function executor's id")
    threads, _, gpus = executor[len(EXECUTOR_PREFIX) :].partition("/")
    groups = tuple(tuple(int(g) for g in group.split("+")) for group in gpus.split(".") if gpus)
    return int(threads), groups


def _eligible(p: ProcessInfo, plan: Plan, label: str | None, alive: bool) -> bool:
    if not (alive and p.node.hosts_actors):
        return False
    if label is None:
        return True
    if plan.specs:  # a layout: the processes holding a slot of the label
        try:
            return label in plan.for_rank(p.rank).labels
        except PlacementError:  # joined after the plan was made: it holds no slot
            return False
    return not p.node.labels or label in p.node.labels


def _gpu_groups(gpus: Sequence[int], res: Resources) -> tuple[GpuGroups, int]:
    """The groups of ``gpus`` one call uses, and how many calls each group runs at once."""
    if res.num_gpus < 1:
        return tuple((g,) for g in gpus), GPU_UNIT // res.gpu_units
    n = int(res.num_gpus)
    return tuple(tuple(gpus[i : i + n]) for i in range(0, len(gpus) - n + 1, n)), 1


def function_spots(
    processes: Sequence[ProcessInfo],
    plan: Plan,
    label: str | None,
    res: Resources,
    alive: Sequence[bool] | None = None,
) -> tuple[FunctionSpot, ...]:
    """The executors that can run a function of ``label`` taking ``res`` per call.

    Args:
        processes: The cluster's processes.
        plan: Its plan (for the labels of a layout's slots).
        label: The function's label, or None.
        res: What each running call takes.
        alive: Per process, whether it is alive (default: all are).

    Returns:
        One spot per process that can run it, in rank order.

    Raises:
        PlacementError: No process can; the message says what is missing.
    """
    if label is not None and plan.specs and label not in {s.label for s in plan.specs}:
        raise PlacementError(
            f"label {label!r} is not in the cluster's layout (labels offered: "
            f"{', '.join(s.label for s in plan.specs)}); add it to actorrt.start(labels=...), "
            "or use one of those labels"
        )
    living = list(alive) if alive is not None else [True] * len(processes)
    hosting: dict[object, list[ProcessInfo]] = defaultdict(list)
    for p in sorted(processes, key=lambda q: q.rank):
        if p.node.hosts_actors:
            hosting[container_key(p.node)].append(p)
    spots = []
    labelled = 0
    for p, is_alive in zip(processes, living, strict=True):
        if not _eligible(p, plan, label, is_alive):
            continue
        labelled += 1
        peers = hosting[container_key(p.node)]
        count, position = len(peers), peers.index(p)
        cpus = max(1, p.node.num_cpus)
        if res.num_cpus > cpus:
            continue
        share = cpus / count
        threads = FREE_THREADS if not res.cpu_units else max(1, int(share / res.num_cpus))
        groups: GpuGroups = ()
        if res.gpu_units:
            gpus = sorted(g.index for g in p.node.gpus)
            mine = [g for k, g in enumerate(gpus) if k % count == position]
            groups, per_group = _gpu_groups(mine, res)
            if not groups:
                continue
            threads = len(groups) * per_group
        spots.append(FunctionSpot(p.name, executor_id(threads, groups), threads))
    if spots:
        return tuple(spots)
    asked = f"num_cpus={res.num_cpus:g}, num_gpus={res.num_gpus:g}"
    if not labelled:
        where = f"with label {label!r}" if label is not None else "that hosts actors"
        raise PlacementError(f"no live process {where} can run it")
    if res.gpu_units:
        raise PlacementError(
            f"it asks {asked}, and no live process {_with(label)}has that many GPUs of its "
            "own (a host's GPUs are split among its processes); lower num_gpus, or start "
            "the cluster on GPUs (actorrt.start(local_cuda_devices=...))"
        )
    most = max(p.node.num_cpus for p in processes)
    raise PlacementError(
        f"it asks {asked}, more CPUs than any host has (at most {most}); lower num_cpus"
    )


def _with(label: str | None) -> str:
    return f"with label {label!r} " if label is not None else ""
