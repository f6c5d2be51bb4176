"""The driver's layout: what it asks ``actorrt.start()`` for, and how actorrt plans it.

Pure: the layout is planned on described machines (no process, socket or GPU).
"""

from __future__ import annotations

import json

import pytest

from actorrt.placement import make_plan
from actorrt.placement.clusterfile import parse_cluster
from actorrt.placement.layout import parse_layout
from examples.atari_dqn.driver import build_layout, parse_args, placement_line, resolve_gpus


def _plan(nodes: list[dict], argv: list[str], transport: str = "cpu") -> dict:
    """The plan of the DQN's layout (from ``argv``) on a cluster of ``nodes``."""
    layout = build_layout(parse_args(argv))
    cluster = parse_cluster({"nodes": nodes}, "test")
    plan = make_plan(cluster.processes, parse_layout(**layout), transport=transport)
    return json.loads(plan.to_json())  # the plan.json form


def _holders(plan: dict, label: str) -> list[tuple[int, str]]:
    return [
        (p["rank"], p["node"]) for p in plan["processes"] for s in p["slots"] if s["label"] == label
    ]


def test_layout_from_flags(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    layout = build_layout(parse_args(["--collectors", "3"]))
    assert layout == {
        "labels": {
            "learner": {"count": 1, "num_gpus": 0.0},
            "collector": {"count": 3, "num_gpus": 0.0},
        },
        "talks": [("collector", "learner")],
    }
    parsed = parse_layout(**layout)
    assert parsed.strategy == "spread" and parsed.talks == (("collector", "learner"),)

    # A GPU here (or --transport cuda) gives the learner one; cuda gives collectors one each.
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert resolve_gpus("cpu") == (1.0, 0.0)
    assert resolve_gpus("cuda") == (1.0, 1.0)
    layout = build_layout(
        parse_args(["--transport", "cuda", "--learner-gpus", "0.5", "--collector-gpus", "0.25"])
    )
    assert layout["labels"]["learner"]["num_gpus"] == 0.5
    assert layout["labels"]["collector"] == {"count": 2, "num_gpus": 0.25}


def test_plan_flag_and_worker_flags():
    assert parse_args([]).plan is None
    assert parse_args(["--plan"]).plan == "table"
    assert parse_args(["--plan", "json"]).plan == "json"
    assert parse_args(["--num-workers", "2"]).num_workers == 2
    with pytest.raises(SystemExit):
        parse_args(["--plan", "yaml"])
    with pytest.raises(SystemExit):
        parse_args(["--num-workers", "0"])
    with pytest.raises(SystemExit):  # a local-cluster flag with a multi-node cluster
        parse_args(["--init-method", "tcp://h:1", "--world-size", "3", "--num-workers", "2"])


def test_spread_puts_learner_and_collectors_on_other_hosts():
    """The multi-node test's cluster: driver on a, one worker on b, two on c."""
    nodes = [
        {"hostname": "a", "processes": [{"name": "driver", "hosts_actors": False}]},
        {"hostname": "b", "processes": [{"name": "worker1"}]},
        {"hostname": "c", "processes": [{"name": "onc", "count": 2}]},
    ]
    plan = _plan(nodes, ["--collectors", "2", "--learner-gpus", "0"])
    assert _holders(plan, "learner") == [(1, "b")]
    assert _holders(plan, "collector") == [(2, "c"), (3, "c")]
    line = placement_line(plan)
    assert line == "placement (spread, transport cpu): learner=worker1@b collector=onc0@c,onc1@c"


def test_learner_goes_to_the_gpu_node():
    """The README's three nodes: --learner-gpus 1 sends the learner to B, the only GPU."""
    nodes = [
        {"hostname": "nodeA", "processes": [{"name": "driver", "hosts_actors": False}]},
        {"hostname": "nodeB", "gpus": 1, "processes": [{"name": "worker1"}]},
        {"hostname": "nodeC", "processes": [{"name": "worker2"}, {"name": "worker3"}]},
    ]
    argv = ["--collectors", "2", "--learner-gpus", "1"]
    plan = _plan(nodes, argv)
    assert _holders(plan, "learner") == [(1, "nodeB")]
    assert _holders(plan, "collector") == [(2, "nodeC"), (3, "nodeC")]
    assert placement_line(plan) == (
        "placement (spread, transport cpu): learner=worker1@nodeB[gpu 0] "
        "collector=worker2@nodeC,worker3@nodeC"
    )
    # the GPU node listed last changes nothing: the GPU decides
    plan = _plan([nodes[0], nodes[2], nodes[1]], argv)
    assert _holders(plan, "learner") == [(3, "nodeB")]
    assert _holders(plan, "collector") == [(1, "nodeC"), (2, "nodeC")]


def test_fewer_workers_than_slots_share_processes(monkeypatch):
    """--num-workers 2 for 3 slots: every slot is placed, two in one process."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)  # CPU nodes: no GPU wanted
    nodes = [
        {"hostname": "a", "processes": [{"name": "driver", "hosts_actors": False}]},
        {"hostname": "a", "processes": [{"name": "worker", "count": 2}]},
    ]
    plan = _plan(nodes, ["--collectors", "2"])
    ranks = [r for r, _ in _holders(plan, "learner") + _holders(plan, "collector")]
    assert sorted(set(ranks)) == [1, 2] and len(ranks) == 3
