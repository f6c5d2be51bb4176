"""The placer: which process hosts each slot, on which GPUs. The only placement algorithm.

:func:`schedule` places a layout's slots when the plan is made; the runtime's directory
keeps a :class:`Placer` built from the same plan, with those slots reserved, and places
actors that fit no slot (no label, or no layout) with :meth:`Placer.place` — the same
keys and the same capacity counts.

Capacity: a GPU belongs to the physical GPU (host, bus id), shared by every process
that sees it (fractions below 1 share one GPU, whole numbers take whole free GPUs);
CPUs belong to the host (or container), shared by its processes. Processes that host
no actors (the driver) and dead processes are never chosen.

Every strategy first balances slots over processes (a process hosts a second slot only
when every eligible process has one), then:

* ``spread`` (default): round-robin over hosts; among equal candidates, the process
  whose free GPU has the best path (an adapter that is up and GPUDirect-capable next to
  it, then the most NVLink peers); on a process, the emptiest GPU;
* ``pack``: fills hosts in order (fewest hosts in use); on a process, the fullest GPU
  that still fits (best fit);
* ``nearest`` (or ``nearest:LABEL``): places the anchor label (default: the first spec)
  with ``spread``'s path preference, then every other slot on the processes with the
  fastest link to an anchor process (same process, NVLink, same host, GPUDirect RDMA,
  InfiniBand, TCP), preferring GPUs NVLinked to the anchor's GPUs.

Ties break on rank, so every process that runs the same inputs computes the same
placement.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from actorrt.errors import PlacementError
from actorrt.placement.layout import (
    DEFAULT_STRATEGY,
    STRATEGIES,
    LabelSpec,
    check_strategy,
)
from actorrt.placement.node import GpuInfo, ProcessInfo
from actorrt.placement.resources import GPU_UNIT, Resources
from actorrt.placement.topology import (
    container_key,
    gdr_usable,
    gpu_key,
    host_key,
    ibv_usable,
    nvlinked,
)

__all__ = ["STRATEGIES", "Placer", "Slot", "schedule"]

_FAR = 9  # link tier when no anchor is placed yet


@dataclass(frozen=True)
class Slot:
    """One placed slot: a label instance, the local GPUs it got, what it reserves.

    Attributes:
        label: The label.
        index: Which of the label's ``count`` slots this is (0-based).
        gpus: Local CUDA indices given to the slot (empty for CPU-only slots).
        num_gpus: The GPU share asked for (fractions share ``gpus[0]``).
        num_cpus: The CPUs reserved.
    """

    label: str
    index: int
    gpus: tuple[int, ...] = ()
    num_gpus: float = 0
    num_cpus: float = 0

    @property
    def resources(self) -> Resources:
        """What this slot reserves on its process."""
        return Resources(self.num_cpus, self.num_gpus)

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form, as the plan's JSON carries it."""
        return {
            "label": self.label,
            "index": self.index,
            "gpus": list(self.gpus),
            "num_gpus": self.num_gpus,
            "num_cpus": self.num_cpus,
        }

    @classmethod
    def from_dict(cls, d: Any) -> Slot:
        """Builds a slot from :meth:`to_dict`'s form."""
        return cls(
            label=str(d["label"]),
            index=int(d["index"]),
            gpus=tuple(int(x) for x in d.get("gpus", ())),
            num_gpus=d.get("num_gpus", 0),
            num_cpus=d.get("num_cpus", 0),
        )


def _gpu_path(node: Any, gpu: GpuInfo) -> tuple[int, int]:
    """How good a GPU's path to its peers is (lower is better)."""
    gdr = 0 if node.hcas and gdr_usable(node, (gpu.index,)) else 1
    peers = sum(1 for other in node.gpus if other is not gpu and nvlinked(gpu, other))
    return (gdr, -peers)


