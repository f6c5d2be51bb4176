"""Cluster files: a TOML description of nodes, processes and a layout, for ``actorrt plan``.

See ``docs/placement.md`` for the format; ``examples/clusters/`` has one file per
typical layout. A cluster file turns into a :class:`ClusterSpec`: exactly the
``ProcessInfo`` list the runtime gathers from the processes themselves, plus the layout
and plan options. ``actorrt.start()`` builds the same ``ClusterSpec`` from the live
cluster and calls the same :meth:`ClusterSpec.plan`, and :func:`dump_cluster` writes a
live cluster back as a file, so ``actorrt plan`` shows what the runtime does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actorrt.errors import PlacementError
from actorrt.placement.device_flags import device_map_override_from_di
from actorrt.placement.layout import LabelSpec, Layout, layout_from_tables, load_toml
from actorrt.placement.node import (
    ContainerIdentity,
    GpuInfo,
    HcaInfo,
    NodeDescription,
    ProcessInfo,
    normalize_bus_id,
)
from actorrt.placement.plan import Plan, make_plan

__all__ = ["ClusterSpec", "dump_cluster", "load_cluster", "node_table", "parse_cluster"]

_PLAN_KEYS = {"transport", "strategy", "socket_ifname"}
_TOP_KEYS = {"plan", "labels", "talks", "nodes", "processes", "device_maps", "cuda_device_map"}
_PROCESS_KEYS = {"rank", "name", "node"}
_NODE_KEYS = {
    "hostname",
    "name",
    "boot_id",
    "container",
    "num_cpus",
    "gpus",
    "gpu_name",
    "nvlink",
    "hcas",
    "processes",
    "gpus_per_process",
    "labels",
    "hosts_actors",
}
_GROUP_KEYS = {"count", "name", "labels", "gpus", "gpus_per_process", "hosts_actors"}
_WORKER_NAME = re.compile(r"[^A-Za-z0-9_:\-]")  # what torch accepts in an RPC worker name
_DEFAULT_NUM_CPUS = 8  # a host's CPUs when a cluster file does not say


@dataclass(frozen=True)
class ClusterSpec:
    """Everything the planner takes: the processes, the layout and the plan options.

    Built from a cluster file by :func:`parse_cluster`, and from the live node
    descriptions by the runtime; :meth:`plan` is the one way either gets a plan.
    """

    processes: tuple[ProcessInfo, ...]
    layout: Layout = field(default_factory=Layout)
    transport: str = "auto"
    socket_ifname: str | None = None
    device_map_override: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)

    @property
    def specs(self) -> tuple[LabelSpec, ...]:
        """The layout's label specs (``layout.specs``)."""
        return self.layout.specs

    @property
    def strategy(self) -> str:
        """The layout's placement strategy (``layout.strategy``)."""
        return self.layout.strategy

    def plan(
        self,
        *,
        transport: str | None = None,
        strategy: str | None = None,
        layout: Layout | None = None,
    ) -> Plan:
        """Plan this cluster (optionally with another transport mode, strategy or layout)."""
        return make_plan(
            self.processes,
            layout or self.layout,
            transport=transport or self.transport,
            strategy=strategy,
            device_map_override=self.device_map_override or None,
            socket_ifname=self.socket_ifname,
        )


def load_cluster(path: str | os.PathLike[str]) -> ClusterSpec:
    """Read and check a TOML cluster file.

    Raises:
        PlacementError: The file is missing, not TOML, or has a bad field (named).
    """
    p = Path(path)
    return parse_cluster(load_toml(p), source=str(p))


