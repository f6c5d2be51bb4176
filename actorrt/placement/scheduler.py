"""Label scheduler: which process hosts which label slot, on which GPUs.

A label spec says how many slots a label needs and how much GPU each takes
(``learner: count 1, num_gpus 1``). Slots are placed one at a time, in spec order, on
the best process by a strategy key; ties break on rank, so every process that runs
the same inputs computes the same placement.

Every strategy first balances slots over processes (a process hosts a second slot
only when every eligible process has one), then:

* ``pack``: fills hosts in order (fewest hosts in use);
* ``spread``: goes round-robin over hosts;
* ``nearest`` (or ``nearest:LABEL``): places the anchor label (default: the first spec)
  with ``pack``, then every other slot on the processes with the fastest link to an
  anchor process (same host and NVLink, same host, GPUDirect RDMA, InfiniBand, TCP),
  preferring GPUs NVLinked to the anchor's GPUs.

GPU capacity belongs to the physical GPU (host, bus id), shared by every process that
sees it; fractions below 1 share a GPU, whole numbers take whole free GPUs.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from actorrt.errors import PlacementError
from actorrt.placement.node import GpuInfo, ProcessInfo
from actorrt.placement.topology import (
    container_key,
    gdr_usable,
    gpu_key,
    host_key,
    ibv_usable,
    nvlinked,
)

__all__ = ["STRATEGIES", "LabelSpec", "Slot", "parse_label_specs", "schedule"]

STRATEGIES = ("pack", "spread", "nearest")
_UNIT = 1000  # GPU capacity in thousandths, so fractions never drift


@dataclass(frozen=True)
class LabelSpec:
    """How many slots a label needs and the GPU share of each.

    Attributes:
        label: The label (``"learner"``).
        count: Number of slots (actors / workers) carrying the label.
        num_gpus: GPUs per slot: 0 (CPU only), a fraction below 1 (a shared GPU), or a
            whole number of whole GPUs.
    """

    label: str
    count: int = 1
    num_gpus: float = 0

    def __post_init__(self) -> None:
        if not self.label or not isinstance(self.label, str):
            raise PlacementError(f"a label spec needs a non-empty label name, got {self.label!r}")
        if not isinstance(self.count, int) or self.count < 0:
            raise PlacementError(
                f"label {self.label!r}: count must be an integer >= 0, got {self.count!r}"
            )
        if self.num_gpus < 0 or (self.num_gpus > 1 and self.num_gpus != int(self.num_gpus)):
            raise PlacementError(
                f"label {self.label!r}: num_gpus must be 0, a fraction below 1 or a whole "
                f"number, got {self.num_gpus!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "count": self.count, "num_gpus": self.num_gpus}


def parse_label_specs(specs: Mapping[str, Any]) -> tuple[LabelSpec, ...]:
    """Parse ``{"learner": {"count": 1, "num_gpus": 1}, "collector": 14, ...}``.

    A bare integer is a count of CPU-only slots. Order is kept (it is the spec order).
    """
    out = []
    for label, value in specs.items():
        if isinstance(value, bool):
            raise PlacementError(f"label {label!r}: expected a count or a table, got {value!r}")
        if isinstance(value, int):
            out.append(LabelSpec(label, count=value))
            continue
        if not isinstance(value, Mapping):
            raise PlacementError(f"label {label!r}: expected a count or a table, got {value!r}")
        unknown = set(value) - {"count", "num_gpus"}
        if unknown:
            raise PlacementError(
                f"label {label!r}: unknown field(s) {sorted(unknown)}; use count and num_gpus"
            )
        out.append(
            LabelSpec(label, count=int(value.get("count", 1)), num_gpus=value.get("num_gpus", 0))
        )
    return tuple(out)


@dataclass(frozen=True)
class Slot:
    """One placed slot: a label instance and the local GPUs it got.

    Attributes:
        label: The label.
        index: Which of the label's ``count`` slots this is (0-based).
        gpus: Local CUDA indices given to the slot (empty for CPU-only slots).
        num_gpus: The GPU share asked for (fractions share ``gpus[0]``).
    """

    label: str
    index: int
    gpus: tuple[int, ...] = ()
    num_gpus: float = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "index": self.index,
            "gpus": list(self.gpus),
            "num_gpus": self.num_gpus,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Slot:
        return cls(
            label=str(d["label"]),
            index=int(d["index"]),
            gpus=tuple(int(x) for x in d.get("gpus", ())),
            num_gpus=d.get("num_gpus", 0),
        )


def _accepts(p: ProcessInfo, label: str) -> bool:
    return not p.node.labels or label in p.node.labels


class _State:
    """Mutable bookkeeping of one scheduling run (capacity per physical GPU, loads)."""

    def __init__(self, processes: Sequence[ProcessInfo]) -> None:
        self.procs = processes
        self.free: dict[tuple[str, str], int] = {}
        for p in processes:
            for g in p.node.gpus:
                self.free.setdefault(gpu_key(p.node, g), _UNIT)
        self.load = [0] * len(processes)
        self.slots: list[list[Slot]] = [[] for _ in processes]
        hosts: dict[str, int] = {}
        per_host: dict[str, int] = {}
        self.host_idx = []
        self.host_pos = []  # position of the process among its host's processes
        for p in processes:
            hk = host_key(p.node)
            self.host_idx.append(hosts.setdefault(hk, len(hosts)))
            self.host_pos.append(per_host.get(hk, 0))
            per_host[hk] = per_host.get(hk, 0) + 1

    def choose_gpus(
        self, i: int, need: int, prefer: str, near: frozenset[tuple[str, str]] = frozenset()
    ) -> tuple[GpuInfo, ...] | None:
        """Pick GPUs for a slot on process ``i``, or None when they do not fit."""
        node = self.procs[i].node
        cands = []
        whole = need >= _UNIT
        for g in node.gpus:
            free = self.free[gpu_key(node, g)]
            if (free == _UNIT) if whole else (free >= need):
                cands.append((g, free))
        want = need // _UNIT if whole else 1
        if len(cands) < want:
            return None
        if prefer == "pack":  # best fit: fill partly used GPUs first
            cands.sort(key=lambda c: (c[1], c[0].index))
        elif prefer == "nearest":
            cands.sort(key=lambda c: (gpu_key(node, c[0]) not in near, -c[1], c[0].index))
        else:  # spread: emptiest first
            cands.sort(key=lambda c: (-c[1], c[0].index))
        return tuple(c[0] for c in cands[:want])

    def take(self, i: int, spec: LabelSpec, index: int, gpus: tuple[GpuInfo, ...]) -> None:
        node = self.procs[i].node
        need = round(spec.num_gpus * _UNIT)
        for g in gpus:
            self.free[gpu_key(node, g)] -= _UNIT if need >= _UNIT else need
        self.load[i] += 1
        self.slots[i].append(
            Slot(spec.label, index, tuple(sorted(g.index for g in gpus)), spec.num_gpus)
        )


def _distance(state: _State, i: int, anchors: list[int]) -> tuple[int, int]:
    """Link tier from process i to the nearest anchor (lower is nearer)."""
    best = (9, 0)
    a_node = state.procs[i].node
    for j in anchors:
        b_node = state.procs[j].node
        if i == j:
            tier = 0
        elif container_key(a_node) == container_key(b_node):
            anchor_gpus = [g for g in b_node.gpus if g.index in _slot_gpus(state, j)]
            linked = any(nvlinked(x, y) for x in a_node.gpus for y in anchor_gpus)
            tier = 1 if linked else 2
        elif host_key(a_node) == host_key(b_node):
            tier = 3
        elif ibv_usable(a_node) and ibv_usable(b_node):
            a_gdr = a_node.gpus and gdr_usable(a_node, (g.index for g in a_node.gpus))
            b_gdr = b_node.gpus and gdr_usable(b_node, _slot_gpus(state, j))
            tier = 4 if a_gdr and b_gdr else 5
        else:
            tier = 6
        best = min(best, (tier, state.host_idx[j]))
    return best


def _slot_gpus(state: _State, j: int) -> set[int]:
    return {g for s in state.slots[j] for g in s.gpus}


def _failure(processes: Sequence[ProcessInfo], spec: LabelSpec, placed: int, state: _State) -> str:
    offering = [p for p in processes if _accepts(p, spec.label)]
    if not offering:
        offered = sorted({lb for p in processes for lb in p.node.labels})
        return (
            f"label {spec.label!r} needs {spec.count} process(es); no process offers label "
            f"{spec.label!r} (labels offered: {offered or 'none'}; a process with no labels "
            "accepts any)"
        )
    gpus_word = f"{spec.num_gpus:g} GPU" + ("" if spec.num_gpus <= 1 else "s")
    free = sum(1 for p in offering for g in p.node.gpus if state.free[gpu_key(p.node, g)] > 0)
    return (
        f"label {spec.label!r} needs {gpus_word}; no node with a free GPU for slot "
        f"{placed + 1} of {spec.count} ({len(offering)} process(es) offer {spec.label!r}, "
        f"{free} GPU(s) among them have capacity left); lower count or num_gpus, or add GPUs"
    )


def schedule(
    processes: Sequence[ProcessInfo], specs: Sequence[LabelSpec], strategy: str = "pack"
) -> list[tuple[Slot, ...]]:
    """Place every slot of every spec.

    Args:
        processes: Processes sorted by rank.
        specs: Label specs, in order.
        strategy: ``pack``, ``spread``, ``nearest`` or ``nearest:LABEL``.

    Returns:
        The slots of each process, aligned with ``processes``.

    Raises:
        PlacementError: A spec cannot be satisfied; the message names what is missing.
    """
    base, _, anchor_label = strategy.partition(":")
    if base not in STRATEGIES or (anchor_label and base != "nearest"):
        raise PlacementError(
            f"unknown placement strategy {strategy!r}; use pack, spread, nearest or nearest:LABEL"
        )
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise PlacementError(f"a label appears twice in the spec: {labels}")
    if anchor_label and anchor_label not in labels:
        raise PlacementError(f"strategy {strategy!r}: label {anchor_label!r} is not in the spec")
    state = _State(processes)
    ordered = list(specs)
    if base == "nearest" and ordered:
        anchor_label = anchor_label or ordered[0].label
        ordered.sort(key=lambda s: s.label != anchor_label)  # stable: anchor first
    anchors: list[int] = []
    for spec in ordered:
        is_anchor = base == "nearest" and spec.label == anchor_label
        prefer = "pack" if (base == "pack" or is_anchor) else base
        need = round(spec.num_gpus * _UNIT)
        near: frozenset[tuple[str, str]] = frozenset()
        if prefer == "nearest":
            near = frozenset(
                gpu_key(processes[j].node, g)
                for j in anchors
                for g in processes[j].node.gpus
                if g.index in _slot_gpus(state, j)
            )
        heap = []
        for i, p in enumerate(processes):
            if not _accepts(p, spec.label) or (need and not p.node.gpus):
                continue
            if prefer == "pack":
                static: tuple[int, ...] = (state.host_idx[i], i)
            elif prefer == "spread":
                static = (state.host_pos[i], state.host_idx[i], i)
            else:
                static = (*_distance(state, i, anchors), i)
            heap.append((state.load[i], static, i))
        heapq.heapify(heap)
        for index in range(spec.count):
            while heap:
                load, static, i = heapq.heappop(heap)
                gpus = state.choose_gpus(i, need, prefer, near) if need else ()
                if gpus is None:
                    continue  # capacity only shrinks: this process is out for this spec
                state.take(i, spec, index, gpus)
                heapq.heappush(heap, (load + 1, static, i))
                if is_anchor:
                    anchors.append(i)
                break
            else:
                raise PlacementError(_failure(processes, spec, index, state))
    return [tuple(s) for s in state.slots]
