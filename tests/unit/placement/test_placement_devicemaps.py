"""Every computed device map passes torch's own validator, on the documented clusters."""

from __future__ import annotations

import time

import pytest
import torch
from placement_testlib import big_cluster, check_with_torch, example
from torch.distributed.rpc.backend_registry import _validate_device_maps

from actorrt.placement import make_plan


def test_validator_is_not_a_no_op():
    # A duplicated target must be refused, or the checks below prove nothing.
    with pytest.raises(ValueError, match="duplicated target"):
        _validate_device_maps(
            ["a", "b"],
            {"a": 2, "b": 2},
            {
                "a": {
                    "b": {
                        torch.device("cuda:0"): torch.device("cuda:0"),
                        torch.device("cuda:1"): torch.device("cuda:0"),
                    }
                },
                "b": {},
            },
            {"a": [], "b": []},
        )


def test_one_node_8_nvlinked_gpus():
    c = example("one_node_8gpu_nvlink.toml")
    plan = c.plan()
    check_with_torch(plan, list(c.processes))
    learner = [p for p, _ in plan.holders("learner")]
    assert len(learner) == 1 and learner[0].gpus == (0,)
    assert sorted(g for p in plan.processes for g in p.gpus) == list(range(8))
    # Every process sees all 8 GPUs: each maps its own GPU onto the peer's.
    p1 = plan.for_rank(1)
    assert p1.device_maps["dgx0-0"] == {"cuda:1": "cuda:0"}
    assert plan.for_rank(0).device_maps["dgx0-1"] == {"cuda:0": "cuda:1"}
    assert {p.transport for p in plan.pairs} == {"nvlink"}
    assert all(p.channels is None and p.transports is None for p in plan.processes)


def test_two_nodes_one_hca_down():
    c = example("two_nodes_ib_one_hca_down.toml")
    plan = c.plan()
    check_with_torch(plan, list(c.processes))
    assert all(p.devices == ["cuda:0"] for p in plan.processes)  # one GPU per process
    node1 = [p for p in plan.processes if p.node == "node1"]
    # mlx5_0 (first in the verbs list) is down on node1: no ibv there at all.
    assert all(p.transports == ["uv", "shm"] for p in node1)
    assert all(p.transports is None for p in plan.processes if p.node == "node0")
    # GPUs 0 and 1 of node1 sit next to the down adapter: no cuda_gdr for them.
    for p in node1[:2]:
        assert p.channels is not None and "cuda_gdr" not in p.channels
        assert "cuda_ipc" in p.channels and not p.guard_tiny_cuda
    for p in node1[2:]:
        assert p.channels is None and p.guard_tiny_cuda
    assert plan.transport_between("node0-0", "node1-0") == "tcp"
    assert plan.transport_between("node0-0", "node1-2") == "gdr"
    assert plan.transport_between("node1-0", "node1-1") == "nvlink"
    assert all(
        p.env["IBV_FORK_SAFE"] == "1" and p.env["RDMAV_FORK_SAFE"] == "1" for p in plan.processes
    )
    assert all(p.env["TP_SOCKET_IFNAME"] == "ib0" for p in plan.processes)


def test_gpu_learner_cpu_collectors():
    c = example("gpu_learner_cpu_collectors.toml")
    plan = c.plan()
    check_with_torch(plan, list(c.processes))
    learner = plan.for_name("learner")
    assert learner.labels == ("learner",) and learner.gpus == (0,)
    # No peer has a GPU: no device map anywhere, TensorPipe defaults everywhere.
    assert all(not p.device_maps and not p.devices for p in plan.processes)
    assert all(p.backend_options_kwargs() == {} for p in plan.processes)
    assert sum(len(p.slots) for p in plan.processes) == 15
    # spread: collectors alternate between the two CPU nodes.
    hosts = [p.node for p, _ in plan.holders("collector")]
    assert hosts.count("cpu0") == 7 and hosts.count("cpu1") == 7


def test_two_containers_on_one_host():
    c = example("two_containers_one_host.toml")
    plan = c.plan()
    check_with_torch(plan, list(c.processes))
    assert [p.node for p in plan.processes] == ["gpuhost/c0"] * 2 + ["gpuhost/c1"] * 2
    for p in plan.processes:
        assert p.channels is not None
        assert "cuda_ipc" not in p.channels and "cuda_xth" not in p.channels
        assert "cuda_basic" in p.channels
    a0, a1, b0, _ = (p.name for p in plan.processes)
    assert plan.transport_between(a0, a1) == "cuda_ipc"
    assert plan.transport_between(a0, b0) == "tcp"  # separate network namespaces


def test_backend_options_accept_the_kwargs():
    from torch.distributed.rpc import TensorPipeRpcBackendOptions

    from actorrt.placement import registered_tensorpipe_backends

    c = example("two_nodes_ib_one_hca_down.toml")
    plan = c.plan()
    raw = plan.for_rank(8).backend_options_kwargs()
    assert set(raw) == {"device_maps", "devices", "_transports", "_channels"}
    assert raw["_channels"] == ["basic", "cma", "mpt_uv", "cuda_basic", "cuda_ipc", "cuda_xth"]
    transports, channels = registered_tensorpipe_backends()
    assert {"uv", "basic"} <= transports | channels
    if not torch.cuda.is_available():  # a CPU build registers no cuda_* channel
        assert not any(c.startswith("cuda") for c in channels)
    kwargs = plan.for_rank(8).backend_options_kwargs(transports, channels)
    assert set(kwargs["_channels"]) <= channels
    opts = TensorPipeRpcBackendOptions(**kwargs)
    assert opts.devices == [torch.device("cuda:0")]
    assert opts.device_maps["node0-0"] == {torch.device("cuda:0"): torch.device("cuda:0")}


def test_64_nodes_of_8_gpus_is_fast_and_valid():
    c = big_cluster(64, 8)
    t = time.perf_counter()
    plan = make_plan(c.processes, c.specs, strategy="nearest")
    elapsed = time.perf_counter() - t
    assert len(plan.processes) == 512 and len(plan.pairs) == 512 * 511 // 2
    assert elapsed < 3.0, f"planning 512 processes took {elapsed:.2f}s"
    check_with_torch(plan, list(c.processes))
    counts = {}
    for p in plan.pairs:
        counts[p.transport] = counts.get(p.transport, 0) + 1
    assert counts == {"nvlink": 64 * 28, "gdr": 512 * 511 // 2 - 64 * 28}
