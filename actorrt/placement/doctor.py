"""``actorrt doctor``: what on this machine would break TensorPipe, and how to fix it.

Each check returns :class:`Finding` s (``OK``, ``INFO``, ``WARN`` or ``FAIL``, a message
and the fix). A ``FAIL`` is something that breaks RPC even with actorrt's plan working
around TensorPipe's traps (an interface that does not exist, GPUs torch cannot use);
a ``WARN`` is a trap the plan avoids for the processes it starts but that costs speed
or bites other launchers (a down adapter, no GPUDirect, a small ``/dev/shm``).

Everything the checks read is injectable through :class:`Machine` (the proc, sys and
file-system roots, the environment, the NVML loader, the nvidia-smi runner, the CUDA
probe, name resolution and interface addresses), so they run against the fake trees of the
placement tests. torch is imported only when an NVIDIA GPU was found, and only to ask
about CUDA: on a machine without GPUs the doctor says so and stays fast.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from actorrt.placement.discovery import (
    CommandRunner,
    NvmlLoader,
    load_nvml,
    nvml_session,
    read_boot_id,
    read_container_identity,
    read_gpus,
    read_hcas,
    run_command,
)
from actorrt.placement.node import GpuInfo, HcaInfo
from actorrt.placement.topology import nvlinked

__all__ = [
    "STATUSES",
    "CudaReport",
    "Finding",
    "Machine",
    "check_container",
    "check_cuda",
    "check_fork_safety",
    "check_gdr",
    "check_gpus",
    "check_hcas",
    "check_interface",
    "check_shm",
    "check_thp",
    "exit_status",
    "probe_cuda",
    "report",
    "run_checks",
]

#: Finding statuses, least to most severe.
STATUSES = ("OK", "INFO", "WARN", "FAIL")

# The kernel's initial namespaces have fixed inode numbers (PROC_IPC_INIT_INO and
# PROC_PID_INIT_INO in include/linux/proc_ns.h), so "not the host's IPC / PID namespace"
# can be told from inside a container without seeing the host.
_IPC_INIT = "ipc:[4026531839]"
_PID_INIT = "pid:[4026531836]"
_CGROUP_MARKERS = ("kubepods", "docker", "containerd", "libpod", "lxc")
_SHM_MIN = 1 << 30  # below this, DataLoader workers and torch.multiprocessing run out
# nvidia-smi's compute modes other than Default: each keeps other processes off the GPU.
_BLOCKING_COMPUTE_MODES = ("Exclusive_Process", "Exclusive_Thread", "Prohibited")
# NVML's nvmlComputeMode_t values, named as nvidia-smi prints them.
_NVML_COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}


@dataclass(frozen=True)
class Finding:
    """One result of the doctor.

    Attributes:
        check: What was checked (``container``, ``gpus``, ``cuda``, ``hca``, ``gdr``,
            ``fork_safety``, ``shm``, ``thp``, ``interface``).
        status: One of :data:`STATUSES`.
        message: What was found, and why it matters to TensorPipe.
        fix: What to do about it ("" when nothing needs doing).
    """

    check: str
    status: str
    message: str
    fix: str = ""

    def line(self) -> str:
        """The finding as one line: status, check, message and fix."""
        text = f"{self.status:<4}  {self.check:<11}  {self.message}"
        return text + (f"  -> fix: {self.fix}" if self.fix else "")

    def to_dict(self) -> dict[str, str]:
        """The JSON form of ``actorrt doctor --json``."""
        return {
            "check": self.check,
            "status": self.status,
            "message": self.message,
            "fix": self.fix,
        }


@dataclass(frozen=True)
class CudaReport:
    """What torch says about CUDA on this machine.

    Attributes:
        torch_version: ``torch.__version__``; None when torch is not installed.
        cuda_version: ``torch.version.cuda``; None for a CPU build.
        available: ``torch.cuda.is_available()``.
        device_count: ``torch.cuda.device_count()``.
        peer_access: ``(i, j) -> torch.cuda.can_device_access_peer(i, j)`` for i != j.
        error: Why torch could not be imported ("" when it could).
    """

    torch_version: str | None = None
    cuda_version: str | None = None
    available: bool = False
    device_count: int = 0
    peer_access: dict[tuple[int, int], bool] = field(default_factory=dict)
    error: str = ""


def probe_cuda() -> CudaReport:
    """Ask torch about CUDA and peer access between the local GPUs.

    Imports torch (seconds), so the doctor calls it only once a GPU has been found.
    """
    if importlib.util.find_spec("torch") is None:
        return CudaReport()
    try:
        import torch
    except Exception as e:  # a broken install is a finding, not a crash of the doctor
        return CudaReport(torch_version="?", error=f"{type(e).__name__}: {e}")
    version = str(torch.__version__)
    cuda = torch.version.cuda
    if cuda is None:
        return CudaReport(torch_version=version)
    if not torch.cuda.is_available():
        return CudaReport(torch_version=version, cuda_version=str(cuda))
    n = torch.cuda.device_count()
    peer = {
        (i, j): bool(torch.cuda.can_device_access_peer(i, j))
        for i in range(n)
        for j in range(n)
        if i != j
    }
    return CudaReport(version, str(cuda), True, n, peer)


def _resolve(host: str) -> str | None:
    # TensorPipe listens on the first address getaddrinfo gives for the host name.
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
    except OSError:
        return None
    return str(infos[0][4][0]) if infos else None


def _ipv4_addresses() -> dict[str, str]:
    """The first IPv4 address of each interface that has one."""
    out: dict[str, str] = {}
    for name, addrs in psutil.net_if_addrs().items():
        first = next((a.address for a in addrs if a.family == socket.AF_INET), None)
        if first is not None:
            out[str(name)] = str(first)
    return out


def _shm_bytes(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_frsize * st.f_blocks


@dataclass(frozen=True)
class Machine:
    """Where the doctor looks. The defaults are this machine; tests pass fake ones.

    Attributes:
        proc_root: The proc tree (boot id, namespaces, cgroup, routes, NVIDIA driver).
        sys_root: The sysfs tree (InfiniBand adapters, peer-memory module, THP, links).
        fs_root: The file-system root (``/.dockerenv``, ``/dev/shm``).
        environ: The environment (default ``os.environ``).
        runner: Runs nvidia-smi (None when missing).
        nvml: Loads NVML (default: pynvml when installed, the ``gpu`` extra); None:
            nvidia-smi only.
        cuda_probe: Asks torch about CUDA; called only when a GPU was found.
        resolve: Host name -> the address TensorPipe would listen on, or None.
        interfaces: Interface name -> IPv4 address.
        shm_bytes: Size of the file system at a path, None when it is missing.
        hostname: The host name (default: the UTS name in ``proc_root``, else
            ``socket.gethostname()``).
    """

    proc_root: Path = Path("/proc")
    sys_root: Path = Path("/sys")
    fs_root: Path = Path("/")
    environ: Mapping[str, str] | None = None
    runner: CommandRunner = run_command
    nvml: NvmlLoader | None = load_nvml
    cuda_probe: Callable[[], CudaReport] = probe_cuda
    resolve: Callable[[str], str | None] = _resolve
    interfaces: Callable[[], dict[str, str]] = _ipv4_addresses
    shm_bytes: Callable[[Path], int | None] = _shm_bytes
    hostname: str | None = None

    @property
    def env(self) -> Mapping[str, str]:
        """The environment the checks read."""
        return os.environ if self.environ is None else self.environ

    def read(self, path: Path) -> str | None:
        """A file's text, stripped, or None when it cannot be read."""
        try:
            return path.read_text().strip()
        except OSError:
            return None

    def host(self) -> str:
        """This machine's host name (what TensorPipe resolves)."""
        if self.hostname:
            return self.hostname
        return self.read(self.proc_root / "sys/kernel/hostname") or socket.gethostname()


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


