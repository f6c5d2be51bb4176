"""Label scheduling: strategies, GPU capacity, determinism, infeasible specs."""

from __future__ import annotations

import json
import random

import pytest
from placement_testlib import big_cluster, check_with_torch, node, procs

from actorrt.errors import PlacementError
from actorrt.placement import LabelSpec, Plan, ProcessInfo, make_plan, parse_label_specs


def two_hosts(per_host: int = 4, gpus: int = 0):
    return procs(
        *[node("a", gpus, nvlink_all=True) for _ in range(per_host)],
        *[node("b", gpus, nvlink_all=True) for _ in range(per_host)],
    )


def test_parse_label_specs():
    specs = parse_label_specs({"learner": {"count": 1, "num_gpus": 1}, "collector": 14})
    assert specs == (LabelSpec("learner", 1, 1), LabelSpec("collector", 14, 0))
    with pytest.raises(PlacementError, match="unknown field"):
        parse_label_specs({"learner": {"gpus": 1}})
    with pytest.raises(PlacementError, match="num_gpus"):
        LabelSpec("x", 1, 1.5)


def test_pack_fills_first_host_spread_alternates():
    ps = two_hosts()
    specs = [LabelSpec("learner"), LabelSpec("collector", 3)]
    pack = make_plan(ps, specs, strategy="pack")
    assert [p.labels for p in pack.processes] == [("learner",), ("collector",)] * 1 + [
        ("collector",),
        ("collector",),
        (),
        (),
        (),
        (),
    ]
    spread = make_plan(ps, specs, strategy="spread")
    by_slot = sorted(spread.holders("collector"), key=lambda h: h[1].index)
    assert [pp.node for pp, _ in by_slot] == ["b", "a", "b"]  # round robin after the learner on a


def test_slots_balance_before_doubling_up():
    ps = two_hosts(per_host=1)
    plan = make_plan(ps, [LabelSpec("collector", 5)], strategy="pack")
    assert [len(p.slots) for p in plan.processes] == [3, 2]
    assert [s.index for s in plan.processes[0].slots] == [0, 2, 4]


def test_gpu_capacity_is_per_physical_gpu():
    # Four processes on one host all see the same 2 GPUs: only 2 whole-GPU slots fit.
    ps = procs(*[node("a", 2) for _ in range(4)])
    plan = make_plan(ps, [LabelSpec("collector", 2, num_gpus=1)])
    assert [p.gpus for p in plan.processes] == [(0,), (1,), (), ()]
    with pytest.raises(
        PlacementError, match=r"label 'collector' needs 1 GPU; no node with a free GPU"
    ):
        make_plan(ps, [LabelSpec("collector", 3, num_gpus=1)])
    # Fractions share: 4 x 0.5 fit on 2 GPUs; pack fills the first GPU first, spread
    # (the default) takes the emptiest GPU.
    plan = make_plan(ps, [LabelSpec("collector", 4, num_gpus=0.5)], strategy="pack")
    assert [p.gpus for p in plan.processes] == [(0,), (0,), (1,), (1,)]
    plan = make_plan(ps, [LabelSpec("collector", 4, num_gpus=0.5)])
    assert [p.gpus for p in plan.processes] == [(0,), (1,), (0,), (1,)]
    with pytest.raises(PlacementError, match="no node with a free GPU for slot 5 of 5"):
        make_plan(ps, [LabelSpec("collector", 5, num_gpus=0.5)])


def test_multi_gpu_slot_takes_whole_free_gpus():
    ps = procs(node("a", 4), node("a", 4))
    plan = make_plan(ps, [LabelSpec("learner", 1, num_gpus=2), LabelSpec("c", 2, num_gpus=1)])
    assert plan.processes[0].slots[0].gpus == (0, 1)  # the learner: two whole GPUs
    assert plan.processes[1].gpus == (2,)
    assert plan.processes[0].slots[1].gpus == (3,)
    assert plan.processes[0].gpus == (0, 1, 3)


