"""Discovery against fake /proc and /sys trees and a fake nvidia-smi."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from actorrt.errors import PlacementError
from actorrt.placement import NodeDescription, describe_node
from actorrt.placement.discovery import (
    parse_nvidia_smi_topo,
    read_container_identity,
    read_gpus,
    read_hcas,
)

TOPO = """\
\x1b[4m\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m
GPU0\t X \tNV12\tNV12\tSYS\tPXB\tSYS\t0-31\t0\t\tN/A
GPU1\tNV12\t X \tNV12\tSYS\tPXB\tSYS\t0-31\t0\t\tN/A
GPU2\tNV12\tNV12\t X \tSYS\tSYS\tPIX\t32-63\t1\t\tN/A
GPU3\tSYS\tSYS\tSYS\t X \tSYS\tNODE\t32-63\t1\t\tN/A
NIC0\tPXB\tPXB\tSYS\tSYS\t X \tSYS
NIC1\tSYS\tSYS\tPIX\tNODE\tSYS\t X

Legend:

  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
"""

QUERY = """\
0, 00000000:1A:00.0, NVIDIA H100 80GB HBM3, GPU-aaaa
1, 00000000:3A:00.0, NVIDIA H100 80GB HBM3, GPU-bbbb
2, 00000000:9A:00.0, NVIDIA H100 80GB HBM3, GPU-cccc
3, 00000000:BA:00.0, NVIDIA H100 80GB HBM3, GPU-dddd
"""


def fake_runner(argv):
    if argv[:2] == ["nvidia-smi", "topo"]:
        return TOPO
    if argv[0] == "nvidia-smi":
        return QUERY
    return None


def make_proc(root: Path, *, ns_suffix: str = "1") -> Path:
    (root / "sys/kernel/random").mkdir(parents=True)
    (root / "sys/kernel/random/boot_id").write_text("0f6c9a2e-boot\n")
    (root / "sys/kernel/hostname").write_text("fakehost\n")
    ns = root / "self/ns"
    ns.mkdir(parents=True)
    for name, inode in (
        ("net", 4026531840),
        ("pid", 4026531836),
        ("ipc", 4026531839),
        ("mnt", 4026531841),
    ):
        os.symlink(f"{name}:[{inode}{ns_suffix}]", ns / name)  # dangling, like the real ones
    (root / "self/cgroup").write_text("0::/kubepods/pod-1234\n")
    return root


def make_sys(root: Path, states=("4: ACTIVE", "1: DOWN"), peermem=True) -> Path:
    for i, state in enumerate(states):
        dev = root / f"class/infiniband/mlx5_{i}"
        (dev / "ports/1").mkdir(parents=True)
        (dev / "ports/1/state").write_text(state + "\n")
        pci = root / f"devices/pci0000:00/0000:{0x1B + i:02x}:00.0"
        pci.mkdir(parents=True)
        (pci / "numa_node").write_text(f"{i}\n")
        os.symlink(pci, dev / "device")
    if peermem:
        (root / "module/nvidia_peermem").mkdir(parents=True)
    return root


def test_parse_topo():
    nvlinks, near = parse_nvidia_smi_topo(TOPO)
    assert nvlinks == {0: {1, 2}, 1: {0, 2}, 2: {0, 1}}
    assert near == {"mlx5_0": {0, 1}, "mlx5_1": {2}}


def test_describe_node_from_fake_trees(tmp_path):
    proc = make_proc(tmp_path / "proc")
    sys_ = make_sys(tmp_path / "sys")
    node = describe_node(
        ["learner"],
        proc_root=proc,
        sys_root=sys_,
        runner=fake_runner,
        cuda_probe=None,
        environ={},
        nvml=None,
        cpu_count=lambda: 9,
    )
    assert node.hostname == "fakehost" and node.boot_id == "0f6c9a2e-boot"
    assert (
        node.container.net == "net:[40265318401]"
        and node.container.cgroup == "0::/kubepods/pod-1234"
    )
    assert node.num_cpus == 9
    assert [g.pci_bus_id for g in node.gpus] == [
        "0000:1a:00.0",
        "0000:3a:00.0",
        "0000:9a:00.0",
        "0000:ba:00.0",
    ]
    assert node.gpus[0].nvlink_peers == (1, 2) and node.gpus[3].nvlink_peers == ()
    assert node.gpus[0].nvlink_peer_bus_ids == ("0000:3a:00.0", "0000:9a:00.0")
    assert [(h.name, h.port_state, h.gdr_capable, h.near_gpus, h.numa_node) for h in node.hcas] == [
        ("mlx5_0", "ACTIVE", True, (0, 1), 0),
        ("mlx5_1", "DOWN", True, (2,), 1),
    ]
    assert node.hcas[0].pci_bus_id == "0000:1b:00.0"
    assert node.labels == ("learner",)
    assert NodeDescription.from_dict(json.loads(json.dumps(node.to_dict()))) == node


def test_cuda_visible_devices_renumbers(tmp_path):
    proc = make_proc(tmp_path / "proc")
    node = describe_node(
        proc_root=proc,
        sys_root=make_sys(tmp_path / "sys"),
        runner=fake_runner,
        cuda_probe=None,
        environ={"CUDA_VISIBLE_DEVICES": "2,GPU-aaaa"},
        nvml=None,
    )
    assert [g.pci_bus_id for g in node.gpus] == ["0000:9a:00.0", "0000:1a:00.0"]
    assert node.gpus[0].nvlink_peers == (1,)  # GPU2 <-> GPU0, now local 0 <-> 1
    assert node.hcas[0].near_gpus == (1,) and node.hcas[1].near_gpus == (0,)
    none = describe_node(
        proc_root=proc,
        sys_root=tmp_path / "nosys",
        runner=fake_runner,
        cuda_probe=None,
        environ={"CUDA_VISIBLE_DEVICES": ""},
        nvml=None,
    )
    assert none.gpus == () and none.hcas == ()


def test_cuda_probe_and_local_devices(tmp_path):
    proc = make_proc(tmp_path / "proc")
    probe = lambda: [("0000:ba:00.0", "H100"), ("0000:1a:00.0", "H100")]  # noqa: E731
    node = describe_node(
        proc_root=proc, sys_root=tmp_path, runner=fake_runner, cuda_probe=probe, gpus=[1], nvml=None
    )
    assert [(g.index, g.pci_bus_id) for g in node.gpus] == [(1, "0000:1a:00.0")]
    with pytest.raises(PlacementError, match=r"local CUDA devices \[5\]"):
        describe_node(
            proc_root=proc,
            sys_root=tmp_path,
            runner=fake_runner,
            cuda_probe=probe,
            gpus=[5],
            nvml=None,
        )


def test_no_nvidia_smi_no_gpus(tmp_path):
    node = describe_node(
        proc_root=make_proc(tmp_path / "p"),
        sys_root=tmp_path,
        runner=lambda a: None,
        cuda_probe=None,
        nvml=None,
    )
    assert node.gpus == () and node.hcas == ()


def test_containers_differ_by_namespace(tmp_path):
    a = read_container_identity(make_proc(tmp_path / "a", ns_suffix="1"))
    b = read_container_identity(make_proc(tmp_path / "b", ns_suffix="2"))
    assert a != b and a.key() != b.key()
    missing = read_container_identity(tmp_path / "nothing")
    assert missing.key() == ("", "", "", "", "")


def test_hca_order_is_natural_and_gdr_needs_peermem(tmp_path):
    root = make_sys(tmp_path, states=["4: ACTIVE"] * 11, peermem=False)
    hcas = read_hcas(root)
    assert [h.name for h in hcas][:3] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert hcas[-1].name == "mlx5_10"
    assert not any(h.gdr_capable for h in hcas)


def test_describe_this_machine_is_fast():
    t = time.perf_counter()
    node = describe_node()
    assert time.perf_counter() - t < 0.5
    assert node.boot_id and node.num_cpus >= 1 and node.container.net.startswith("net:")


def test_cpu_count_is_the_affinity_mask_unless_injected(tmp_path):
    proc = make_proc(tmp_path / "proc")
    node = describe_node(proc_root=proc, sys_root=tmp_path, runner=lambda a: None, nvml=None)
    assert node.num_cpus == len(os.sched_getaffinity(0))
    node = describe_node(
        proc_root=proc, sys_root=tmp_path, runner=lambda a: None, nvml=None, cpu_count=lambda: 3
    )
    assert node.num_cpus == 3


class NvmlError(Exception):
    pass


class FakeNvml:
    """pynvml's functions over two H100s joined by NVLink (busId as bytes, like ctypes)."""

    GPUS = [
        (b"00000000:1A:00.0", "NVIDIA H100 80GB HBM3", "GPU-aaaa"),
        (b"00000000:3A:00.0", "NVIDIA H100 80GB HBM3", "GPU-bbbb"),
    ]

    def __init__(self, *, nvlink: bool = True, p2p_fails: bool = False, modes=(0, 0)):
        self.nvlink, self.p2p_fails, self.modes = nvlink, p2p_fails, modes
        self.shutdowns = 0

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return len(self.GPUS)

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("handle", i)

    def nvmlDeviceGetPciInfo(self, h):
        return type("PciInfo", (), {"busId": self.GPUS[h[1]][0]})()

    def nvmlDeviceGetName(self, h):
        return self.GPUS[h[1]][1]

    def nvmlDeviceGetUUID(self, h):
        return self.GPUS[h[1]][2]

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        assert index == 2  # NVML_P2P_CAPS_INDEX_NVLINK
        if self.p2p_fails:
            raise NvmlError("Not Supported")
        return 0 if self.nvlink else 4  # NVML_P2P_STATUS_OK / NOT_SUPPORTED

    def nvmlDeviceGetComputeMode(self, h):
        return self.modes[h[1]]


def test_nvml_gives_the_gpus_and_nvlinks_before_nvidia_smi(tmp_path):
    nvml = FakeNvml()
    calls = []

    def runner(argv):
        calls.append(list(argv))
        return fake_runner(argv)

    node = describe_node(
        proc_root=make_proc(tmp_path / "proc"),
        sys_root=make_sys(tmp_path / "sys"),
        runner=runner,
        cuda_probe=None,
        environ={},
        nvml=lambda: nvml,
    )
    assert [(g.index, g.pci_bus_id, g.name) for g in node.gpus] == [
        (0, "0000:1a:00.0", "NVIDIA H100 80GB HBM3"),
        (1, "0000:3a:00.0", "NVIDIA H100 80GB HBM3"),
    ]
    assert node.gpus[0].nvlink_peers == (1,) and node.gpus[1].nvlink_peers == (0,)
    assert node.gpus[0].nvlink_peer_bus_ids == ("0000:3a:00.0",)
    # nvidia-smi is asked only for `topo -m` (the NICs near each GPU), not the GPU list.
    assert calls == [["nvidia-smi", "topo", "-m"]]
    assert node.hcas[0].near_gpus == (0, 1) and node.hcas[1].near_gpus == ()
    assert nvml.shutdowns == 1


def test_nvml_uuids_serve_cuda_visible_devices_and_no_nvlink_is_no_peer(tmp_path):
    gpus, _ = read_gpus(
        runner=lambda a: None,
        cuda_probe=None,
        environ={"CUDA_VISIBLE_DEVICES": "GPU-bbbb"},
        nvml=lambda: FakeNvml(nvlink=False),
    )
    assert [(g.index, g.pci_bus_id, g.nvlink_peers) for g in gpus] == [(0, "0000:3a:00.0", ())]


def test_nvml_without_the_p2p_query_takes_nvlinks_from_topo(tmp_path):
    gpus, _ = read_gpus(
        runner=fake_runner, cuda_probe=None, environ={}, nvml=lambda: FakeNvml(p2p_fails=True)
    )
    # topo -m: GPU0 <-> GPU1, GPU2 (absent from NVML's list, so not a peer).
    assert [g.nvlink_peers for g in gpus] == [(1,), (0,)]


@pytest.mark.parametrize(
    "loader",
    [
        pytest.param(lambda: None, id="nvml-missing"),
        pytest.param(None, id="no-loader"),
        pytest.param(
            lambda: type("Broken", (FakeNvml,), {"nvmlDeviceGetCount": lambda self: 1 / 0})(),
            id="nvml-fails",
        ),
    ],
)
def test_without_nvml_the_gpus_come_from_nvidia_smi(loader):
    gpus, near = read_gpus(runner=fake_runner, cuda_probe=None, environ={}, nvml=loader)
    assert [g.pci_bus_id for g in gpus] == [
        "0000:1a:00.0",
        "0000:3a:00.0",
        "0000:9a:00.0",
        "0000:ba:00.0",
    ]
    assert gpus[0].nvlink_peers == (1, 2) and near == {"mlx5_0": (0, 1), "mlx5_1": (2,)}
