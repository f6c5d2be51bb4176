"""Build a :class:`NodeDescription` from the machine this process runs on.

Every source is injectable (``proc_root``, ``sys_root``, ``environ``, the NVML loader,
the command runner used for nvidia-smi, the CUDA probe, the CPU count), so each rule is
tested against fake trees in ``tmp_path`` on machines with no GPU and no InfiniBand. On
such a machine the whole call costs a few file reads: NVML is used only when
``nvidia-ml-py`` (the ``gpu`` extra) is installed, nvidia-smi is looked up on ``PATH``
before it is run, and torch is only asked about CUDA when it is already imported.

The GPU list (bus ids, names, UUIDs) and the NVLink peers come from NVML when it loads,
else from nvidia-smi's text; which NICs sit behind the same PCIe switch as each GPU
comes from ``nvidia-smi topo -m`` either way (NVML knows nothing of NICs).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from actorrt.placement.node import (
    ContainerIdentity,
    GpuInfo,
    HcaInfo,
    NodeDescription,
    normalize_bus_id,
)

__all__ = [
    "CommandRunner",
    "CudaProbe",
    "NvmlLoader",
    "cuda_device_count",
    "describe_node",
    "load_nvml",
    "nvml_session",
    "read_boot_id",
    "read_container_identity",
    "read_gpus",
    "read_hcas",
    "parse_nvidia_smi_topo",
    "run_command",
]

#: ``runner(argv) -> stdout`` or None when the command is missing or fails.
CommandRunner = Callable[[Sequence[str]], "str | None"]
#: ``probe() -> [(pci_bus_id, name), ...]`` per local CUDA index, or None when unknown.
CudaProbe = Callable[[], "list[tuple[str, str]] | None"]
#: ``load() -> module`` with pynvml's functions, NVML initialized; None when unusable.
NvmlLoader = Callable[[], Any]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NEAR_LEVELS = {"PIX", "PXB"}  # same PCIe switch: where GPUDirect RDMA pays off (NCCL's default)
# nvml.h's nvmlGpuP2PCapsIndex_t NVML_P2P_CAPS_INDEX_NVLINK and NVML_P2P_STATUS_OK.
_NVML_P2P_NVLINK = 2
_NVML_P2P_OK = 0
_Physical = tuple[int, str, str, str]  # (NVML / nvidia-smi index, bus id, name, uuid)


def run_command(argv: Sequence[str], timeout: float = 10.0) -> str | None:
    """Run a command and return its stdout, or None if it is missing, fails or hangs."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _natural_key(name: str) -> tuple[object, ...]:
    # mlx5_10 sorts after mlx5_9, as the kernel registers them.
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def read_boot_id(proc_root: str | os.PathLike[str] = "/proc") -> str:
    """Return the kernel boot id (TensorPipe's "same machine" identity), or ""."""
    return _read(Path(proc_root) / "sys/kernel/random/boot_id") or ""


def read_container_identity(proc_root: str | os.PathLike[str] = "/proc") -> ContainerIdentity:
    """Read the namespace inodes (``/proc/self/ns/*``) and cgroup of this process."""
    ns_dir = Path(proc_root) / "self/ns"
    values: dict[str, str] = {}
    for ns in ("net", "pid", "ipc", "mnt"):
        try:
            values[ns] = os.readlink(ns_dir / ns)  # e.g. "net:[4026531840]"
        except OSError:
            values[ns] = ""
    cgroup = _read(Path(proc_root) / "self/cgroup") or ""
    return ContainerIdentity(cgroup=";".join(cgroup.split()), **values)


def _allowed_cpus() -> int:
    # The CPUs this process may run on (taskset, cgroup cpusets, Slurm's binding), which
    # is what /proc/self/status calls Cpus_allowed_list; not a CFS quota.
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def cuda_device_count() -> int:
    """The number of CUDA devices torch sees here (0 without CUDA); imports torch.

    ``torch.cuda.device_count()`` creates no CUDA context, so actors may still pick
    their GPU afterwards.
    """
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _read_hostname(proc_root: Path) -> str:
    # The UTS namespace's name (what a container calls itself), like `hostname`.
    return _read(proc_root / "sys/kernel/hostname") or socket.gethostname()


