"""Rank 0's bookkeeping of ranks given to late workers: a rank whose worker never joins
is not held for ever, and the worker that lost it cannot join after all. The same for a
rank given to a process growing the cluster."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
import torch.distributed as dist

from actorrt.cluster import process_setup
from actorrt.cluster.driver import Driver
from actorrt.errors import ClusterError
from actorrt.placement import Layout, NodeDescription
from actorrt.runtime import group


@dataclass
class _Slot:
    gpus: tuple[int, ...] = ()


@dataclass
class _Plan:
    def for_rank(self, rank: int) -> _Slot:
        return _Slot()


@dataclass
class _Runtime:  # what _late_claim and _admit read before they act
    plan: _Plan = field(default_factory=_Plan)
    stopped: threading.Event = field(default_factory=threading.Event)
    dead_workers: frozenset[str] = frozenset({"worker2"})


@dataclass
class _Server:
    store: Any
    session: str = ""


def _driver(join_timeout: float) -> Driver:
    store = dist.HashStore()
    store.set_timeout(timedelta(seconds=5))
    group.rpc_store(store).set("names/_ALL_WORKER_INFOS", "worker1-1,")
    driver = Driver(
        _Server(store),  # type: ignore[arg-type]
        None,
        shutdown_timeout=5.0,
        log_to_driver=False,
        join_timeout=join_timeout,
    )
    driver.rt = _Runtime()  # type: ignore[assignment]
    driver._world_size = driver._next_rpc_id = 3
    return driver


CLAIM = {"rank": 2, "world_size": 3, "description": {"gpus": []}, "pid": 4242}


def test_a_rank_given_to_a_worker_that_never_joins_goes_to_the_next_claim():
    driver = _driver(join_timeout=0.2)
    first = driver._late_claim(CLAIM, waited=0.0)
    assert isinstance(first, dict) and first["join"] == {"rank": 2, "rpc_id": 3}
    refused = driver._late_claim(CLAIM, waited=0.0)
    assert isinstance(refused, str) and "already replacing rank 2" in refused
    assert "0.2 s to join" in refused
    time.sleep(0.3)  # the first worker never joined
    second = driver._late_claim(CLAIM, waited=0.0)
    assert isinstance(second, dict) and second["join"] == {"rank": 2, "rpc_id": 4}
    # the first worker, late after all, is turned away: the rank is the second's now
    with pytest.raises(ClusterError, match="given to another worker"):
        driver._admit("worker2", 3)


def test_within_the_join_timeout_the_rank_stays_with_its_worker():
    driver = _driver(join_timeout=60.0)
    assert isinstance(driver._late_claim(CLAIM, waited=0.0), dict)
    for _ in range(3):
        assert "already replacing" in str(driver._late_claim(CLAIM, waited=0.0))


def _description(host: str) -> dict[str, Any]:
    return NodeDescription(hostname=host, boot_id=f"boot-{host}", num_cpus=4).to_dict()


def test_a_rank_given_to_a_grower_that_never_joins_goes_to_the_next_grower():
    driver = _driver(join_timeout=0.2)
    driver._descriptions = [_description("a"), _description("a"), _description("a")]
    plan = process_setup.cluster_spec(driver._descriptions, Layout(), transport="cpu").plan()
    first = driver._grow(driver.rt, plan, _description("b"))  # type: ignore[arg-type]
    assert isinstance(first, dict) and first["join"] == {"rank": 3, "rpc_id": 3}
    second = driver._grow(driver.rt, plan, _description("c"))  # type: ignore[arg-type]
    assert isinstance(second, dict) and second["join"] == {"rank": 4, "rpc_id": 4}
    time.sleep(0.3)  # neither joined
    third = driver._grow(driver.rt, plan, _description("d"))  # type: ignore[arg-type]
    assert isinstance(third, dict) and third["join"] == {"rank": 3, "rpc_id": 5}
    assert [d["hostname"] for d in driver._descriptions] == ["a", "a", "a", "d", "c"]
    # the plan the third joins with has it on its own host, and no pair to rank 4's
    # process, which never joined
    grown = plan.grown(driver._growing["worker3"][0], 3)
    assert grown.for_rank(3).name == "worker3"
    assert all("worker4" not in (p.src, p.dst) for p in grown.pairs)
    ends = [{p.src, p.dst} for p in grown.pairs if "worker3" in (p.src, p.dst)]
    peers = set().union(*ends) - {"worker3"}
    assert peers == {"driver", "worker1", "worker2"}
    with pytest.raises(ClusterError, match="given to another worker"):
        driver._admit("worker3", 3)  # the first grower, late after all


class _GrowingPlan:
    processes: tuple[Any, ...] = ()

    def grown(self, bigger: Any, rank: int) -> _GrowingPlan:
        return self


@dataclass
class _GrowingRuntime:
    """Records, in order, the grower's admission and its entry in the directory."""

    events: list[str] = field(default_factory=list)
    plan: _GrowingPlan = field(default_factory=_GrowingPlan)
    stopped: threading.Event = field(default_factory=threading.Event)
    descriptions: list[Any] = field(default_factory=list)
    pids: dict[int, int] = field(default_factory=dict)
    local_worker_pids: list[int] = field(default_factory=list)

    @property
    def directory(self) -> Any:
        events = self.events

        class _Directory:
            def grow(self, plan: Any, info: Any) -> None:
                events.append("placeable")

        return _Directory()

    def admit(self, worker: str, rpc_id: int, replaces: bool = True) -> None:
        self.events.append(f"every process knows {worker}")


def test_a_grower_becomes_placeable_only_once_every_process_knows_it():
    """Was: the directory took the grower before its RPC id reached any agent, and an
    actor placed on it at once failed ("could not find destination url for name
    worker3"; CI, test_a_dead_rank_comes_back_and_a_running_cluster_grows)."""
    driver = _driver(join_timeout=60.0)
    rt = driver.rt = _GrowingRuntime()  # type: ignore[assignment]
    driver._descriptions = [_description("a")] * 4
    driver._growing["worker3"] = (None, 3, None)  # type: ignore[assignment]
    driver._admit("worker3", 5)
    assert rt.events == ["every process knows worker3", "placeable"]
    assert "worker3" in driver.workers
