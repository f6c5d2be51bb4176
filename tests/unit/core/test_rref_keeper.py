"""The RRef keeper: user RRefs are held in Python until torch's C++ side let go of them.

Fake RRefs stand in for torch's: the keeper reads only ``is_owner()`` and
``confirmed_by_owner()``. A weak reference tells whether the keeper still holds one.
"""

import pickle
import time
import weakref

import pytest

from actorrt.runtime import rref_keeper


class FakeRRef:
    def __init__(self, owner: bool = False, confirmed: bool = False) -> None:
        self.owner = owner
        self.confirmed = confirmed

    def is_owner(self) -> bool:
        return self.owner

    def confirmed_by_owner(self) -> bool:
        return self.confirmed


@pytest.fixture(autouse=True)
def fresh_keeper(monkeypatch):
    monkeypatch.setattr(rref_keeper, "SETTLE_S", 0.8)
    monkeypatch.setattr(rref_keeper, "SENT_HOLD_S", 0.6)
    rref_keeper.release_all()
    yield
    rref_keeper.release_all()


def _gone_within(ref: weakref.ref, seconds: float) -> float | None:
    """Seconds until ``ref`` died (polled), or None if it lives after ``seconds``."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if ref() is None:
            return time.monotonic() - start
        time.sleep(0.02)
    return None


def test_a_received_user_rref_is_held_until_its_owner_confirmed_it():
    rref = FakeRRef()
    rref_keeper.hold_received(rref)
    ref = weakref.ref(rref)
    del rref
    assert _gone_within(ref, 1.0) is None, "let go before its owner confirmed it"
    assert rref_keeper.holds(ref())
    ref().confirmed = True
    waited = _gone_within(ref, 5.0)
    assert waited is not None, "still held 5 s after its owner confirmed it"
    assert waited >= 0.8 - 0.05, f"let go {waited:.2f} s after confirmation, before SETTLE_S"
    assert rref_keeper.held() == 0


def test_a_sent_user_rref_is_held_for_sent_hold_s_after_its_last_send():
    rref = FakeRRef(confirmed=False)  # e.g. received from its owner: never flagged
    start = time.monotonic()
    rref_keeper.hold_sent(rref)
    time.sleep(0.3)
    rref_keeper.hold_sent(rref)  # sent again: held SENT_HOLD_S from now
    ref = weakref.ref(rref)
    del rref
    assert _gone_within(ref, 5.0) is not None, "a sent RRef was never let go"
    assert time.monotonic() - start >= 0.3 + 0.6 - 0.05


def test_an_rref_received_and_sent_on_goes_when_neither_holds_it():
    rref = FakeRRef(confirmed=False)
    rref_keeper.hold_received(rref)
    rref_keeper.hold_sent(rref)
    ref = weakref.ref(rref)
    del rref
    assert _gone_within(ref, 1.5) is None, "let go before its owner confirmed it"
    ref().confirmed = True
    assert _gone_within(ref, 5.0) is not None


def test_owner_rrefs_are_never_held():
    rref = FakeRRef(owner=True)
    rref_keeper.hold_received(rref)
    rref_keeper.hold_sent(rref)
    assert rref_keeper.held() == 0
    ref = weakref.ref(rref)
    del rref
    assert ref() is None


def test_an_rref_carried_in_a_message_is_held_from_its_arrival():
    before = rref_keeper.arrivals()
    arrived = pickle.loads(pickle.dumps(rref_keeper.Carried(FakeRRef())))
    assert isinstance(arrived, FakeRRef)  # the RRef itself, unwrapped on arrival
    assert rref_keeper.arrivals() == before + 1
    assert rref_keeper.holds(arrived)
    ref = weakref.ref(arrived)
    del arrived
    assert ref() is not None


def test_release_all_lets_go_of_everything():
    rrefs = [FakeRRef(), FakeRRef(confirmed=True)]
    rref_keeper.hold_received(rrefs[0])
    rref_keeper.hold_sent(rrefs[1])
    refs = [weakref.ref(r) for r in rrefs]
    del rrefs
    assert rref_keeper.held() == 2
    rref_keeper.release_all()
    assert rref_keeper.held() == 0
    assert all(r() is None for r in refs)


def test_the_keeper_sleeps_while_it_holds_nothing_and_wakes_for_a_new_hold(monkeypatch):
    looks = []
    due = rref_keeper._due

    def counted():
        looks.append(time.monotonic())
        return due()

    monkeypatch.setattr(rref_keeper, "_due", counted)
    rref = FakeRRef(confirmed=True)
    rref_keeper.hold_received(rref)
    ref = weakref.ref(rref)
    del rref
    assert _gone_within(ref, 5.0) is not None
    time.sleep(0.5)  # its last look found nothing held
    before = len(looks)
    time.sleep(1.0)
    assert len(looks) - before <= 1, f"{len(looks) - before} looks in 1 s while holding nothing"
    again = FakeRRef(confirmed=True)
    rref_keeper.hold_received(again)
    ref = weakref.ref(again)
    del again
    assert _gone_within(ref, 5.0) is not None, "a hold made while it slept was never let go"
