"""Plain data types for what a process reports about the machine it runs on.

Everything here is immutable and JSON-safe (``to_dict`` / ``from_dict``), because the
runtime gathers these descriptions from every process through a c10d store as JSON
before anything else happens.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ContainerIdentity",
    "GpuInfo",
    "HcaInfo",
    "NodeDescription",
    "ProcessInfo",
    "check_processes",
    "normalize_bus_id",
]

_BUS_ID = re.compile(r"^(?:([0-9a-fA-F]+):)?([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)$")


def normalize_bus_id(bus_id: str) -> str:
    """Return a PCI bus id in one canonical spelling (``"0000:3b:00.0"``).

    nvidia-smi prints ``00000000:3B:00.0``, sysfs ``0000:3b:00.0`` and torch may omit the
    domain; comparing them needs one form. Strings that are not PCI addresses (the
    synthetic ids a cluster file may use) are returned stripped and lower-cased.
    """
    text = bus_id.strip().lower()
    m = _BUS_ID.match(text)
    if not m:
        return text
    domain, bus, dev, fn = m.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{int(fn, 16)}"


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as the process sees it.

    Attributes:
        index: The process-local CUDA index (after ``CUDA_VISIBLE_DEVICES``); device maps
            use it (``cuda:<index>``).
        pci_bus_id: Physical identity of the device; two processes on one host that
            report the same bus id share the GPU. Empty when unknown.
        name: Product name, informational.
        nvlink_peers: Local indices of the GPUs visible to this process that are
            NVLink-connected to this one.
        nvlink_peer_bus_ids: Bus ids of every NVLink peer, visible or not; needed to see
            an NVLink between two processes that each see one GPU.
    """

    index: int
    pci_bus_id: str = ""
    name: str = ""
    nvlink_peers: tuple[int, ...] = ()
    nvlink_peer_bus_ids: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form, as cluster files and the rendezvous carry it."""
        return {
            "index": self.index,
            "pci_bus_id": self.pci_bus_id,
            "name": self.name,
            "nvlink_peers": list(self.nvlink_peers),
            "nvlink_peer_bus_ids": list(self.nvlink_peer_bus_ids),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GpuInfo:
        """Builds one from :meth:`to_dict`'s form; missing keys take their defaults."""
        return cls(
            index=int(d["index"]),
            pci_bus_id=str(d.get("pci_bus_id", "")),
            name=str(d.get("name", "")),
            nvlink_peers=tuple(int(x) for x in d.get("nvlink_peers", ())),
            nvlink_peer_bus_ids=tuple(str(x) for x in d.get("nvlink_peer_bus_ids", ())),
        )


@dataclass(frozen=True)
class HcaInfo:
    """One InfiniBand / RoCE host channel adapter.

    Attributes:
        name: Device name (``mlx5_0``). The order of ``NodeDescription.hcas`` matters:
            TensorPipe's ibv transport opens the *first* device of the verbs list.
        pci_bus_id: PCI address of the adapter.
        port_state: State of port 1 (the port TensorPipe uses), e.g. ``ACTIVE``/``DOWN``.
        gdr_capable: GPUDirect RDMA works through it (the peer-memory module is loaded).
        near_gpus: Local indices of GPUs behind the same PCIe switch (nvidia-smi's PIX/PXB);
            TensorPipe's cuda_gdr channel uses the nearest adapter of each GPU.
        numa_node: NUMA node of the adapter, -1 when unknown.
    """

    name: str
    pci_bus_id: str = ""
    port_state: str = "ACTIVE"
    gdr_capable: bool = False
    near_gpus: tuple[int, ...] = ()
    numa_node: int = -1

    @property
    def active(self) -> bool:
        """Whether port 1 is up (``ACTIVE``)."""
        return self.port_state.strip().upper() == "ACTIVE"

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form, as cluster files and the rendezvous carry it."""
        return {
            "name": self.name,
            "pci_bus_id": self.pci_bus_id,
            "port_state": self.port_state,
            "gdr_capable": self.gdr_capable,
            "near_gpus": list(self.near_gpus),
            "numa_node": self.numa_node,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HcaInfo:
        """Builds one from :meth:`to_dict`'s form; missing keys take their defaults."""
        return cls(
            name=str(d["name"]),
            pci_bus_id=str(d.get("pci_bus_id", "")),
            port_state=str(d.get("port_state", "ACTIVE")),
            gdr_capable=bool(d.get("gdr_capable", False)),
            near_gpus=tuple(int(x) for x in d.get("near_gpus", ())),
            numa_node=int(d.get("numa_node", -1)),
        )