# -- the checks ------------------------------------------------------------------------


def check_container(m: Machine) -> list[Finding]:
    """Container or not, and whether it isolates IPC / PID (the boot-id trap)."""
    ident = read_container_identity(m.proc_root)
    boot = read_boot_id(m.proc_root)
    markers = []
    if (m.fs_root / ".dockerenv").exists():
        markers.append("/.dockerenv")
    if (m.fs_root / "run/.containerenv").exists():
        markers.append("/run/.containerenv")
    if m.env.get("container"):
        markers.append(f"container={m.env['container']}")
    if m.env.get("KUBERNETES_SERVICE_HOST"):
        markers.append("KUBERNETES_SERVICE_HOST")
    markers += [f"cgroup {w}" for w in _CGROUP_MARKERS if w in ident.cgroup]
    own = [
        name
        for name, value, init in (("IPC", ident.ipc, _IPC_INIT), ("PID", ident.pid, _PID_INIT))
        if value and value != init
    ]
    boot_text = f"boot id {boot[:8]}..." if boot else "no boot id"
    if own:
        why = f" ({', '.join(markers)})" if markers else ""
        return [
            Finding(
                "container",
                "WARN",
                f"in a container with its own {' and '.join(own)} namespace{why}; its "
                f"{boot_text} is the host's, and TensorPipe takes equal boot ids for one "
                "machine, so cuda_ipc/cuda_xth (and shm when the network namespace is "
                "shared) to processes in other containers of this host look usable and fail",
                "run a host's processes in one container, or share the host's namespaces "
                "(docker --ipc=host --pid=host; Kubernetes hostIPC/hostPID); actorrt's "
                "plan leaves cuda_ipc/cuda_xth out between containers it is told about",
            )
        ]
    if not ident.ipc and not ident.pid:
        return [
            Finding(
                "container",
                "INFO",
                f"cannot read {m.proc_root}/self/ns: whether this is a container is unknown "
                f"({boot_text})",
            )
        ]
    if markers:
        return [
            Finding(
                "container",
                "OK",
                f"container markers ({', '.join(markers)}) but the host's IPC and PID "
                f"namespaces: CUDA IPC and shm to the host's other processes work ({boot_text})",
            )
        ]
    return [
        Finding("container", "OK", f"not in a container: host IPC and PID namespaces ({boot_text})")
    ]


