"""Per-process transports/channels, pair transports, env, modes and the tiny-tensor guard."""

from __future__ import annotations

import pytest
from placement_testlib import check_with_torch, node, procs

from actorrt.errors import PlacementError
from actorrt.placement import HcaInfo, LabelSpec, make_plan

IB = (HcaInfo("mlx5_0", gdr_capable=True), HcaInfo("mlx5_1", gdr_capable=True))


def test_no_gpus_anywhere_gives_defaults():
    plan = make_plan(procs(node("a"), node("a"), node("b")))
    assert all(p.backend_options_kwargs() == {} and p.env == {} for p in plan.processes)
    assert [p.transport for p in plan.pairs] == ["shm", "tcp", "tcp"]


def test_first_hca_down_drops_ibv_only_there():
    down = (HcaInfo("mlx5_0", port_state="DOWN"), HcaInfo("mlx5_1"))
    second_down = (HcaInfo("mlx5_0"), HcaInfo("mlx5_1", port_state="DOWN"))
    plan = make_plan(procs(node("a", hcas=down), node("b", hcas=second_down), node("c", hcas=IB)))
    a, b, c = plan.processes
    assert a.transports == ["uv", "shm"]
    assert b.transports is None and c.transports is None  # ibv opens mlx5_0, which is up
    assert plan.transport_between("w0", "w1") == "tcp"
    assert plan.transport_between("w1", "w2") == "ibv"
    assert a.env == {"IBV_FORK_SAFE": "1", "RDMAV_FORK_SAFE": "1"}


def test_gdr_needs_active_capable_adapter_near_each_gpu():
    no_gdr = (HcaInfo("mlx5_0", gdr_capable=False),)
    plan = make_plan(procs(node("a", 1, hcas=IB), node("b", 1, hcas=IB), node("c", 1, hcas=no_gdr)))
    assert plan.transport_between("w0", "w1") == "gdr"
    assert plan.transport_between("w0", "w2") == "ibv"  # CUDA tensors via cuda_basic over ibv
    a, _, c = plan.processes
    assert a.guard_tiny_cuda and not c.guard_tiny_cuda
    assert c.channels == ["basic", "cma", "mpt_uv", "cuda_basic", "cuda_ipc", "cuda_xth"]
    # Without any adapter, TensorPipe cannot even start cuda_gdr: defaults are safe.
    plain = make_plan(procs(node("a", 1), node("b", 1)))
    assert all(p.channels is None for p in plain.processes)


def test_containers_on_one_host_never_get_cuda_ipc():
    ps = procs(node("h", 2, container="x"), node("h", 2, container="y"), node("other", 2))
    plan = make_plan(ps, [LabelSpec("g", 3, num_gpus=1)])
    check_with_torch(plan, ps)
    x, y, other = plan.processes
    for p in (x, y):
        assert "cuda_ipc" not in p.channels and "cuda_xth" not in p.channels
    assert other.channels is None  # its own host has one container only
    assert plan.transport_between("w0", "w1") == "tcp"
    # Same network namespace (a pod's containers): shm still works across them.
    from dataclasses import replace

    ps2 = [
        p
        if p.rank != 1
        else replace(
            p,
            node=replace(p.node, container=replace(p.node.container, net=ps[0].node.container.net)),
        )
        for p in ps
    ]
    assert make_plan(ps2).transport_between("w0", "w1") == "shm"


def test_cpu_mode_has_no_device_maps():
    ps = procs(node("a", 2, nvlink_all=True), node("a", 2, nvlink_all=True))
    plan = make_plan(ps, [LabelSpec("x", 2, num_gpus=1)], transport="cpu")
    assert all(not p.device_maps and not p.devices for p in plan.processes)
    assert plan.processes[1].gpus == (1,)  # placement still assigns GPUs
    assert plan.transport_between("w0", "w1") == "shm"
    auto = make_plan(ps, [LabelSpec("x", 2, num_gpus=1)])
    assert auto.transport_between("w0", "w1") == "nvlink"


def test_cuda_mode_needs_a_gpu_everywhere():
    ps = procs(node("a", 1), node("cpuhost"))
    with pytest.raises(PlacementError, match=r"process 'w1' .* has none; use transport='cpu'"):
        make_plan(ps, transport="cuda")
    with pytest.raises(PlacementError, match="unknown transport"):
        make_plan(ps, transport="gpu")


def test_auto_mode_cpu_slots_keep_gpus_out_of_rpc():
    ps = procs(node("a", 2), node("a", 2), node("a", 2))
    plan = make_plan(ps, [LabelSpec("learner", 1, 1), LabelSpec("collector", 1)])
    learner, collector, spare = plan.processes
    assert learner.devices == ["cuda:0"]
    assert collector.devices == [] and collector.device_maps == {}
    # A process with no slot yet offers every GPU it sees (it may host GPU actors later).
    assert spare.device_maps == {"w0": {"cuda:0": "cuda:0"}}  # zip of (0, 1) with (0,)
    assert spare.devices == ["cuda:0"]
    assert learner.device_maps["w2"] == {v: k for k, v in spare.device_maps["w0"].items()}


def test_socket_ifname_env():
    plan = make_plan(procs(node("a")), socket_ifname="lo")
    assert plan.processes[0].env == {"TP_SOCKET_IFNAME": "lo"}


def _crowd(host: str, cpus: int, hcas: tuple[HcaInfo, ...] = (), container: str = ""):
    from dataclasses import replace

    return replace(node(host, hcas=hcas, container=container), num_cpus=cpus)


def test_shm_is_left_out_where_a_host_has_more_processes_than_cpus():
    # 3 processes on a 2-CPU host: each shm reactor would busy-poll a core
    ps = procs(_crowd("a", 2), _crowd("a", 2), _crowd("a", 2), _crowd("b", 8))
    plan = make_plan(ps)
    check_with_torch(plan, ps)
    a0 = plan.processes[0]
    assert a0.transports == ["uv"]
    assert "3 processes on 2 CPUs" in a0.why.transports and "busy-polls" in a0.why.transports
    assert plan.processes[3].transports is None  # host b runs one process on 8 CPUs
    assert plan.transport_between("w0", "w1") == "tcp"
    why = dict(plan.explain_pairs())
    assert why[next(p for p in plan.pairs if {p.src, p.dst} == {"w0", "w1"})].startswith(
        "same host, where shm is left out"
    )
    # as many processes as CPUs: every reactor has a core, shm stays
    fits = make_plan(procs(_crowd("a", 2), _crowd("a", 2)))
    assert all(p.transports is None for p in fits.processes)
    assert fits.transport_between("w0", "w1") == "shm"


def test_a_crowded_host_keeps_ibv_and_tcp_across_containers():
    down = (HcaInfo("mlx5_0", port_state="DOWN"),)
    ib = make_plan(procs(*[_crowd("a", 1, hcas=IB)] * 2))
    assert [p.transports for p in ib.processes] == [["uv", "ibv"]] * 2
    no_ib = make_plan(procs(*[_crowd("a", 1, hcas=down)] * 2))
    assert [p.transports for p in no_ib.processes] == [["uv"]] * 2
    # containers sharing a network namespace would use shm; crowded, they use tcp
    from dataclasses import replace

    x, y = _crowd("h", 1, container="x"), _crowd("h", 1, container="y")
    y = replace(y, container=replace(y.container, net=x.container.net))
    assert make_plan(procs(x, y)).transport_between("w0", "w1") == "tcp"
