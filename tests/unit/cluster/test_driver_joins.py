"""Rank 0's bookkeeping of ranks given to late workers: a rank whose worker never joins
is not held for ever, and the worker that lost it cannot join after all."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
import torch.distributed as dist

from actorrt.cluster.driver import Driver
from actorrt.errors import ClusterError
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