def _gpu_summary(gpus: Sequence[GpuInfo]) -> str:
    names = Counter(g.name or "GPU" for g in gpus)
    kinds = ", ".join(f"{n} x {name}" for name, n in names.items())
    linked = sum(1 for i, a in enumerate(gpus) for b in gpus[i + 1 :] if nvlinked(a, b))
    pairs = len(gpus) * (len(gpus) - 1) // 2
    nvl = (
        ""
        if len(gpus) < 2
        else "; NVLink between every pair"
        if linked == pairs
        else f"; NVLink between {linked} of {pairs} pairs"
        if linked
        else "; no NVLink"
    )
    return f"{kinds}{nvl}"


def _compute_modes(m: Machine) -> list[tuple[str, str]]:
    """``(index, compute mode)`` per GPU, from NVML, else from nvidia-smi."""
    with nvml_session(m.nvml) as nvml:
        if nvml is not None:
            try:
                modes = []
                for i in range(nvml.nvmlDeviceGetCount()):
                    mode = nvml.nvmlDeviceGetComputeMode(nvml.nvmlDeviceGetHandleByIndex(i))
                    modes.append((str(i), _NVML_COMPUTE_MODES.get(mode, str(mode))))
                return modes
            except Exception:
                pass  # nvidia-smi may still answer
    text = m.runner(["nvidia-smi", "--query-gpu=index,compute_mode", "--format=csv,noheader"])
    out = []
    for line in (text or "").splitlines():
        index, _, mode = (s.strip() for s in line.partition(","))
        out.append((index, mode))
    return out