def _check_keys(d: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise PlacementError(f"{where}: unknown field(s) {unknown}; known: {sorted(allowed)}")


def _table(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PlacementError(f"{where}: expected a table, got {value!r}")
    return value


def _list(value: Any, where: str, of: str) -> list[Any]:
    if not isinstance(value, (list, tuple)):  # a tuple: a cluster given as Python data
        raise PlacementError(f"{where}: expected a list of {of}, got {value!r}")
    return list(value)


def _indices(value: Any, where: str) -> list[int]:
    """A list of GPU indices (``nvlink_peers``, ``near_gpus``)."""
    items = _list(value, where, "GPU indices, e.g. [0, 1]")
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise PlacementError(
                f"{where}: expected a list of GPU indices (integers >= 0), got {value!r}"
            )
    return items


def _labels(value: Any, where: str) -> tuple[str, ...]:
    # A string would be taken letter by letter: "collector" as c, o, l...
    items = _list(value, where, 'label names, e.g. ["collector"]')
    if not all(isinstance(item, str) for item in items):
        raise PlacementError(
            f'{where}: expected a list of label names, e.g. ["collector"], got {value!r}'
        )
    return tuple(items)


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise PlacementError(f"{where}: expected true or false, got {value!r}")
    return value


def _gpu_tables(node: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    raw = node.get("gpus", 0)
    if (
        isinstance(raw, bool)
        or not isinstance(raw, (int, list))
        or isinstance(raw, int)
        and raw < 0
    ):
        raise PlacementError(
            f"{where}.gpus: expected a count >= 0 or a list of tables, got {raw!r}"
        )
    if isinstance(raw, int):
        raw = [{} for _ in range(raw)]
    tables: list[dict[str, Any]] = []
    for i, g in enumerate(raw):
        g = _table(g, f"{where}.gpus[{i}]")
        _check_keys(g, {"pci_bus_id", "name", "nvlink_peers"}, f"{where}.gpus[{i}]")
        tables.append(
            {
                # Synthetic but unique bus ids: processes that see the same GPU agree on it.
                "bus": normalize_bus_id(str(g.get("pci_bus_id", f"0000:{0x10 + i:02x}:00.0"))),
                "name": str(g.get("name", node.get("gpu_name", ""))),
                "peers": set(
                    _indices(g.get("nvlink_peers", []), f"{where}.gpus[{i}].nvlink_peers")
                ),
            }
        )
    nvlink = node.get("nvlink", "none")
    n = len(tables)
    if nvlink == "all":
        for i in range(n):
            tables[i]["peers"] |= set(range(n)) - {i}
    elif isinstance(nvlink, list):
        for link in nvlink:
            if not (isinstance(link, list) and len(link) == 2 and all(0 <= x < n for x in link)):
                raise PlacementError(
                    f"{where}.nvlink: {link!r} is not a pair of GPU indices below {n}"
                )
            a, b = link
            tables[a]["peers"].add(b)
            tables[b]["peers"].add(a)
    elif nvlink != "none":
        raise PlacementError(
            f'{where}.nvlink: expected "all", "none" or a list of [a, b] pairs, got {nvlink!r}'
        )
    for i, t in enumerate(tables):
        bad = [x for x in t["peers"] if not 0 <= x < n or x == i]
        if bad:
            raise PlacementError(f"{where}.gpus[{i}].nvlink_peers: invalid GPU index {bad[0]}")
    return tables


def _num_cpus(value: Any, where: str) -> int:
    # A host's CPUs are what num_cpus of a layout is counted against: a count below 1
    # would make every layout with num_cpus infeasible for a reason the file hides.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlacementError(
            f"{where}.num_cpus: expected an integer >= 1 (the host's CPUs), got {value!r}"
        )
    return value


def _container(node: Mapping[str, Any], where: str) -> ContainerIdentity:
    c = node.get("container")
    if c is None:
        return ContainerIdentity(net="net:host", pid="pid:host", ipc="ipc:host", mnt="mnt:host")
    if isinstance(c, str):
        return ContainerIdentity(
            net=f"net:{c}", pid=f"pid:{c}", ipc=f"ipc:{c}", mnt=f"mnt:{c}", cgroup=f"/{c}"
        )
    if isinstance(c, Mapping):
        _check_keys(c, {"net", "pid", "ipc", "mnt", "cgroup"}, f"{where}.container")
        return ContainerIdentity.from_dict(c)
    raise PlacementError(f"{where}.container: expected a name or a table, got {c!r}")


def _visible_sets(
    group: Mapping[str, Any], count: int, n_gpus: int, default_per: Any, where: str
) -> list[list[int]]:
    pool = group.get("gpus", "all")
    if pool == "all":
        pool = list(range(n_gpus))
    if not isinstance(pool, list) or not all(isinstance(g, int) and 0 <= g < n_gpus for g in pool):
        raise PlacementError(
            f'{where}.gpus: expected "all" or a list of the node\'s GPU indices '
            f"(0..{n_gpus - 1}), got {group.get('gpus')!r}"
        )
    per = group.get("gpus_per_process", default_per)
    if per == "all":
        return [list(pool) for _ in range(count)]
    if not isinstance(per, int) or isinstance(per, bool) or per < 1:
        raise PlacementError(
            f'{where}.gpus_per_process: expected "all" or a positive integer, got {per!r}'
        )
    if not pool:
        return [[] for _ in range(count)]
    # Like CUDA_VISIBLE_DEVICES slices handed out round-robin by a launcher.
    return [[pool[(k * per + m) % len(pool)] for m in range(per)] for k in range(count)]


def parse_cluster(data: Mapping[str, Any], source: str = "<cluster>") -> ClusterSpec:
    """Turn a parsed cluster file (a dict) into a :class:`ClusterSpec`."""
    _check_keys(data, _TOP_KEYS, source)
    plan_opts = data.get("plan", {})
    _check_keys(plan_opts, _PLAN_KEYS, f"{source} [plan]")
    layout = layout_from_tables(data, source)
    nodes = data.get("nodes")
    if "processes" in data:
        if nodes:
            raise PlacementError(f"{source}: has both [[nodes]] and [[processes]]; use one of them")
        processes = _verbatim_processes(data["processes"], source)
    elif not nodes or not isinstance(nodes, list):
        raise PlacementError(f"{source}: needs at least one [[nodes]] (or [[processes]]) table")
    else:
        processes = _expand_nodes(nodes, source)
    return ClusterSpec(
        processes=tuple(processes),
        layout=layout,
        transport=str(plan_opts.get("transport", "auto")),
        socket_ifname=plan_opts.get("socket_ifname"),
        device_map_override=_overrides(data, processes, source),
    )


def _verbatim_processes(raw: Any, source: str) -> list[ProcessInfo]:
    if not isinstance(raw, list):
        raise PlacementError(f"{source}: [[processes]] must be a list of tables")
    out = []
    for i, entry in enumerate(raw):
        where = f"{source} processes[{i}]"
        entry = _table(entry, where)
        _check_keys(entry, _PROCESS_KEYS, where)
        if "name" not in entry or not isinstance(entry.get("node"), Mapping):
            raise PlacementError(f"{where}: needs a name and a node table")
        # Not given: as many CPUs as a [[nodes]] host gets by default (not from_dict's 1,
        # which would leave shm out of every host with two processes).
        raw_node = {"num_cpus": _DEFAULT_NUM_CPUS, **entry["node"]}
        _num_cpus(raw_node["num_cpus"], f"{where}.node")
        try:
            node = NodeDescription.from_dict(raw_node)
        except (KeyError, TypeError, ValueError) as exc:
            raise PlacementError(f"{where}.node: {type(exc).__name__}: {exc}") from None
        out.append(ProcessInfo(rank=int(entry.get("rank", i)), name=str(entry["name"]), node=node))
    return out


def _expand_nodes(nodes: list[Any], source: str) -> list[ProcessInfo]:
    processes: list[ProcessInfo] = []
    for n_idx, node in enumerate(nodes):
        where = f"{source} nodes[{n_idx}]"
        node = _table(node, where)
        _check_keys(node, _NODE_KEYS, where)
        if "hostname" not in node:
            raise PlacementError(f"{where}: needs a hostname")
        num_cpus = _num_cpus(node.get("num_cpus", _DEFAULT_NUM_CPUS), where)
        if not isinstance(node["hostname"], str) or not node["hostname"]:
            raise PlacementError(
                f"{where}.hostname: expected a host name, got {node['hostname']!r}"
            )
        hostname = node["hostname"]
        tables = _gpu_tables(node, where)
        container = _container(node, where)
        node_name = _WORKER_NAME.sub(
            "_",
            str(
                node.get(
                    "name",
                    hostname
                    + (f"-{node['container']}" if isinstance(node.get("container"), str) else ""),
                )
            ),
        )
        hca_raw = _list(node.get("hcas", []), f"{where}.hcas", "tables")
        hcas: list[tuple[HcaInfo, set[int]]] = []
        for h_idx, h in enumerate(hca_raw):
            hw = f"{where}.hcas[{h_idx}]"
            h = _table(h, hw)
            _check_keys(
                h, {"name", "pci_bus_id", "port_state", "gdr_capable", "near_gpus", "numa_node"}, hw
            )
            if "name" not in h:
                raise PlacementError(f"{hw}: needs a name (e.g. mlx5_0)")
            near = set(_indices(h.get("near_gpus", []), f"{hw}.near_gpus"))
            hcas.append((HcaInfo.from_dict({**h, "near_gpus": ()}), near))
        groups = node.get("processes", 1)
        if isinstance(groups, int) and not isinstance(groups, bool):
            if groups < 1:
                raise PlacementError(
                    f"{where}.processes: expected a count >= 1 (a node runs at least one "
                    f"process; leave the node out instead), got {groups}"
                )
            groups = [{"count": groups}]
        if not isinstance(groups, list) or not groups:
            raise PlacementError(
                f"{where}.processes: expected a count >= 1 or a non-empty list of tables, "
                f"got {groups!r}"
            )
        k = 0
        for g_idx, group in enumerate(groups):
            gw = f"{where}.processes[{g_idx}]"
            group = _table(group, gw)
            _check_keys(group, _GROUP_KEYS, gw)
            count = group.get("count", 1)
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise PlacementError(f"{gw}.count: expected an integer >= 1, got {count!r}")
            hosts_actors = _flag(
                group.get("hosts_actors", node.get("hosts_actors", True)),
                f"{gw}.hosts_actors" if "hosts_actors" in group else f"{where}.hosts_actors",
            )
            labels = _labels(
                group.get("labels", node.get("labels", [])),
                f"{gw}.labels" if "labels" in group else f"{where}.labels",
            )
            visible_sets = _visible_sets(
                group, count, len(tables), node.get("gpus_per_process", "all"), gw
            )
            for c, visible in enumerate(visible_sets):
                local = {phys: i for i, phys in enumerate(visible)}
                gpus = tuple(
                    GpuInfo(
                        index=i,
                        pci_bus_id=tables[phys]["bus"],
                        name=tables[phys]["name"],
                        nvlink_peers=tuple(
                            sorted(local[q] for q in tables[phys]["peers"] if q in local)
                        ),
                        nvlink_peer_bus_ids=tuple(
                            tables[q]["bus"] for q in sorted(tables[phys]["peers"])
                        ),
                    )
                    for i, phys in enumerate(visible)
                )
                hca_infos = tuple(
                    HcaInfo(
                        name=h.name,
                        pci_bus_id=h.pci_bus_id,
                        port_state=h.port_state,
                        gdr_capable=h.gdr_capable,
                        near_gpus=tuple(sorted(local[q] for q in near if q in local)),
                        numa_node=h.numa_node,
                    )
                    for h, near in hcas
                )
                if "name" in group:
                    gname = str(group["name"]) + (str(c) if count > 1 else "")
                else:
                    gname = f"{node_name}-{k}"
                k += 1
                processes.append(
                    ProcessInfo(
                        rank=len(processes),
                        name=_WORKER_NAME.sub("_", gname),
                        node=NodeDescription(
                            hostname=hostname,
                            boot_id=str(node.get("boot_id", f"boot-{hostname}")),
                            container=container,
                            num_cpus=num_cpus,
                            gpus=gpus,
                            hcas=hca_infos,
                            labels=labels,
                            hosts_actors=hosts_actors,
                        ),
                    )
                )
    return processes


def _overrides(
    data: Mapping[str, Any], processes: list[ProcessInfo], source: str
) -> dict[str, dict[str, dict[str, str]]]:
    override: dict[str, dict[str, dict[str, str]]] = {}
    where = f"{source} [device_maps]"
    for src, per_peer in _table(data.get("device_maps", {}), where).items():
        per_peer = _table(per_peer, f"{where} {src}")
        override[str(src)] = {
            str(p): {str(a): str(b) for a, b in _table(m, f"{where} {src}.{p}").items()}
            for p, m in per_peer.items()
        }
    di = data.get("cuda_device_map", {})
    if di:
        bad = [k for k in di if not str(k).isdigit()]
        if bad:
            raise PlacementError(
                f'{source} [cuda_device_map]: keys are ranks ("0" = "1_0_1"), got {bad[0]!r}'
            )
        for src, per_peer in device_map_override_from_di(
            {int(k): str(v) for k, v in di.items()}, processes
        ).items():
            override.setdefault(src, {}).update(per_peer)
    return override


def dump_cluster(spec: ClusterSpec) -> str:
    """Write ``spec`` as a cluster file (TOML) that :func:`load_cluster` reads back equal.

    Processes are written verbatim (``[[processes]]``, one node description each), so a
    live cluster dumped by ``actorrt.dump_cluster()`` plans offline exactly as it did.
    """
    import tomli_w

    data: dict[str, Any] = {"plan": {"transport": spec.transport, "strategy": spec.strategy}}
    if spec.socket_ifname:
        data["plan"]["socket_ifname"] = spec.socket_ifname
    data["labels"] = {
        s.label: {"count": s.count, "num_gpus": s.num_gpus, "num_cpus": s.num_cpus}
        for s in spec.specs
    }
    if spec.layout.talks is not None:
        talks: dict[str, list[str]] = {}
        for a, b in spec.layout.talks:
            talks.setdefault(a, []).append(b)
        data["talks"] = talks
    if spec.device_map_override:
        data["device_maps"] = spec.device_map_override
    data["processes"] = [p.to_dict() for p in spec.processes]
    return tomli_w.dumps(data)


def node_table(node: NodeDescription, processes: int = 1) -> str:
    """This node as a ``[[nodes]]`` block of a cluster file (what ``actorrt describe`` prints)."""
    import tomli_w

    table: dict[str, Any] = {
        "hostname": node.hostname,
        "boot_id": node.boot_id,
        "container": node.container.to_dict(),
        "num_cpus": node.num_cpus,
        "gpus": [
            {"pci_bus_id": g.pci_bus_id, "name": g.name, "nvlink_peers": list(g.nvlink_peers)}
            for g in node.gpus
        ],
        "hcas": [h.to_dict() for h in node.hcas],
        "processes": processes,
    }
    if node.labels:
        table["labels"] = list(node.labels)
    return tomli_w.dumps({"nodes": [table]})
