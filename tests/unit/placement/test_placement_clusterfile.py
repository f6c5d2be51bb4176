"""Cluster files, the topology graph and the `actorrt plan` command."""

from __future__ import annotations

import json

import pytest
from placement_testlib import EXAMPLES, check_with_torch

from actorrt.cli import main
from actorrt.errors import PlacementError
from actorrt.placement import load_cluster, parse_cluster, plan_graph

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.toml"))


def test_examples_are_shipped():
    names = {p.name for p in EXAMPLE_FILES}
    assert {
        "one_node_8gpu_nvlink.toml",
        "two_nodes_ib_one_hca_down.toml",
        "gpu_learner_cpu_collectors.toml",
        "two_containers_one_host.toml",
    } <= names


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_every_example_plans_and_validates(path):
    c = load_cluster(path)
    plan = c.plan()
    check_with_torch(plan, list(c.processes))
    placed = sum(len(p.slots) for p in plan.processes)
    assert placed == sum(s.count for s in c.specs)


def test_cluster_file_fields(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text(
        """
[plan]
transport = "cuda"
strategy = "spread"
socket_ifname = "lo"

[labels]
learner = { count = 1, num_gpus = 1 }

[[nodes]]
hostname = "h"
gpus = [{ pci_bus_id = "0000:07:00.0", name = "A" }, { pci_bus_id = "0000:08:00.0" }]
nvlink = [[0, 1]]
hcas = [{ name = "mlx5_0", port_state = "DOWN", near_gpus = [1] }]
processes = [{ count = 2, name = "gw", gpus = [1, 0], gpus_per_process = 1 }]

[cuda_device_map]
"0" = "1_0_0"
"""
    )
    c = load_cluster(f)
    assert (c.transport, c.strategy, c.socket_ifname) == ("cuda", "spread", "lo")
    a, b = c.processes
    assert (a.name, b.name) == ("gw0", "gw1")
    assert a.node.gpus[0].pci_bus_id == "0000:08:00.0" and a.node.gpus[0].index == 0
    assert a.node.gpus[0].nvlink_peer_bus_ids == ("0000:07:00.0",)
    assert a.node.hcas[0].near_gpus == (0,) and b.node.hcas[0].near_gpus == ()
    assert c.device_map_override == {"gw0": {"gw1": {"cuda:0": "cuda:0"}}}
    plan = c.plan()
    assert plan.transport_between("gw0", "gw1") == "nvlink"
    assert plan.processes[0].transports == ["uv", "shm"]


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"nodes": []}, "at least one"),
        ({"nodes": [{"hostname": "h", "gpu": 2}]}, r"unknown field\(s\) \['gpu'\]"),
        ({"nodes": [{"gpus": 2}]}, "needs a hostname"),
        ({"nodes": [{"hostname": "h", "gpus": 2, "nvlink": [[0, 5]]}]}, "not a pair of GPU"),
        ({"nodes": [{"hostname": "h", "processes": [{"gpus": [3]}]}]}, r"processes\[0\]\.gpus"),
        ({"nodes": [{"hostname": "h"}], "plan": {"mode": "x"}}, r"\[plan\]: unknown"),
        (
            {"nodes": [{"hostname": "h", "processes": 2}], "cuda_device_map": {"x": "1_0_0"}},
            "keys are ranks",
        ),
        # Fields of the wrong type: a named error, not a traceback (or labels taken as
        # letters: "collector" was c, o, l, ...).
        (
            {"nodes": [{"hostname": "h", "labels": "collector"}]},
            r"nodes\[0\]\.labels: expected a list",
        ),
        ({"nodes": [{"hostname": "h", "labels": 5}]}, r"nodes\[0\]\.labels"),
        (
            {"nodes": [{"hostname": "h", "processes": [{"labels": [1]}]}]},
            r"processes\[0\]\.labels: expected a list of label names",
        ),
        ({"nodes": [{"hostname": "h", "hcas": 5}]}, r"nodes\[0\]\.hcas: expected a list of tables"),
        ({"nodes": [{"hostname": "h", "hcas": [5]}]}, r"hcas\[0\]: expected a table"),
        (
            {"nodes": [{"hostname": "h", "gpus": 1, "hcas": [{"name": "m", "near_gpus": 0}]}]},
            r"hcas\[0\]\.near_gpus: expected a list of GPU",
        ),
        ({"nodes": [{"hostname": "h", "processes": [5]}]}, r"processes\[0\]: expected a table"),
        (
            {"nodes": [{"hostname": "h", "gpus": [{"nvlink_peers": ["a"]}]}]},
            r"gpus\[0\]\.nvlink_peers: expected a list of GPU indices",
        ),
        ({"nodes": [{"hostname": "h", "gpus": -1}]}, r"gpus: expected a count >= 0"),
        ({"nodes": [{"hostname": 5}]}, r"hostname: expected a host name"),
        ({"nodes": [{"hostname": "h", "hosts_actors": "false"}]}, r"hosts_actors: expected true"),
        (
            {"nodes": [{"hostname": "h"}], "device_maps": {"x": 5}},
            r"\[device_maps\] x: expected a table",
        ),
    ],
)
def test_cluster_file_errors_name_the_field(data, match):
    with pytest.raises(PlacementError, match=match):
        parse_cluster(data)