@dataclass(frozen=True)
class ContainerIdentity:
    """Which container a process runs in: namespace inodes and cgroup.

    Two processes with the same boot id but different namespaces are on one host in
    different containers: TensorPipe's CUDA IPC / cuda_xth channels must not be used
    between them (it would pick them and fail instead of falling back).
    """

    net: str = ""
    pid: str = ""
    ipc: str = ""
    mnt: str = ""
    cgroup: str = ""

    def key(self) -> tuple[str, ...]:
        """The fields that decide "same container".

        Namespace inodes decide when any is known; the cgroup is only a fallback, since
        two shells on one bare host sit in different cgroups yet share CUDA IPC.
        """
        ns = (self.net, self.pid, self.ipc, self.mnt)
        if any(ns):
            return ns
        return ("", "", "", "", self.cgroup)

    def to_dict(self) -> dict[str, str]:
        """The plain-data form, as cluster files and the rendezvous carry it."""
        return {
            "net": self.net,
            "pid": self.pid,
            "ipc": self.ipc,
            "mnt": self.mnt,
            "cgroup": self.cgroup,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ContainerIdentity:
        """Builds one from :meth:`to_dict`'s form; missing keys are empty (unknown)."""
        return cls(**{k: str(d.get(k, "")) for k in ("net", "pid", "ipc", "mnt", "cgroup")})


@dataclass(frozen=True)
class NodeDescription:
    """What one process reports about its machine (and what it offers).

    Attributes:
        hostname: Host name, for display and as a fallback host identity.
        boot_id: ``/proc/sys/kernel/random/boot_id``; TensorPipe's own "same machine" test,
            so we use it too (two containers on one host share it).
        container: Namespace / cgroup identity of the process.
        num_cpus: CPUs the process may run on.
        gpus: GPUs visible to the process, by local index.
        hcas: InfiniBand adapters of the host, in verbs-list order.
        labels: Labels the process offers; empty means it accepts any label.
        hosts_actors: False for the driver, which hosts no actors (as in Ray).
    """

    hostname: str
    boot_id: str
    container: ContainerIdentity = field(default_factory=ContainerIdentity)
    num_cpus: int = 1
    gpus: tuple[GpuInfo, ...] = ()
    hcas: tuple[HcaInfo, ...] = ()
    labels: tuple[str, ...] = ()
    hosts_actors: bool = True

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form: a ``[[nodes]]`` entry of a cluster file, the rendezvous message."""
        return {
            "hostname": self.hostname,
            "boot_id": self.boot_id,
            "container": self.container.to_dict(),
            "num_cpus": self.num_cpus,
            "gpus": [g.to_dict() for g in self.gpus],
            "hcas": [h.to_dict() for h in self.hcas],
            "labels": list(self.labels),
            "hosts_actors": self.hosts_actors,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodeDescription:
        """Builds one from :meth:`to_dict`'s form; missing keys take their defaults."""
        return cls(
            hostname=str(d["hostname"]),
            boot_id=str(d.get("boot_id", "")),
            container=ContainerIdentity.from_dict(d.get("container", {})),
            num_cpus=int(d.get("num_cpus", 1)),
            gpus=tuple(GpuInfo.from_dict(g) for g in d.get("gpus", ())),
            hcas=tuple(HcaInfo.from_dict(h) for h in d.get("hcas", ())),
            labels=tuple(str(x) for x in d.get("labels", ())),
            hosts_actors=bool(d.get("hosts_actors", True)),
        )


@dataclass(frozen=True)
class ProcessInfo:
    """One RPC process: its rank, its RPC worker name and its node description."""

    rank: int
    name: str
    node: NodeDescription

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form: rank, name and the node description."""
        return {"rank": self.rank, "name": self.name, "node": self.node.to_dict()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProcessInfo:
        """Builds one from :meth:`to_dict`'s form."""
        return cls(
            rank=int(d["rank"]), name=str(d["name"]), node=NodeDescription.from_dict(d["node"])
        )


def check_processes(processes: Sequence[ProcessInfo]) -> tuple[ProcessInfo, ...]:
    """Return the processes sorted by rank, checking ranks and names are unique."""
    from actorrt.errors import PlacementError

    ordered = tuple(sorted(processes, key=lambda p: p.rank))
    seen_names: set[str] = set()
    for i, p in enumerate(ordered):
        if i and ordered[i - 1].rank == p.rank:
            raise PlacementError(f"two processes have rank {p.rank}; ranks must be unique")
        if p.name in seen_names:
            raise PlacementError(f"two processes are named {p.name!r}; names must be unique")
        seen_names.add(p.name)
    return ordered
