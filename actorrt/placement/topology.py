"""The cluster as a graph, and the small link predicates the planner is built on.

Nodes of the graph are hosts, GPUs, HCAs and worker processes; edges carry the link
kind (same process, shared memory, NVLink, PCIe, InfiniBand with or without GPUDirect,
TCP) and a bandwidth class (higher is faster). The predicates below are what placement
uses on its hot paths; the graph is built on demand for display and inspection.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from actorrt.placement.node import GpuInfo, NodeDescription, ProcessInfo, normalize_bus_id

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "BANDWIDTH_CLASS",
    "LINK_KINDS",
    "build_topology",
    "container_key",
    "gdr_usable",
    "gpu_key",
    "host_key",
    "ibv_usable",
    "near_hcas",
    "nvlinked",
]

#: Link kinds, fastest first. Pair transports in a Plan use the same vocabulary
#: (``cuda_ipc`` is CUDA IPC over PCIe; ``gdr`` is InfiniBand with GPUDirect RDMA).
LINK_KINDS = ("same_process", "nvlink", "cuda_ipc", "shm", "pcie", "gdr", "ibv", "tcp")

#: Bandwidth class per link kind: a coarse order for "nearest", not a measurement.
BANDWIDTH_CLASS = {
    "same_process": 7,
    "nvlink": 6,
    "cuda_ipc": 5,
    "shm": 4,
    "pcie": 4,
    "gdr": 3,
    "ibv": 2,
    "tcp": 1,
}


def host_key(node: NodeDescription) -> str:
    """Physical host identity: TensorPipe's own test is the boot id."""
    return node.boot_id or node.hostname


def container_key(node: NodeDescription) -> tuple[str, ...]:
    """Identity of (host, container): equal keys may share CUDA IPC and shm."""
    return (host_key(node), *node.container.key())


@lru_cache(maxsize=65536)
def _bus(bus_id: str) -> str:
    return normalize_bus_id(bus_id)


def gpu_key(node: NodeDescription, gpu: GpuInfo) -> tuple[str, str]:
    """Identity of a physical GPU: (host, bus id), or (host, index) when unknown."""
    return (host_key(node), _bus(gpu.pci_bus_id) if gpu.pci_bus_id else f"#{gpu.index}")


def nvlinked(a: GpuInfo, b: GpuInfo) -> bool:
    """Whether two GPUs of one host are joined by NVLink.

    Bus ids decide when both sides report them (processes may number GPUs differently);
    otherwise local indices are compared, which holds inside one process or when every
    process sees every GPU.
    """
    if a.pci_bus_id and b.pci_bus_id and (a.nvlink_peer_bus_ids or b.nvlink_peer_bus_ids):
        pa, pb = _bus(a.pci_bus_id), _bus(b.pci_bus_id)
        return pb in {_bus(x) for x in a.nvlink_peer_bus_ids} or pa in {
            _bus(x) for x in b.nvlink_peer_bus_ids
        }
    return b.index in a.nvlink_peers or a.index in b.nvlink_peers


def ibv_usable(node: NodeDescription) -> bool:
    """Whether TensorPipe's ibv transport would work on this node.

    ibv opens the *first* adapter of the verbs list and uses its port 1; if that port
    is down, every ibv connection fails, even with other adapters up.
    """
    return bool(node.hcas) and node.hcas[0].active


def near_hcas(node: NodeDescription, gpu_index: int) -> tuple[int, ...]:
    """Indices into ``node.hcas`` that cuda_gdr may pick for a GPU.

    cuda_gdr picks the adapter nearest each GPU on the PCIe tree. Adapters that declare
    the GPU in ``near_gpus`` are those; when none does, any adapter may be picked.
    """
    near = tuple(i for i, h in enumerate(node.hcas) if gpu_index in h.near_gpus)
    return near or tuple(range(len(node.hcas)))


