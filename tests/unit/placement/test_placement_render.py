"""The plan's picture: containers inside hosts, labelled GPUs, a legend of what is used."""

from __future__ import annotations

import itertools

import pytest
from placement_testlib import EXAMPLES, big_cluster, example

from actorrt.cli import main
from actorrt.placement import parse_cluster
from actorrt.placement.render import (
    TRANSPORT_COLORS,
    draw_topology,
    layout_scene,
    legend_entries,
)

# 20 processes on one host in two containers, plus a second host whose first adapter is
# down and a driver: every kind of box, marker and line at once, past 16 processes.
BIG_FILE = """
[plan]
strategy = "spread"

[labels]
learner = { count = 1, num_gpus = 1 }
collector = { count = 12, num_gpus = 0.5 }

[[nodes]]
hostname = "gpuhost"
boot_id = "boot-gpuhost"
container = "pod-a"
gpus = 8
gpu_name = "NVIDIA H100 80GB HBM3"
nvlink = "all"
processes = [{ count = 10, gpus = [0, 1, 2, 3], gpus_per_process = 1 }]

[[nodes]]
hostname = "gpuhost"
boot_id = "boot-gpuhost"
container = "pod-b"
gpus = 8
gpu_name = "NVIDIA H100 80GB HBM3"
nvlink = "all"
processes = [{ count = 10, gpus = [4, 5, 6, 7], gpus_per_process = 1 }]

[[nodes]]
hostname = "ibhost"
gpus = 4
hcas = [
  { name = "mlx5_0", port_state = "DOWN", gdr_capable = true },
  { name = "mlx5_1", gdr_capable = false },
]
processes = 2

[[nodes]]
hostname = "head"
hosts_actors = false
"""


@pytest.fixture(scope="module")
def big():
    return parse_cluster(__import__("tomllib").loads(BIG_FILE), source="big")


def keys(processes, plan) -> list[str]:
    return [e.key for e in legend_entries(processes, plan)]


def test_legend_lists_only_what_one_node_uses():
    c = example("one_node_8gpu_nvlink.toml")
    got = keys(c.processes, c.plan())
    assert got == [
        "box:host",
        "process:label:learner",
        "process:label:collector",
        "gpu:used",
        "link:uses",
        "link:nvlink",
        "transport:nvlink",
    ]


def test_legend_of_containers_and_adapters():
    c = example("two_containers_one_host.toml")
    got = keys(c.processes, c.plan())
    assert "box:container" in got and "transport:cuda_ipc" in got and "transport:tcp" in got
    assert not [k for k in got if k.startswith("hca:") or k in ("transport:nvlink", "link:nvlink")]
    c = example("two_nodes_ib_one_hca_down.toml")
    got = keys(c.processes, c.plan())
    assert {"hca:down", "hca:gdr", "transport:gdr", "transport:tcp", "transport:nvlink"} <= set(got)
    assert not {"box:container", "hca:active", "transport:ibv", "transport:shm"} & set(got)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.stem)
def test_legend_is_exactly_what_the_scene_holds(path):
    c = example(path.name)
    plan = c.plan()
    scene = layout_scene(c.processes, plan)
    entries = scene.legend()
    assert {e.key for e in entries} == scene.used_keys()
    drawn = {f"transport:{p.transport}" for p in plan.pairs}  # small plans: every pair drawn
    assert {e.key for e in entries if e.key.startswith("transport:")} == drawn
    for e in entries:
        assert e.label and e.color.startswith("#") and e.kind in ("box", "marker", "line")
        if e.key.startswith("transport:"):
            assert e.color == TRANSPORT_COLORS[e.key.split(":")[1]]


def test_every_kind_of_entry_at_20_processes(big):
    plan = big.plan()
    assert len(plan.processes) == 23
    got = keys(big.processes, plan)
    for key in (
        "box:host",
        "box:container",
        "process:label:learner",
        "process:label:collector",
        "process:free",
        "process:driver",
        "gpu:used",
        "gpu:idle",
        "hca:down",
        "hca:active",
        "link:uses",
        "link:nvlink",
    ):
        assert key in got, key
    assert len(got) == len(set(got))


