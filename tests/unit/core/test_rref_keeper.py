"""The RRef keeper: user RRefs are held in Python until torch's C++ side let go of them.

Fake RRefs stand in for torch's: the keeper reads only ``is_owner()``,
``confirmed_by_owner()`` and ``owner_name()``, and a carried one travels as what its
``_serialize()`` gives (torch's fork data, made again by ``rref_keeper._deserialize``,
faked here too). A weak reference tells whether the keeper still holds one.
"""

import itertools
import pickle
import threading
import time
import weakref

import pytest

from actorrt.runtime import rref_keeper

_forks = itertools.count(1)
ME = 3  # the worker id of this process in the fakes' fork data


def fork() -> tuple[int, int]:
    """A new fork id of this process (as torch's ``_serialize()`` makes one per send)."""
    return ME, next(_forks)


class FakeRRef:
    def __init__(self, owner: bool = False, confirmed: bool = False, where: str = "w1") -> None:
        self.owner = owner
        self.confirmed = confirmed
        self.where = where

    def is_owner(self) -> bool:
        return self.owner

    def confirmed_by_owner(self) -> bool:
        return self.confirmed

    def owner_name(self) -> str:
        return self.where

    def _serialize(self) -> tuple:
        # torch's fork data: owner id, RRef id (2), fork id (2), parent (sender) id, type
        return (1, 1, 7, *fork(), ME, self.where)


@pytest.fixture
def made_on(monkeypatch):
    """The threads the carried fakes were made on (``rref_keeper._deserialize``)."""
    threads: list[str] = []

    def deserialize(data: tuple) -> FakeRRef:
        threads.append(threading.current_thread().name)
        return FakeRRef(where=data[6])

    monkeypatch.setattr(rref_keeper, "_deserialize", deserialize)
    return threads


@pytest.fixture(autouse=True)
def fresh_keeper(monkeypatch):
    monkeypatch.setattr(rref_keeper, "SETTLE_S", 0.8)
    monkeypatch.setattr(rref_keeper, "SENT_HOLD_S", 0.6)
    monkeypatch.setattr(rref_keeper, "ACCEPTED_SETTLE_S", 0.3)
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
    rref_keeper.hold_sent(rref, fork())
    time.sleep(0.3)
    rref_keeper.hold_sent(rref, fork())  # sent again: held SENT_HOLD_S from now
    ref = weakref.ref(rref)
    del rref
    assert _gone_within(ref, 5.0) is not None, "a sent RRef was never let go"
    assert time.monotonic() - start >= 0.3 + 0.6 - 0.05


def test_a_sent_user_rref_goes_soon_after_its_receiver_said_torch_accepted_it(monkeypatch):
    monkeypatch.setattr(rref_keeper, "SENT_HOLD_S", 30.0)
    rref, other = FakeRRef(), FakeRRef()
    mine, theirs = fork(), fork()
    rref_keeper.hold_sent(rref, mine)
    rref_keeper.hold_sent(rref, fork())  # sent twice: each fork is held on its own
    rref_keeper.hold_sent(other, theirs)
    ref = weakref.ref(rref)
    del rref
    assert _gone_within(ref, 0.5) is None, "let go before its receivers accepted it"
    rref_keeper.rpc_children_accepted([mine, (ME, 10**9)])  # an unknown fork is ignored
    assert _gone_within(ref, 1.0) is None, "let go while its other send was not accepted"
    start = time.monotonic()
    rref_keeper.rpc_children_accepted([list(f) for f in rref_keeper._sent if f != theirs])
    assert _gone_within(ref, 5.0) is not None, "still held 5 s after its receivers accepted it"
    assert time.monotonic() - start >= 0.3 - 0.05, "let go before ACCEPTED_SETTLE_S"
    assert rref_keeper.holds(other)  # not accepted yet: held still


@pytest.mark.parametrize("at_owner", [True, False])
def test_the_receiver_of_a_carried_rref_tells_its_sender_once_torch_accepted_it(
    monkeypatch, at_owner
):
    told: list[tuple[int, list]] = []
    monkeypatch.setattr(rref_keeper, "_tell", lambda sender, forks: told.append((sender, forks)))
    made: list[FakeRRef] = []

    def deserialize(data: tuple) -> FakeRRef:
        made.append(FakeRRef(owner=at_owner, where=data[6]))
        return made[-1]

    monkeypatch.setattr(rref_keeper, "_deserialize", deserialize)
    data = FakeRRef()._serialize()
    arriving = rref_keeper._arriving(data)  # what unpickling a Carried runs
    assert arriving.rref() is made[0]
    if not at_owner:  # told once its owner confirmed it (torch then sent the accept)
        time.sleep(0.5)
        assert told == []
        made[0].confirmed = True
    deadline = time.monotonic() + 5
    while not told and time.monotonic() < deadline:
        time.sleep(0.02)
    assert told == [(ME, [(data[3], data[4])])]


def test_an_rref_received_and_sent_on_goes_when_neither_holds_it():
    rref = FakeRRef(confirmed=False)
    rref_keeper.hold_received(rref)
    rref_keeper.hold_sent(rref, fork())
    ref = weakref.ref(rref)
    del rref
    assert _gone_within(ref, 1.5) is None, "let go before its owner confirmed it"
    ref().confirmed = True
    assert _gone_within(ref, 5.0) is not None


