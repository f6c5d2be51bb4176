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
* cuda_gdr can crash on CUDA tensors under 32 bytes: processes that may use it are
  marked ``guard_tiny_cuda``, and the runtime sends their tiny CUDA tensors through host
  memory (:mod:`actorrt.runtime.roads`);
* shm's reactor thread busy-polls, a whole core in every process that enables it, even
  when idle: on a host planned with more processes than CPUs, the spinning threads would
  take every core from the work, so shm is left out there and same-host pairs use tcp
  over loopback (cma still moves CPU tensors; measurements in docs/performance.md).

Each choice is made together with the sentence that says why (``choose_*`` return both,
:func:`pair_transports` records a reason code per pair), so ``actorrt plan --explain``
prints the reason the planner acted on, not one reconstructed afterwards.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from actorrt.placement.node import GpuInfo, NodeDescription, ProcessInfo
from actorrt.placement.topology import (
    container_key,
    gdr_blocker,
    gdr_usable,
    host_key,
    ibv_usable,
    nvlinked,
)

__all__ = [
    "CHANNELS",
    "CPU_CHANNELS",
    "CUDA_CHANNELS",
    "FORK_SAFE_ENV",
    "GDR_MIN_BYTES",
    "PAIR_REASONS",
    "TRANSPORTS",
    "ProcessFacts",
    "ProcessWhy",
    "choose_channels",
    "choose_env",
    "choose_transports",
    "explain_pair",
    "pair_transports",
    "process_facts",
    "registered_tensorpipe_backends",
    "shm_spins_out",
]

TRANSPORTS = ("uv", "shm", "ibv")
CPU_CHANNELS = ("basic", "cma", "mpt_uv")
CUDA_CHANNELS = ("cuda_basic", "cuda_ipc", "cuda_gdr", "cuda_xth")
CHANNELS = CPU_CHANNELS + CUDA_CHANNELS
#: cuda_gdr can crash on smaller CUDA tensors (pytorch issue 57136).
GDR_MIN_BYTES = 32
#: Set before ibverbs loads, or fork() after RDMA set-up corrupts memory.
FORK_SAFE_ENV = {"IBV_FORK_SAFE": "1", "RDMAV_FORK_SAFE": "1"}


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
    host_processes: int = 1  # processes planned on its host
    host_cpus: int = 0  # CPUs of its host (the most any of its processes reports); 0: unknown
    # Why ibv / cuda_gdr are usable or not, worded once per process for --explain.
    hostname: str = ""
    ibv_why: str = ""
    gdr_why: str = ""
    gdr_safe_why: str = ""


@dataclass(frozen=True)
class ProcessWhy:
    """Why one process got its transports, channels and environment (``plan --explain``).

    Attributes:
        transports: Why ``_transports`` is what it is.
        channels: Why ``_channels`` is what it is.
        env: Why each variable of ``env`` is set ("" when none is).
        guard: Why ``guard_tiny_cuda`` is set ("" when it is not).
        ibv: Whether TensorPipe's ibv transport is usable on the process's host.
        ibv_why: The sentence behind ``ibv``.
        gdr: Whether cuda_gdr is usable for the GPUs the process moves.
        gdr_why: The sentence behind ``gdr``.
    """

    transports: str = ""
    channels: str = ""
    env: str = ""
    guard: str = ""
    ibv: bool = False
    ibv_why: str = ""
    gdr: bool = False
    gdr_why: str = ""

    @classmethod
    def of(
        cls, f: ProcessFacts, transports: str, channels: str, env: str, guard: bool
    ) -> ProcessWhy:
        """Bundle the reasons of one process with its facts' ibv / cuda_gdr verdicts."""
        return cls(
            transports=transports,
            channels=channels,
            env=env,
            guard=(
                f"guard_tiny_cuda: cuda_gdr may carry its CUDA tensors, and it can crash on "
                f"ones under {GDR_MIN_BYTES} B (pytorch issue 57136): those are staged via CPU"
                if guard
                else ""
            ),
            ibv=f.ibv,
            ibv_why=f.ibv_why,
            gdr=f.gdr,
            gdr_why=f.gdr_why,
        )


