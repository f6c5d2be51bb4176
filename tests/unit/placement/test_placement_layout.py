"""Layouts (labels, talks, strategy), where each label lands on the issue's synthetic
clusters and why, talks-restricted device maps, and cluster files that round-trip."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from placement_testlib import EXAMPLES, big_cluster, check_with_torch, example, node, procs

from actorrt.errors import PlacementError
from actorrt.placement import (
    ClusterSpec,
    HcaInfo,
    LabelSpec,
    Layout,
    ProcessInfo,
    dump_cluster,
    load_cluster,
    load_layout,
    make_plan,
    parse_cluster,
    parse_layout,
)


def with_driver(ps):
    """Rank 0 becomes a driver on the first host (hosts no actors); workers shift up."""
    driver = ProcessInfo(0, "driver", replace(ps[0].node, labels=(), hosts_actors=False))
    return [driver, *(ProcessInfo(p.rank + 1, p.name, p.node) for p in ps)]


# -- parsing ---------------------------------------------------------------------------


def test_layout_from_a_dict_with_cpus_gpus_talks_and_defaults():
    layout = parse_layout(
        {"learner": {"num_gpus": 1}, "collector": {"count": 8, "num_cpus": 1, "num_gpus": 0.25}},
        talks=[("learner", "collector")],
    )
    assert layout.specs == (LabelSpec("learner", 1, 1), LabelSpec("collector", 8, 0.25, 1))
    assert layout.talks == (("collector", "learner"),)  # one sorted pair, either order given
    assert layout.strategy == "spread"
    assert layout.talk("learner", "collector") and not layout.talk("collector", "collector")
    assert parse_layout(None).specs == () and parse_layout({}).talks is None


@pytest.mark.parametrize(
    ("labels", "talks", "message"),
    [
        ({"learner": {"gpus": 1}}, None, "unknown field"),
        ({"learner": {"num_gpus": 1.5}}, None, "fractions are only allowed below 1"),
        ({"learner": {"num_cpus": -1}}, None, "num_cpus=-1 must be a number >= 0"),
        ({"learner": {"num_cpus": "2"}}, None, "num_cpus='2' must be a number"),  # a TypeError
        ({"learner": {"count": -2}}, None, "count must be an integer >= 0"),
        ({"bad label": 1}, None, "not a valid label"),
        ({"learner": 1}, [("learner", "critic")], "label 'critic' is not in the layout"),
        ({"learner": 1}, ["learner"], "not a pair of labels"),
        ({"learner": "x"}, None, "expected a count or a table"),
    ],
)
def test_bad_layouts_name_the_field(labels, talks, message):
    with pytest.raises(PlacementError, match=message):
        parse_layout(labels, talks)


def test_layout_from_a_toml_file_and_a_cluster_file(tmp_path):
    path = tmp_path / "layout.toml"
    path.write_text(
        '[plan]\nstrategy = "pack"\n'
        "[labels]\nlearner = { count = 1, num_gpus = 1 }\ncollector = { count = 3 }\n"
        '[talks]\ncollector = ["learner"]\n'
    )
    layout = parse_layout(str(path))
    assert layout == Layout(
        (LabelSpec("learner", 1, 1), LabelSpec("collector", 3)),
        (("collector", "learner"),),
        "pack",
    )
    assert parse_layout(path, strategy="nearest").strategy == "nearest"
    # A cluster file is a layout file too (its nodes are ignored).
    assert load_layout(EXAMPLES / "gpu_learner_cpu_collectors.toml").specs[1].count == 14
    (tmp_path / "empty.toml").write_text("[plan]\n")
    with pytest.raises(PlacementError, match="has no \\[labels\\] table"):
        load_layout(tmp_path / "empty.toml")
    (tmp_path / "latin1.toml").write_bytes("[labels]\nl\xe9arner = 1\n".encode("latin-1"))
    with pytest.raises(PlacementError, match="not UTF-8"):
        load_layout(tmp_path / "latin1.toml")


# -- where labels land, and why --------------------------------------------------------


def test_one_node_eight_gpus_nvlink_pairs_collectors_nearest_share_the_learners_link():
    # 8 processes on one node, each sees all 8 GPUs; NVLink joins 0-1, 2-3, 4-5, 6-7.
    data = {
        "labels": {"learner": {"num_gpus": 1}, "collector": {"count": 3, "num_gpus": 1}},
        "nodes": [{"hostname": "dgx", "gpus": 8, "nvlink": [[0, 1], [2, 3], [4, 5], [6, 7]],
                   "processes": 8}],
    }  # fmt: skip
    spec = parse_cluster(data)
    near = spec.plan(strategy="nearest")
    learner_gpu = next(near.holders("learner"))[1].gpus[0]
    first_collector = min(near.holders("collector"), key=lambda h: h[1].index)[1]
    # the learner's NVLink peer goes to the first collector: its pushes stay on NVLink
    assert first_collector.gpus[0] == learner_gpu ^ 1
    assert sum(1 for p in near.pairs if p.transport == "nvlink") >= 1
    used = [g for pp in near.processes for g in pp.gpus]
    assert len(used) == len(set(used)) == 4  # whole GPUs: no GPU twice
    check_with_torch(near, list(spec.processes))


def test_two_nodes_with_the_first_hca_down_the_learner_goes_where_gdr_works():
    spec = example("two_nodes_ib_one_hca_down.toml")
    for strategy in ("spread", "nearest", "pack"):
        plan = spec.plan(strategy=strategy)
        learner = next(plan.holders("learner"))[0]
        # node1's mlx5_0 (next to its GPUs 0-1, and first in the verbs list) is DOWN:
        # node0's GPU 0 sits next to an active GPUDirect adapter, so the learner goes there.
        assert learner.node == "node0", strategy
        assert learner.guard_tiny_cuda  # cuda_gdr possible: tiny tensors are guarded
    spread = spec.plan(strategy="spread")
    hosts = [pp.node for pp, s in sorted(spread.holders("collector"), key=lambda h: h[1].index)]
    assert hosts[:2] == ["node1", "node0"]  # spread: round robin over the nodes
    # node1's process on the down adapter gets ibv and cuda_gdr left out
    bad = spread.for_name("node1-0")
    assert bad.transports == ["uv", "shm"] and "cuda_gdr" not in (bad.channels or [])


def test_two_containers_on_one_host_keep_cuda_ipc_inside_each():
    spec = example("two_containers_one_host.toml")
    plan = spec.plan()
    assert [len(pp.slots) for pp in plan.processes] == [1, 1, 1, 1]
    for pp in plan.processes:
        assert "cuda_ipc" not in pp.channels and "cuda_xth" not in pp.channels
    pod = {pp.name: pp.node for pp in plan.processes}  # "gpuhost/c0", "gpuhost/c1"
    assert len(set(pod.values())) == 2
    inside = {t for a, b, t in plan.pairs if pod[a] == pod[b]}
    across = {t for a, b, t in plan.pairs if pod[a] != pod[b]}
    assert inside == {"cuda_ipc"} and across == {"tcp"}
    check_with_torch(plan, list(spec.processes))


def test_sixty_four_nodes_spread_puts_the_first_collectors_on_distinct_hosts():
    c = big_cluster(64, 8, collectors=200)
    plan = c.plan(strategy="spread")
    by_index = sorted(plan.holders("collector"), key=lambda h: h[1].index)
    learner_host = next(plan.holders("learner"))[0].node
    first_hosts = [pp.node for pp, _ in by_index[:63]]
    assert len(set(first_hosts)) == 63 and learner_host not in first_hosts
    # one GPU per process (CUDA_VISIBLE_DEVICES=i): 201 slots take 201 distinct processes
    assert sum(len(pp.gpus) for pp in plan.processes) == 201
    assert all(len(pp.slots) <= 1 for pp in plan.processes)


def test_the_driver_hosts_no_slot_and_cpu_capacity_is_per_host():
    ps = with_driver(procs(node("a"), node("a"), node("b")))
    plan = make_plan(ps, [LabelSpec("collector", 3)])
    assert plan.for_rank(0).slots == ()
    assert [len(plan.for_rank(r).slots) for r in (1, 2, 3)] == [1, 1, 1]
    # 8 CPUs per host: 2 x 4 fit on host a, a third slot of 4 must go to host b
    plan = make_plan(ps, [LabelSpec("collector", 4, num_cpus=4)], strategy="pack")
    per_host = sorted(pp.node for pp in plan.processes for _ in pp.slots)
    assert per_host == ["a", "a", "b", "b"]
    with pytest.raises(PlacementError, match="num_cpus=4; no host has that many CPUs free"):
        make_plan(ps, [LabelSpec("collector", 5, num_cpus=4)])


# -- talks -----------------------------------------------------------------------------


def test_device_maps_and_pairs_only_for_labels_that_talk():
    c = big_cluster(4, 8)
    talks = Layout(c.specs, (("collector", "learner"),))
    plan = c.plan(layout=talks)
    full = c.plan()
    learner = next(plan.holders("learner"))[0].name
    assert len(full.pairs) == 32 * 31 // 2
    assert len(plan.pairs) == 31  # learner <-> each collector, nothing else
    for pp in plan.processes:
        if pp.name != learner:
            assert set(pp.device_maps) == {learner}
    with pytest.raises(PlacementError, match="do not talk"):
        plan.transport_between("n01-0", "n02-0")
    check_with_torch(plan, list(c.processes))


# -- preview equals runtime: a cluster written out plans the same ----------------------


def test_dumped_cluster_reads_back_equal_and_plans_the_same(tmp_path):
    ps = with_driver(procs(node("a", 2, nvlink_all=True), node("b", 2, hcas=(HcaInfo("m0"),))))
    spec = ClusterSpec(
        tuple(ps),
        parse_layout({"learner": {"num_gpus": 1}, "collector": {"count": 2, "num_gpus": 0.5}},
                     talks=[("collector", "learner")]),
        socket_ifname="lo",
    )  # fmt: skip
    path = tmp_path / "live.toml"
    path.write_text(dump_cluster(spec))
    again = load_cluster(path)
    assert again == spec
    assert again.plan().to_dict() == spec.plan().to_dict()
    out = subprocess.run(
        [sys.executable, "-m", "actorrt", "plan", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(out.stdout) == spec.plan().to_dict()


def test_planning_512_processes_with_a_layout_is_fast_enough_to_do_at_start():
    c = big_cluster(64, 8)
    t0 = time.perf_counter()
    plan = c.plan(layout=Layout(c.specs, (("collector", "learner"),)))
    elapsed = time.perf_counter() - t0
    assert len(plan.processes) == 512 and len(plan.pairs) == 511
    # not a benchmark (docs/placement.md has the figures): a guard against a quadratic
    # blow-up that would make start() wait for minutes
    assert elapsed < 30, elapsed
