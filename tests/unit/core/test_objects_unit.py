"""Objects without a cluster: what stays at its owner, how refs pack, lifetime bookkeeping."""

from __future__ import annotations

import dataclasses
import pickle
import threading
import time
import types
import weakref

import pytest
import torch

import actorrt
from actorrt.errors import ActorError, ObjectLostError
from actorrt.refs import ObjectRef, _failed_ref, _inline_ref, _located_ref
from actorrt.runtime import context, objects, payload, trace
from actorrt.runtime.objects import ObjectLocation, ObjectStore, resolve_args
from actorrt.runtime.protocol import COPY, KEEP, LOST, OBJECT, OK, RAISE, RELAY, decode_reply

MB = 1 << 20


@dataclasses.dataclass
class Batch:
    obs: torch.Tensor
    note: str


def _no_road(_peer):
    return None


def test_a_small_value_is_packed_and_a_large_one_is_measured_instead():
    small = (OK, {"t": torch.zeros(16)})
    assert isinstance(payload.pack_or_measure(small, "p", _no_road, MB), tuple)
    big = (OK, {"t": torch.zeros(MB // 4 + 1)})  # float32: just over 1 MiB
    assert payload.pack_or_measure(big, "p", _no_road, MB) == MB + 4
    # a value that is not plain (a dataclass) is measured by its pickle and its tensors
    other = (OK, Batch(torch.zeros(MB, dtype=torch.uint8), "n"))
    size = payload.pack_or_measure(other, "p", _no_road, MB)
    assert isinstance(size, int) and size >= MB
    # an atom reply is never measured
    assert payload.pack_or_measure((OK, 5), "p", _no_road, 0) == (None, [(OK, 5)])


def test_a_kept_value_never_took_the_road():
    taken = []

    def road_for(_peer):
        def road(t):
            taken.append(t.nbytes)
            return t

        return road

    payload.pack_or_measure(
        (OK, Batch(torch.zeros(2 * MB, dtype=torch.uint8), "x")), "p", road_for, MB
    )
    assert taken == []  # measured before any tensor went to the peer's road (no copy)
    wire = payload.pack_or_measure((OK, Batch(torch.zeros(8), "x")), "p", road_for, MB)
    assert taken == [32]  # small: packed, each tensor through the road once
    blob, side = wire
    assert payload.unpack((blob, side))[1].note == "x"


def test_wire_bytes_counts_pickled_and_tensor_bytes():
    assert trace.wire_bytes(payload.pack({"t": torch.zeros(10)})) == 40
    wire = payload.pack(Batch(torch.zeros(100, dtype=torch.uint8), "n"))
    assert trace.wire_bytes(wire) == len(wire[0]) + 100


def test_refs_of_each_state_travel_inside_a_packed_value():
    loc = ObjectLocation("a" * 32, "worker3", 64 * MB, None)
    located = _located_ref("A.make", "f" * 32, "", loc)
    inline = _inline_ref("A.small", None, "", torch.arange(3))
    failed = _failed_ref("A.bad", None, "", ActorError("A.bad raised ValueError: no", None, "tb"))
    wire = payload.pack({"refs": [located, inline, failed]})
    assert wire[0] is not None  # refs are never plain: they go through the pickler
    back = payload.unpack(wire)["refs"]
    assert back[0]._loc == loc and back[0].done()
    assert actorrt.get(back[1], timeout=1).tolist() == [0, 1, 2]
    with pytest.raises(ActorError, match="no"):
        actorrt.get(back[2], timeout=1)


def test_a_ref_pickled_outside_a_call_says_where_it_can_travel():
    loc = ObjectLocation("a" * 32, "worker3", 1, None)
    with pytest.raises(TypeError, match="inside the arguments or return values"):
        pickle.dumps(_located_ref("A.make", None, "", loc))


def test_a_located_ref_is_ready_without_being_fetched():
    ref = _located_ref("A.make", None, "", ObjectLocation("b" * 32, "worker1", 1, None))
    ready, not_ready = actorrt.wait([ref], timeout=0)
    assert ready == [ref] and not_ready == []
    assert ref._failure() is None


def test_a_kept_result_is_owned_by_the_process_that_answered():
    """A call sent again (retries, remote functions) is answered by another process than
    the one it first went to: the reply names the owner, and the ref follows it."""
    for status, payload_ in [(OBJECT, ("o1", 5 * MB, "w2")), (COPY, ("o2", 2 * MB, "w2", 7))]:
        ref = ObjectRef("C.m")
        sent = torch.futures.Future()
        sent.set_result((None, [(status, payload_)]))
        ref.attach(sent, "w1", None, 0)
        loc, value = ref._reply_value(sent)
        assert ref._loc.owner == "w2" and ref._loc.nbytes == payload_[1]
        assert (loc, value) == ((ref._loc, None) if status == OBJECT else (None, 7))
        ref._direct = False  # no runtime here to tell the owner when the ref goes


def test_replies_decode_to_their_errors():
    loc = ObjectLocation("c" * 32, "w", 1, None)
    assert decode_reply((OBJECT, loc)) == loc
    with pytest.raises(ObjectLostError, match="gone"):
        decode_reply((LOST, "object x is gone"))
    with pytest.raises(KeyError):
        decode_reply((RAISE, KeyError("k")))


def test_top_level_refs_are_resolved_and_nested_ones_kept():
    inline = _inline_ref("A.small", None, "", 7)
    nested = _inline_ref("A.small", None, "", 8)
    args, kwargs = resolve_args((inline, [nested]), {"k": inline, "n": {"r": nested}})
    assert args[0] == 7 and args[1][0] is nested
    assert kwargs == {"k": 7, "n": {"r": nested}}


def test_the_store_frees_objects_and_loans_when_no_ref_is_left():
    store = ObjectStore("worker1", lambda peer, value: payload.pack(value), "driver", False)
    oid = store.keep(torch.ones(4), 16, holder="worker1")  # put here
    assert store.stats() == (1, 16) and store.value(oid).sum() == 4
    store.let_go("worker1", oid)  # its last ref went (here: the object is this store's)
    assert store.stats() == (0, 0)
    with pytest.raises(ObjectLostError, match="no longer kept"):
        store.value(oid)
    store._loans["t"] = ObjectRef("A.m")
    store.let_go("worker1", "t", objects.LOAN)
    assert store.loaned("t") is None


def test_a_holder_that_dies_lets_go_of_what_it_held_directly():
    store = ObjectStore("worker1", lambda peer, value: payload.pack(value), "driver", False)
    held = store.keep(torch.ones(4), 16, holder="worker2")
    other = store.keep(torch.ones(4), 16, holder="worker3")
    store.holder_died("worker2")
    assert store.stats() == (1, 16) and store.value(other) is not None
    with pytest.raises(ObjectLostError):
        store.value(held)


def test_dropping_a_value_that_holds_refs_does_not_deadlock_the_store(monkeypatch):
    import types

    from actorrt import refs

    store = ObjectStore("worker1", lambda peer, value: payload.pack(value), "driver", False)
    # the ref's going asks this process's runtime for its store: this one
    monkeypatch.setattr(
        refs, "current_or_none", lambda: types.SimpleNamespace(objects=store, session=1)
    )
    inner = store.keep(torch.ones(4), 16, holder="worker1")
    ref = _located_ref("put", None, "", ObjectLocation(inner, "worker1", 16))
    ref._direct = True  # as actorrt.put's: its going lets the object go
    outer = store.keep([ref], 64, holder="worker1")
    del ref
    done = []
    release = lambda: store.release(outer, objects.HELD, "worker1")  # noqa: E731
    t = threading.Thread(target=lambda: (release(), done.append(1)), daemon=True)
    t.start()
    t.join(10)  # release() drops the list outside the lock, and the ref then frees inner
    assert done == [1], "release() deadlocked on the store's lock"
    assert store.stats() == (0, 0)


def test_a_fetch_of_a_freed_object_answers_lost():
    store = ObjectStore("worker1", lambda peer, value: payload.pack(value), "driver", False)
    freed = store.keep(1, 8, holder="worker2")
    store.release(freed, objects.HELD, "worker2")  # its one holder let go
    with pytest.raises(ObjectLostError, match="every ref to it was dropped"):
        decode_reply(payload.unpack(store.answer_fetch(freed, "worker2", True)))


def test_an_object_of_a_dead_process_of_the_same_name_answers_that_its_owner_died():
    dead = ObjectStore("worker1", lambda peer, value: payload.pack(value), "driver", False)
    made = dead.keep(1, 8, holder="worker2")
    new = ObjectStore("worker1", lambda peer, value: payload.pack(value), "driver", False)
    assert dead.made_here(made) and not new.made_here(made)
    with pytest.raises(ObjectLostError, match="owner process died .*took the dead one's name"):
        decode_reply(payload.unpack(new.answer_fetch(made, "worker2", True)))


def test_put_refuses_a_ref_and_needs_a_cluster(monkeypatch):
    from actorrt.runtime import context

    with pytest.raises(TypeError, match="already be passed"):
        actorrt.put(ObjectRef("A.m"))
    # as in a process where actorrt was never started (xdist may share one with a cluster)
    monkeypatch.setattr(context, "installed", lambda: None)
    with pytest.raises(actorrt.NotInitializedError, match="actorrt.put"):
        actorrt.put(1)


def test_a_fetch_from_another_host_is_relayed_by_that_hosts_first_fetcher():
    store = ObjectStore("owner", lambda peer, value: payload.pack(value), "driver", False)
    nodes = {"owner": "h0", "a1": "h1", "a2": "h1", "b1": "h2", "local": "h0"}
    store.node_of = nodes.get
    oid = store.keep(torch.ones(4), 16, holder="driver")

    def status(requester, relay=True):
        return payload.unpack(store.answer_fetch(oid, requester, relay))

    assert status("a1")[0] == KEEP  # the first of host h1: it keeps a copy to pass on
    assert status("a2") == (RELAY, "a1")  # the rest of h1 ask a1
    assert status("a2", relay=False)[0] == KEEP  # a1 had none: the owner itself
    assert status("b1")[0] == KEEP  # host h2 has a relay of its own
    assert status("local")[0] == OK  # the owner's own host: no relay
    assert store.fetches_served == 4


def test_a_relay_passes_on_its_copy_until_it_expires(monkeypatch):

    monkeypatch.setattr(objects, "RELAY_S", 0.2)
    store = ObjectStore("a1", lambda peer, value: payload.pack(value), "driver", False)
    store.keep_copy("x", torch.arange(3))
    assert payload.unpack(store.answer_copy("x", "a2"))[1].tolist() == [0, 1, 2]
    time.sleep(0.5)
    assert payload.unpack(store.answer_copy("x", "a2"))[0] == LOST
    assert store._copies == {}  # dropped when it expired


def test_a_store_closed_at_shutdown_tells_no_owner(monkeypatch):
    """Refs dropped as the interpreter ends (garbage collection after shutdown) must not
    send: a thread inside torch's C++ when the interpreter's end overtakes it aborts the
    process ("terminate called without an active exception")."""

    sent = []
    monkeypatch.setattr(objects.rpc, "rpc_async", lambda to, fn, args: sent.append((to, args)))
    # long enough that the let-goes below are still being gathered when the store closes
    monkeypatch.setattr(objects, "LET_GO_GATHER_S", 0.5)
    store = ObjectStore("worker1", lambda peer, value: payload.pack(value), "driver", False)
    store.let_go_unread_later((None, [(OBJECT, ("o1", 5 * MB, "w2"))]))
    deadline = time.monotonic() + 5
    while not sent and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sent == [("w2", ("worker1", 0, [("o1", objects.HELD)]))]  # an open store tells the owner

    sent.clear()
    store.let_go("w3", "o2")
    store.let_go_unread_later((None, [(OBJECT, ("o3", 5 * MB, "w2"))]))
    store.clear()  # while those two are gathered
    queued = store._unread.qsize()
    store.let_go_unread_later((None, [(OBJECT, ("o4", 5 * MB, "w2"))]))
    assert store._unread.qsize() == queued  # after the end: not even read later
    time.sleep(1.0)
    assert sent == []


def test_the_thread_that_tells_owners_ends_with_the_store():
    """It is waited for as the interpreter ends (runtime/torch_threads.py): it must end."""
    from actorrt.runtime import torch_threads

    before = set(torch_threads.running())
    store = ObjectStore("worker1", lambda peer, value: payload.pack(value), "driver", False)
    (mine,) = [t for t in torch_threads.running() if t not in before]
    assert mine.name == "actorrt-objects"
    time.sleep(0.1)
    assert mine.is_alive()  # idle, waiting for refs to go
    store.clear()
    mine.join(5)
    assert not mine.is_alive()


def test_the_first_let_go_after_a_quiet_while_goes_at_once_and_later_ones_together(monkeypatch):
    """At most one message per owner per LET_GO_GATHER_S, the first one at once: a holder
    that dies just after a ref arrived has told its owner (held_forks), and what goes in
    a loop of gets still travels in few messages."""

    sent = []
    monkeypatch.setattr(objects.rpc, "rpc_async", lambda to, fn, args: sent.append((to, args)))
    monkeypatch.setattr(objects, "LET_GO_GATHER_S", 0.5)
    store = ObjectStore("worker1", lambda peer, value: payload.pack(value), "driver", False)
    try:
        store.let_go("w2", "o1")
        deadline = time.monotonic() + 0.3  # well before the gathering time
        while not sent and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sent == [("w2", ("worker1", 0, [("o1", objects.HELD)]))]
        store.let_go("w2", "o2")
        store.let_go("w2", "o3")
        time.sleep(0.2)
        assert len(sent) == 1  # gathered until 0.5 s after the first went
        deadline = time.monotonic() + 5
        while len(sent) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sent[1:] == [("w2", ("worker1", 0, [("o2", objects.HELD), ("o3", objects.HELD)]))]
    finally:
        store.clear()


def _store(name="owner"):
    return ObjectStore(name, lambda peer, value: payload.pack(value), "driver", False)


def test_an_object_goes_once_no_holder_and_no_lease_is_left_in_any_order_told():
    """An object held by several processes directly (its caller, and each process that
    kept a ref borrowed for a call) and by leases goes once all have gone, whichever
    owner's word arrives first: they come from different processes."""
    store = _store()
    try:
        # a callee kept the caller's ref: the caller said so, then both let go
        oid = store.keep(torch.ones(4), 16, holder="driver")
        store.hold([oid], "w2", 2)
        store.release(oid, objects.HELD, "driver")
        assert store.stats()[0] == 1  # w2 holds it
        store.release(oid, objects.HELD, "w2")
        assert store.stats()[0] == 0
        # the callee's let-go overtook the caller's word that it kept it
        oid = store.keep(torch.ones(4), 16, holder="driver")
        store.release(oid, objects.HELD, "w2")
        assert store.stats()[0] == 1  # the caller still holds it (until w2's hold is told)
        store.hold([oid], "w2", 2)
        store.release(oid, objects.HELD, "driver")
        assert store.stats()[0] == 0
        # rank 0's word that a lease ended overtook its holder's word that it made it
        oid = store.keep(torch.ones(4), 16, holder="driver")
        store.release(oid, objects.LEASED, "driver")
        assert store.stats()[0] == 1
        store.leased(oid, "driver")
        assert store.stats()[0] == 0
        # a lease and a direct holder: the object outlives the first to go
        oid = store.keep(torch.ones(4), 16, holder="driver")
        store.hold([oid], "w2", 2)
        store.leased(oid, "w2")
        store.release(oid, objects.HELD, "driver")
        assert store.stats()[0] == 1
        store.release(oid, objects.LEASED, "driver")
        assert store.stats()[0] == 0
        # a holder that died lets go of every hold it had; the others keep it
        oid = store.keep(torch.ones(4), 16, holder="driver")
        store.hold([oid], "w2", 2)
        store.hold([oid], "w2", 2)
        store.holder_died("w2")
        assert store.stats()[0] == 1
        store.release(oid, objects.HELD, "driver")
        assert store.stats()[0] == 0
    finally:
        store.clear()


def test_a_dead_processs_late_word_on_its_holds_is_not_counted():
    """A word from a process that died (it kept a ref, its caller's word came after the
    death had freed its holds; or it let go, the word overtaken by its death), or from
    the dead process whose name a new one took, changes no count: a counted hold of a
    dead process kept its object until the cluster ended, and a count taken off twice
    freed an object under the new process of that name."""
    live = {"driver": 0, "w2": 7}  # w2's process now has RPC id 7
    store = _store()
    store.is_current = lambda process, rpc_id: live.get(process) == rpc_id
    try:
        # the callee (id 2) kept the ref and died; its caller's word came after the death
        oid = store.keep(torch.ones(4), 16, holder="driver")
        store.holder_died("w2")
        store.hold([oid], "w2", 2)
        store.released("driver", 0, [(oid, objects.HELD)])
        assert store.stats()[0] == 0  # freed: no hold of the dead callee was counted
        # the dead one's let-go came after its death; the new w2 then kept a ref
        oid = store.keep(torch.ones(4), 16, holder="driver")
        store.released("w2", 2, [(oid, objects.HELD)])
        store.hold([oid], "w2", 7)
        store.released("driver", 0, [(oid, objects.HELD)])
        assert store.stats()[0] == 1  # the new w2 holds it
        store.released("w2", 7, [(oid, objects.HELD)])
        assert store.stats()[0] == 0
        # a dead holder's hold turned lease: the lease counts, the hold is not taken off
        oid = store.keep(torch.ones(4), 16, holder="driver")
        store.hold([oid], "w2", 7)
        store.leased(oid, "w2", 2)
        store.released("driver", 0, [(oid, objects.HELD)])
        assert store.stats()[0] == 1
        store.release(oid, objects.LEASED, "driver")
        store.released("w2", 7, [(oid, objects.HELD)])
        assert store.stats()[0] == 0
    finally:
        store.clear()


def _sent_borrowed(refs):
    """``refs`` packed inside a call's arguments, as a caller sends them: (wire, pins)."""
    pins = []
    wire = payload.pack_args(({"refs": refs},), {}, "w2", _no_road, pins)
    return wire, pins


def test_refs_inside_call_arguments_travel_borrowed_and_the_sender_pins_them():
    refs = [_located_ref("A.m", None, f"r{i}", ObjectLocation(f"o{i}", "w1", MB)) for i in range(2)]
    for ref in refs:
        ref._direct = True  # the caller holds them directly: no lease is made for the call
    wire, pins = _sent_borrowed(refs)
    assert pins == refs and all(ref._direct and ref._loc.rref is None for ref in refs)
    (args, _), borrowing = objects.unpack_arguments(wire)
    got = args[0]["refs"]
    assert [r._loc.object_id for r in got] == ["o0", "o1"]
    assert all(r._on_call is borrowing for r in got) and not any(r._direct for r in got)
    # outside a call's arguments (a reply, a put) a ref travels as before
    assert payload.call_pins() is None


def test_a_callee_reply_names_the_borrowed_refs_it_kept_and_only_those(monkeypatch):
    store = _store("w2")
    store.rpc_id = 5
    monkeypatch.setattr(context, "part", lambda kind, what="": store)
    refs = [_located_ref("A.m", None, f"r{i}", ObjectLocation(f"o{i}", "w1", MB)) for i in range(3)]
    wire, _ = _sent_borrowed(refs)
    (args, _), borrowing = objects.unpack_arguments(wire)
    kept = args[0]["refs"][1]
    del args  # the method's frame went: the others die with it
    reply = (None, [(OK, 7)])
    answered = objects.with_kept(reply, borrowing)
    assert answered == (None, [(objects.KEPT, (reply, [("w1", "o1")], 5))])
    assert kept._direct and kept._on_call is None  # held here from now on

    # a call that kept none answers as any other
    wire, _ = _sent_borrowed(refs)
    (args, _), borrowing = objects.unpack_arguments(wire)
    del args
    assert objects.with_kept(reply, borrowing) is reply


def test_the_caller_unpins_a_kept_ref_only_once_its_owner_heard(monkeypatch):
    """The callee's hold must reach the owner before the caller's hold can go: else the
    owner would free an object the callee still uses."""
    told = []
    monkeypatch.setattr(
        objects.rpc,
        "rpc_async",
        lambda to, fn, args: told.append((to, fn, args, torch.futures.Future())) or told[-1][3],
    )
    store = _store("driver")
    monkeypatch.setattr(context, "part", lambda kind, what="": store)
    try:
        pins = [object()]
        sent = torch.futures.Future()
        got = objects.reply_of_call(sent, "w2", pins)
        inner = (None, [(OK, 7)])
        sent.set_result((None, [(objects.KEPT, (inner, [("w1", "o1"), ("w3", "o3")], 5))]))
        assert got.wait() == inner  # the caller reads its reply at once
        assert [(to, args) for to, _, args, _ in told] == [
            ("w1", (["o1"], "w2", 5)),
            ("w3", (["o3"], "w2", 5)),
        ]
        assert pins  # not while an owner has not heard
        told[0][3].set_result(None)
        assert pins
        told[1][3].set_result(None)
        assert pins == []
        # a reply that kept nothing lets go at once
        pins = [object()]
        sent = torch.futures.Future()
        got = objects.reply_of_call(sent, "w2", pins)
        sent.set_result(inner)
        assert got.wait() == inner and pins == []
    finally:
        store.clear()


def test_a_reply_hands_over_refs_of_other_processes_and_keeps_them_until_told(monkeypatch):
    """A ref of another process's object in a reply travels held directly by the
    receiver, with no lease: the sender tells the owner (one message per owner) and
    keeps its own ref, and so its hold, until the owner heard. A ref of its own object
    is counted as the receiver's at once."""
    store = _store("w2")
    store.rpc_id_of = {"driver": 7}.get
    sent = []

    def rpc_async(to, fn, args):
        if to == "gone":
            raise RuntimeError("unknown destination worker gone")
        sent.append((to, fn, args, torch.futures.Future()))
        return sent[-1][3]

    monkeypatch.setattr(objects.rpc, "rpc_async", rpc_async)
    rt = types.SimpleNamespace(name="w2", objects=store, session=0)
    monkeypatch.setattr(context, "installed", lambda: rt)

    def ref(object_id, owner):
        made = _located_ref("A.m", None, "", ObjectLocation(object_id, owner, MB))
        made._direct = True
        return made

    try:
        own_id = store.keep(torch.ones(4), 16, holder="w2")
        theirs, mine, third, lost = (
            ref("o1", "w1"),
            ref(own_id, "w2"),
            ref("o3", "w3"),
            ref("o5", "gone"),
        )
        with payload.holds_in_reply() as holds:
            wire = payload.pack((OK, [theirs, mine, theirs, third, ref("o4", "w1"), lost]))
        assert holds.own == [own_id]
        assert [(owner, oid) for _, owner, oid in holds.handed] == [
            ("w1", "o1"),
            ("w3", "o3"),
            ("w1", "o4"),
            ("gone", "o5"),
        ]
        store.hold_sent("driver", holds)
        assert store._holders[own_id] == {"w2": 1, "driver": 1}
        assert [(to, fn, args) for to, fn, args, _ in sent] == [
            ("w1", objects.rpc_hold, (["o1", "o4"], "driver", 7)),  # its RPC id as known here
            ("w3", objects.rpc_hold, (["o3"], "driver", 7)),
        ]
        back = payload.unpack(wire)[1]  # the receiver's refs: direct, no lease
        assert all(r._direct and r._loc.rref is None for r in back) and back[0] is back[2]
        del back
        watched = [weakref.ref(r) for r in (theirs, third, lost)]
        del theirs, third, lost, holds
        assert all(w() is not None for w in watched)  # kept until every owner heard
        sent[0][3].set_result(None)
        assert all(w() is not None for w in watched)
        sent[1][3].set_exception(RuntimeError("w3 died"))  # an owner gone: its objects too
        assert all(w() is None for w in watched)
        # a relay passing on its copy of a fetched value hands its refs over the same way
        store.keep_copy("x", [ref("o7", "w1")])
        store.answer_copy("x", "a2")
        assert sent[-1][:3] == ("w1", objects.rpc_hold, (["o7"], "a2", None))
    finally:
        store.clear()


def test_a_reply_to_itself_hands_over_and_holds_its_let_go_back_until_counted(monkeypatch):
    """A reply a process sends itself (an actor's call to another actor of its process)
    hands refs of other processes' objects over too, with no lease. The owner counts
    both holds under one name, so the let-go of the ref that came back, and a lease made
    of it, wait until the owner counted it: overtaking, either would take off the
    sender's own hold, perhaps the last, and the object would go while still held."""
    monkeypatch.setattr(objects, "LET_GO_GATHER_S", 0.0)
    store = _store("w2")
    store.rpc_id = 4
    sent = []

    def rpc_async(to, fn, args):
        sent.append((to, fn, args, torch.futures.Future()))
        return sent[-1][3]

    monkeypatch.setattr(objects.rpc, "rpc_async", rpc_async)
    monkeypatch.setattr(store, "_lease", lambda owner, key, loan: "lease")
    rt = types.SimpleNamespace(name="w2", objects=store, session=0)
    monkeypatch.setattr(context, "installed", lambda: rt)

    def to(fn):  # this store's messages (another test's store may still be sending)
        return [(where, args) for where, f, args, _ in sent if f is fn and "w2" in args]

    def ref(object_id):
        made = _located_ref("A.m", None, "", ObjectLocation(object_id, "w1", MB))
        made._direct = True
        return made

    try:
        theirs, other = ref("o6"), ref("o7")
        with payload.holds_in_reply() as holds:
            wire = payload.pack((OK, [theirs, theirs, other]))
        store.hold_sent("w2", holds)
        assert to(objects.rpc_hold) == [("w1", (["o6", "o7"], "w2", 4))]  # no lease asked
        back = payload.unpack(wire)[1]
        assert back[0] is back[1] and all(r._direct and r._loc.rref is None for r in back)
        # One ref that came back travels leased (an actor's constructor arguments), the
        # other is dropped: both wait for the owner's count.
        leased = []
        leasing = threading.Thread(target=lambda: leased.append(back[0]._leased()))
        leasing.start()
        watched = [weakref.ref(theirs), weakref.ref(other)]
        del theirs, other, holds, wire, back[1:]
        time.sleep(0.3)
        assert leasing.is_alive() and not to(objects.rpc_leased)  # the lease waits
        assert not to(objects.rpc_let_go)  # so does the let-go of the one dropped
        assert all(w() is not None for w in watched)  # the sender's refs are kept
        sent[0][3].set_result(None)  # the owner counted them
        leasing.join(5)
        assert leased and leased[0].rref == "lease" and not back[0]._direct
        assert to(objects.rpc_leased) == [("w1", ("o6", "w2", 4))]
        assert all(w() is None for w in watched)  # the sender's refs went once it heard

        def let_gos():
            return sorted(key for _, (_, _, keys) in to(objects.rpc_let_go) for key in keys)

        deadline = time.monotonic() + 5
        while len(let_gos()) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        # the sender's two refs, and the one that came back and was dropped
        assert let_gos() == [("o6", objects.HELD)] + [("o7", objects.HELD)] * 2
    finally:
        store.clear()