def _ibv_why(node: NodeDescription) -> str:
    # Mirrors topology.ibv_usable: ibv opens the first adapter of the verbs list.
    if not node.hcas:
        return f"{node.hostname} has no InfiniBand adapter"
    first = node.hcas[0]
    if not first.active:
        return (
            f"{first.name} is {first.port_state} on {node.hostname} and ibv opens the first "
            f"adapter of the verbs list, so ibv is off for {node.hostname}"
        )
    return f"{first.name}, the adapter ibv opens, is ACTIVE on {node.hostname}"


def _gdr_why(node: NodeDescription, gpu_indices: Sequence[int], usable: bool) -> str:
    if not gpu_indices:
        return "it moves no GPU through RPC"
    if usable:
        # No adapter names: processes of one host then share this reason (and its line).
        return f"every adapter cuda_gdr may pick on {node.hostname} is ACTIVE and GPUDirect-capable"
    return gdr_blocker(node, gpu_indices) or "an adapter near its GPUs is not usable"


def process_facts(
    processes: Sequence[ProcessInfo], devices: Sequence[Sequence[int]]
) -> list[ProcessFacts]:
    """Collect the per-process facts (one pass; pairs then compare them cheaply)."""
    containers_per_host: dict[str, set[tuple[str, ...]]] = {}
    processes_per_host: dict[str, int] = {}
    cpus_per_host: dict[str, int] = {}
    for p in processes:
        hk = host_key(p.node)
        containers_per_host.setdefault(hk, set()).add(container_key(p.node))
        processes_per_host[hk] = processes_per_host.get(hk, 0) + 1
        cpus_per_host[hk] = max(cpus_per_host.get(hk, 0), p.node.num_cpus)
    out = []
    for p, devs in zip(processes, devices, strict=True):
        node = p.node
        hk = host_key(node)
        # Which GPUs cuda_gdr would touch: the mapped ones, or (for a process whose maps
        # are empty but whose default channels still start cuda_gdr) every visible one.
        touched = devs or [g.index for g in node.gpus]
        gdr = bool(devs) and gdr_usable(node, devs)
        gdr_safe = not node.hcas or not touched or gdr_usable(node, touched)
        out.append(
            ProcessFacts(
                host=hk,
                container=container_key(node),
                net=(hk, node.container.net),
                devices=tuple(devs),
                has_hca=bool(node.hcas),
                ibv=ibv_usable(node),
                gdr=gdr,
                gdr_safe=gdr_safe,
                cross_container=len(containers_per_host[hk]) > 1,
                gpus={g.index: g for g in node.gpus},
                host_processes=processes_per_host[hk],
                host_cpus=cpus_per_host[hk],
                hostname=node.hostname,
                ibv_why=_ibv_why(node),
                gdr_why=_gdr_why(node, devs, gdr),
                gdr_safe_why="" if gdr_safe else gdr_blocker(node, touched),
            )
        )
    return out


def shm_spins_out(f: ProcessFacts) -> bool:
    """Whether shm is left out: its host is planned with more processes than CPUs.

    TensorPipe's shm transport runs a reactor thread that busy-polls (it yields, but never
    sleeps), so every process that enables it keeps a core busy, idle or not.
    """
    return 0 < f.host_cpus < f.host_processes


def choose_transports(f: ProcessFacts) -> tuple[list[str] | None, str]:
    """The ``_transports`` list (None where TensorPipe's default is safe) and why."""
    if shm_spins_out(f):
        transports = ["uv", "ibv"] if f.ibv else ["uv"]
        return transports, (
            f"{','.join(transports)}: shm left out, since {f.hostname} is planned with "
            f"{f.host_processes} processes on {f.host_cpus} CPUs and shm busy-polls a core "
            f"in each process that enables it; {f.ibv_why}"
        )
    if f.has_hca and not f.ibv:
        return ["uv", "shm"], f"uv,shm: {f.ibv_why}"
    if f.has_hca:
        return None, f"default (uv, shm, ibv): {f.ibv_why}"
    return None, f"default: {f.ibv_why}, so TensorPipe has no ibv to start"