def check_gpus(m: Machine) -> tuple[list[Finding], int]:
    """The GPUs NVML / nvidia-smi and the driver list; returns the findings and the count."""
    env = dict(m.env)
    cvd = env.pop("CUDA_VISIBLE_DEVICES", None)
    physical, _ = read_gpus(runner=m.runner, cuda_probe=None, environ=env, nvml=m.nvml)
    driver_dir = m.proc_root / "driver/nvidia/gpus"
    driver = sorted(p.name for p in driver_dir.iterdir()) if driver_dir.is_dir() else []
    out: list[Finding] = []
    if physical:
        out.append(Finding("gpus", "OK", f"{len(physical)} GPU(s): {_gpu_summary(physical)}"))
        if cvd is not None:
            visible, _ = read_gpus(runner=m.runner, cuda_probe=None, environ=m.env, nvml=m.nvml)
            if not visible:
                out.append(
                    Finding(
                        "gpus",
                        "WARN",
                        f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU from this process",
                        "unset CUDA_VISIBLE_DEVICES or list GPU indices / UUIDs that exist",
                    )
                )
        for index, mode in _compute_modes(m):
            if mode in _BLOCKING_COMPUTE_MODES:
                out.append(
                    Finding(
                        "gpus",
                        "WARN",
                        f"GPU {index} is in compute mode {mode}: no other process may open its "
                        "memory, so TensorPipe's cuda_ipc is off for every GPU of a process "
                        "that sees it",
                        f"sudo nvidia-smi -i {index} -c DEFAULT",
                    )
                )
        return out, len(physical)
    if driver:
        out.append(
            Finding(
                "gpus",
                "WARN",
                f"the NVIDIA driver lists {len(driver)} GPU(s) but neither NVML nor nvidia-smi "
                "answered: actorrt cannot read bus ids or the NVLink / PCIe topology",
                "put nvidia-smi (it comes with the driver) on PATH, or pip install "
                "'actorrt[gpu]' (NVML through nvidia-ml-py) where libnvidia-ml.so loads",
            )
        )
        return out, len(driver)
    out.append(
        Finding(
            "gpus",
            "INFO",
            "no NVIDIA GPU on this machine (no NVML, no nvidia-smi, no "
            "/proc/driver/nvidia/gpus): "
            "CUDA, peer-access and GPUDirect checks are skipped; CUDA tensors cannot be "
            "sent from here, and plans give this machine's processes no device maps",
        )
    )
    return out, 0


def check_cuda(m: Machine, gpu_count: int) -> list[Finding]:
    """CUDA through torch and peer access between local GPUs (imports torch only here)."""
    if not gpu_count:
        return []
    r = m.cuda_probe()
    if r.torch_version is None:
        return [
            Finding("cuda", "INFO", "torch is not installed here: CUDA and peer access not checked")
        ]
    if r.error:
        return [
            Finding(
                "cuda",
                "FAIL",
                f"importing torch failed ({r.error})",
                "reinstall torch (pip install -c constraints.txt torch)",
            )
        ]
    if r.cuda_version is None:
        return [
            Finding(
                "cuda",
                "WARN",
                f"torch {r.torch_version} is a CPU build: this machine's GPUs cannot be used, "
                "and CUDA tensors cannot be sent from here",
                "install a CUDA build of torch that the driver supports",
            )
        ]
    if not r.available:
        return [
            Finding(
                "cuda",
                "FAIL",
                f"torch {r.torch_version} (CUDA {r.cuda_version}) cannot use the GPUs "
                "(torch.cuda.is_available() is False): the driver is older than CUDA "
                f"{r.cuda_version}, or CUDA_VISIBLE_DEVICES hides them",
                f"update the NVIDIA driver to one that supports CUDA {r.cuda_version}, or "
                "install a torch built for an older CUDA",
            )
        ]
    label = f"torch {r.torch_version} (CUDA {r.cuda_version})"
    if r.device_count < 2:
        return [
            Finding("cuda", "OK", f"{label} sees {r.device_count} GPU: no peer access to check")
        ]
    denied = sorted({tuple(sorted(k)) for k, ok in r.peer_access.items() if not ok})
    if not denied:
        return [
            Finding(
                "cuda",
                "OK",
                f"{label}: peer access between all {r.device_count} GPUs, so cuda_ipc can "
                "copy directly between processes on them",
            )
        ]
    pairs = ", ".join(f"cuda:{a}<->cuda:{b}" for a, b in denied[:8])
    more = f" and {len(denied) - 8} more" if len(denied) > 8 else ""
    return [
        Finding(
            "cuda",
            "WARN",
            f"{label}: no peer access between {pairs}{more}: TensorPipe's cuda_ipc is not "
            "used between processes on those GPUs, and their CUDA tensors go through host "
            "memory (cuda_basic)",
            "put processes that exchange CUDA tensors on GPUs with peer access "
            "(`nvidia-smi topo -p2p r`), or check the PCIe / IOMMU setup (ACS, VM passthrough)",
        )
    ]


def _link_layer(m: Machine, hca: HcaInfo) -> str:
    ports = m.sys_root / "class/infiniband" / hca.name / "ports"
    return m.read(ports / "1/link_layer") or ""