class Placer:
    """Capacity and load over a fixed list of processes; places one request at a time.

    Args:
        processes: Processes sorted by rank (``check_processes``).
    """

    def __init__(self, processes: Sequence[ProcessInfo]) -> None:
        self.procs = tuple(processes)
        self.gpu_free: dict[tuple[str, str], int] = {}
        self.cpu_free: dict[tuple[str, ...], int] = {}
        for p in processes:
            for g in p.node.gpus:
                self.gpu_free.setdefault(gpu_key(p.node, g), GPU_UNIT)
            pool = container_key(p.node)
            cpus = max(0, p.node.num_cpus) * GPU_UNIT
            self.cpu_free[pool] = max(self.cpu_free.get(pool, 0), cpus)
        self.load = [0] * len(processes)
        self.alive = [True] * len(processes)
        self.slots: list[list[Slot]] = [[] for _ in processes]
        # Hosts in order of their first process that may host actors, and each process's
        # position among its host's such processes (the driver takes no turn).
        hosts: dict[str, int] = {}
        per_host: dict[str, int] = {}
        self.host_idx: list[int] = []
        self.host_pos: list[int] = []
        for p in sorted(processes, key=lambda q: not q.node.hosts_actors):
            hk = host_key(p.node)
            hosts.setdefault(hk, len(hosts))
        for p in processes:
            hk = host_key(p.node)
            self.host_idx.append(hosts[hk])
            self.host_pos.append(per_host.get(hk, 0))
            if p.node.hosts_actors:
                per_host[hk] = per_host.get(hk, 0) + 1
        self._rank_index = {p.rank: i for i, p in enumerate(processes)}

    def index_of(self, rank: int) -> int:
        """The position in ``procs`` of the process of rank ``rank``."""
        return self._rank_index[rank]

    def add(self, p: ProcessInfo) -> int:
        """Adds a process that joined the running cluster (a rank after the last).

        It shares the CPUs of a container already known, and comes after every host
        already known in the strategies' order, as if it had been listed last.

        Returns:
            Its position in ``procs``.

        Raises:
            PlacementError: Its rank is already there.
        """
        if p.rank in self._rank_index:
            raise PlacementError(f"rank {p.rank} is already in the placer")
        i = len(self.procs)
        self.procs = (*self.procs, p)
        for g in p.node.gpus:
            self.gpu_free.setdefault(gpu_key(p.node, g), GPU_UNIT)
        self.cpu_free.setdefault(container_key(p.node), max(0, p.node.num_cpus) * GPU_UNIT)
        self.load.append(0)
        self.alive.append(True)
        self.slots.append([])
        hk = host_key(p.node)
        known = [j for j in range(i) if host_key(self.procs[j].node) == hk]
        new_host = max(self.host_idx, default=-1) + 1
        self.host_idx.append(self.host_idx[known[0]] if known else new_host)
        self.host_pos.append(sum(1 for j in known if self.procs[j].node.hosts_actors))
        self._rank_index[p.rank] = i
        return i

    # -- eligibility and capacity -------------------------------------------------------
    def accepts(self, i: int, label: str | None) -> bool:
        """Whether process ``i`` may host an actor with ``label`` (None: no label)."""
        node = self.procs[i].node
        if not (self.alive[i] and node.hosts_actors):
            return False
        return label is None or not node.labels or label in node.labels

    def _cpus_fit(self, i: int, res: Resources) -> bool:
        return res.cpu_units <= self.cpu_free[container_key(self.procs[i].node)]

    def choose_gpus(
        self,
        i: int,
        res: Resources,
        prefer: str = DEFAULT_STRATEGY,
        near: frozenset[tuple[str, str]] = frozenset(),
    ) -> tuple[GpuInfo, ...] | None:
        """GPUs for ``res`` on process ``i``, or None when they (or the CPUs) do not fit."""
        if not self._cpus_fit(i, res):
            return None
        need = res.gpu_units
        if not need:
            return ()
        node = self.procs[i].node
        whole = need >= GPU_UNIT
        cands = []
        for g in node.gpus:
            free = self.gpu_free[gpu_key(node, g)]
            if (free == GPU_UNIT) if whole else (free >= need):
                cands.append((g, free, _gpu_path(node, g)))
        want = res.whole_gpus
        if len(cands) < want:
            return None
        if prefer == "pack":  # best fit: fill partly used GPUs first
            cands.sort(key=lambda c: (c[1], c[2], c[0].index))
        elif prefer == "nearest":
            cands.sort(key=lambda c: (gpu_key(node, c[0]) not in near, -c[1], c[2], c[0].index))
        else:  # spread: emptiest first, then the best path
            cands.sort(key=lambda c: (-c[1], c[2], c[0].index))
        return tuple(c[0] for c in cands[:want])

    def take(self, i: int, res: Resources, gpus: Iterable[GpuInfo]) -> None:
        """Reserve ``res`` on process ``i`` and the given GPUs."""
        node = self.procs[i].node
        share = GPU_UNIT if res.gpu_units >= GPU_UNIT else res.gpu_units
        for g in gpus:
            self.gpu_free[gpu_key(node, g)] -= share
        self.cpu_free[container_key(node)] -= res.cpu_units
        self.load[i] += 1

    def give_back(self, i: int, res: Resources, gpu_indices: Iterable[int]) -> None:
        """Undo :meth:`take` (an actor ended)."""
        node = self.procs[i].node
        by_index = {g.index: g for g in node.gpus}
        share = GPU_UNIT if res.gpu_units >= GPU_UNIT else res.gpu_units
        for idx in gpu_indices:
            key = gpu_key(node, by_index[idx])
            self.gpu_free[key] = min(GPU_UNIT, self.gpu_free[key] + share)
        pool = container_key(node)
        self.cpu_free[pool] += res.cpu_units
        self.load[i] = max(0, self.load[i] - 1)

    def resources(self) -> tuple[dict[str, float], dict[str, float]]:
        """What the live processes that host actors hold, and what no actor or slot reserves.

        Each as ``{"CPU": n, "GPU": n}``, as Ray's ``cluster_resources()`` and
        ``available_resources()`` (``"GPU"`` left out when there are none, as Ray does):
        the CPUs of each host (or container) counted once, however many processes it runs,
        and each physical GPU once.
        """
        pools: dict[tuple[str, ...], None] = {}
        gpus: dict[tuple[str, str], None] = {}
        cpus = 0
        for i, p in enumerate(self.procs):
            if not (self.alive[i] and p.node.hosts_actors):
                continue
            pool = container_key(p.node)
            if pool not in pools:
                pools[pool] = None
                cpus += max(0, p.node.num_cpus) * GPU_UNIT
            for g in p.node.gpus:
                gpus[gpu_key(p.node, g)] = None
        total = {"CPU": cpus / GPU_UNIT}
        free = {"CPU": sum(max(0, self.cpu_free[pool]) for pool in pools) / GPU_UNIT}
        if gpus:
            total["GPU"] = float(len(gpus))
            free["GPU"] = sum(max(0, self.gpu_free[g]) for g in gpus) / GPU_UNIT
        return total, free

    def gpus_of(self, i: int, indices: Iterable[int]) -> tuple[GpuInfo, ...]:
        """The ``GpuInfo`` of process ``i``'s GPUs with these local indices."""
        by_index = {g.index: g for g in self.procs[i].node.gpus}
        return tuple(by_index[x] for x in indices)

    # -- strategy keys ------------------------------------------------------------------
    def _path_key(self, i: int, res: Resources) -> tuple[int, int]:
        if not res.gpu_units:
            return (0, 0)
        node = self.procs[i].node
        free = [
            g for g in node.gpus if self.gpu_free[gpu_key(node, g)] >= min(res.gpu_units, GPU_UNIT)
        ]
        return min((_gpu_path(node, g) for g in free), default=(1, 0))

    def _static_key(
        self, i: int, res: Resources, prefer: str, anchors: list[int]
    ) -> tuple[int, ...]:
        if prefer == "pack":
            return (self.host_idx[i], *self._path_key(i, res), i)
        if prefer == "spread":
            return (self.host_pos[i], *self._path_key(i, res), self.host_idx[i], i)
        return (*self._distance(i, anchors), i)

    def _distance(self, i: int, anchors: list[int]) -> tuple[int, int]:
        """Link tier from process i to the nearest anchor (lower is nearer)."""
        best = (_FAR, 0)
        a_node = self.procs[i].node
        for j in anchors:
            b_node = self.procs[j].node
            if i == j:
                tier = 0
            elif container_key(a_node) == container_key(b_node):
                anchor_gpus = [g for g in b_node.gpus if g.index in self._slot_gpus(j)]
                linked = any(nvlinked(x, y) for x in a_node.gpus for y in anchor_gpus)
                tier = 1 if linked else 2
            elif host_key(a_node) == host_key(b_node):
                tier = 3
            elif ibv_usable(a_node) and ibv_usable(b_node):
                a_gdr = a_node.gpus and gdr_usable(a_node, (g.index for g in a_node.gpus))
                b_gdr = b_node.gpus and gdr_usable(b_node, self._slot_gpus(j))
                tier = 4 if a_gdr and b_gdr else 5
            else:
                tier = 6
            best = min(best, (tier, self.host_idx[j]))
        return best

    def _slot_gpus(self, j: int) -> set[int]:
        return {g for s in self.slots[j] for g in s.gpus}

    def near_gpus(self, anchors: list[int]) -> frozenset[tuple[str, str]]:
        """The GPUs (as ``(host, bus id)`` keys) that the anchor processes' slots hold."""
        return frozenset(
            gpu_key(self.procs[j].node, g)
            for j in anchors
            for g in self.procs[j].node.gpus
            if g.index in self._slot_gpus(j)
        )

    # -- placing ------------------------------------------------------------------------
    def candidates(
        self, label: str | None, res: Resources, prefer: str, anchors: list[int]
    ) -> list[tuple[int, tuple[int, ...], int]]:
        """Heap entries ``(load, static key, index)`` of the processes that may host it."""
        heap = []
        for i, p in enumerate(self.procs):
            if not self.accepts(i, label) or (res.gpu_units and not p.node.gpus):
                continue
            heap.append((self.load[i], self._static_key(i, res, prefer, anchors), i))
        heapq.heapify(heap)
        return heap

    def place(
        self, label: str | None, res: Resources, strategy: str = DEFAULT_STRATEGY
    ) -> tuple[int, tuple[GpuInfo, ...]]:
        """Place one request (an actor outside the layout's slots) and reserve it.

        Returns:
            The process index and the GPUs it got.

        Raises:
            PlacementError: No live process can host it; the message says what is missing.
        """
        prefer = strategy.partition(":")[0]
        prefer = "spread" if prefer == "nearest" else prefer
        heap = self.candidates(label, res, prefer, [])
        while heap:
            _, _, i = heapq.heappop(heap)
            gpus = self.choose_gpus(i, res, prefer)
            if gpus is not None:
                self.take(i, res, gpus)
                return i, gpus
        raise PlacementError(self.why_not(label, res))

    def why_not(self, label: str | None, res: Resources, count: int = 1, placed: int = 0) -> str:
        """Why a request does not fit: no process for the label, no GPU, or no CPU."""
        what = f"label {label!r}" if label else "an actor without a label"
        offering = [i for i in range(len(self.procs)) if self.accepts(i, label)]
        if not offering:
            offered = sorted({lb for p in self.procs for lb in p.node.labels})
            hosts = sum(
                1 for i, p in enumerate(self.procs) if self.alive[i] and p.node.hosts_actors
            )
            if label and hosts:
                return (
                    f"{what} needs {count} process(es); no process offers label {label!r} "
                    f"(labels offered: {offered or 'none'}; a process with no labels accepts "
                    f"any); give a process that label (a local cluster: "
                    f"actorrt.start(labels={{{label!r}: 1}}); a node: actorrt worker --labels "
                    f"{label}; a cluster file: labels = [{label!r}] on a node), or drop the "
                    "label"
                )
            return f"{what}: no live process can host actors; add workers or restart the cluster"
        slot = f"slot {placed + 1} of {count}" if count > 1 or placed else "it"
        if res.gpu_units:
            gpus_word = f"{res.num_gpus:g} GPU" + ("" if res.num_gpus <= 1 else "s")
            seen = {
                gpu_key(self.procs[i].node, g): self.gpu_free[gpu_key(self.procs[i].node, g)]
                for i in offering
                for g in self.procs[i].node.gpus
            }
            if not seen:
                return (
                    f"{what} needs {gpus_word}; no process that may host it has a GPU "
                    f"({len(offering)} process(es) offer it); set num_gpus=0, or add nodes "
                    "with GPUs"
                )
            left = sum(1 for v in seen.values() if v > 0)
            if not res.cpu_units or any(self._cpus_fit(i, res) for i in offering):
                return (
                    f"{what} needs {gpus_word}; no node with a free GPU for {slot} "
                    f"({len(offering)} process(es) offer it, {left} of {len(seen)} GPU(s) "
                    "among them have capacity left); lower count or num_gpus, or add GPUs"
                )
        pools = {container_key(self.procs[i].node) for i in offering}
        most = max((self.cpu_free[k] for k in pools), default=0) / GPU_UNIT
        return (
            f"{what} needs num_cpus={res.num_cpus:g}; no host has that many CPUs free for "
            f"{slot} (the most free on one host: {most:g}); lower count or num_cpus, or add "
            "nodes"
        )


