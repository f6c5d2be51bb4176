"""Shared builders and checks for the placement tests (no processes, no GPUs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.distributed.rpc.backend_registry import _validate_device_maps

from actorrt.placement import (
    ContainerIdentity,
    GpuInfo,
    HcaInfo,
    NodeDescription,
    Plan,
    ProcessInfo,
    load_cluster,
    parse_cluster,
)

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples" / "clusters"


def example(name: str):
    return load_cluster(EXAMPLES / name)


def big_cluster(hosts: int = 64, gpus: int = 8, collectors: int | None = None) -> Any:
    nodes = [
        {
            "hostname": f"n{h:02d}",
            "gpus": gpus,
            "nvlink": "all",
            "processes": gpus,
            "gpus_per_process": 1,
            "hcas": [
                {"name": f"mlx5_{k}", "gdr_capable": True, "near_gpus": [2 * k, 2 * k + 1]}
                for k in range(gpus // 2)
            ],
        }
        for h in range(hosts)
    ]
    n = hosts * gpus
    data = {
        "labels": {
            "learner": {"count": 1, "num_gpus": 1},
            "collector": {"count": n - 1 if collectors is None else collectors, "num_gpus": 1},
        },
        "nodes": nodes,
    }
    return parse_cluster(data, source="big")


def node(
    host: str = "h0",
    gpus: int = 0,
    *,
    nvlink_all: bool = False,
    hcas: tuple[HcaInfo, ...] = (),
    container: str = "",
    labels: tuple[str, ...] = (),
) -> NodeDescription:
    infos = tuple(
        GpuInfo(
            index=i,
            pci_bus_id=f"0000:{0x10 + i:02x}:00.0",
            nvlink_peers=tuple(j for j in range(gpus) if j != i) if nvlink_all else (),
        )
        for i in range(gpus)
    )
    ns = container or "host"
    return NodeDescription(
        hostname=host,
        boot_id=f"boot-{host}",
        container=ContainerIdentity(
            net=f"net:{ns}", pid=f"pid:{ns}", ipc=f"ipc:{ns}", mnt=f"mnt:{ns}"
        ),
        num_cpus=8,
        gpus=infos,
        hcas=hcas,
        labels=labels,
    )


def procs(*nodes: NodeDescription) -> list[ProcessInfo]:
    return [ProcessInfo(rank=i, name=f"w{i}", node=n) for i, n in enumerate(nodes)]


def check_with_torch(
    plan: Plan, processes: list[ProcessInfo], device_counts: dict[str, int] | None = None
) -> None:
    """Feed the plan to torch's own group-wide validator, as init_rpc would.

    ``device_counts`` (``torch.cuda.device_count()`` per process name) defaults to the
    GPUs each process's description lists.
    """
    counts = device_counts or {p.name: len(p.node.gpus) for p in processes}
    names = [p.name for p in plan.processes]
    all_maps = {
        p.name: {
            peer: {torch.device(a): torch.device(b) for a, b in m.items()}
            for peer, m in p.device_maps.items()
        }
        for p in plan.processes
    }
    all_devices = {p.name: [torch.device(d) for d in p.devices] for p in plan.processes}
    _validate_device_maps(names, counts, all_maps, all_devices, is_static_group=True)
    # Replies use the inverse of the peer's map: those devices must be listed too,
    # since an explicit `devices` list is used as is.
    for p in plan.processes:
        for peer, m in p.device_maps.items():
            assert set(m.values()) <= set(plan.for_name(peer).devices), (p.name, peer)
            assert set(m) <= set(p.devices)