def test_bad_toml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[nodes\n")
    with pytest.raises(PlacementError, match="not valid TOML"):
        load_cluster(bad)
    with pytest.raises(PlacementError, match="cannot read"):
        load_cluster(tmp_path / "missing.toml")


def test_topology_graph():
    c = load_cluster(EXAMPLES / "two_nodes_ib_one_hca_down.toml")
    plan = c.plan()
    g = plan_graph(c.processes, plan)
    kinds = {}
    for _, d in g.nodes(data=True):
        kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
    assert kinds == {"host": 2, "gpu": 16, "hca": 8, "process": 16}
    assert g.edges[("host", "boot-node0"), ("host", "boot-node1")]["link"] == "tcp"
    nvlinks = [e for e in g.edges(data=True) if e[2]["link"] == "nvlink"]
    assert len(nvlinks) == 2 * 28
    assert not g.nodes[("hca", "boot-node1", "mlx5_0")]["active"]
    gpu0 = ("gpu", "boot-node1", "0000:10:00.0")
    assert g.edges[gpu0, ("hca", "boot-node1", "mlx5_0")]["link"] == "pcie"  # adapter down
    assert g.edges[("process", 0), ("process", 10)]["link"] == "gdr"
    assert (
        g.edges[("process", 0), ("process", 10)]["bandwidth"]
        > g.edges[("process", 0), ("process", 8)]["bandwidth"]
    )
    assert g.has_edge(("process", 9), ("gpu", "boot-node1", "0000:11:00.0"))


def test_cli_table(capsys):
    assert main(["plan", str(EXAMPLES / "two_containers_one_host.toml")]) == 0
    out = capsys.readouterr().out
    assert "gpuhost/c1" in out and "C=cuda_ipc" in out and "pairs: cuda_ipc: 2, tcp: 4" in out


def test_cli_json(capsys):
    assert main(["plan", str(EXAMPLES / "two_nodes_ib_one_hca_down.toml"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    procs = d["processes"]
    assert len(procs) == 16
    for key in (
        "name",
        "rank",
        "node",
        "labels",
        "devices",
        "device_maps",
        "transports",
        "channels",
    ):
        assert key in procs[0]
    assert procs[0]["labels"] == ["learner"]
    assert procs[8]["transports"] == ["uv", "shm"]
    assert procs[8]["device_maps"]["node0-0"] == {"cuda:0": "cuda:0"}
    assert len(d["pairs"]) == 16 * 15 // 2
    assert {"src": "node0-0", "dst": "node1-2", "transport": "gdr"} in d["pairs"]


def test_cli_draw_png(tmp_path, capsys):
    out = tmp_path / "topo.png"
    assert main(["plan", str(EXAMPLES / "two_nodes_ib_one_hca_down.toml"), "--draw", str(out)]) == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    svg = tmp_path / "topo.svg"
    assert (
        main(["plan", str(EXAMPLES / "one_node_8gpu_nvlink.toml"), "--draw", str(svg), "--json"])
        == 0
    )
    assert b"<svg" in svg.read_bytes()


def test_cli_errors_exit_2(tmp_path, capsys):
    f = tmp_path / "c.toml"
    f.write_text('[labels]\nlearner = { num_gpus = 1 }\n[[nodes]]\nhostname = "cpu"\n')
    assert main(["plan", str(f)]) == 2
    assert "label 'learner' needs 1 GPU" in capsys.readouterr().err
    assert main(["plan", str(f), "--transport", "cpu"]) == 2  # still no GPU to give


def test_draw_without_matplotlib_says_how_to_fix(tmp_path, monkeypatch):
    import sys

    from actorrt.placement.render import draw_topology

    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    c = load_cluster(EXAMPLES / "one_node_8gpu_nvlink.toml")
    with pytest.raises(PlacementError, match="pip install matplotlib"):
        draw_topology(c.processes, c.plan(), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_node_description_round_trip_and_bus_ids():
    from actorrt.placement import ContainerIdentity, ProcessInfo
    from actorrt.placement.node import normalize_bus_id

    assert normalize_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert normalize_bus_id("3b:00.0") == "0000:3b:00.0"
    c = load_cluster(EXAMPLES / "two_nodes_ib_one_hca_down.toml")
    for p in c.processes:
        assert ProcessInfo.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    # Namespaces decide "same container"; the cgroup only when no namespace is known.
    assert (
        ContainerIdentity(net="n", cgroup="a").key() == ContainerIdentity(net="n", cgroup="b").key()
    )
    assert ContainerIdentity(cgroup="a").key() != ContainerIdentity(cgroup="b").key()


def test_processes_without_num_cpus_get_the_nodes_default_and_keep_shm(tmp_path):
    # [[processes]] written by hand may leave num_cpus out: two processes on a host
    # must not read as a crowded 1-CPU host, whose pairs the plan sends over tcp.
    f = tmp_path / "c.toml"
    f.write_text(
        """
[[processes]]
name = "a"
node = { hostname = "h" }

[[processes]]
name = "b"
node = { hostname = "h" }
"""
    )
    c = load_cluster(f)
    assert [p.node.num_cpus for p in c.processes] == [8, 8]
    assert c.plan().transport_between("a", "b") == "shm"
