"""Where remote functions run: executors per process, their threads and GPU groups."""

from __future__ import annotations

import dataclasses

import pytest
from placement_testlib import node, procs

from actorrt.errors import PlacementError
from actorrt.placement import LabelSpec, make_plan
from actorrt.placement.functions import (
    FREE_THREADS,
    executor_id,
    function_spots,
    parse_executor_id,
)
from actorrt.placement.resources import Resources


def driver_and(*workers):
    """A driver (hosting no actors) on the first worker's host, then the workers."""
    driver = dataclasses.replace(workers[0], hosts_actors=False)
    return procs(driver, *workers)


def test_executor_ids_round_trip():
    for threads, groups in [(4, ()), (2, ((0,), (1,))), (1, ((0, 1), (2, 3)))]:
        assert parse_executor_id(executor_id(threads, groups)) == (threads, groups)
    assert executor_id(2, ((0,), (1,))) == "fn/2/0.1"
    with pytest.raises(ValueError, match="not a function executor"):
        parse_executor_id("0" * 32)


def test_cpu_functions_split_the_hosts_cpus_among_its_processes():
    # 8 CPUs per host, 2 worker processes on host a, 1 on host b; the driver hosts none.
    ps = driver_and(node("a"), node("a"), node("b"))
    plan = make_plan(ps, [])
    spots = function_spots(ps, plan, None, Resources(1, 0))
    assert [(s.worker, s.threads) for s in spots] == [("w1", 4), ("w2", 4), ("w3", 8)]
    assert [s.executor for s in spots] == ["fn/4", "fn/4", "fn/8"]
    halves = function_spots(ps, plan, None, Resources(0.5, 0))
    assert [s.threads for s in halves] == [8, 8, 16]
    assert {s.threads for s in function_spots(ps, plan, None, Resources(0, 0))} == {FREE_THREADS}
    big = function_spots(ps, plan, None, Resources(6, 0))  # more than a process's share
    assert [s.threads for s in big] == [1, 1, 1]
    with pytest.raises(PlacementError, match="more CPUs than any host has"):
        function_spots(ps, plan, None, Resources(9, 0))


def test_each_gpu_of_a_host_goes_to_one_process():
    ps = driver_and(node("a", 3), node("a", 3))
    plan = make_plan(ps, [])
    one = function_spots(ps, plan, None, Resources(1, 1))
    assert [(s.worker, s.executor, s.threads) for s in one] == [
        ("w1", "fn/2/0.2", 2),
        ("w2", "fn/1/1", 1),
    ]
    quarter = function_spots(ps, plan, None, Resources(1, 0.25))
    assert [s.threads for s in quarter] == [8, 4]  # 4 calls share each GPU
    two = function_spots(ps, plan, None, Resources(1, 2))
    assert [(s.worker, s.executor) for s in two] == [("w1", "fn/1/0+2")]
    with pytest.raises(PlacementError, match="no live process has that many GPUs"):
        function_spots(ps, plan, None, Resources(1, 3))
    cpu_only = driver_and(node("a"), node("a"))
    with pytest.raises(PlacementError, match="num_gpus=1"):
        function_spots(cpu_only, make_plan(cpu_only, []), None, Resources(1, 1))


def test_labels_follow_the_layout_or_what_processes_offer():
    ps = driver_and(node("a"), node("a"), node("a"))
    plan = make_plan(ps, [LabelSpec("learner", 1), LabelSpec("collector", 2)])
    holders = {p.name for p in plan.processes if "collector" in p.labels}
    spots = function_spots(ps, plan, "collector", Resources(1, 0))
    assert {s.worker for s in spots} == holders and len(holders) == 2
    assert len(function_spots(ps, plan, None, Resources(1, 0))) == 3  # no label: any
    with pytest.raises(PlacementError, match="label 'evaluator' is not in the cluster's layout"):
        function_spots(ps, plan, "evaluator", Resources(1, 0))
    offered = driver_and(node("a", labels=("env",)), node("a", labels=("gpu",)))
    free = make_plan(offered, [])
    assert [s.worker for s in function_spots(offered, free, "env", Resources(1, 0))] == ["w1"]
    with pytest.raises(PlacementError, match="no live process with label 'sim'"):
        function_spots(offered, free, "sim", Resources(1, 0))


def test_dead_processes_are_left_out():
    ps = driver_and(node("a"), node("a"))
    plan = make_plan(ps, [])
    spots = function_spots(ps, plan, None, Resources(1, 0), alive=[True, False, True])
    assert [s.worker for s in spots] == ["w2"]
    assert spots[0].threads == 4  # the dead one still counts in the host's split
    with pytest.raises(PlacementError, match="no live process that hosts actors"):
        function_spots(ps, plan, None, Resources(1, 0), alive=[True, False, False])
