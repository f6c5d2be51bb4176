"""`actorrt plan --explain`: the reasons recorded where transports and channels are chosen."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from placement_testlib import EXAMPLES, big_cluster, example, node, procs

from actorrt.cli import main
from actorrt.placement import HcaInfo, LabelSpec, Plan, make_plan
from actorrt.placement.render import explain_dict, explain_text
from actorrt.placement.topology import gdr_blocker, gdr_usable, near_hcas
from actorrt.placement.transports import PAIR_REASONS

# Which transport each reason code may come with: a code is the branch that chose it.
CODE_TRANSPORT = {
    "same_container_nvlink": "nvlink",
    "same_container_cuda_ipc": "cuda_ipc",
    "same_container_no_map": "shm",
    "other_container_gdr": "gdr",
    "other_container_shm": "shm",
    "other_container_tcp": "tcp",
    "other_host_gdr": "gdr",
    "other_host_ibv": "ibv",
    "other_host_tcp": "tcp",
    "same_host_shm_left_out": "tcp",
}


def reasons(plan: Plan) -> dict[tuple[str, str], str]:
    return {(p.src, p.dst): why for p, why in plan.explain_pairs()}


def test_first_hca_down_says_ibv_is_off_for_that_node():
    plan = example("two_nodes_ib_one_hca_down.toml").plan()
    node1 = plan.for_name("node1-0").why
    assert node1 is not None
    assert node1.transports.startswith("uv,shm: mlx5_0 is DOWN on node1")
    assert "so ibv is off for node1" in node1.transports
    assert "cuda_gdr left out, since mlx5_0" in node1.channels
    assert "IBV_FORK_SAFE, RDMAV_FORK_SAFE" in node1.env
    node0 = plan.for_name("node0-0").why
    assert node0.transports.startswith("default (uv, shm, ibv): mlx5_0, the adapter ibv opens")
    assert "pytorch issue 57136" in node0.guard
    why = reasons(plan)
    tcp = why[("node0-0", "node1-0")]
    assert tcp.startswith("different hosts: no shm/cma; mlx5_0 is DOWN on node1")
    assert "so ibv is off for node1: tcp" in tcp and "cuda_gdr is off because mlx5_0" in tcp
    gdr = why[("node0-0", "node1-2")]
    assert "cuda_gdr usable on both" in gdr and "CPU tensors over uv (tcp), since mlx5_0" in gdr
    assert "NVLinked GPUs" in why[("node0-0", "node0-1")]


def test_no_device_map_means_staged_through_host_memory():
    why = reasons(example("gpu_learner_cpu_collectors.toml").plan())
    text = why[("learner", "cpu0-0")]
    assert "different hosts: no shm/cma" in text and "gpu0 has no InfiniBand adapter" in text
    assert "no device map (neither end moves a GPU through RPC)" in text
    assert text.endswith("CUDA tensors are staged through host memory")
    assert why[("cpu0-0", "cpu0-1")].startswith("same host and container: CPU tensors over shm")
    ps = procs(node("a", 2, nvlink_all=True), node("a", 2, nvlink_all=True))
    cpu = make_plan(ps, [LabelSpec("x", 2, num_gpus=1)], transport="cpu")
    assert "no device map (transport='cpu')" in reasons(cpu)[("w0", "w1")]


def test_containers_on_one_host():
    plan = example("two_containers_one_host.toml").plan()
    first = plan.processes[0]
    assert "share its boot id" in first.why.channels and "cuda_ipc/cuda_xth" in first.why.channels
    cross = reasons(plan)[(first.name, plan.processes[2].name)]
    assert cross.startswith("same host, other container and network namespace: no shm")
    assert "cuda_basic" in cross


def test_every_branch_records_its_reason_code():
    ib = (HcaInfo("mlx5_0", gdr_capable=True),)
    down = (HcaInfo("mlx5_0", port_state="DOWN"),)
    plans = [
        make_plan(
            procs(node("a", 2, nvlink_all=True), node("a", 2, nvlink_all=True)),
            [LabelSpec("x", 2, num_gpus=1)],
        ),
        make_plan(procs(node("a", 2), node("a", 2))),
        make_plan(procs(node("a"), node("a"))),
        make_plan(
            procs(node("h", 1, hcas=ib, container="x"), node("h", 1, hcas=ib, container="y"))
        ),
        make_plan(procs(node("h", container="x"), node("h", container="y"))),
        make_plan(procs(node("a", 1, hcas=ib), node("b", 1, hcas=ib))),
        make_plan(procs(node("a", hcas=ib), node("b", hcas=ib))),
        make_plan(procs(node("a", hcas=down), node("b", hcas=ib))),
    ]
    from dataclasses import replace

    ps = procs(node("h", container="x"), node("h", container="y"))
    same_net = replace(ps[1].node.container, net=ps[0].node.container.net)
    ps[1] = replace(ps[1], node=replace(ps[1].node, container=same_net))
    plans.append(make_plan(ps))
    crowded = replace(node("a"), num_cpus=1)  # two processes on one CPU: shm left out
    plans.append(make_plan(procs(crowded, crowded)))
    seen = set()
    for plan in plans:
        assert len(plan.pair_reasons) == len(plan.pairs)
        for pair, code in zip(plan.pairs, plan.pair_reasons, strict=True):
            assert CODE_TRANSPORT[code] == pair.transport, (pair, code)
            seen.add(code)
        for _, text in plan.explain_pairs():
            assert "reason not recorded" not in text and "{" not in text
    assert seen == set(PAIR_REASONS) == set(CODE_TRANSPORT)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.stem)
def test_every_example_explains_every_pair(path):
    plan = example(path.name).plan()
    codes = set(plan.pair_reasons)
    assert codes <= set(PAIR_REASONS)
    for pair, code in zip(plan.pairs, plan.pair_reasons, strict=True):
        assert CODE_TRANSPORT[code] == pair.transport
    assert all(p.why is not None and p.why.transports and p.why.channels for p in plan.processes)


def test_gdr_reason_agrees_with_gdr_usable():
    rng = random.Random(13)
    for _ in range(300):
        hcas = tuple(
            HcaInfo(
                f"mlx5_{k}",
                port_state=rng.choice(["ACTIVE", "DOWN", "INIT"]),
                gdr_capable=rng.random() < 0.7,
                near_gpus=tuple(g for g in range(4) if rng.random() < 0.3),
            )
            for k in range(rng.randrange(0, 4))
        )
        n = node("h", 4, hcas=hcas)
        for size in range(1, 4):
            for gpus in itertools.combinations(range(4), size):
                # the rule, written out: every adapter cuda_gdr may pick is up and capable
                expected = bool(hcas) and all(
                    n.hcas[i].active and n.hcas[i].gdr_capable
                    for g in gpus
                    for i in near_hcas(n, g)
                )
                assert gdr_usable(n, gpus) == expected, (hcas, gpus)
                assert (gdr_blocker(n, gpus) == "") == expected, (hcas, gpus)


def test_reasons_stay_out_of_the_json_plan():
    plan = example("two_nodes_ib_one_hca_down.toml").plan()
    d = plan.to_dict()
    assert "pair_reasons" not in d and all("why" not in p for p in d["processes"])
    back = Plan.from_json(plan.to_json())
    assert back == plan  # reasons do not take part in equality
    assert back.pair_reasons == () and back.processes[0].why is None
    text = explain_text(back)
    assert "reasons not recorded" in text and "reason not recorded (plan read from JSON)" in text


def test_explain_text_groups_equal_reasons():
    plan = example("two_nodes_ib_one_hca_down.toml").plan()
    text = explain_text(plan)
    assert text.startswith("Why each process got its transports, channels and env:")
    assert "Why each pair got its transport and channels:" in text
    assert "  nvlink, 56 pairs: same host and container" in text
    assert "  tcp, 16 pairs: different hosts" in text
    assert "node0-0<->node1-0 [cuda:0->cuda:0]" in text
    big = big_cluster(4, 8).plan()
    assert len(explain_text(big).splitlines()) < 60  # grouped: 496 pairs, few lines


def test_explain_mentions_talks():
    c = example("gpu_learner_cpu_collectors.toml")
    from actorrt.placement import Layout

    layout = Layout(c.layout.specs, (("collector", "learner"),), c.layout.strategy)
    text = explain_text(c.plan(layout=layout))
    assert "pairs whose labels do not talk (talks: collector-learner)" in text


def test_cli_explain(capsys):
    path = str(EXAMPLES / "two_nodes_ib_one_hca_down.toml")
    assert main(["plan", path, "--explain"]) == 0
    out = capsys.readouterr().out
    assert "Why each pair got its transport and channels:" in out
    assert "mlx5_0 is DOWN on node1" in out
    assert main(["plan", path, "--json", "--explain"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["explain"]["pairs"]) == len(data["pairs"])
    first = data["explain"]["pairs"][0]
    assert set(first) == {"src", "dst", "transport", "why"} and first["why"]
    assert data["explain"]["processes"][8]["transports"].startswith("uv,shm: mlx5_0 is DOWN")
    assert main(["plan", path, "--json"]) == 0
    assert "explain" not in json.loads(capsys.readouterr().out)  # plain --json unchanged


def test_explain_dict_matches_the_plan():
    plan = example("two_containers_one_host.toml").plan()
    d = explain_dict(plan)
    assert [p["name"] for p in d["processes"]] == [p.name for p in plan.processes]
    assert [(p["src"], p["dst"], p["transport"]) for p in d["pairs"]] == list(plan.pairs)