def test_geometry_at_16_and_more_processes(big):
    plan = big.plan()
    scene = layout_scene(big.processes, plan)
    hosts = [b for b in scene.boxes if b.kind == "host"]
    containers = [b for b in scene.boxes if b.kind == "container"]
    assert [b.title for b in hosts] == ["gpuhost", "ibhost", "head"]
    assert [b.title for b in containers] == ["gpuhost/c0", "gpuhost/c1"]
    assert all(hosts[0].contains(b.x0, b.y0) and hosts[0].contains(b.x1, b.y1) for b in containers)
    for a, b in itertools.combinations(hosts, 2):  # hosts never overlap
        assert a.x1 <= b.x0 or b.x1 <= a.x0 or a.y1 <= b.y0 or b.y1 <= a.y0
    # Markers keep a marker and a label apart: nothing is drawn over anything else.
    for a, b in itertools.combinations(scene.marks, 2):
        assert abs(a.x - b.x) >= 1.4 or abs(a.y - b.y) >= 1.2, (a, b)
    procs = {m.text.split("\n")[0]: m for m in scene.marks if m.kind == "process"}
    assert len(procs) == 23
    for m in procs.values():
        inside = [b for b in containers if b.contains(m.x, m.y)]
        if m.group and m.text.startswith("gpuhost"):
            assert len(inside) == 1  # the processes of a container sit in its box
    gpus = [m for m in scene.marks if m.kind == "gpu"]
    assert len(gpus) == 8 + 4
    assert all(m.text.startswith("GPU") for m in gpus)
    assert {m.text for m in gpus if "H100" in m.text} >= {"GPU0\nH100", "GPU7\nH100"}
    # The containers each see 4 of the host's 8 GPUs: drawn inside their own box.
    assert sum(1 for m in gpus if containers[0].contains(m.x, m.y)) == 4
    assert any(n[2] == "NVLink between every pair of GPUs" for n in scene.notes)


def test_lines_between_boxes_carry_counts(big):
    plan = big.plan()
    scene = layout_scene(big.processes, plan)
    between = [ln for ln in scene.links if ln.level < 2]
    assert between and all(ln.text and ln.text_at for ln in between)
    total = sum(ln.count for ln in between)
    inside = sum(
        ln.count for ln in scene.links if ln.key.startswith("transport:") and ln.level == 2
    )
    counted = sum(int(n[2].rsplit("x", 1)[1]) for n in scene.notes if "pairs inside" in n[2])
    assert total + inside + counted == len(plan.pairs)


def test_many_hosts_count_pairs_instead_of_lines():
    c = big_cluster(24, 2)
    plan = c.plan()
    scene = layout_scene(c.processes, plan)
    assert not [ln for ln in scene.links if ln.level == 0]
    assert any(n[2].startswith("pairs to other hosts: gdr x") for n in scene.notes)
    assert "transport:gdr" in {e.key for e in scene.legend()}


def test_draw_a_16_process_cluster_file(tmp_path, big):
    out = draw_topology(big.processes, big.plan(), tmp_path / "big.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000
    c = big_cluster(2, 8)
    assert len(c.processes) == 16
    svg = draw_topology(c.processes, c.plan(), tmp_path / "two.svg")
    assert b"<svg" in svg.read_bytes()


def test_cli_draws_the_file(tmp_path, capsys):
    f = tmp_path / "big.toml"
    f.write_text(BIG_FILE)
    out = tmp_path / "big.pdf"
    assert main(["plan", str(f), "--draw", str(out)]) == 0
    assert out.read_bytes()[:5] == b"%PDF-"
    assert f"drawing written to {out}" in capsys.readouterr().out


def test_anchor_filter_is_said_in_the_title():
    c = big_cluster(4, 8)
    scene = layout_scene(c.processes, c.plan(), max_pair_edges=100)
    assert "only the pairs of 'learner' drawn (31 of 496)" in scene.title