def gdr_blocker(node: NodeDescription, gpu_indices: Iterable[int]) -> str:
    """Why cuda_gdr is unsafe for these GPUs, or "" when every adapter it may pick is fine."""
    if not node.hcas:
        return f"{node.hostname} has no InfiniBand adapter"
    for g in gpu_indices:
        for i in near_hcas(node, g):
            h = node.hcas[i]
            if not h.active:
                return (
                    f"{h.name} (the adapter cuda_gdr picks for cuda:{g}) is {h.port_state} "
                    f"on {node.hostname}"
                )
            if not h.gdr_capable:
                return (
                    f"{h.name} on {node.hostname} is not GPUDirect-capable "
                    "(nvidia_peermem not loaded)"
                )
    return ""


def gdr_usable(node: NodeDescription, gpu_indices: Iterable[int]) -> bool:
    """Whether cuda_gdr is safe for these GPUs: every adapter it may pick is up and GDR-capable."""
    return not gdr_blocker(node, gpu_indices)


def build_topology(processes: Sequence[ProcessInfo]) -> nx.Graph:
    """Build the cluster graph (with a plan over it: :func:`actorrt.placement.plan.plan_graph`).

    Args:
        processes: Every RPC process.

    Returns:
        A networkx Graph. Node ids: ``("host", key)``, ``("gpu", host, bus)``,
        ``("hca", host, name)``, ``("process", rank)``; every node has a ``kind`` and a
        ``label`` attribute, every edge a ``link`` (see LINK_KINDS, plus ``"runs_on"``
        / ``"uses"``) and a ``bandwidth`` class.
    """
    import networkx as nx  # here, not at the top: workers import this module and never draw

    g = nx.Graph()
    hosts: dict[str, NodeDescription] = {}
    for p in processes:
        hosts.setdefault(host_key(p.node), p.node)
    for hk, node in hosts.items():
        g.add_node(("host", hk), kind="host", label=node.hostname)
    # A host's GPUs and HCAs are the union of what its processes see.
    for p in processes:
        hk = host_key(p.node)
        for gpu in p.node.gpus:
            gid = ("gpu", *gpu_key(p.node, gpu))
            if gid not in g:
                g.add_node(gid, kind="gpu", label=gpu.name or f"gpu{gpu.index}", gpu=gpu)
                g.add_edge(("host", hk), gid, link="pcie", bandwidth=BANDWIDTH_CLASS["pcie"])
        for hca in p.node.hcas:
            hid = ("hca", hk, hca.name)
            if hid not in g:
                g.add_node(hid, kind="hca", label=hca.name, active=hca.active, gdr=hca.gdr_capable)
                g.add_edge(("host", hk), hid, link="pcie", bandwidth=BANDWIDTH_CLASS["pcie"])
    for p in processes:
        gpus = p.node.gpus
        for i, a in enumerate(gpus):
            for b in gpus[i + 1 :]:
                if nvlinked(a, b):
                    g.add_edge(
                        ("gpu", *gpu_key(p.node, a)),
                        ("gpu", *gpu_key(p.node, b)),
                        link="nvlink",
                        bandwidth=BANDWIDTH_CLASS["nvlink"],
                    )
        for gpu in gpus:
            for i in near_hcas(p.node, gpu.index):
                hca = p.node.hcas[i]
                if gpu.index in hca.near_gpus:
                    link = "gdr" if hca.active and hca.gdr_capable else "pcie"
                    g.add_edge(
                        ("gpu", *gpu_key(p.node, gpu)),
                        ("hca", host_key(p.node), hca.name),
                        link=link,
                        bandwidth=BANDWIDTH_CLASS[link],
                    )
    # Hosts reach each other over IB when both have a usable adapter, else over TCP.
    host_list = list(hosts.items())
    for i, (ha, na) in enumerate(host_list):
        for hb, nb in host_list[i + 1 :]:
            link = "ibv" if ibv_usable(na) and ibv_usable(nb) else "tcp"
            g.add_edge(("host", ha), ("host", hb), link=link, bandwidth=BANDWIDTH_CLASS[link])
    for p in processes:
        pid = ("process", p.rank)
        g.add_node(pid, kind="process", label=p.name, name=p.name)
        g.add_edge(pid, ("host", host_key(p.node)), link="runs_on", bandwidth=0)
    return g