def choose_channels(f: ProcessFacts) -> tuple[list[str] | None, str]:
    """The ``_channels`` list (None where TensorPipe's default is safe) and why."""
    if not (f.cross_container or not f.gdr_safe):
        if f.has_hca and (f.devices or f.gpus):
            reason = "cuda_gdr is safe for its GPUs" + (f" ({f.gdr_why})" if f.gdr else "")
        else:
            reason = "no adapter for cuda_gdr to pick wrongly"
        return None, f"default: one container on {f.hostname}, {reason}"
    channels = list(CPU_CHANNELS)
    why: list[str] = []
    if f.cross_container:
        why.append(
            f"{f.hostname} runs processes in other containers, which share its boot id, so "
            "cuda_ipc/cuda_xth would look usable between them and fail: both left out"
        )
    if not f.gdr_safe:
        why.append(f"cuda_gdr left out, since {f.gdr_safe_why}")
    if f.devices:
        channels.append("cuda_basic")
        if not f.cross_container:
            channels += ["cuda_ipc", "cuda_xth"]
        if f.gdr:
            channels.append("cuda_gdr")
            why.append(f"cuda_gdr kept for its mapped GPUs ({f.gdr_why})")
    else:
        why.append("no CUDA channel: it moves no GPU through RPC")
    return channels, f"{','.join(channels)}: " + "; ".join(why)


def choose_env(f: ProcessFacts, socket_ifname: str | None) -> tuple[dict[str, str], str]:
    """Environment the process must have before torch loads ibverbs / TensorPipe, and why."""
    env: dict[str, str] = {}
    why = []
    if f.has_hca:
        # fork() after ibverbs initialises corrupts memory unless these are set first.
        env.update(FORK_SAFE_ENV)
        why.append(
            f"IBV_FORK_SAFE, RDMAV_FORK_SAFE: {f.hostname} has InfiniBand adapters, and "
            "fork() after ibverbs loads corrupts memory without them"
        )
    if socket_ifname:
        env["TP_SOCKET_IFNAME"] = socket_ifname
        why.append(f"TP_SOCKET_IFNAME: the plan's socket_ifname ({socket_ifname})")
    return env, "; ".join(why)


# Reason codes of pair_transports: one per branch of its decision, so a pair's reason is
# recorded by the branch that chose its transport. The wording lives in PAIR_REASONS.
_SAME_NVLINK = "same_container_nvlink"
_SAME_IPC = "same_container_cuda_ipc"
_SAME_NOMAP = "same_container_no_map"
_XC_GDR = "other_container_gdr"
_XC_SHM = "other_container_shm"
_XC_TCP = "other_container_tcp"
_SPIN_TCP = "same_host_shm_left_out"
_HOSTS_GDR = "other_host_gdr"
_HOSTS_IBV = "other_host_ibv"
_HOSTS_TCP = "other_host_tcp"

#: Pair reason code -> sentence template. Fields: ``{cuda}`` how CUDA tensors travel,
#: ``{ibv_off}`` why ibv is off, ``{cpu}`` the CPU transport under cuda_gdr.
PAIR_REASONS = {
    _SAME_NVLINK: "same host and container; a device map between NVLinked GPUs: "
    "CUDA tensors over cuda_ipc (NVLink), CPU tensors over shm/cma (tcp/cma where shm is "
    "left out)",
    _SAME_IPC: "same host and container; a device map, GPUs not NVLinked: "
    "CUDA tensors over cuda_ipc (PCIe), CPU tensors over shm/cma (tcp/cma where shm is "
    "left out)",
    _SAME_NOMAP: "same host and container: CPU tensors over shm/cma; {cuda}",
    _XC_GDR: "same host, other container (no cuda_ipc across containers); a device map "
    "and cuda_gdr usable on both: CUDA tensors over cuda_gdr (GPUDirect RDMA)",
    _XC_SHM: "same host, other container, same network namespace: shm (no cuda_ipc/cuda_xth "
    "across containers); {cuda}",
    _XC_TCP: "same host, other container and network namespace: no shm, no cuda_ipc: tcp; {cuda}",
    _SPIN_TCP: "same host, where shm is left out (more processes than CPUs; see the "
    "processes' transports): tcp over loopback, CPU tensors over cma where TensorPipe can "
    "use it; {cuda}",
    _HOSTS_GDR: "different hosts: no shm/cma; a device map and cuda_gdr usable on both: "
    "CUDA tensors over cuda_gdr (GPUDirect RDMA), CPU tensors over {cpu}",
    _HOSTS_IBV: "different hosts: no shm/cma; ibv usable on both: CPU tensors over ibv; {cuda}",
    _HOSTS_TCP: "different hosts: no shm/cma; {ibv_off}: tcp; {cuda}",
}


