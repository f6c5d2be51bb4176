"""Node discovery and planning on the real GPUs of this machine (no processes started).

``describe_node()`` must report exactly the GPUs torch sees, in torch's order, each with
its physical identity (PCI bus id); a plan over processes described from it must pass
torch's own device-map validator, as ``init_rpc`` would run it.
"""

from __future__ import annotations

import pytest
import torch
from gpu_testlib import check_with_torch, cuda_count, requires_cuda

from actorrt.errors import PlacementError
from actorrt.placement import LabelSpec, ProcessInfo, describe_node, make_plan
from actorrt.placement.node import normalize_bus_id

pytestmark = [requires_cuda, pytest.mark.timeout(120)]


def _torch_bus_id(i: int) -> str | None:
    props = torch.cuda.get_device_properties(i)
    if not hasattr(props, "pci_bus_id"):
        return None
    dom = getattr(props, "pci_domain_id", 0)
    return normalize_bus_id(f"{dom:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0")


def _specs(n_gpus: int) -> list[LabelSpec]:
    # A whole-GPU learner and two collectors sharing one GPU where there are two GPUs;
    # on one GPU everything shares it.
    if n_gpus >= 2:
        return [LabelSpec("learner", 1, 1), LabelSpec("collector", 2, 0.5)]
    return [LabelSpec("learner", 1, 0.5), LabelSpec("collector", 2, 0.25)]


def test_describe_node_reports_the_visible_gpus():
    n = torch.cuda.device_count()
    desc = describe_node()
    assert len(desc.gpus) == n, desc.gpus
    assert [g.index for g in desc.gpus] == list(range(n))
    buses = [g.pci_bus_id for g in desc.gpus]
    assert all(buses), f"a GPU without a PCI bus id (its physical identity): {buses}"
    assert len(set(buses)) == n, f"two local indices report one physical GPU: {buses}"
    for i, g in enumerate(desc.gpus):
        expected = _torch_bus_id(i)
        if expected is not None:  # local index i is torch's cuda:i
            assert g.pci_bus_id == expected, (i, g.pci_bus_id, expected)
        assert g.name, f"GPU {i} has no name"
    # DI-engine's --local-cuda-devices keeps the local index of the GPU it picks ...
    last = describe_node(gpus=[n - 1])
    assert [(g.index, g.pci_bus_id) for g in last.gpus] == [(n - 1, buses[n - 1])]
    # ... and a GPU this process does not see is refused with a message that says so.
    with pytest.raises(PlacementError, match=rf"local CUDA devices \[{n}\]"):
        describe_node(gpus=[n])


@pytest.mark.parametrize("transport", ["auto", "cuda"])
def test_plan_over_every_gpu_passes_torchs_validator(transport):
    """Three processes that each see every GPU (a driver and two workers of one machine)."""
    n = cuda_count()
    desc = describe_node()
    procs = [ProcessInfo(rank=r, name=f"p{r}", node=desc) for r in range(4)]
    plan = make_plan(procs, _specs(n), transport=transport)
    check_with_torch(plan, {p.name: n for p in procs})
    bus = {g.index: g.pci_bus_id for g in desc.gpus}
    learner = [(p, s) for p, s in plan.holders("learner")]
    assert len(learner) == 1 and len(learner[0][1].gpus) == 1, learner
    collectors = list(plan.holders("collector"))
    assert len(collectors) == 2 and all(len(s.gpus) == 1 for _, s in collectors), collectors
    # GPU capacity is per physical GPU: no GPU carries more than one whole GPU's worth.
    load: dict[str, float] = {}
    for p in plan.processes:
        for s in p.slots:
            for g in s.gpus:
                load[bus[g]] = load.get(bus[g], 0.0) + min(1.0, s.num_gpus)
    assert load and max(load.values()) <= 1.0 + 1e-9, load
    if n >= 2:  # the learner's GPU is whole: no collector shares it
        collector_buses = {bus[s.gpus[0]] for _, s in collectors}
        assert bus[learner[0][1].gpus[0]] not in collector_buses, plan.processes
        if n == 2:  # ... so the two half-GPU collectors share the other one
            assert len(collector_buses) == 1, plan.processes
    # GPU slots talk to each other through device maps (GPU to GPU).
    lp = learner[0][0]
    for cp, _ in collectors:
        if cp.name != lp.name:
            assert cp.device_maps.get(lp.name), (cp.name, cp.device_maps)
            assert lp.device_maps.get(cp.name), (lp.name, lp.device_maps)


@pytest.mark.parametrize("transport", ["auto", "cuda"])
def test_plan_with_one_gpu_per_process_passes_torchs_validator(transport):
    """As a local cluster runs: the driver sees every GPU, worker k offers GPU k % n."""
    n = cuda_count()
    workers = 3
    procs = [ProcessInfo(rank=0, name="driver", node=describe_node())]
    procs += [
        ProcessInfo(rank=k, name=f"worker{k}", node=describe_node(gpus=[(k - 1) % n]))
        for k in range(1, workers + 1)
    ]
    plan = make_plan(procs, transport=transport)
    # every process of this machine sees all n GPUs: that is the count init_rpc checks
    check_with_torch(plan, {p.name: n for p in procs})
    for k in range(1, workers + 1):
        me = plan.for_name(f"worker{k}")
        own = f"cuda:{(k - 1) % n}"
        assert me.devices == [own], (me.name, me.devices)
        # every map of a worker sends from its own GPU, and its peers' maps land there
        for peer, m in me.device_maps.items():
            assert list(m) == [own], (me.name, peer, m)
            assert own in plan.for_name(peer).device_maps[me.name].values()
    # the driver maps onto every worker
    assert set(plan.for_name("driver").device_maps) == {f"worker{k}" for k in range(1, 4)}


def test_cpu_transport_plans_no_device_maps_on_a_gpu_machine():
    desc = describe_node()
    procs = [ProcessInfo(rank=r, name=f"p{r}", node=desc) for r in range(3)]
    plan = make_plan(procs, _specs(cuda_count()), transport="cpu")
    check_with_torch(plan, {p.name: cuda_count() for p in procs})
    assert all(not p.device_maps and not p.devices for p in plan.processes)
    # the slots still got their GPUs: only the road of CUDA tensors changes
    assert all(s.gpus for _, s in plan.holders("learner"))