def schedule(
    processes: Sequence[ProcessInfo],
    specs: Sequence[LabelSpec],
    strategy: str = DEFAULT_STRATEGY,
) -> tuple[Placer, list[tuple[Slot, ...]]]:
    """Place every slot of every spec.

    Args:
        processes: Processes sorted by rank.
        specs: Label specs, in order.
        strategy: ``spread``, ``pack``, ``nearest`` or ``nearest:LABEL``.

    Returns:
        The placer (capacity left after the slots) and the slots of each process,
        aligned with ``processes``.

    Raises:
        PlacementError: A spec cannot be satisfied; the message names what is missing.
    """
    labels = [s.label for s in specs]
    check_strategy(strategy, labels)
    if len(set(labels)) != len(labels):
        raise PlacementError(f"a label appears twice in the spec: {labels}")
    base, _, anchor_label = strategy.partition(":")
    placer = Placer(processes)
    ordered = list(specs)
    if base == "nearest" and ordered:
        anchor_label = anchor_label or ordered[0].label
        ordered.sort(key=lambda s: s.label != anchor_label)  # stable: anchor first
    anchors: list[int] = []
    for spec in ordered:
        is_anchor = base == "nearest" and spec.label == anchor_label
        prefer = "spread" if is_anchor else base
        res = spec.resources
        near = placer.near_gpus(anchors) if prefer == "nearest" else frozenset()
        heap = placer.candidates(spec.label, res, prefer, anchors)
        for index in range(spec.count):
            while heap:
                load, static, i = heapq.heappop(heap)
                gpus = placer.choose_gpus(i, res, prefer, near)
                if gpus is None:
                    continue  # capacity only shrinks: this process is out for this spec
                placer.take(i, res, gpus)
                placer.slots[i].append(
                    Slot(
                        spec.label,
                        index,
                        tuple(sorted(g.index for g in gpus)),
                        spec.num_gpus,
                        spec.num_cpus,
                    )
                )
                heapq.heappush(heap, (load + 1, static, i))
                if is_anchor:
                    anchors.append(i)
                break
            else:
                raise PlacementError(placer.why_not(spec.label, res, spec.count, index))
    return placer, [tuple(s) for s in placer.slots]
