"""Which TensorPipe transports and channels each process enables, and what each pair uses.

TensorPipe picks a transport (uv = TCP, shm, ibv) and channels (basic, cma, mpt_uv,
cuda_basic, cuda_ipc, cuda_gdr, cuda_xth) per connection, but the lists it chooses
from are per *process* (``_transports`` / ``_channels``). The defaults are right except
where TensorPipe is known to choose something that then fails instead of falling back;
only there does the planner give an explicit list, the union safe for every peer:

* two containers on one host share a boot id, so cuda_ipc / cuda_xth look usable
  between them and fail: a process with such a peer gets neither;
* ibv opens the first adapter of the verbs list: if its port is down, ibv is left out;
* cuda_gdr uses the adapter nearest each GPU: if that one is down (or not
  GPUDirect-capable), cuda_gdr is left out;
* cuda_gdr can crash on CUDA tensors under 32 bytes: processes that may use it must
  pass call payloads through :func:`guard_tiny_cuda_tensors`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from actorrt.placement.node import GpuInfo, ProcessInfo
from actorrt.placement.topology import (
    container_key,
    gdr_usable,
    host_key,
    ibv_usable,
    nvlinked,
)
from actorrt.tensor_tree import map_tensors

__all__ = [
    "CHANNELS",
    "CPU_CHANNELS",
    "CUDA_CHANNELS",
    "GDR_MIN_BYTES",
    "TRANSPORTS",
    "ProcessFacts",
    "guard_tiny_cuda_tensors",
    "pair_transports",
    "process_channels",
    "process_env",
    "process_facts",
    "process_transports",
    "registered_tensorpipe_backends",
]

TRANSPORTS = ("uv", "shm", "ibv")
CPU_CHANNELS = ("basic", "cma", "mpt_uv")
CUDA_CHANNELS = ("cuda_basic", "cuda_ipc", "cuda_gdr", "cuda_xth")
CHANNELS = CPU_CHANNELS + CUDA_CHANNELS
#: cuda_gdr can crash on smaller CUDA tensors (pytorch issue 57136).
GDR_MIN_BYTES = 32


@dataclass(frozen=True)
class ProcessFacts:
    """What transport selection needs to know about one planned process."""

    host: str
    container: tuple[str, ...]
    net: tuple[str, str]  # (host, net namespace): shm needs both equal
    devices: tuple[int, ...]  # local CUDA indices used in device maps
    has_hca: bool
    ibv: bool  # ibv transport usable
    gdr: bool  # cuda_gdr usable for the devices it moves
    gdr_safe: bool  # default channels would not put cuda_gdr on a bad adapter
    cross_container: bool  # shares the host with a process in another container
    gpus: dict[int, GpuInfo]


def process_facts(
    processes: Sequence[ProcessInfo], devices: Sequence[Sequence[int]]
) -> list[ProcessFacts]:
    """Collect the per-process facts (one pass; pairs then compare them cheaply)."""
    containers_per_host: dict[str, set[tuple[str, ...]]] = {}
    for p in processes:
        containers_per_host.setdefault(host_key(p.node), set()).add(container_key(p.node))
    out = []
    for p, devs in zip(processes, devices, strict=True):
        node = p.node
        hk = host_key(node)
        # Which GPUs cuda_gdr would touch: the mapped ones, or (for a process whose maps
        # are empty but whose default channels still start cuda_gdr) every visible one.
        touched = devs or [g.index for g in node.gpus]
        out.append(
            ProcessFacts(
                host=hk,
                container=container_key(node),
                net=(hk, node.container.net),
                devices=tuple(devs),
                has_hca=bool(node.hcas),
                ibv=ibv_usable(node),
                gdr=bool(devs) and gdr_usable(node, devs),
                gdr_safe=not node.hcas or not touched or gdr_usable(node, touched),
                cross_container=len(containers_per_host[hk]) > 1,
                gpus={g.index: g for g in node.gpus},
            )
        )
    return out


def process_transports(f: ProcessFacts) -> list[str] | None:
    """The ``_transports`` list, or None where TensorPipe's default is safe."""
    if f.has_hca and not f.ibv:
        return ["uv", "shm"]
    return None


def process_channels(f: ProcessFacts) -> list[str] | None:
    """The ``_channels`` list, or None where TensorPipe's default is safe."""
    if not (f.cross_container or not f.gdr_safe):
        return None
    channels = list(CPU_CHANNELS)
    if f.devices:
        channels.append("cuda_basic")
        if not f.cross_container:
            channels += ["cuda_ipc", "cuda_xth"]
        if f.gdr:
            channels.append("cuda_gdr")
    return channels


