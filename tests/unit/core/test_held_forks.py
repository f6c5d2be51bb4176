"""Held forks: an owner drops the forks of its leases that a dead process held.

No processes: torch's ``PyRRef._deserialize`` (which, at an owner, drops the fork it is
given) and ``get_worker_info`` are faked; what the owner hands them is what is checked.
"""

import threading
import time
from types import SimpleNamespace

import pytest

from actorrt.runtime import held_forks
from actorrt.runtime.held_forks import HeldForks

ME = 0  # the owner's worker id


@pytest.fixture
def dropped(monkeypatch):
    """The fork data the owner unpickled to drop forks, as they come (a list)."""
    seen: list[tuple] = []
    done = threading.Event()

    def deserialize(data: tuple) -> object:
        seen.append(data)
        done.set()
        return object()

    monkeypatch.setattr(held_forks.rpc.PyRRef, "_deserialize", staticmethod(deserialize))
    monkeypatch.setattr(held_forks.rpc, "get_worker_info", lambda: SimpleNamespace(id=ME))
    monkeypatch.setattr(held_forks, "DEAD_HOLDER_SETTLE_S", 0.05)
    return seen


def _owner() -> HeldForks:
    return HeldForks("driver", wake=lambda: None, tells=False)


def _settled(seen: list, count: int, seconds: float = 5.0) -> list:
    deadline = time.monotonic() + seconds
    while len(seen) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # and no more than that
    return seen


def test_a_dead_holders_forks_of_a_live_lease_are_dropped_at_the_owner(dropped):
    forks = _owner()
    forks.watch("obj", True)
    forks.note("worker2", [("obj", (2, 0), (2, 1)), ("obj", (3, 4), (3, 5))])
    forks.note("worker3", [("obj", (2, 0), (3, 9))])
    forks.holder_died("worker2")
    # Each as a fork the owner (parent) sent itself: torch's owner then deletes it.
    assert _settled(dropped, 2) == [
        (ME, 2, 0, 2, 1, ME, "PyObject"),
        (ME, 3, 4, 3, 5, ME, "PyObject"),
    ]
    forks.holder_died("worker2")  # told twice: nothing more
    assert _settled(dropped, 3, 0.3) == dropped[:2]


def test_the_forks_of_a_lease_that_went_are_not_dropped(dropped):
    forks = _owner()
    forks.watch("obj", True)
    forks.note("worker2", [("obj", (2, 0), (2, 1))])
    forks.note("worker2", [("other", (2, 0), (2, 2))])  # never made here: not recorded
    forks.watch("obj", False)  # torch dropped it (every holder let go)
    forks.holder_died("worker2")
    assert _settled(dropped, 1, 0.3) == []


def test_a_lease_gone_between_the_death_and_the_drop_is_left_alone(dropped, monkeypatch):
    monkeypatch.setattr(held_forks, "DEAD_HOLDER_SETTLE_S", 0.3)
    forks = _owner()
    forks.watch("obj", True)
    forks.note("worker2", [("obj", (2, 0), (2, 1))])
    forks.holder_died("worker2")
    forks.watch("obj", False)  # within the settle time
    assert _settled(dropped, 1, 0.8) == []


def test_an_owner_remembers_the_newest_forks_per_holder_only(dropped):
    forks = _owner()
    forks.watch("obj", True)
    many = held_forks.FORKS_KEPT_PER_HOLDER + 10
    forks.note("worker2", [("obj", (2, 0), (2, i)) for i in range(many)])
    forks.holder_died("worker2")
    seen = _settled(dropped, held_forks.FORKS_KEPT_PER_HOLDER)
    assert [d[4] for d in seen] == list(range(10, many))


def test_a_holder_tells_each_owner_its_forks_in_one_message(monkeypatch):
    sent: list[tuple] = []
    monkeypatch.setattr(
        held_forks.rpc, "rpc_async", lambda to, fn, args: sent.append((to, fn, args))
    )
    woken = []
    holder = HeldForks("worker2", wake=lambda: woken.append(1), tells=False)
    holder.holds(0, "obj", (2, 0), (2, 1))
    holder.holds(0, "obj2", (2, 3), (2, 4))
    holder.holds(5, "actor", (5, 0), (2, 7))
    holder.tell()
    assert woken == [1, 1, 1]
    assert sent == [
        (
            0,
            held_forks.rpc_lease_forks,
            ("worker2", [("obj", (2, 0), (2, 1)), ("obj2", (2, 3), (2, 4))]),
        ),
        (5, held_forks.rpc_lease_forks, ("worker2", [("actor", (5, 0), (2, 7))])),
    ]
    holder.close()
    holder.holds(0, "obj", (2, 0), (2, 9))  # closed: nothing more
    holder.tell()
    assert len(sent) == 2


def test_at_the_end_every_fork_told_of_is_dropped_those_of_the_dead_too_once(dropped, monkeypatch):
    # After a death nobody lets go at shutdown; what is still registered, torch prints as
    # a leak. A dead holder's forks still waiting for their settle time go too, once.
    monkeypatch.setattr(held_forks, "DEAD_HOLDER_SETTLE_S", 0.3)
    forks = _owner()
    forks.watch("obj", True)
    forks.watch("gone", True)
    forks.note("worker2", [("obj", (2, 0), (2, 1))])
    forks.note("worker3", [("obj", (2, 0), (3, 1)), ("gone", (2, 5), (3, 2))])
    forks.note("driver_1", [("obj", (2, 0), (0, 7))])  # rank 0 tells too
    forks.watch("gone", False)
    forks.holder_died("worker2")
    forks.close()
    forks.drop_all()
    assert sorted(d[3:5] for d in dropped) == [(0, 7), (2, 1), (3, 1)]
    assert _settled(dropped, 4, 0.6) == dropped[:3]  # the dead holder's timer: nothing


def test_a_fork_told_before_its_lease_was_made_here_counts_once_it_is(dropped, monkeypatch):
    # A process that made an actor tells the host its fork at once; torch may handle that
    # word before the creation itself. Was: not recorded, so the fork outlived its holder.
    monkeypatch.setattr(held_forks, "EARLY_KEPT_S", 0.2)
    forks = _owner()
    forks.note("worker2", [("actor", (2, 0), (2, 1))])
    forks.note("worker2", [("never", (2, 3), (2, 4))])  # a lease that went before its word
    forks.watch("actor", True)  # made now
    time.sleep(0.3)
    forks.note("worker3", [("other", (3, 0), (3, 1))])  # prunes what waited too long
    assert set(forks._early) == {"other"}
    forks.holder_died("worker2")
    assert _settled(dropped, 1) == [(ME, 2, 0, 2, 1, ME, "PyObject")]


def test_a_fork_that_cannot_be_dropped_does_not_keep_the_others(dropped, monkeypatch):
    seen = []

    def deserialize(data: tuple) -> object:
        if data[4] == 1:
            raise RuntimeError("its OwnerRRef is gone here")
        seen.append(data)
        return object()

    monkeypatch.setattr(held_forks.rpc.PyRRef, "_deserialize", staticmethod(deserialize))
    forks = _owner()
    forks.watch("obj", True)
    forks.note("worker2", [("obj", (2, 0), (2, 1)), ("obj", (2, 0), (2, 2))])
    forks.holder_died("worker2")
    assert [d[3:5] for d in _settled(seen, 1)] == [(2, 2)]