def parse_nvidia_smi_topo(text: str) -> tuple[dict[int, set[int]], dict[str, set[int]]]:
    """Parse ``nvidia-smi topo -m``.

    Args:
        text: The command's output.

    Returns:
        ``(nvlinks, near)``: NVLink peers of each GPU (nvidia-smi indices), and for each
        NIC name the GPUs behind the same PCIe switch (PIX / PXB).
    """
    lines = [_ANSI.sub("", ln).rstrip() for ln in text.splitlines()]
    legend: dict[str, str] = {}
    for ln in lines:
        m = re.match(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", ln)
        if m:
            legend[m.group(1)] = m.group(2)
    header: list[str] = []
    nvlinks: dict[int, set[int]] = {}
    near: dict[str, set[int]] = {}
    for ln in lines:
        tokens = ln.split()
        if not tokens:
            continue
        if not header and ln[:1].isspace() and tokens[0].startswith("GPU"):
            # Device columns are the header tokens before the affinity columns.
            for t in tokens:
                if t in ("CPU", "NUMA", "GPU NUMA") or "Affinity" in t:
                    break
                header.append(t)
            continue
        if not header or not re.match(r"^GPU\d+$", tokens[0]):
            continue
        row = int(tokens[0][3:])
        for col, value in zip(header, tokens[1 : 1 + len(header)], strict=False):
            if re.match(r"^GPU\d+$", col):
                if value.startswith("NV"):
                    nvlinks.setdefault(row, set()).add(int(col[3:]))
            elif value in _NEAR_LEVELS:
                near.setdefault(legend.get(col, col), set()).add(row)
    return nvlinks, near


def _torch_cuda_probe() -> list[tuple[str, str]] | None:
    # Only ask torch when it is already imported: importing it costs seconds, and a
    # process that never imported torch is not going to hand CUDA tensors to RPC.
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    out = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        bus = ""
        if hasattr(props, "pci_bus_id"):
            dom = getattr(props, "pci_domain_id", 0)
            bus = f"{dom:04x}:{props.pci_bus_id:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
        out.append((bus, str(props.name)))
    return out


def load_nvml() -> Any:
    """Import pynvml (``nvidia-ml-py``, the ``gpu`` extra) and initialize NVML.

    Returns:
        The ``pynvml`` module, initialized (end with ``nvmlShutdown()``, or use
        :func:`nvml_session`); None when the package is not installed or NVML does not
        load (no NVIDIA driver).
    """
    if importlib.util.find_spec("pynvml") is None:
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # ImportError, NVMLError (no driver, no libnvidia-ml.so), OSError
        return None
    return pynvml


@contextlib.contextmanager
def nvml_session(loader: NvmlLoader | None) -> Iterator[Any]:
    """Load NVML with ``loader`` for the block and shut it down after.

    Args:
        loader: :func:`load_nvml`, a test's fake, or None (no NVML).

    Yields:
        The initialized module, or None when there is no loader or it gave nothing.
    """
    nvml = loader() if loader is not None else None
    try:
        yield nvml
    finally:
        if nvml is not None:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()


def _text(value: object) -> str:
    # pynvml returns bytes for ctypes char arrays (pciInfo.busId), str from most getters.
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_gpus(nvml: Any) -> tuple[list[_Physical], dict[int, set[int]] | None] | None:
    """The physical GPUs and their NVLink peers from NVML; None when NVML fails."""
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        physical = [
            (
                i,
                normalize_bus_id(_text(nvml.nvmlDeviceGetPciInfo(h).busId)),
                _text(nvml.nvmlDeviceGetName(h)),
                _text(nvml.nvmlDeviceGetUUID(h)),
            )
            for i, h in enumerate(handles)
        ]
    except Exception:
        return None
    # P2P over NVLink, pair by pair: what `topo -m` shows as NV#, NVSwitch systems
    # included (where a link's remote PCI device is the switch, not the peer GPU).
    nvlinks: dict[int, set[int]] = {}
    try:
        for i, a in enumerate(handles):
            for j, b in enumerate(handles):
                if i != j and nvml.nvmlDeviceGetP2PStatus(a, b, _NVML_P2P_NVLINK) == _NVML_P2P_OK:
                    nvlinks.setdefault(i, set()).add(j)
    except Exception:
        return physical, None  # a driver without the query: `topo -m` says
    return physical, nvlinks


def _smi_gpus(runner: CommandRunner) -> list[_Physical]:
    physical: list[_Physical] = []
    query = runner(
        ["nvidia-smi", "--query-gpu=index,pci.bus_id,name,uuid", "--format=csv,noheader"]
    )
    for line in (query or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4 and parts[0].isdigit():
            physical.append((int(parts[0]), normalize_bus_id(parts[1]), parts[2], parts[3]))
    return physical


def _visible_physical(environ: Mapping[str, str], physical: list[_Physical]) -> list[_Physical]:
    """Apply ``CUDA_VISIBLE_DEVICES`` (ints or UUID prefixes) to the physical GPU list."""
    spec = environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return physical
    by_index = {g[0]: g for g in physical}
    out = []
    for item in (s.strip() for s in spec.split(",")):
        if item.isdigit() and int(item) in by_index:
            out.append(by_index[int(item)])
        elif item.startswith(("GPU-", "MIG-")):
            match = [g for g in physical if g[3].startswith(item)]
            if len(match) != 1:
                break
            out.append(match[0])
        else:
            break  # CUDA stops enumerating at the first invalid entry
    return out


def read_gpus(
    *,
    runner: CommandRunner = run_command,
    cuda_probe: CudaProbe | None = _torch_cuda_probe,
    environ: Mapping[str, str] | None = None,
    nvml: NvmlLoader | None = load_nvml,
) -> tuple[tuple[GpuInfo, ...], dict[str, tuple[int, ...]]]:
    """Discover the GPUs visible to this process and which NICs sit near each.

    NVML (when ``nvml`` loads it), else nvidia-smi's text, gives the bus ids, names and
    NVLink peers of the whole host; ``nvidia-smi topo -m`` gives which NICs share a PCIe
    switch with each GPU (and the NVLink peers when NVML did not). The CUDA probe (torch)
    gives what this process actually sees, in local order. When only one of them
    answers, it is used alone.

    Args:
        runner: Runs nvidia-smi.
        cuda_probe: Returns ``(bus_id, name)`` per local CUDA index, or None.
        environ: Environment for ``CUDA_VISIBLE_DEVICES`` (default ``os.environ``).
        nvml: Loads NVML (:func:`load_nvml`; a fake in tests); None: nvidia-smi only.

    Returns:
        ``(gpus, near)``: the GPUs by local index, and per NIC name the local indices
        of GPUs behind the same PCIe switch.
    """
    env = os.environ if environ is None else environ
    with nvml_session(nvml) as lib:
        from_nvml = _nvml_gpus(lib) if lib is not None else None
    physical, nvml_links = from_nvml if from_nvml is not None else (_smi_gpus(runner), None)
    topo = runner(["nvidia-smi", "topo", "-m"]) if physical else None
    nvlinks, near_smi = parse_nvidia_smi_topo(topo) if topo else ({}, {})
    if nvml_links is not None:
        nvlinks = nvml_links

    probed = cuda_probe() if cuda_probe is not None else None
    if probed is not None:
        by_bus = {g[1]: g for g in physical}
        local = [
            by_bus.get(normalize_bus_id(b), (-1, normalize_bus_id(b), n, "")) for b, n in probed
        ]
    else:
        local = _visible_physical(env, physical)

    smi_to_local = {g[0]: i for i, g in enumerate(local) if g[0] >= 0}
    bus_of_smi = {g[0]: g[1] for g in physical}
    gpus = []
    for i, (smi, bus, name, _uuid) in enumerate(local):
        peers = sorted(nvlinks.get(smi, ()))
        gpus.append(
            GpuInfo(
                index=i,
                pci_bus_id=bus,
                name=name,
                nvlink_peers=tuple(smi_to_local[p] for p in peers if p in smi_to_local),
                nvlink_peer_bus_ids=tuple(bus_of_smi[p] for p in peers if p in bus_of_smi),
            )
        )
    near = {
        nic: tuple(sorted(smi_to_local[g] for g in smis if g in smi_to_local))
        for nic, smis in near_smi.items()
    }
    return tuple(gpus), near


def read_hcas(
    sys_root: str | os.PathLike[str] = "/sys", near: Mapping[str, Sequence[int]] | None = None
) -> tuple[HcaInfo, ...]:
    """Read InfiniBand adapters from ``/sys/class/infiniband`` in verbs-list order.

    Args:
        sys_root: Root of the sysfs tree.
        near: Per adapter name, local GPU indices behind the same PCIe switch.

    Returns:
        The adapters, naturally sorted by name (the order the kernel registers them,
        which is the order ibverbs lists them and TensorPipe's ibv picks the first of).
    """
    root = Path(sys_root)
    ib_dir = root / "class/infiniband"
    if not ib_dir.is_dir():
        return ()
    # The nvidia_peermem (or older nv_peer_mem) module is what makes GPUDirect RDMA work.
    gdr = (root / "module/nvidia_peermem").exists() or (root / "module/nv_peer_mem").exists()
    near = near or {}
    out = []
    for dev in sorted((p for p in ib_dir.iterdir()), key=lambda p: _natural_key(p.name)):
        ports = dev / "ports"
        port_names = (
            sorted((p.name for p in ports.iterdir()), key=_natural_key) if ports.is_dir() else []
        )
        port = "1" if "1" in port_names else (port_names[0] if port_names else None)
        state = "DOWN"
        if port is not None:
            raw = _read(ports / port / "state") or ""
            state = raw.split(":", 1)[-1].strip().upper() or "DOWN"  # "4: ACTIVE" -> ACTIVE
        bus = ""
        try:
            bus = normalize_bus_id(Path(os.readlink(dev / "device")).name)
        except OSError:
            pass
        numa = _read(dev / "device/numa_node")
        out.append(
            HcaInfo(
                name=dev.name,
                pci_bus_id=bus,
                port_state=state,
                gdr_capable=gdr,
                near_gpus=tuple(near.get(dev.name, ())),
                numa_node=int(numa) if numa and numa.lstrip("-").isdigit() else -1,
            )
        )
    return tuple(out)


def describe_node(
    labels: Sequence[str] = (),
    *,
    gpus: Sequence[int] | None = None,
    proc_root: str | os.PathLike[str] = "/proc",
    sys_root: str | os.PathLike[str] = "/sys",
    environ: Mapping[str, str] | None = None,
    runner: CommandRunner = run_command,
    cuda_probe: CudaProbe | None = _torch_cuda_probe,
    hostname: str | None = None,
    nvml: NvmlLoader | None = load_nvml,
    cpu_count: Callable[[], int] = _allowed_cpus,
) -> NodeDescription:
    """Describe the machine this process runs on.

    Args:
        labels: Labels this process offers (empty: any).
        gpus: Restrict to these local CUDA indices (DI-engine's ``--local-cuda-devices``);
            None keeps every visible GPU.
        proc_root: Root of the proc tree (a fake tree in tests): host name, boot id,
            namespaces and cgroup.
        sys_root: Root of the sysfs tree.
        environ: Environment (``CUDA_VISIBLE_DEVICES``), default ``os.environ``.
        runner: Runs nvidia-smi; returns None when it is missing.
        cuda_probe: Lists local CUDA devices; default asks torch if already imported.
        hostname: Override the host name.
        nvml: Loads NVML (default: pynvml when installed); None: nvidia-smi only.
        cpu_count: The CPUs this process may use (default: its affinity mask,
            ``os.sched_getaffinity``).

    Returns:
        The node description.
    """
    proc = Path(proc_root)
    found_gpus, near = read_gpus(runner=runner, cuda_probe=cuda_probe, environ=environ, nvml=nvml)
    if gpus is not None:
        wanted = set(gpus)
        missing = sorted(wanted - {g.index for g in found_gpus})
        if missing:
            from actorrt.errors import PlacementError

            raise PlacementError(
                f"local CUDA devices {missing} were asked for but this process sees "
                f"{len(found_gpus)} GPU(s); fix the GPUs asked for (actorrt worker --gpus, "
                "the DQN example's --local-cuda-devices) or CUDA_VISIBLE_DEVICES"
            )
        found_gpus = tuple(g for g in found_gpus if g.index in wanted)
        near = {k: tuple(i for i in v if i in wanted) for k, v in near.items()}
    return NodeDescription(
        hostname=hostname or _read_hostname(proc),
        boot_id=read_boot_id(proc),
        container=read_container_identity(proc),
        num_cpus=cpu_count(),
        gpus=found_gpus,
        hcas=read_hcas(sys_root, near),
        labels=tuple(labels),
    )