def check_hcas(m: Machine, hcas: Sequence[HcaInfo]) -> list[Finding]:
    """The InfiniBand / RoCE adapters and their port 1 states, in verbs-list order."""
    if not hcas:
        return [
            Finding(
                "hca",
                "OK",
                "no InfiniBand / RoCE adapter (/sys/class/infiniband is empty): TensorPipe "
                "uses TCP between hosts and never starts ibv",
            )
        ]
    out = []
    for k, h in enumerate(hcas):
        layer = _link_layer(m, h)
        where = ", ".join(
            x
            for x in (
                layer and ("RoCE" if layer.lower() == "ethernet" else layer),
                f"NUMA {h.numa_node}" if h.numa_node >= 0 else "",
                h.pci_bus_id,
            )
            if x
        )
        what = f"{h.name} port 1 {h.port_state}" + (f" ({where})" if where else "")
        if h.active:
            first = ", the adapter ibv opens" if k == 0 else ""
            out.append(Finding("hca", "OK", f"{what}{first}"))
        elif k == 0:
            out.append(
                Finding(
                    "hca",
                    "WARN",
                    f"{what}: it is the first adapter of the verbs list, which TensorPipe's "
                    "ibv opens, so every ibv connection from this host would fail (actorrt's "
                    "plan leaves ibv out here: TCP between hosts)",
                    f"bring the port up (cable, switch, subnet manager: `ibstat {h.name}`); "
                    "raw torch RPC needs _transports=['uv', 'shm'] until then",
                )
            )
        else:
            out.append(
                Finding(
                    "hca",
                    "WARN",
                    f"{what}: cuda_gdr would pick it for the GPUs next to it and fail "
                    "(actorrt's plan leaves cuda_gdr out for those GPUs)",
                    f"bring the port up (`ibstat {h.name}`)",
                )
            )
    return out


def check_gdr(m: Machine, hcas: Sequence[HcaInfo], gpu_count: int) -> list[Finding]:
    """GPUDirect RDMA: adapters, GPUs and the peer-memory kernel module."""
    if not hcas:
        return [Finding("gdr", "OK", "not applicable: no InfiniBand adapter")]
    if not gpu_count:
        return [Finding("gdr", "OK", "not applicable: no GPU")]
    module = next(
        (n for n in ("nvidia_peermem", "nv_peer_mem") if (m.sys_root / "module" / n).exists()),
        None,
    )
    if module is None:
        return [
            Finding(
                "gdr",
                "WARN",
                "GPUDirect RDMA is off: neither nvidia_peermem nor nv_peer_mem is loaded, so "
                "CUDA tensors between hosts are staged through host memory (no cuda_gdr)",
                "sudo modprobe nvidia_peermem (part of the NVIDIA driver since 470; "
                "MLNX_OFED's nv_peer_mem before that)",
            )
        ]
    if not any(h.active for h in hcas):
        return [
            Finding(
                "gdr",
                "WARN",
                f"{module} is loaded but no adapter port is ACTIVE: GPUDirect RDMA has no path",
                "bring an adapter port up (`ibstat`)",
            )
        ]
    return [
        Finding(
            "gdr",
            "OK",
            f"GPUDirect RDMA usable: {module} is loaded, so cuda_gdr can move CUDA tensors "
            "between hosts without host copies (through ACTIVE adapters next to the GPUs)",
        )
    ]


def _truthy(value: str | None) -> bool:
    if not value:
        return False
    return value.strip().lower() not in ("0", "false", "no", "off")


def check_fork_safety(m: Machine, hcas: Sequence[HcaInfo]) -> list[Finding]:
    """RDMAV_FORK_SAFE / IBV_FORK_SAFE where ibverbs may be loaded."""
    if not hcas:
        return [Finding("fork_safety", "OK", "not needed: no InfiniBand adapter")]
    missing = [v for v in ("RDMAV_FORK_SAFE", "IBV_FORK_SAFE") if not _truthy(m.env.get(v))]
    if not missing:
        return [Finding("fork_safety", "OK", "RDMAV_FORK_SAFE and IBV_FORK_SAFE are set")]
    return [
        Finding(
            "fork_safety",
            "WARN",
            f"{' and '.join(missing)} not set here: fork() after ibverbs loads (DataLoader "
            "workers, subprocesses of an actor) corrupts registered memory; actorrt sets "
            "them in the processes it plans, not in a driver or a torchrun / srun launch",
            "export RDMAV_FORK_SAFE=1 IBV_FORK_SAFE=1 before Python starts",
        )
    ]


