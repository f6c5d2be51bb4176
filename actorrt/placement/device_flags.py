"""DI-engine's command-line formats: ``--cuda-device-map`` and ``--local-cuda-devices``.

``--cuda-device-map`` is ``<peer rank>_<local gpu>_<peer gpu>,...`` (``1_0_1,2_0_2,0_0_0``):
for each peer (DI-engine's node id, here the peer's RPC rank), which local GPU maps to
which GPU of the peer. ``--local-cuda-devices`` is a comma-separated list of local GPU indices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from actorrt.errors import PlacementError
from actorrt.placement.devicemap import cuda, parse_cuda_index
from actorrt.placement.node import ProcessInfo
from actorrt.placement.plan import Plan

__all__ = [
    "device_map_override_from_di",
    "di_device_map_for",
    "format_cuda_device_map",
    "format_local_cuda_devices",
    "parse_cuda_device_map",
    "parse_local_cuda_devices",
]


def parse_cuda_device_map(text: str, name: str = "--cuda-device-map") -> dict[int, dict[int, int]]:
    """Parse ``"1_0_1,2_0_2"`` into ``{1: {0: 1}, 2: {0: 2}}`` (order kept).

    Args:
        text: The map as written.
        name: How the user gave it, for the messages.

    Raises:
        PlacementError: Naming the entry that is malformed or breaks one-to-one.
    """
    out: dict[int, dict[int, int]] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        parts = entry.split("_")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise PlacementError(
                f"{name} entry {entry!r} is not <peer rank>_<local gpu>_<peer gpu> (three "
                "integers >= 0; e.g. 1_0_1 maps this process's GPU 0 to GPU 1 of rank 1)"
            )
        peer, local, remote = (int(p) for p in parts)
        per_peer = out.setdefault(peer, {})
        if local in per_peer and per_peer[local] != remote:
            raise PlacementError(
                f"{name} entry {entry!r}: <local gpu> {local} is already mapped to GPU "
                f"{per_peer[local]} of rank {peer}"
            )
        if remote in per_peer.values() and per_peer.get(local) != remote:
            raise PlacementError(
                f"{name} entry {entry!r}: <peer gpu> {remote} of rank {peer} is already the "
                "target of another local GPU; a device map must be one-to-one"
            )
        per_peer[local] = remote
    return out


def format_cuda_device_map(mapping: Mapping[int, Mapping[int, int]]) -> str:
    """Print ``{1: {0: 1}}`` as ``"1_0_1"`` (inverse of :func:`parse_cuda_device_map`)."""
    return ",".join(
        f"{peer}_{local}_{remote}" for peer, m in mapping.items() for local, remote in m.items()
    )


def parse_local_cuda_devices(text: str, name: str = "--local-cuda-devices") -> tuple[int, ...]:
    """Parse ``"0,1,3"`` into ``(0, 1, 3)``; ``""`` is no GPU.

    Args:
        text: The GPU indices as written.
        name: How the user gave them, for the messages (``--gpus`` for ``actorrt worker``).

    Raises:
        PlacementError: Naming the entry that is not a GPU index, or a repeated one.
    """
    out: list[int] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        if not item.isdigit():
            raise PlacementError(f"{name} entry {item!r} is not a GPU index (write e.g. 0,1)")
        if int(item) in out:
            raise PlacementError(f"{name} lists GPU {item} twice")
        out.append(int(item))
    return tuple(out)


def format_local_cuda_devices(devices: Iterable[int]) -> str:
    """Print ``(0, 1)`` as ``"0,1"``."""
    return ",".join(str(int(d)) for d in devices)


def device_map_override_from_di(
    maps: Mapping[int, str | Mapping[int, Mapping[int, int]]], processes: Sequence[ProcessInfo]
) -> dict[str, dict[str, dict[str, str]]]:
    """Turn per-rank ``--cuda-device-map`` values into a ``make_plan`` override.

    Args:
        maps: ``{rank: "1_0_1,..."}`` (or already parsed); peer node ids are ranks.
        processes: The cluster, to turn ranks into RPC names.

    Returns:
        ``{process name: {peer name: {"cuda:a": "cuda:b"}}}``.
    """
    name_of = {p.rank: p.name for p in processes}

    def name(rank: int, what: str) -> str:
        if rank not in name_of:
            raise PlacementError(
                f"--cuda-device-map {what} node {rank} is not a rank of the cluster "
                f"(ranks: {sorted(name_of)[:16]})"
            )
        return name_of[rank]

    out: dict[str, dict[str, dict[str, str]]] = {}
    for rank, value in maps.items():
        parsed = parse_cuda_device_map(value) if isinstance(value, str) else value
        src = name(int(rank), "local")
        for peer, m in parsed.items():
            out.setdefault(src, {})[name(int(peer), f"entry of rank {rank} names peer")] = {
                cuda(int(a)): cuda(int(b)) for a, b in m.items()
            }
    return out


def di_device_map_for(plan: Plan, rank: int) -> str:
    """The ``--cuda-device-map`` string equivalent to one process's planned maps."""
    rank_of = {p.name: p.rank for p in plan.processes}
    me = plan.for_rank(rank)
    mapping = {
        rank_of[peer]: {
            parse_cuda_index(a, "plan"): parse_cuda_index(b, "plan") for a, b in m.items()
        }
        for peer, m in sorted(me.device_maps.items(), key=lambda kv: rank_of[kv[0]])
    }
    return format_cuda_device_map(mapping)