def explain_pair(
    code: str,
    a: ProcessWhy,
    b: ProcessWhy,
    device_map: dict[str, str] | None,
    no_map_cause: str = "",
) -> str:
    """The sentence saying why a pair got its transport and channels.

    Args:
        code: The pair's reason code, as :func:`pair_transports` recorded it.
        a: The reasons of one end.
        b: The reasons of the other end.
        device_map: The pair's device map seen from ``a`` (None or empty: none).
        no_map_cause: Why the pair has no device map (e.g. ``transport='cpu'``).

    Returns:
        One line naming hosts but neither the processes nor the map's devices, so pairs
        with equal reasons can be grouped.
    """
    template = PAIR_REASONS.get(code)
    if template is None:
        return f"reason not recorded ({code or 'plan read from JSON'})"
    if device_map:
        gdr_off = "; ".join(dict.fromkeys(w.gdr_why for w in (a, b) if not w.gdr))
        cuda = "CUDA tensors over cuda_basic (staged via host memory)" + (
            f": cuda_gdr is off because {gdr_off}" if gdr_off else ""
        )
    else:
        cuda = "no device map" + (f" ({no_map_cause})" if no_map_cause else "")
        cuda += ", so CUDA tensors are staged through host memory"
    ibv_off = "; ".join(dict.fromkeys(w.ibv_why for w in (a, b) if not w.ibv))
    cpu = "ibv" if a.ibv and b.ibv else f"uv (tcp), since {ibv_off}"
    return template.format(cuda=cuda, ibv_off=ibv_off, cpu=cpu)


def pair_transports(
    names: Sequence[str],
    facts: Sequence[ProcessFacts],
    maps: Sequence[dict[str, dict[str, str]]],
    talk: Callable[[int, int], bool] | None = None,
    reasons: list[str] | None = None,
) -> list[tuple[int, int, str]]:
    """The transport each pair ``i < j`` that talks uses (vocabulary of ``LINK_KINDS``).

    CUDA tensors of a pair move on a CUDA path only when the pair has a device map;
    otherwise they would be staged through host memory over the CPU transport.

    Args:
        names: Process names, by index.
        facts: Process facts, by index.
        maps: Device maps of each process, ``{peer: {"cuda:a": "cuda:b"}}``.
        talk: Which pairs exchange data (None: all); others are skipped.
        reasons: When given, one reason code (a key of :data:`PAIR_REASONS`) is appended
            per returned pair, by the branch that chose its transport.

    Returns:
        ``(i, j, transport)`` per planned pair.
    """
    out = []
    record = reasons.append if reasons is not None else None
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
                        if ga and gb and nvlinked(ga, gb):
                            t, why = "nvlink", _SAME_NVLINK
                        else:
                            t, why = "cuda_ipc", _SAME_IPC
                    elif shm_spins_out(fi):  # facts of one host: fj's verdict is the same
                        t, why = "tcp", _SPIN_TCP
                    else:
                        t, why = "shm", _SAME_NOMAP
                elif m and fi.gdr and fj.gdr:
                    t, why = "gdr", _XC_GDR
                elif fi.net == fj.net and not shm_spins_out(fi):
                    t, why = "shm", _XC_SHM
                elif fi.net == fj.net:
                    t, why = "tcp", _SPIN_TCP
                else:
                    t, why = "tcp", _XC_TCP
            elif m and fi.gdr and fj.gdr:
                t, why = "gdr", _HOSTS_GDR
            elif fi.ibv and fj.ibv:
                t, why = "ibv", _HOSTS_IBV
            else:
                t, why = "tcp", _HOSTS_TCP
            out.append((i, j, t))
            if record is not None:
                record(why)
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

    def ok(transports: list[str] | None = None, channels: list[str] | None = None) -> bool:
        try:
            TensorPipeRpcBackendOptions(_transports=transports, _channels=channels)
        except RuntimeError:
            return False
        return True

    return (
        frozenset(t for t in TRANSPORTS if ok(transports=[t])),
        frozenset(c for c in CHANNELS if ok(channels=[c])),
    )