def check_shm(m: Machine) -> list[Finding]:
    """The size of ``/dev/shm``."""
    path = m.fs_root / "dev/shm"
    size = m.shm_bytes(path)
    users = (
        "torch.multiprocessing, DataLoader workers and TensorPipe on kernels without "
        "memfd_create use it"
    )
    fix = (
        "docker run --shm-size=8g (or --ipc=host); Kubernetes: an emptyDir with "
        "medium: Memory mounted at /dev/shm"
    )
    if size is None:
        return [Finding("shm", "WARN", f"/dev/shm is missing: {users}", fix)]
    if size < _SHM_MIN:
        return [
            Finding(
                "shm",
                "WARN",
                f"/dev/shm is {_human(size)}: {users}, and Docker's default 64 MiB runs out",
                fix,
            )
        ]
    return [Finding("shm", "OK", f"/dev/shm is {_human(size)}")]


def check_thp(m: Machine, hcas: Sequence[HcaInfo]) -> list[Finding]:
    """Transparent huge pages, which matter with fork-safe ibverbs."""
    raw = m.read(m.sys_root / "kernel/mm/transparent_hugepage/enabled")
    if raw is None:
        return [Finding("thp", "INFO", "transparent huge pages: setting not readable")]
    mode = raw[raw.find("[") + 1 : raw.find("]")] if "[" in raw else raw
    if mode == "always" and hcas and not _truthy(m.env.get("RDMAV_HUGEPAGES_SAFE")):
        return [
            Finding(
                "thp",
                "WARN",
                "transparent huge pages are 'always' on a host with InfiniBand adapters: "
                "fork-safe ibverbs protects registered memory page by page and must be told "
                "that pages may be huge, or fork() still corrupts it",
                "export RDMAV_HUGEPAGES_SAFE=1 with RDMAV_FORK_SAFE=1, or set "
                "/sys/kernel/mm/transparent_hugepage/enabled to madvise",
            )
        ]
    if mode == "always":
        return [
            Finding(
                "thp",
                "INFO",
                "transparent huge pages: always (fine for TensorPipe; if large transfers "
                "stall now and then, madvise is the usual setting)",
            )
        ]
    return [Finding("thp", "OK", f"transparent huge pages: {mode}")]


def _default_route(m: Machine) -> str | None:
    text = m.read(m.proc_root / "net/route") or ""
    best: tuple[int, str] | None = None
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) >= 8 and f[1] == "00000000" and f[7] == "00000000":
            try:
                up, metric = int(f[3], 16) & 1, int(f[6])
            except ValueError:
                continue
            if up and (best is None or metric < best[0]):
                best = (metric, f[0])
    return best[1] if best else None


