"""`actorrt doctor` against the fake /proc and /sys trees of the discovery tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The fake trees and nvidia-smi of the discovery tests: the same machine, checked here.
from test_placement_discovery import QUERY, FakeNvml, fake_runner, make_proc, make_sys

from actorrt.cli import main
from actorrt.placement.doctor import (
    STATUSES,
    CudaReport,
    Finding,
    Machine,
    exit_status,
    report,
    run_checks,
)

ROOT = Path(__file__).resolve().parents[3]
GIB = 1 << 30
ROUTE = (
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    "eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
    "ib0\t00000000\t010300C0\t0003\t0\t0\t50\t00000000\t0\t0\t0\n"
    "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
)


def no_cuda_probe() -> CudaReport:
    raise AssertionError("torch must not be asked about CUDA on a machine without GPUs")


def no_gpu_runner(argv):
    return None


def torch_ok(n: int = 4, denied=()) -> CudaReport:
    peer = {(i, j): True for i in range(n) for j in range(n) if i != j}
    for a, b in denied:
        peer[(a, b)] = peer[(b, a)] = False
    return CudaReport("2.13.0", "12.8", True, n, peer)


def fake_machine(
    tmp_path: Path,
    *,
    container: bool = False,
    states=("4: ACTIVE", "1: DOWN"),
    peermem: bool = True,
    hcas: bool = True,
    thp: str = "always [madvise] never",
    environ: dict[str, str] | None = None,
    runner=fake_runner,
    nvml=None,
    cuda_probe=torch_ok,
    resolve=lambda host: "10.0.0.5",
    shm: int | None = 8 * GIB,
) -> Machine:
    # ns_suffix "" keeps the kernel's initial IPC / PID inodes: the host's namespaces.
    proc = make_proc(tmp_path / "proc", ns_suffix="1" if container else "")
    if not container:
        (proc / "self/cgroup").write_text("0::/\n")
    (proc / "net").mkdir()
    (proc / "net/route").write_text(ROUTE)
    sys_root = make_sys(tmp_path / "sys", states=states if hcas else (), peermem=peermem)
    thp_file = sys_root / "kernel/mm/transparent_hugepage/enabled"
    thp_file.parent.mkdir(parents=True)
    thp_file.write_text(thp + "\n")
    for name, state in (("eth0", "up"), ("ib0", "up"), ("lo", "unknown"), ("eth9", "down")):
        (sys_root / "class/net" / name).mkdir(parents=True)
        (sys_root / "class/net" / name / "operstate").write_text(state + "\n")
    fs = tmp_path / "fs"
    fs.mkdir()
    return Machine(
        proc_root=proc,
        sys_root=sys_root,
        fs_root=fs,
        environ={} if environ is None else environ,
        runner=runner,
        nvml=nvml,
        cuda_probe=cuda_probe,
        resolve=resolve,
        interfaces=lambda: {
            "lo": "127.0.0.1",
            "eth0": "10.0.0.5",
            "ib0": "192.168.3.5",
            "eth9": "10.9.0.1",
        },
        shm_bytes=lambda path: shm,
    )


def by_check(findings: list[Finding], check: str) -> list[Finding]:
    return [f for f in findings if f.check == check]


def one(findings: list[Finding], check: str) -> Finding:
    found = by_check(findings, check)
    assert len(found) == 1, found
    return found[0]


def test_every_finding_is_one_line_with_a_status_and_fixes_for_problems(tmp_path):
    m = fake_machine(
        tmp_path, container=True, peermem=False, shm=64 << 20, cuda_probe=lambda: torch_ok()
    )
    findings = run_checks(m)
    assert {f.check for f in findings} == {
        "container",
        "gpus",
        "cuda",
        "hca",
        "gdr",
        "fork_safety",
        "shm",
        "thp",
        "interface",
    }
    for f in findings:
        assert f.status in STATUSES
        assert "\n" not in f.line() and f.line().startswith(f.status)
        if f.status in ("WARN", "FAIL"):
            assert f.fix, f
            assert "fix: " in f.line()
    assert exit_status(findings) == 0  # warnings only


def test_container_with_its_own_namespaces_is_the_boot_id_trap(tmp_path):
    f = one(run_checks(fake_machine(tmp_path, container=True)), "container")
    assert f.status == "WARN"
    assert "own IPC and PID namespace" in f.message and "cgroup kubepods" in f.message
    assert "boot id 0f6c9a2e..." in f.message and "cuda_ipc" in f.message
    assert "--ipc=host" in f.fix


def test_host_namespaces_are_no_container(tmp_path):
    f = one(run_checks(fake_machine(tmp_path)), "container")
    assert f.status == "OK" and f.message.startswith("not in a container")


def test_container_markers_with_host_namespaces(tmp_path):
    m = fake_machine(tmp_path)
    (m.fs_root / ".dockerenv").write_text("")
    f = one(run_checks(m), "container")
    assert f.status == "OK" and "/.dockerenv" in f.message and "host's IPC and PID" in f.message


def test_hca_port_states_first_down_is_the_ibv_trap(tmp_path):
    findings = by_check(run_checks(fake_machine(tmp_path, states=("1: DOWN", "4: ACTIVE"))), "hca")
    assert [f.status for f in findings] == ["WARN", "OK"]
    assert findings[0].message.startswith("mlx5_0 port 1 DOWN (NUMA 0, 0000:1b:00.0)")
    assert "first adapter of the verbs list" in findings[0].message
    assert "ibstat mlx5_0" in findings[0].fix
    second = by_check(run_checks(fake_machine(tmp_path / "b")), "hca")
    assert [f.status for f in second] == ["OK", "WARN"]
    assert "the adapter ibv opens" in second[0].message and "cuda_gdr" in second[1].message


def test_no_hca(tmp_path):
    findings = run_checks(fake_machine(tmp_path, hcas=False))
    assert one(findings, "hca").status == "OK" and "no InfiniBand" in one(findings, "hca").message
    assert "not applicable" in one(findings, "gdr").message
    assert one(findings, "fork_safety").message.startswith("not needed")


def test_gdr_needs_the_peer_memory_module(tmp_path):
    findings = run_checks(fake_machine(tmp_path, cuda_probe=lambda: torch_ok()))
    assert one(findings, "gdr").status == "OK" and "nvidia_peermem" in one(findings, "gdr").message
    off = one(run_checks(fake_machine(tmp_path / "b", peermem=False)), "gdr")
    assert off.status == "WARN" and "modprobe nvidia_peermem" in off.fix


def test_gpus_and_peer_access(tmp_path):
    findings = run_checks(fake_machine(tmp_path, cuda_probe=lambda: torch_ok(denied=[(0, 3)])))
    gpus = one(findings, "gpus")
    assert gpus.status == "OK" and "4 GPU(s): 4 x NVIDIA H100 80GB HBM3" in gpus.message
    assert "NVLink between 3 of 6 pairs" in gpus.message
    cuda = one(findings, "cuda")
    assert cuda.status == "WARN" and "cuda:0<->cuda:3" in cuda.message
    assert "cuda:0<->cuda:1" not in cuda.message and "nvidia-smi topo -p2p r" in cuda.fix
    ok = one(run_checks(fake_machine(tmp_path / "b", cuda_probe=lambda: torch_ok())), "cuda")
    assert ok.status == "OK" and "peer access between all 4 GPUs" in ok.message


@pytest.mark.parametrize(
    ("report_", "status", "words"),
    [
        (CudaReport(), "INFO", "torch is not installed"),
        (CudaReport("2.13.0+cpu"), "WARN", "CPU build"),
        (CudaReport("2.13.0", "12.8"), "FAIL", "torch.cuda.is_available() is False"),
        (CudaReport("?", error="ImportError: libcudart"), "FAIL", "importing torch failed"),
        (CudaReport("2.13.0", "12.8", True, 1), "OK", "sees 1 GPU"),
    ],
    ids=["no-torch", "cpu-build", "unavailable", "broken", "one-gpu"],
)
def test_cuda_states(tmp_path, report_, status, words):
    findings = run_checks(fake_machine(tmp_path, cuda_probe=lambda: report_))
    f = one(findings, "cuda")
    assert f.status == status and words in f.message
    assert exit_status(findings) == (1 if status == "FAIL" else 0)


def test_no_gpu_machine_says_so_and_never_asks_torch(tmp_path):
    m = fake_machine(tmp_path, runner=no_gpu_runner, hcas=False, cuda_probe=no_cuda_probe)
    findings = run_checks(m)
    f = one(findings, "gpus")
    assert f.status == "INFO" and f.message.startswith("no NVIDIA GPU on this machine")
    assert not by_check(findings, "cuda")
    assert one(findings, "gdr").message == "not applicable: no InfiniBand adapter"


def test_driver_without_nvidia_smi(tmp_path):
    m = fake_machine(tmp_path, runner=no_gpu_runner, cuda_probe=lambda: CudaReport())
    (m.proc_root / "driver/nvidia/gpus/0000:1a:00.0").mkdir(parents=True)
    f = by_check(run_checks(m), "gpus")[0]
    assert f.status == "WARN" and "1 GPU(s) but neither NVML nor nvidia-smi" in f.message


def test_compute_mode_and_hidden_gpus(tmp_path):
    def runner(argv):
        if "--query-gpu=index,compute_mode" in argv:
            return "0, Default\n1, Exclusive_Process\n"
        return fake_runner(argv)

    m = fake_machine(
        tmp_path,
        runner=runner,
        environ={"CUDA_VISIBLE_DEVICES": "7"},
        cuda_probe=lambda: torch_ok(),
    )
    warnings = [f for f in by_check(run_checks(m), "gpus") if f.status == "WARN"]
    assert any("CUDA_VISIBLE_DEVICES='7' hides every GPU" in f.message for f in warnings)
    assert any("GPU 1 is in compute mode Exclusive_Process" in f.message for f in warnings)
    assert len(QUERY.splitlines()) == 4  # the fake nvidia-smi lists 4 GPUs


def test_compute_modes_and_gpus_from_nvml_before_nvidia_smi(tmp_path):
    def runner(argv):
        assert "--query-gpu=index,compute_mode" not in argv, "NVML answered: no nvidia-smi"
        return fake_runner(argv)

    nvml = FakeNvml(modes=(2, 0))  # GPU 0: NVML_COMPUTEMODE_PROHIBITED
    m = fake_machine(tmp_path, runner=runner, nvml=lambda: nvml, cuda_probe=lambda: torch_ok(2))
    findings = by_check(run_checks(m), "gpus")
    assert findings[0].status == "OK" and findings[0].message.startswith("2 GPU(s)")
    assert "NVLink between every pair" in findings[0].message
    warnings = [f for f in findings if f.status == "WARN"]
    assert [f.fix for f in warnings] == ["sudo nvidia-smi -i 0 -c DEFAULT"]
    assert "GPU 0 is in compute mode Prohibited" in warnings[0].message
    assert nvml.shutdowns == 2  # one NVML session for the GPU list, one for the modes


def test_fork_safety_environment(tmp_path):
    f = one(run_checks(fake_machine(tmp_path)), "fork_safety")
    assert f.status == "WARN" and "RDMAV_FORK_SAFE and IBV_FORK_SAFE not set" in f.message
    env = {"RDMAV_FORK_SAFE": "1", "IBV_FORK_SAFE": "1"}
    assert one(run_checks(fake_machine(tmp_path / "b", environ=env)), "fork_safety").status == "OK"
    half = {"RDMAV_FORK_SAFE": "1", "IBV_FORK_SAFE": "0"}
    f = one(run_checks(fake_machine(tmp_path / "c", environ=half)), "fork_safety")
    assert f.status == "WARN" and f.message.startswith("IBV_FORK_SAFE not set")


@pytest.mark.parametrize(
    ("size", "status", "words"),
    [(64 << 20, "WARN", "64.0 MiB"), (None, "WARN", "missing"), (16 * GIB, "OK", "16.0 GiB")],
)
def test_dev_shm_size(tmp_path, size, status, words):
    f = one(run_checks(fake_machine(tmp_path, shm=size)), "shm")
    assert f.status == status and words in f.message
    if status == "WARN":
        assert "--shm-size" in f.fix


def test_transparent_huge_pages(tmp_path):
    assert one(run_checks(fake_machine(tmp_path)), "thp").message.endswith("madvise")
    f = one(run_checks(fake_machine(tmp_path / "b", thp="[always] madvise never")), "thp")
    assert f.status == "WARN" and "RDMAV_HUGEPAGES_SAFE=1" in f.fix
    safe = {"RDMAV_HUGEPAGES_SAFE": "1"}
    m = fake_machine(tmp_path / "c", thp="[always] madvise never", environ=safe)
    assert one(run_checks(m), "thp").status == "INFO"
    no_ib = fake_machine(tmp_path / "d", thp="[always] madvise never", hcas=False)
    assert one(run_checks(no_ib), "thp").status == "INFO"


def test_interface_from_the_environment(tmp_path):
    ok = one(run_checks(fake_machine(tmp_path, environ={"TP_SOCKET_IFNAME": "ib0"})), "interface")
    assert ok.status == "OK" and "ib0 (192.168.3.5)" in ok.message
    bad = run_checks(fake_machine(tmp_path / "b", environ={"TP_SOCKET_IFNAME": "ib7"}))
    f = one(bad, "interface")
    assert f.status == "FAIL" and "names no interface here" in f.message
    assert "127.0.0.1" in f.message and "TP_SOCKET_IFNAME=ib0" in f.fix  # lowest metric route
    assert exit_status(bad) == 1
    down = one(
        run_checks(fake_machine(tmp_path / "c", environ={"TP_SOCKET_IFNAME": "eth9"})), "interface"
    )
    assert down.status == "FAIL" and "is down" in down.message
    loop = one(
        run_checks(fake_machine(tmp_path / "d", environ={"TP_SOCKET_IFNAME": "lo"})), "interface"
    )
    assert loop.status == "WARN" and "loopback" in loop.message


def test_interface_from_the_host_name(tmp_path):
    f = one(run_checks(fake_machine(tmp_path)), "interface")
    assert f.status == "OK" and "10.0.0.5 on eth0" in f.message and "'fakehost'" in f.message
    assert "default route goes through ib0" in f.message
    loop = one(run_checks(fake_machine(tmp_path / "b", resolve=lambda h: "127.0.1.1")), "interface")
    assert loop.status == "WARN" and "resolves to 127.0.1.1" in loop.message
    assert loop.fix.startswith("export TP_SOCKET_IFNAME=ib0")
    gone = one(run_checks(fake_machine(tmp_path / "c", resolve=lambda h: None)), "interface")
    assert gone.status == "WARN" and "does not resolve" in gone.message
    env = {"TP_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "ib0"}
    both = by_check(run_checks(fake_machine(tmp_path / "d", environ=env)), "interface")
    assert [f.status for f in both] == ["OK", "INFO"] and "GLOO_SOCKET_IFNAME=ib0" in both[
        1
    ].message


def test_report_json(tmp_path):
    m = fake_machine(tmp_path, environ={"TP_SOCKET_IFNAME": "nope0"}, cuda_probe=lambda: torch_ok())
    findings = run_checks(m)
    data = json.loads(json.dumps(report(findings, m)))
    assert data["host"] == "fakehost" and data["exit_status"] == 1
    assert set(data["counts"]) == set(STATUSES) and data["counts"]["FAIL"] == 1
    assert data["findings"][0] == findings[0].to_dict()


def test_cli_against_fake_roots(tmp_path, capsys, monkeypatch):
    m = fake_machine(tmp_path)
    monkeypatch.setenv("TP_SOCKET_IFNAME", "no-such-if0")
    monkeypatch.setattr("actorrt.placement.doctor.probe_cuda", lambda: torch_ok())
    argv = ["doctor", "--proc-root", str(m.proc_root), "--sys-root", str(m.sys_root)]
    assert main([*argv, "--fs-root", str(m.fs_root)]) == 1  # the interface is a FAIL
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "actorrt doctor: fakehost"
    assert out[-1].startswith("summary: ") and "1 FAIL" in out[-1]
    assert any(line.startswith("FAIL  interface") for line in out)
    assert any(line.startswith("WARN  hca          mlx5_1 port 1 DOWN") for line in out)
    monkeypatch.setenv("TP_SOCKET_IFNAME", "lo")
    assert main([*argv, "--fs-root", str(m.fs_root), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["exit_status"] == 0 and {f["check"] for f in data["findings"]} >= {"hca", "gdr"}


def test_doctor_on_this_machine_without_gpus_does_not_import_torch():
    code = (
        "import json, sys\n"
        "from actorrt.cli import main\n"
        "rc = main(['doctor'])\n"
        "print(json.dumps({'rc': rc, 'torch': 'torch' in sys.modules}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TP_SOCKET_IFNAME"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    *lines, last = out.stdout.strip().splitlines()
    result = json.loads(last)
    assert result["rc"] in (0, 1)
    assert lines[0].startswith("actorrt doctor: ") and lines[-1].startswith("summary: ")
    assert all(line.split()[0] in STATUSES for line in lines[1:-1])
    gpus = [line for line in lines if line.split()[1] == "gpus"]
    if gpus and "no NVIDIA GPU" in gpus[0]:
        assert not result["torch"], "doctor imported torch on a machine without GPUs"


def test_describe_against_the_same_fake_trees(tmp_path, capsys):
    m = fake_machine(tmp_path, states=("1: DOWN", "4: ACTIVE"))
    argv = ["describe", "--proc-root", str(m.proc_root), "--sys-root", str(m.sys_root)]
    assert main([*argv, "--json"]) == 0
    node = json.loads(capsys.readouterr().out)
    assert node["hostname"] == "fakehost" and node["boot_id"] == "0f6c9a2e-boot"
    assert [(h["name"], h["port_state"]) for h in node["hcas"]] == [
        ("mlx5_0", "DOWN"),
        ("mlx5_1", "ACTIVE"),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "[[nodes]]" in out and 'hostname = "fakehost"' in out
