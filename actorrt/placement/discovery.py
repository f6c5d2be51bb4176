"""Build a :class:`NodeDescription` from the machine this process runs on.

Every source is injectable (``proc_root``, ``sys_root``, ``environ``, the command
runner used for nvidia-smi, the CUDA probe), so each rule is tested against fake
trees in ``tmp_path`` on machines with no GPU and no InfiniBand. On such a machine the
whole call costs a few file reads: nvidia-smi is looked up on ``PATH`` before it is run,
and torch is only asked about CUDA when it is already imported.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

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
    "describe_node",
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

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NEAR_LEVELS = {"PIX", "PXB"}  # same PCIe switch: where GPUDirect RDMA pays off (NCCL's default)


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


def _read_num_cpus(proc_root: Path) -> int:
    status = _read(proc_root / "self/status") or ""
    for line in status.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            count = 0
            for part in line.split(":", 1)[1].strip().split(","):
                if "-" in part:
                    lo, hi = part.split("-")
                    count += int(hi) - int(lo) + 1
                elif part:
                    count += 1
            if count:
                return count
    return os.cpu_count() or 1


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


def _visible_physical(
    environ: Mapping[str, str], physical: list[tuple[int, str, str, str]]
) -> list[tuple[int, str, str, str]]:
    """Apply ``CUDA_VISIBLE_DEVICES`` (ints or UUID prefixes) to nvidia-smi's GPU list."""
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
) -> tuple[tuple[GpuInfo, ...], dict[str, tuple[int, ...]]]:
    """Discover the GPUs visible to this process and which NICs sit near each.

    nvidia-smi gives bus ids, names and the NVLink / PCIe topology of the whole host;
    the CUDA probe (torch) gives what this process actually sees, in local order. When
    only one of them answers, it is used alone.

    Args:
        runner: Runs nvidia-smi.
        cuda_probe: Returns ``(bus_id, name)`` per local CUDA index, or None.
        environ: Environment for ``CUDA_VISIBLE_DEVICES`` (default ``os.environ``).

    Returns:
        ``(gpus, near)``: the GPUs by local index, and per NIC name the local indices
        of GPUs behind the same PCIe switch.
    """
    env = os.environ if environ is None else environ
    physical: list[tuple[int, str, str, str]] = []  # (smi index, bus id, name, uuid)
    query = runner(
        ["nvidia-smi", "--query-gpu=index,pci.bus_id,name,uuid", "--format=csv,noheader"]
    )
    for line in (query or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4 and parts[0].isdigit():
            physical.append((int(parts[0]), normalize_bus_id(parts[1]), parts[2], parts[3]))
    topo = runner(["nvidia-smi", "topo", "-m"]) if physical else None
    nvlinks, near_smi = parse_nvidia_smi_topo(topo) if topo else ({}, {})

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
) -> NodeDescription:
    """Describe the machine this process runs on.

    Args:
        labels: Labels this process offers (empty: any).
        gpus: Restrict to these local CUDA indices (DI-engine's ``--local-cuda-devices``);
            None keeps every visible GPU.
        proc_root: Root of the proc tree (a fake tree in tests).
        sys_root: Root of the sysfs tree.
        environ: Environment (``CUDA_VISIBLE_DEVICES``), default ``os.environ``.
        runner: Runs nvidia-smi; returns None when it is missing.
        cuda_probe: Lists local CUDA devices; default asks torch if already imported.
        hostname: Override the host name.

    Returns:
        The node description.
    """
    proc = Path(proc_root)
    found_gpus, near = read_gpus(runner=runner, cuda_probe=cuda_probe, environ=environ)
    if gpus is not None:
        wanted = set(gpus)
        missing = sorted(wanted - {g.index for g in found_gpus})
        if missing:
            from actorrt.errors import PlacementError

            raise PlacementError(
                f"local CUDA devices {missing} were asked for but this process sees "
                f"{len(found_gpus)} GPU(s); fix --local-cuda-devices or CUDA_VISIBLE_DEVICES"
            )
        found_gpus = tuple(g for g in found_gpus if g.index in wanted)
        near = {k: tuple(i for i in v if i in wanted) for k, v in near.items()}
    return NodeDescription(
        hostname=hostname or _read_hostname(proc),
        boot_id=read_boot_id(proc),
        container=read_container_identity(proc),
        num_cpus=_read_num_cpus(proc),
        gpus=found_gpus,
        hcas=read_hcas(sys_root, near),
        labels=tuple(labels),
    )
