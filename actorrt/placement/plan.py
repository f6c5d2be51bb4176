"""``make_plan``: node descriptions and label specs in, a :class:`Plan` out.

Pure computation over plain data (no processes, sockets or GPUs), so rank 0 can plan
for the whole cluster and publish the plan as JSON, and tests can plan clusters of any
size. The same inputs give the same plan in every process.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from actorrt.errors import PlacementError
from actorrt.placement.devicemap import (
    DeviceMapOverride,
    apply_device_map_override,
    compute_device_maps,
    devices_in_use,
)
from actorrt.placement.layout import DEFAULT_STRATEGY, LabelSpec, Layout
from actorrt.placement.node import ProcessInfo, check_processes
from actorrt.placement.scheduler import Slot, schedule
from actorrt.placement.topology import (
    BANDWIDTH_CLASS,
    build_topology,
    container_key,
    gpu_key,
    host_key,
)
from actorrt.placement.transports import (
    ProcessWhy,
    choose_channels,
    choose_env,
    choose_transports,
    explain_pair,
    pair_transports,
    process_facts,
)

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["TRANSPORT_MODES", "Pair", "Plan", "ProcessPlan", "make_plan", "plan_graph"]

TRANSPORT_MODES = ("auto", "cpu", "cuda")


class Pair(NamedTuple):
    """The transport two processes use (symmetric; listed once, ``src`` has the lower rank)."""

    src: str
    dst: str
    transport: str


@dataclass(frozen=True)
class ProcessPlan:
    """Everything one process needs from the plan.

    Attributes:
        name: RPC worker name.
        rank: RPC rank.
        node: Node id: the host name, with ``/cN`` appended when several containers share
            the host.
        labels: Labels of the slots it hosts, in order, without repeats.
        slots: The slots it hosts (label, slot index, GPUs).
        gpus: Local CUDA indices its slots were given.
        devices: ``devices`` for TensorPipe: every device its maps (and its peers' maps
            to it) use.
        device_maps: ``{peer: {"cuda:a": "cuda:b"}}``.
        transports: ``_transports``, or None for TensorPipe's default.
        channels: ``_channels``, or None for TensorPipe's default.
        env: Environment to set before torch loads (fork safety, TP_SOCKET_IFNAME).
        guard_tiny_cuda: Its CUDA tensors may travel over cuda_gdr: the runtime sends
            tiny ones through host memory (:mod:`actorrt.runtime.roads`).
        why: Why it got its transports, channels and env, as the planner decided them
            (``actorrt plan --explain``); None on a plan read back from JSON, which does
            not carry reasons (workers never need them).
    """

    name: str
    rank: int
    node: str
    labels: tuple[str, ...] = ()
    slots: tuple[Slot, ...] = ()
    gpus: tuple[int, ...] = ()
    devices: list[str] = field(default_factory=list)
    device_maps: dict[str, dict[str, str]] = field(default_factory=dict)
    transports: list[str] | None = None
    channels: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    guard_tiny_cuda: bool = False
    why: ProcessWhy | None = field(default=None, compare=False, repr=False)

    def backend_options_kwargs(
        self,
        available_transports: Collection[str] | None = None,
        available_channels: Collection[str] | None = None,
    ) -> dict[str, Any]:
        """Keyword arguments for ``TensorPipeRpcBackendOptions`` (empty ones left out).

        Args:
            available_transports: When given, transports outside it are dropped.
            available_channels: When given, channels outside it are dropped. torch
                refuses names its build lacks (``registered_tensorpipe_backends()``
                gives both sets); dropping one it lacks changes nothing, since
                TensorPipe could not have used it.
        """
        kwargs: dict[str, Any] = {}
        if self.device_maps:
            kwargs["device_maps"] = {k: dict(v) for k, v in self.device_maps.items()}
        if self.devices:
            kwargs["devices"] = list(self.devices)
        if self.transports:
            kwargs["_transports"] = [
                t
                for t in self.transports
                if available_transports is None or t in available_transports
            ]
        if self.channels:
            kwargs["_channels"] = [
                c for c in self.channels if available_channels is None or c in available_channels
            ]
        return kwargs

    def to_dict(self) -> dict[str, Any]:
        """This process's plan as plain data (what ``actorrt plan --json`` prints)."""
        return {
            "name": self.name,
            "rank": self.rank,
            "node": self.node,
            "labels": list(self.labels),
            "slots": [s.to_dict() for s in self.slots],
            "gpus": list(self.gpus),
            "devices": list(self.devices),
            "device_maps": {k: dict(v) for k, v in self.device_maps.items()},
            "transports": None if self.transports is None else list(self.transports),
            "channels": None if self.channels is None else list(self.channels),
            "env": dict(self.env),
            "guard_tiny_cuda": self.guard_tiny_cuda,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProcessPlan:
        """The inverse of :meth:`to_dict`."""
        return cls(
            name=str(d["name"]),
            rank=int(d["rank"]),
            node=str(d["node"]),
            labels=tuple(d.get("labels", ())),
            slots=tuple(Slot.from_dict(s) for s in d.get("slots", ())),
            gpus=tuple(int(g) for g in d.get("gpus", ())),
            devices=list(d.get("devices", ())),
            device_maps={k: dict(v) for k, v in d.get("device_maps", {}).items()},
            transports=None if d.get("transports") is None else list(d["transports"]),
            channels=None if d.get("channels") is None else list(d["channels"]),
            env=dict(d.get("env", {})),
            guard_tiny_cuda=bool(d.get("guard_tiny_cuda", False)),
        )


@dataclass(frozen=True)
class Plan:
    """The placement of a whole cluster.

    Attributes:
        processes: One entry per process, by rank.
        pairs: The transport of every pair of processes (each pair once).
        transport: The mode it was planned in (auto / cpu / cuda).
        strategy: The placement strategy used.
        specs: The label specs it satisfies.
        talks: The label pairs that exchange data (None: every pair); pairs of processes
            that do not talk have no device map and no entry in ``pairs``.
        pair_reasons: Per entry of ``pairs``, the reason code the transport was chosen
            for (see :func:`explain_pair`); empty on a plan read back from JSON.
    """

    processes: tuple[ProcessPlan, ...]
    pairs: tuple[Pair, ...] = ()
    transport: str = "auto"
    strategy: str = DEFAULT_STRATEGY
    specs: tuple[LabelSpec, ...] = ()
    talks: tuple[tuple[str, str], ...] | None = None
    pair_reasons: tuple[str, ...] = field(default=(), compare=False, repr=False)
    _by_rank: dict[int, ProcessPlan] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _by_pair: dict[tuple[str, str], str] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self._by_rank.update((p.rank, p) for p in self.processes)

    def for_rank(self, rank: int) -> ProcessPlan:
        """The plan of the process with this rank."""
        try:
            return self._by_rank[rank]
        except KeyError:
            raise PlacementError(
                f"rank {rank} is not in the plan (ranks 0..{len(self.processes) - 1})"
            ) from None

    def grown(self, bigger: Plan, rank: int) -> Plan:
        """This plan with ``bigger``'s process ``rank`` added: a process that joined late.

        ``bigger`` is a plan of the cluster with that process in it; only the new
        process and its pairs are taken from it (the running ones keep theirs: their
        agents were started with them). It joins without device maps and layout slots:
        the running agents' maps were fixed when they started, and a layout's slots at
        ``start()``; actors reach it through CPU memory, placed outside the slots.

        Raises:
            PlacementError: ``rank`` is already in this plan, or not in ``bigger``.
        """
        if rank in self._by_rank:
            raise PlacementError(f"rank {rank} is already in the plan")
        new = replace(
            bigger.for_rank(rank),
            labels=(),
            slots=(),
            gpus=(),
            devices=[],
            device_maps={},
            guard_tiny_cuda=False,
        )
        codes = bigger.pair_reasons or ("",) * len(bigger.pairs)
        # Its pairs with this plan's processes (``bigger`` may also hold a process that
        # was given a rank and never joined).
        names = {p.name for p in self.processes} | {new.name}
        added = [
            (p, c)
            for p, c in zip(bigger.pairs, codes, strict=True)
            if new.name in (p.src, p.dst) and p.src in names and p.dst in names
        ]
        reasons = self.pair_reasons + tuple(c for _, c in added) if self.pair_reasons else ()
        return replace(
            self,
            processes=(*self.processes, new),
            pairs=(*self.pairs, *(p for p, _ in added)),
            pair_reasons=reasons,
        )

    def for_name(self, name: str) -> ProcessPlan:
        """The plan of the process with this RPC name."""
        for p in self.processes:
            if p.name == name:
                return p
        raise PlacementError(f"no process named {name!r} in the plan")

    def transport_between(self, a: str, b: str) -> str:
        """The transport between two processes (by name); ``same_process`` when equal."""
        if a == b:
            return "same_process"
        if not self._by_pair:  # built on first use: most callers never need it
            for pair in self.pairs:
                self._by_pair[(pair.src, pair.dst)] = pair.transport
                self._by_pair[(pair.dst, pair.src)] = pair.transport
        try:
            return self._by_pair[(a, b)]
        except KeyError:
            raise PlacementError(
                f"no pair {a!r} <-> {b!r} in the plan: their labels do not talk (talks="
                f"{self.talks}); add the pair to the layout's talks"
            ) from None

    def explain_pairs(self) -> Iterator[tuple[Pair, str]]:
        """Every pair with the sentence saying why it got its transport and channels.

        The sentence names no process (only hosts), so pairs with equal reasons can be
        grouped; it says "reason not recorded" on a plan read back from JSON.
        """
        by_name = {p.name: p for p in self.processes}
        codes = self.pair_reasons or ("",) * len(self.pairs)
        blank = ProcessWhy()
        for pair, code in zip(self.pairs, codes, strict=True):
            a, b = by_name[pair.src], by_name[pair.dst]
            yield (
                pair,
                explain_pair(
                    code,
                    a.why or blank,
                    b.why or blank,
                    a.device_maps.get(b.name) or _inverse(b.device_maps.get(a.name)),
                    self._no_map_cause(a, b),
                ),
            )

    def _no_map_cause(self, a: ProcessPlan, b: ProcessPlan) -> str:
        if self.transport == "cpu":
            return "transport='cpu'"
        lacking = sum(1 for p in (a, b) if not p.devices)
        if lacking == 2:
            return "neither end moves a GPU through RPC"
        if lacking == 1:
            return "one end moves no GPU through RPC"
        return "none computed for this pair"

    @property
    def layout(self) -> Layout:
        """The layout this plan places."""
        return Layout(self.specs, self.talks, self.strategy)

    def holders(self, label: str) -> Iterator[tuple[ProcessPlan, Slot]]:
        """Every (process, slot) that carries ``label``, by rank then slot index."""
        for p in self.processes:
            for s in p.slots:
                if s.label == label:
                    yield p, s

    def to_dict(self, include_pairs: bool = True) -> dict[str, Any]:
        """JSON-safe form; ``include_pairs=False`` halves it (pairs are for display)."""
        d: dict[str, Any] = {
            "transport": self.transport,
            "strategy": self.strategy,
            "specs": [s.to_dict() for s in self.specs],
            "talks": None if self.talks is None else [list(t) for t in self.talks],
            "processes": [p.to_dict() for p in self.processes],
        }
        if include_pairs:
            d["pairs"] = [{"src": s, "dst": t, "transport": k} for s, t, k in self.pairs]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Plan:
        """The inverse of :meth:`to_dict` (as rank 0 publishes a plan to the workers)."""
        talks = d.get("talks")
        return cls(
            processes=tuple(ProcessPlan.from_dict(p) for p in d["processes"]),
            pairs=tuple(Pair(p["src"], p["dst"], p["transport"]) for p in d.get("pairs", ())),
            transport=str(d.get("transport", "auto")),
            strategy=str(d.get("strategy", DEFAULT_STRATEGY)),
            specs=tuple(LabelSpec.from_dict(s) for s in d.get("specs", ())),
            talks=None if talks is None else tuple((str(a), str(b)) for a, b in talks),
        )

    def to_json(self, include_pairs: bool = True, **kwargs: Any) -> str:
        """The plan as JSON; ``kwargs`` go to :func:`json.dumps`."""
        return json.dumps(self.to_dict(include_pairs), **kwargs)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        """The inverse of :meth:`to_json`."""
        return cls.from_dict(json.loads(text))


def _inverse(m: Mapping[str, str] | None) -> dict[str, str] | None:
    return {v: k for k, v in m.items()} if m else None


def _node_ids(processes: Sequence[ProcessInfo]) -> list[str]:
    containers: dict[str, list[tuple[str, ...]]] = {}
    for p in processes:
        seen = containers.setdefault(host_key(p.node), [])
        if container_key(p.node) not in seen:
            seen.append(container_key(p.node))
    out = []
    for p in processes:
        seen = containers[host_key(p.node)]
        suffix = f"/c{seen.index(container_key(p.node))}" if len(seen) > 1 else ""
        out.append(p.node.hostname + suffix)
    return out


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    # A big plan allocates ~10^5 small dicts and tuples, none of them cyclic; the
    # cyclic collector would walk the growing heap again and again (more than half of
    # the time at 512 processes), so it waits until the plan is built.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def make_plan(
    processes: Sequence[ProcessInfo],
    layout: Layout | Sequence[LabelSpec] = (),
    *,
    transport: str = "auto",
    strategy: str | None = None,
    device_map_override: DeviceMapOverride | None = None,
    socket_ifname: str | None = None,
) -> Plan:
    """Plan a cluster: placement, device maps, transports and environment of every process.

    The one planner: ``actorrt plan`` (on a cluster file) and ``actorrt.start()`` (on the
    live node descriptions) both call it, through :meth:`ClusterSpec.plan`.

    Args:
        processes: One entry per RPC process (any order; planned by rank).
        layout: The :class:`Layout` to place, or just its label specs.
        transport: ``auto`` (device maps between processes that both use GPUs),
            ``cuda`` (every process must have a GPU) or ``cpu`` (no device maps: CUDA
            tensors are staged through host memory by the runtime).
        strategy: Overrides the layout's strategy (``spread``, ``pack``, ``nearest``,
            ``nearest:LABEL``).
        device_map_override: ``{process: {peer: {"cuda:0": "cuda:1"}}}``; replaces the
            computed maps of those pairs after validation.
        socket_ifname: Network interface TensorPipe listens on (``TP_SOCKET_IFNAME``).

    Returns:
        The plan.

    Raises:
        PlacementError: The layout cannot be met, the mode does not fit the hardware or
            an override is invalid; the message says which and what to change.
    """
    if transport not in TRANSPORT_MODES:
        raise PlacementError(f"unknown transport {transport!r}; use auto, cuda or cpu")
    if not isinstance(layout, Layout):
        layout = Layout(tuple(layout), None, strategy or DEFAULT_STRATEGY)
    elif strategy:
        layout = Layout(layout.specs, layout.talks, strategy)
    with _gc_paused():
        return _make_plan(processes, layout, transport, device_map_override, socket_ifname)