def check_interface(m: Machine) -> list[Finding]:
    """The interface TensorPipe listens on (TP_SOCKET_IFNAME, else the host name's)."""
    tp = m.env.get("TP_SOCKET_IFNAME") or ""
    gloo = m.env.get("GLOO_SOCKET_IFNAME") or ""
    addrs = m.interfaces()
    route = _default_route(m)
    suggest = route or next((n for n in addrs if not addrs[n].startswith("127.")), "eth0")
    fix = (
        f"export TP_SOCKET_IFNAME={suggest} GLOO_SOCKET_IFNAME={suggest} (an interface other "
        "hosts reach; `actorrt worker` picks the one that reaches the driver by itself)"
    )
    out: list[Finding] = []
    if tp:
        state = m.read(m.sys_root / "class/net" / tp / "operstate")
        if tp not in addrs and state is None:
            out.append(
                Finding(
                    "interface",
                    "FAIL",
                    f"TP_SOCKET_IFNAME={tp} names no interface here (there are: "
                    f"{', '.join(sorted(addrs)) or 'none with IPv4'}): TensorPipe falls back "
                    "to 127.0.0.1, which other hosts cannot reach",
                    fix,
                )
            )
        elif tp not in addrs:
            out.append(
                Finding(
                    "interface",
                    "FAIL",
                    f"TP_SOCKET_IFNAME={tp} has no IPv4 address: TensorPipe falls back to "
                    "127.0.0.1, which other hosts cannot reach",
                    fix,
                )
            )
        elif state == "down":
            out.append(
                Finding(
                    "interface",
                    "FAIL",
                    f"TP_SOCKET_IFNAME={tp} ({addrs[tp]}) is down",
                    f"bring it up (ip link set {tp} up) or choose another: {fix}",
                )
            )
        elif addrs[tp].startswith("127."):
            out.append(
                Finding(
                    "interface",
                    "WARN",
                    f"TP_SOCKET_IFNAME={tp} is loopback ({addrs[tp]}): fine for a local "
                    "cluster, unreachable from other hosts",
                    fix,
                )
            )
        else:
            out.append(
                Finding(
                    "interface",
                    "OK",
                    f"TensorPipe listens on {tp} ({addrs[tp]}), from TP_SOCKET_IFNAME"
                    + (
                        f"; the default route goes through {route}" if route and route != tp else ""
                    ),
                )
            )
    else:
        host = m.host()
        addr = m.resolve(host)
        if addr is None:
            out.append(
                Finding(
                    "interface",
                    "WARN",
                    f"TP_SOCKET_IFNAME is not set and the host name {host!r} does not resolve: "
                    "TensorPipe listens on 127.0.0.1, which other hosts cannot reach",
                    fix,
                )
            )
        elif addr.startswith("127.") or addr == "::1":
            out.append(
                Finding(
                    "interface",
                    "WARN",
                    f"TP_SOCKET_IFNAME is not set and the host name {host!r} resolves to "
                    f"{addr}: TensorPipe listens on loopback, which other hosts cannot reach",
                    fix,
                )
            )
        else:
            holder = next((n for n, a in addrs.items() if a == addr), None)
            if holder is None and ":" not in addr:
                out.append(
                    Finding(
                        "interface",
                        "WARN",
                        f"TP_SOCKET_IFNAME is not set and the host name {host!r} resolves to "
                        f"{addr}, which no interface here holds: TensorPipe cannot listen there",
                        fix,
                    )
                )
            else:
                via = f" on {holder}" if holder else ""
                detour = (
                    f"; the default route goes through {route}"
                    if route and holder and route != holder
                    else ""
                )
                out.append(
                    Finding(
                        "interface",
                        "OK",
                        f"TensorPipe listens on {addr}{via}, the address of the host name "
                        f"{host!r} (TP_SOCKET_IFNAME not set){detour}",
                    )
                )
    if gloo and gloo != tp:
        out.append(
            Finding(
                "interface",
                "INFO",
                f"GLOO_SOCKET_IFNAME={gloo} differs from TP_SOCKET_IFNAME={tp or '(unset)'}: "
                "init_rpc's Gloo group and TensorPipe listen on different interfaces; both "
                "must be reachable from the other hosts",
            )
        )
    return out


def run_checks(machine: Machine | None = None) -> list[Finding]:
    """Run every check on a machine (default: this one).

    Args:
        machine: Where to look; tests pass fake roots and probes.

    Returns:
        The findings, in check order.
    """
    m = machine or Machine()
    hcas = read_hcas(m.sys_root)
    gpu_findings, gpu_count = check_gpus(m)
    return [
        *check_container(m),
        *gpu_findings,
        *check_cuda(m, gpu_count),
        *check_hcas(m, hcas),
        *check_gdr(m, hcas, gpu_count),
        *check_fork_safety(m, hcas),
        *check_shm(m),
        *check_thp(m, hcas),
        *check_interface(m),
    ]


def exit_status(findings: Sequence[Finding]) -> int:
    """1 when any finding is a FAIL, else 0."""
    return 1 if any(f.status == "FAIL" for f in findings) else 0


def report(findings: Sequence[Finding], machine: Machine | None = None) -> dict[str, Any]:
    """The JSON form: host, findings, counts per status and the exit status."""
    m = machine or Machine()
    counts = Counter(f.status for f in findings)
    return {
        "host": m.host(),
        "findings": [f.to_dict() for f in findings],
        "counts": {s: counts.get(s, 0) for s in STATUSES},
        "exit_status": exit_status(findings),
    }