def test_infeasible_specs_name_what_is_missing():
    cpu_only = procs(node("a"), node("b"))
    with pytest.raises(PlacementError) as e:
        make_plan(cpu_only, [LabelSpec("learner", 1, num_gpus=1)])
    assert "label 'learner' needs 1 GPU; no process that may host it has a GPU" in str(e.value)
    labelled = procs(node("a", labels=("collector",)))
    with pytest.raises(PlacementError, match="no process offers label 'learner'.*'collector'"):
        make_plan(labelled, [LabelSpec("learner")])
    with pytest.raises(PlacementError, match="unknown placement strategy"):
        make_plan(cpu_only, [LabelSpec("x")], strategy="random")
    with pytest.raises(PlacementError, match="not in the spec"):
        make_plan(cpu_only, [LabelSpec("x")], strategy="nearest:learner")
    with pytest.raises(PlacementError, match="appears twice"):
        make_plan(cpu_only, [LabelSpec("x"), LabelSpec("x")])


def test_labels_restrict_processes():
    ps = procs(node("a", labels=("learner",)), node("a"), node("b", labels=("collector",)))
    plan = make_plan(ps, [LabelSpec("collector", 2), LabelSpec("learner")])
    assert plan.processes[0].labels == ("learner",)
    assert plan.processes[1].labels == ("collector",)
    assert plan.processes[2].labels == ("collector",)


def test_nearest_prefers_nvlink_then_host_then_ib():
    from actorrt.placement import HcaInfo

    ib = (HcaInfo("mlx5_0", gdr_capable=True),)
    ps = procs(
        node("far", 1),  # rank 0: another host, TCP only
        node("ibhost", 1, hcas=ib),  # rank 1: another host, GPUDirect
        node("lh", 4, hcas=ib),  # rank 2: the learner's process
        node("lh", 4, hcas=ib),  # rank 3: same host, no NVLink
    )
    # GPU 1 of the learner host is NVLinked to GPU 0 only for rank 4.
    nv = node("lh", 4, hcas=ib)
    from dataclasses import replace

    gpus = list(nv.gpus)
    gpus[1] = replace(gpus[1], nvlink_peers=(0,))
    gpus[0] = replace(gpus[0], nvlink_peers=(1,))
    ps.append(ProcessInfo(4, "w4", replace(nv, gpus=tuple(gpus))))
    specs = [LabelSpec("learner", 1, 1), LabelSpec("collector", 4, 0.25)]
    plan = make_plan(ps, specs, strategy="nearest")
    learner = next(plan.holders("learner"))[0]
    # The anchor goes first, to the GPU with the best path: rank 1's GPU sits next to an
    # active GPUDirect adapter (rank 0 has none; ranks 2-4 share host lh, a later host).
    assert learner.rank == 1
    # Re-plan with the learner pinned to rank 2 via labels.
    ps2 = [
        ProcessInfo(
            p.rank, p.name, replace(p.node, labels=("learner",) if p.rank == 2 else ("collector",))
        )
        for p in ps
    ]
    plan = make_plan(ps2, specs, strategy="nearest")
    order = [pp.rank for pp, _ in sorted(plan.holders("collector"), key=lambda h: h[1].index)]
    assert order == [4, 3, 1, 0]
    assert plan.for_rank(4).gpus == (1,)  # the GPU NVLinked to the learner's GPU 0


def test_deterministic_across_runs_and_input_order():
    c = big_cluster(8, 8, collectors=40)
    ref = make_plan(c.processes, c.specs, strategy="nearest").to_dict()
    shuffled = list(c.processes)
    random.Random(7).shuffle(shuffled)
    again = make_plan(shuffled, c.specs, strategy="nearest").to_dict()
    assert json.dumps(ref, sort_keys=True) == json.dumps(again, sort_keys=True)


def test_plan_json_round_trip():
    c = big_cluster(2, 4)
    plan = make_plan(c.processes, c.specs, socket_ifname="lo")
    back = Plan.from_json(plan.to_json())
    assert back == plan
    assert back.for_rank(3) == plan.for_rank(3)
    check_with_torch(back, list(c.processes))
    slim = Plan.from_json(plan.to_json(include_pairs=False))
    assert slim.pairs == () and slim.processes == plan.processes
    with pytest.raises(PlacementError, match="rank 99"):
        plan.for_rank(99)


def test_duplicate_ranks_or_names_are_refused():
    a, b = procs(node("a"), node("b"))
    with pytest.raises(PlacementError, match="rank 0"):
        make_plan([a, ProcessInfo(0, "other", b.node)])
    with pytest.raises(PlacementError, match="'w0'"):
        make_plan([a, ProcessInfo(1, "w0", b.node)])