def _talk_rule(
    layout: Layout, slots: Sequence[tuple[Slot, ...]]
) -> Callable[[int, int], bool] | None:
    """Which process pairs exchange data; None when every pair does."""
    if layout.talks is None:
        return None
    labels = [frozenset(s.label for s in ps) for ps in slots]

    def talk(i: int, j: int) -> bool:
        # A process with no slot (the driver, a spare worker) may talk to anyone.
        if not labels[i] or not labels[j]:
            return True
        return any(layout.talk(a, b) for a in labels[i] for b in labels[j])

    return talk


def _make_plan(
    processes: Sequence[ProcessInfo],
    layout: Layout,
    transport: str,
    device_map_override: DeviceMapOverride | None,
    socket_ifname: str | None,
) -> Plan:
    procs = check_processes(processes)
    _, slots = schedule(procs, layout.specs, layout.strategy)
    talk = _talk_rule(layout, slots)

    # Which GPUs each process offers to device maps.
    offered: list[tuple[int, ...]] = []
    for p, ps in zip(procs, slots, strict=True):
        assigned = tuple(sorted({g for s in ps for g in s.gpus}))
        visible = tuple(sorted(g.index for g in p.node.gpus))
        if transport == "cpu":
            offered.append(())
        elif transport == "cuda":
            if not visible:
                raise PlacementError(
                    f"transport='cuda' needs a GPU in every process, but process {p.name!r} "
                    f"(rank {p.rank}, host {p.node.hostname}) has none; use transport='cpu' "
                    "(CUDA tensors staged through host memory) or 'auto' (device maps only "
                    "where both ends have GPUs)"
                )
            offered.append(assigned or visible)
        else:
            # A process hosting only CPU slots keeps its GPUs out of RPC; a process with
            # no slot (the driver, a spare worker) may send or host GPU tensors later, so
            # it offers what it sees.
            offered.append(assigned or (() if ps else visible))

    maps = compute_device_maps(procs, offered, talk)
    touched: set[tuple[int, int]] = set()
    if device_map_override:
        if transport == "cpu":
            raise PlacementError(
                "a device map override was given with transport='cpu', which uses no device "
                "maps; use transport='cuda' or 'auto'"
            )
        touched = apply_device_map_override(procs, maps, device_map_override)
    devices = devices_in_use(procs, maps, touched)
    facts = process_facts(procs, [tuple(int(d[5:]) for d in ds) for ds in devices])
    node_ids = _node_ids(procs)
    names = [p.name for p in procs]

    plans = []
    for i, p in enumerate(procs):
        f = facts[i]
        labels = tuple(dict.fromkeys(s.label for s in slots[i]))
        # Each choice comes with its reason, recorded where it is made (transports.py).
        transports_, transports_why = choose_transports(f)
        channels, channels_why = choose_channels(f)
        env, env_why = choose_env(f, socket_ifname)
        plans.append(
            ProcessPlan(
                name=p.name,
                rank=p.rank,
                node=node_ids[i],
                labels=labels,
                slots=slots[i],
                gpus=tuple(sorted({g for s in slots[i] for g in s.gpus})),
                devices=devices[i],
                device_maps=maps[i],
                transports=transports_,
                channels=channels,
                env=env,
                guard_tiny_cuda=f.gdr,
                why=ProcessWhy.of(f, transports_why, channels_why, env_why, f.gdr),
            )
        )
    make_pair = Pair._make  # tuple.__new__: 3x cheaper than Pair(...) over ~10^5 pairs
    reasons: list[str] = []
    pairs = tuple(
        make_pair((names[i], names[j], t))
        for i, j, t in pair_transports(names, facts, maps, talk, reasons)
    )
    return Plan(
        processes=tuple(plans),
        pairs=pairs,
        transport=transport,
        strategy=layout.strategy,
        specs=layout.specs,
        talks=layout.talks,
        pair_reasons=tuple(reasons),
    )


def plan_graph(processes: Sequence[ProcessInfo], plan: Plan) -> nx.Graph:
    """The cluster graph (:func:`~actorrt.placement.topology.build_topology`) with ``plan`` on it.

    Process nodes carry their labels and devices, process->GPU edges (``link="uses"``)
    show the GPUs each uses, and each planned pair becomes a process-process edge with its
    transport (``kind="transport"``).
    """
    g = build_topology(processes)
    rank_of = {pp.name: pp.rank for pp in plan.processes}
    for p in processes:
        pp = plan.for_rank(p.rank)
        pid = ("process", p.rank)
        g.nodes[pid].update(labels=pp.labels, devices=tuple(pp.devices))
        used = set(pp.gpus)
        for gpu in p.node.gpus:
            if gpu.index in used:
                g.add_edge(pid, ("gpu", *gpu_key(p.node, gpu)), link="uses", bandwidth=0)
    for pair in plan.pairs:
        g.add_edge(
            ("process", rank_of[pair.src]),
            ("process", rank_of[pair.dst]),
            link=pair.transport,
            kind="transport",
            bandwidth=BANDWIDTH_CLASS.get(pair.transport, 0),
        )
    return g