def test_owner_rrefs_are_never_held():
    rref = FakeRRef(owner=True)
    rref_keeper.hold_received(rref)
    rref_keeper.hold_sent(rref, fork())
    assert rref_keeper.held() == 0
    ref = weakref.ref(rref)
    del rref
    assert ref() is None


def test_an_rref_carried_in_a_message_is_made_apart_and_held_from_its_arrival(made_on):
    before = rref_keeper.arrivals()
    arriving = pickle.loads(pickle.dumps(rref_keeper.Carried(FakeRRef(where="w7"))))
    assert isinstance(arriving, rref_keeper.Arriving)  # made on the arrivals thread
    arrived = arriving.rref()
    assert isinstance(arrived, FakeRRef) and arrived.owner_name() == "w7"
    # Not on the thread that unpickled (torch would hold its request until confirmed).
    assert made_on == ["actorrt-rref-arrivals"]
    assert rref_keeper.arrivals() == before + 1
    assert rref_keeper.holds(arrived)
    ref = weakref.ref(arrived)
    del arrived, arriving
    assert ref() is not None


def test_an_rref_whose_owner_is_gone_arrives_as_none(monkeypatch):
    def refuse(data: tuple) -> FakeRRef:
        raise RuntimeError("name:w2,rank:2 could not find destination id 1")

    monkeypatch.setattr(rref_keeper, "_deserialize", refuse)
    before = rref_keeper.arrivals()
    arriving = pickle.loads(pickle.dumps(rref_keeper.Carried(FakeRRef())))
    assert arriving.rref() is None  # a dead actor's handle, without its lease
    assert rref_keeper.arrivals() == before + 1
    assert rref_keeper.held() == 1  # the sender's hold of what it sent (this process's too)


def test_the_rrefs_a_dead_owner_never_confirmed_are_let_go(monkeypatch):
    theirs, mine = FakeRRef(where="w1"), FakeRRef(where="w2")
    sent, sent_mine = FakeRRef(where="w1"), FakeRRef(where="w2")
    for rref in (theirs, mine):
        rref_keeper.hold_received(rref)
    rref_keeper.hold_sent(sent, fork())
    rref_keeper.hold_sent(sent_mine, fork())
    found = FakeRRef(where="w1")  # held by an object a finder knows (an actor handle)
    monkeypatch.setattr(rref_keeper, "_finders", [])
    rref_keeper.find_owned_by(lambda worker: [found] if worker == "w1" else [])
    pinned = rref_keeper.pinned()
    gone = weakref.ref(theirs)
    del theirs
    assert rref_keeper.owner_died("w1") == 1
    assert gone() is None, "still held after its owner died"
    assert rref_keeper.holds(mine) and rref_keeper.holds(sent_mine)
    # Kept for good: dropped, they would send the dead owner a delete (torch retries it).
    assert not rref_keeper.holds(sent) and rref_keeper.pinned() == pinned + 2
    assert rref_keeper.owner_died("w1") == 0


def test_release_all_lets_go_of_everything():
    rrefs = [FakeRRef(), FakeRRef(confirmed=True)]
    rref_keeper.hold_received(rrefs[0])
    rref_keeper.hold_sent(rrefs[1], fork())
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


def test_a_fork_its_owner_sent_is_not_held_for_a_confirmation_that_never_comes(monkeypatch):
    """An owner registers the fork it sends, and torch never flags the receiver's copy
    confirmed: held until then, an object lease sent by rank 0 would never go."""
    made: list[FakeRRef] = []

    def deserialize(data: tuple) -> FakeRRef:
        made.append(FakeRRef(where="w0"))
        return made[-1]

    monkeypatch.setattr(rref_keeper, "_deserialize", deserialize)
    data = (0, 0, 5, 0, 6, 0, "PyObject")  # owner 0, sent by 0 (its parent)
    arriving = rref_keeper._arriving(data, "lease-key")
    arrived = arriving.rref()
    assert arrived is made[0] and not rref_keeper.holds(arrived)
    ref = weakref.ref(arrived)
    del arrived, arriving, made[:]
    assert ref() is None


def test_the_receiver_of_a_carried_lease_says_which_fork_it_holds(monkeypatch, made_on):
    told: list[tuple] = []
    rref_keeper.on_lease_arrival(lambda owner, *fork: told.append((owner, *fork)))
    try:
        carried = rref_keeper.Carried(FakeRRef(), lease="obj-1")
        arriving = pickle.loads(pickle.dumps(carried))
        assert arriving.rref() is not None
        plain = pickle.loads(pickle.dumps(rref_keeper.Carried(FakeRRef())))  # a handle's
        assert plain.rref() is not None
    finally:
        rref_keeper.on_lease_arrival(None)
    (owner, key, rref_id, (made_by, _)), *others = told
    assert (owner, key, rref_id, made_by) == (1, "obj-1", (1, 7), ME) and others == [], told


class _Repr:
    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def test_a_user_rrefs_ids_are_read_from_torchs_repr():
    text = (
        "UserRRef(RRefId = GloballyUniqueId(created_on=1, local_id=0), "
        "ForkId = GloballyUniqueId(created_on=1, local_id=12))"
    )
    assert rref_keeper.ids_of(_Repr(text)) == ((1, 0), (1, 12))
    assert (
        rref_keeper.ids_of(_Repr("OwnerRRef(GloballyUniqueId(created_on=0, local_id=3))")) is None
    )
    assert rref_keeper.ids_of(_Repr("something else")) is None
