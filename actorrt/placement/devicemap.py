"""TensorPipe device maps: which local GPU a tensor leaves from and lands on, per peer.

torch checks the maps of the whole group at ``init_rpc``
(``backend_registry._validate_device_maps``): every map must be one-to-one, its keys
must be in the sender's ``devices`` and its values in the receiver's. Replies travel
on the inverse map, so the planner always gives the peer the inverse back: both
directions agree and the ``devices`` of each process are exactly the devices its maps
(and its peers' maps to it) use.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from actorrt.errors import PlacementError
from actorrt.placement.node import ProcessInfo

__all__ = [
    "DeviceMapOverride",
    "apply_device_map_override",
    "compute_device_maps",
    "cuda",
    "devices_in_use",
    "parse_cuda_index",
]

#: ``{process name: {peer name: {"cuda:0": "cuda:1"}}}``
DeviceMapOverride = Mapping[str, Mapping[str, Mapping[Any, object]]]

_CUDA = re.compile(r"^(?:cuda:)?(\d+)$")


def cuda(index: int) -> str:
    """Spell a local CUDA index as torch does (``cuda:0``)."""
    return f"cuda:{index}"


def parse_cuda_index(value: object, where: str) -> int:
    """Parse ``"cuda:3"``, ``"3"`` or ``3`` into 3; anything else is a PlacementError."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    m = _CUDA.match(str(value).strip())
    if not m:
        raise PlacementError(
            f"{where}: {value!r} is not a CUDA device; write 'cuda:N' (device maps move CUDA "
            "tensors; CPU tensors need no map)"
        )
    return int(m.group(1))


def _pair_map(src: Sequence[int], dst: Sequence[int]) -> tuple[tuple[str, str], ...]:
    # Zip the two device lists: one-to-one by construction. A process with more GPUs
    # than its peer maps only its first ones to that peer.
    return tuple((cuda(a), cuda(b)) for a, b in zip(src, dst, strict=False))


def compute_device_maps(
    processes: Sequence[ProcessInfo],
    devices: Sequence[Sequence[int]],
    talk: Callable[[int, int], bool] | None = None,
) -> list[dict[str, dict[str, str]]]:
    """Device maps between every two processes that both use GPUs and talk.

    Args:
        processes: Processes sorted by rank.
        devices: Local CUDA indices each process offers to RPC (empty: CPU only).
        talk: Whether processes ``i`` and ``j`` exchange data (None: every pair does).

    Returns:
        Per process, ``{peer name: {"cuda:a": "cuda:b"}}``; symmetric (B's map to A is
        the inverse of A's map to B).
    """
    gpu_procs = [i for i, d in enumerate(devices) if d]
    keys = [tuple(d) for d in devices]
    names = [p.name for p in processes]
    cache: dict[tuple[tuple[int, ...], tuple[int, ...]], dict[str, str]] = {}
    out: list[dict[str, dict[str, str]]] = [{} for _ in processes]
    for i in gpu_procs:
        mine = out[i]
        ki = keys[i]
        for j in gpu_procs:
            if j == i or (talk is not None and not talk(i, j)):
                continue
            pair = (ki, keys[j])
            m = cache.get(pair)
            if m is None:
                m = cache[pair] = dict(_pair_map(ki, keys[j]))
            mine[names[j]] = m.copy()  # a copy each: callers may edit one pair's map
    return out


def apply_device_map_override(
    processes: Sequence[ProcessInfo],
    maps: list[dict[str, dict[str, str]]],
    override: DeviceMapOverride,
) -> set[tuple[int, int]]:
    """Replace computed maps with the user's, after checking them; edits ``maps`` in place.

    A peer that has no override of its own back gets the inverse map, so replies land
    where requests came from.

    Returns:
        The ``(process, peer)`` index pairs whose maps were set by the override.

    Raises:
        PlacementError: Naming the bad entry (unknown process, device out of range,
            a map that is not one-to-one).
    """
    index = {p.name: i for i, p in enumerate(processes)}

    def known(name: str, role: str) -> int:
        if name not in index:
            some = ", ".join(sorted(index)[:8]) + (", ..." if len(index) > 8 else "")
            raise PlacementError(
                f"device map override: {role} {name!r} is not a process in the cluster "
                f"(processes: {some})"
            )
        return index[name]

    checked: dict[tuple[int, int], dict[str, str]] = {}
    for src_name, per_peer in override.items():
        i = known(src_name, "process")
        for dst_name, mapping in per_peer.items():
            j = known(dst_name, "peer")
            where = f"device map override {src_name!r} -> {dst_name!r}"
            result: dict[str, str] = {}
            for local, remote in mapping.items():
                a = parse_cuda_index(local, where)
                b = parse_cuda_index(remote, where)
                entry = f"{where}: entry {cuda(a)} -> {cuda(b)}"
                for idx, proc, side in ((a, processes[i], "local"), (b, processes[j], "peer")):
                    n = len(proc.node.gpus)
                    if idx >= n:
                        raise PlacementError(
                            f"{entry}: {side} device {cuda(idx)} does not exist ({proc.name!r} "
                            f"sees {n} GPU(s){': cuda:0..cuda:' + str(n - 1) if n else ''})"
                        )
                if cuda(b) in result.values():
                    raise PlacementError(
                        f"{entry}: {cuda(b)} is already the target of another device; a device "
                        "map must be one-to-one"
                    )
                result[cuda(a)] = cuda(b)
            checked[(i, j)] = result
    for (i, j), result in checked.items():
        maps[i][processes[j].name] = result
        if (j, i) not in checked and i != j:
            maps[j][processes[i].name] = {v: k for k, v in result.items()}
    return set(checked)


def devices_in_use(
    processes: Sequence[ProcessInfo],
    maps: Sequence[Mapping[str, Mapping[str, str]]],
    asymmetric: Iterable[tuple[int, int]] | None = None,
) -> list[list[str]]:
    """Every process's ``devices``: the sources of its maps and the targets of maps to it.

    That is the list torch would build itself; giving it explicitly makes the plan
    state exactly which GPUs each process synchronises.

    Args:
        processes: Processes sorted by rank.
        maps: Their device maps.
        asymmetric: ``(i, j)`` pairs whose maps may not be the inverse of each other
            (set by an override); when None every map's targets are checked, when given
            only those (computed maps are symmetric, so targets are the peer's sources).
    """
    index = {p.name: i for i, p in enumerate(processes)}
    used: list[set[str]] = [set() for _ in processes]
    for i, per_peer in enumerate(maps):
        u = used[i]
        for m in per_peer.values():
            u.update(m)
    if asymmetric is None:
        targets = [(i, peer) for i, per_peer in enumerate(maps) for peer in per_peer]
    else:
        targets = []
        for i, j in asymmetric:
            targets += [(i, processes[j].name), (j, processes[i].name)]
    for i, peer in targets:
        peer_map = maps[i].get(peer)
        if peer_map:
            used[index[peer]].update(peer_map.values())
    return [sorted(u, key=lambda d: int(d.split(":")[1])) for u in used]
