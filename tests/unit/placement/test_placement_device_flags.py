"""DI-engine's --cuda-device-map / --local-cuda-devices, and device map overrides."""

from __future__ import annotations

import pytest
from placement_testlib import check_with_torch, node, procs

from actorrt.errors import PlacementError
from actorrt.placement import (
    LabelSpec,
    device_map_override_from_di,
    di_device_map_for,
    format_cuda_device_map,
    format_local_cuda_devices,
    make_plan,
    parse_cuda_device_map,
    parse_local_cuda_devices,
)


@pytest.mark.parametrize("text", ["1_0_1,2_0_2,0_0_0", "1_0_0", "3_1_0,3_0_1,2_7_7"])
def test_cuda_device_map_round_trip(text):
    parsed = parse_cuda_device_map(text)
    assert format_cuda_device_map(parsed) == text


def test_cuda_device_map_values():
    assert parse_cuda_device_map("1_0_1,2_0_2,0_0_0") == {1: {0: 1}, 2: {0: 2}, 0: {0: 0}}
    assert parse_cuda_device_map(" 1_0_1 , ") == {1: {0: 1}}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("1_0", r"entry '1_0' is not <peer rank>_<local gpu>_<peer gpu>"),
        ("1_a_0", r"entry '1_a_0'"),
        ("1_0_1,1_0_2", r"entry '1_0_2': <local gpu> 0 is already mapped to GPU 1 of rank 1"),
        ("1_0_1,1_1_1", r"entry '1_1_1': <peer gpu> 1 of rank 1 is already the target"),
    ],
)
def test_cuda_device_map_errors(text, match):
    with pytest.raises(PlacementError, match=match):
        parse_cuda_device_map(text)


def test_local_cuda_devices():
    assert parse_local_cuda_devices("0,1,3") == (0, 1, 3)
    assert format_local_cuda_devices(parse_local_cuda_devices("2,0")) == "2,0"
    with pytest.raises(PlacementError, match="'x'"):
        parse_local_cuda_devices("0,x")
    with pytest.raises(PlacementError, match="twice"):
        parse_local_cuda_devices("1,1")


def cluster():
    return procs(node("a", 4), node("b", 2), node("c", 2))


def test_override_replaces_computed_map_and_inverse_follows():
    ps = cluster()
    override = device_map_override_from_di({0: "1_2_1,2_3_0"}, ps)
    assert override == {"w0": {"w1": {"cuda:2": "cuda:1"}, "w2": {"cuda:3": "cuda:0"}}}
    plan = make_plan(ps, [LabelSpec("g", 3, 1)], device_map_override=override)
    check_with_torch(plan, ps)
    w0, w1, w2 = plan.processes
    assert w0.device_maps["w1"] == {"cuda:2": "cuda:1"}
    assert w1.device_maps["w0"] == {"cuda:1": "cuda:2"}
    assert w2.device_maps["w0"] == {"cuda:0": "cuda:3"}
    assert w0.devices == ["cuda:2", "cuda:3"]
    assert w1.devices == ["cuda:0", "cuda:1"]  # cuda:0 still maps to w2
    assert di_device_map_for(plan, 0) == "1_2_1,2_3_0"


def test_override_errors_name_the_bad_entry():
    ps = cluster()
    with pytest.raises(
        PlacementError,
        match=r"'w0' -> 'w1': entry cuda:0 -> cuda:5: peer device cuda:5 does not exist "
        r"\('w1' sees 2 GPU",
    ):
        make_plan(ps, device_map_override={"w0": {"w1": {"cuda:0": "cuda:5"}}})
    with pytest.raises(
        PlacementError, match=r"entry cuda:1 -> cuda:0: cuda:0 is already the target"
    ):
        make_plan(ps, device_map_override={"w0": {"w1": {"cuda:0": "cuda:0", "cuda:1": "cuda:0"}}})
    with pytest.raises(PlacementError, match="peer 'nobody' is not a process"):
        make_plan(ps, device_map_override={"w0": {"nobody": {"cuda:0": "cuda:0"}}})
    with pytest.raises(PlacementError, match="'cpu' is not a CUDA device"):
        make_plan(ps, device_map_override={"w0": {"w1": {"cpu": "cuda:0"}}})
    with pytest.raises(PlacementError, match="transport='cpu'"):
        make_plan(ps, transport="cpu", device_map_override={"w0": {"w1": {0: 0}}})
    with pytest.raises(PlacementError, match="node 9 is not a rank"):
        device_map_override_from_di({0: "9_0_0"}, ps)


def test_override_on_both_sides_is_kept_as_given():
    ps = cluster()
    override = {"w0": {"w1": {"cuda:0": "cuda:1"}}, "w1": {"w0": {"cuda:0": "cuda:3"}}}
    plan = make_plan(ps, device_map_override=override)
    check_with_torch(plan, ps)
    assert plan.processes[1].device_maps["w0"] == {"cuda:0": "cuda:3"}
    assert set(plan.processes[0].devices) >= {"cuda:0", "cuda:3"}
    assert set(plan.processes[1].devices) >= {"cuda:0", "cuda:1"}