def process_env(f: ProcessFacts, socket_ifname: str | None) -> dict[str, str]:
    """Environment the process must have before torch loads ibverbs / TensorPipe."""
    env: dict[str, str] = {}
    if f.has_hca:
        # fork() after ibverbs initialises corrupts memory unless these are set first.
        env["IBV_FORK_SAFE"] = "1"
        env["RDMAV_FORK_SAFE"] = "1"
    if socket_ifname:
        env["TP_SOCKET_IFNAME"] = socket_ifname
    return env


def pair_transports(
    names: Sequence[str],
    facts: Sequence[ProcessFacts],
    maps: Sequence[dict[str, dict[str, str]]],
    talk: Callable[[int, int], bool] | None = None,
) -> list[tuple[int, int, str]]:
    """The transport each pair ``i < j`` that talks uses (vocabulary of ``LINK_KINDS``).

    CUDA tensors of a pair move on a CUDA path only when the pair has a device map;
    otherwise they would be staged through host memory over the CPU transport.
    """
    out = []
    n = len(facts)
    for i in range(n):
        fi = facts[i]
        mi = maps[i]
        ni = names[i]
        for j in range(i + 1, n):
            if talk is not None and not talk(i, j):
                continue
            fj = facts[j]
            m = mi.get(names[j])
            if m is None:
                m2 = maps[j].get(ni)
                m = {v: k for k, v in m2.items()} if m2 else None
            if fi.host == fj.host:
                if fi.container == fj.container:
                    if m:
                        a, b = next(iter(m.items()))
                        ga = fi.gpus.get(int(a[5:]))
                        gb = fj.gpus.get(int(b[5:]))
                        t = "nvlink" if ga and gb and nvlinked(ga, gb) else "cuda_ipc"
                    else:
                        t = "shm"
                elif m and fi.gdr and fj.gdr:
                    t = "gdr"
                else:
                    t = "shm" if fi.net == fj.net else "tcp"
            elif m and fi.gdr and fj.gdr:
                t = "gdr"
            elif fi.ibv and fj.ibv:
                t = "ibv"
            else:
                t = "tcp"
            out.append((i, j, t))
    return out


@functools.lru_cache(maxsize=1)
def registered_tensorpipe_backends() -> tuple[frozenset[str], frozenset[str]]:
    """The transports and channels this torch build registers, as ``(transports, channels)``.

    torch refuses a ``_channels`` list naming a channel it was built without (a CPU
    build has no cuda_* channel; a CUDA build may lack cuda_gdr), so the runtime filters
    a plan's lists through this before building ``TensorPipeRpcBackendOptions``. torch
    has no query for it: each name is tried once on a throwaway options object.
    """
    from torch.distributed.rpc import TensorPipeRpcBackendOptions

    def ok(**kwargs: list[str]) -> bool:
        try:
            TensorPipeRpcBackendOptions(**kwargs)
        except RuntimeError:
            return False
        return True

    return (
        frozenset(t for t in TRANSPORTS if ok(_transports=[t])),
        frozenset(c for c in CHANNELS if ok(_channels=[c])),
    )


def _default_is_cuda(t: Any) -> bool:
    return bool(getattr(t, "is_cuda", False))


def guard_tiny_cuda_tensors(
    obj: Any,
    *,
    min_bytes: int = GDR_MIN_BYTES,
    is_cuda: Callable[[Any], bool] = _default_is_cuda,
    to_host: Callable[[Any], Any] | None = None,
) -> Any:
    """Move CUDA tensors smaller than ``min_bytes`` to the CPU, anywhere in ``obj``.

    cuda_gdr can crash on tensors under 32 bytes (pytorch issue 57136); staging them
    through host memory costs nothing measurable at that size. Walks dicts, lists,
    tuples (named tuples keep their type); other objects are returned as they are, and
    a container with nothing to move is returned unchanged (no copy).

    Args:
        obj: A call's arguments or result.
        min_bytes: Tensors with fewer bytes are staged.
        is_cuda: Whether a tensor lives on a GPU (injectable for tests).
        to_host: Moves one tensor to the CPU; default ``t.cpu()``.

    Returns:
        ``obj`` with small CUDA tensors replaced by CPU copies.
    """
    move = to_host or (lambda t: t.cpu())

    def guard(t: Any) -> Any:
        if is_cuda(t) and t.nelement() * t.element_size() < min_bytes:
            return move(t)
        return t

    return map_tensors(obj, guard)
