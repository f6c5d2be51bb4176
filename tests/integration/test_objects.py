"""Objects live where they are made: large results and puts, fetched from their owner.

On the shared 3-worker local cluster: a 64 MB result passed from one actor to another
(top-level and nested) arrives intact without its bytes reaching the driver; puts on the
driver and in actors serve 8 consumers; refs travel inside values and back; objects are
freed when the last ref goes (the owner's RSS stays bounded over 200 puts of 100 MB).
Owner death and shutdown run in their own driver processes (tests/integration/scripts.py).
"""

import dataclasses
import os
import threading
import time

import psutil
import pytest
import torch
from scripts import run_script

import actorrt
from actorrt.runtime.runtime import current_or_none

pytestmark = pytest.mark.timeout(240)

MB = 1 << 20


def _rss() -> int:
    return psutil.Process().memory_info().rss


@actorrt.actor
class Producer:
    def make(self, nbytes, fill=1):
        return torch.full((nbytes,), fill, dtype=torch.uint8)

    def make_slowly(self, nbytes, fill, seconds):
        time.sleep(seconds)
        return torch.full((nbytes,), fill, dtype=torch.uint8)

    def make_nested(self, nbytes):
        return {"t": torch.full((nbytes,), 3, dtype=torch.uint8), "note": "x"}

    def small(self):
        return torch.arange(4)

    def make_refs(self, nbytes, k):
        # refs made here travel back inside the return value
        return [actorrt.put(torch.full((nbytes,), i, dtype=torch.uint8)) for i in range(k)]

    def pid(self):
        return os.getpid()

    def owned(self):
        return current_or_none().objects.stats()

    def served(self):
        return current_or_none().objects.fetches_served

    def keeps(self, object_id):
        return object_id in current_or_none().objects._values

    def put_loop(self, rounds, nbytes, limit):
        """Puts ``rounds`` values of ``nbytes`` and drops each ref; the peak RSS growth,
        the objects owned after, and the ids of those put."""
        me = psutil.Process()
        base = peak = me.memory_info().rss
        ids = []
        for _ in range(rounds):
            ref = actorrt.put(torch.ones(nbytes, dtype=torch.uint8))
            ids.append(ref._loc.object_id)
            del ref
            peak = max(peak, me.memory_info().rss)
            if peak - base > limit:  # stop before the machine runs out of memory
                break
        return peak - base, current_or_none().objects.stats()[0], ids

    @actorrt.method(num_returns=2)
    def make_two(self, nbytes):
        return torch.ones(nbytes, dtype=torch.uint8), torch.zeros(nbytes, dtype=torch.uint8)

    def kept_ids(self):
        return set(current_or_none().objects._values)

    def keeps_any(self, object_ids):
        values = current_or_none().objects._values
        return [oid for oid in object_ids if oid in values]

    def put_kept(self, nbytes):
        """Puts a tensor, keeps its ref, and returns it in a list."""
        self.kept_ref = actorrt.put(torch.ones(nbytes, dtype=torch.uint8))
        return [self.kept_ref]

    def give_kept(self):
        return {"ref": self.kept_ref}

    def drop_kept(self):
        self.kept_ref = None
        return True

    def put_nested(self):
        """A put of a list of refs of two more puts, returned in a list."""
        inner = [actorrt.put(torch.full((16,), i)) for i in range(2)]
        return [actorrt.put(inner)]

    @actorrt.method(num_returns="streaming")
    def stream_puts(self, k):
        for i in range(k):
            yield [actorrt.put(torch.full((16,), i))]

    def holds(self, object_id):
        """Who holds the object directly, as its owner counts them (leases apart)."""
        store = current_or_none().objects
        held = store._holders.get(object_id, {})
        return {k: n for k, n in held.items() if n}, store._leases.get(object_id, 0)


@actorrt.actor
class Consumer:
    def __init__(self):
        self.kept = []

    def total(self, t):
        return int(t.sum()), t.numel()

    def total_nested(self, box):
        return int(actorrt.get(box["ref"]).sum())

    def total_dict(self, box):
        return int(actorrt.get(box["ref"])["t"].sum())

    def total_list(self, refs):
        return [int(t.sum()) for t in actorrt.get(refs, timeout=60)]

    def keep(self, box):
        self.kept.append(box["ref"])
        return len(self.kept)

    def drop(self):
        self.kept.clear()
        return True

    def total_kept(self):
        return [int(actorrt.get(ref, timeout=60).sum()) for ref in self.kept]

    def keep_after(self, box, seconds):
        time.sleep(seconds)
        return self.keep(box)

    def forward(self, box, other, seconds):
        # sends the box on without waiting: this call answers before the other's does
        self.sent = other.keep_after.remote(box, seconds)
        return True

    def kept_count(self):
        return len(self.kept)

    @actorrt.method(num_returns="streaming")
    def stream_back(self, box):
        yield box["ref"]  # leaves in a streamed value: kept here, then handed over

    def open_box(self, refs):
        """Keeps the refs a put value held (fetched as this call's argument): how each came."""
        self.kept.extend(refs)
        return [(r._loc.rref is None, r._direct) for r in refs]

    def keep_lent(self, box):
        """Gets a ref lent to it (unanswered when sent), keeps it: how it is held."""
        ref = box["ref"]
        total = int(actorrt.get(ref, timeout=60).sum())
        self.kept.append(ref)
        return total, ref._loc.rref is None, ref._direct

    def sample(self, picks):
        """Refs kept here, returned (a replay buffer's sample of its collectors' refs)."""
        return [self.kept[i] for i in picks]

    def sample_from(self, buffer, picks):
        """Keeps a sample of ``buffer``'s refs: how each came (no lease, held directly)."""
        got = actorrt.get(buffer.sample.remote(picks), timeout=60)
        self.kept.extend(got)
        return [(r._loc.rref is None, r._direct) for r in got]

    def sample_and_drop(self, buffer, picks, rounds):
        """``rounds`` samples of ``buffer``'s refs, each dropped once read: how each came."""
        came = []
        for _ in range(rounds):
            got = actorrt.get(buffer.sample.remote(picks), timeout=60)
            came.extend((r._loc.rref is None, r._direct) for r in got)
        return came

    def put_box(self, box):
        return actorrt.put(box)  # the put value holds it: kept here, handed over when fetched

    def bump_and_total(self, refs):
        t = actorrt.get(refs[0], timeout=60)
        t.add_(1)  # written in place: only this process's pages change
        return int(t.sum())

    def pass_on(self, box, other):
        # a borrowed ref travels on, to a third actor
        return actorrt.get(other.total.remote(box.ref), timeout=60)

    def pid(self):
        return os.getpid()

    def echo(self, box):
        return box

    def hexes(self, box):
        return [ref.hex() for ref in box["refs"]]

    def bytes_in(self):
        return current_or_none().payload_bytes_in


@actorrt.actor
class AsyncConsumer:
    def __init__(self):
        self.kept = []

    async def keep(self, box):
        self.kept.append(box["ref"])
        return len(self.kept)

    async def total_kept(self):
        return [int((await ref).sum()) for ref in self.kept]

    async def drop(self):
        self.kept.clear()
        return True

    async def total(self, box):
        ready, _ = actorrt.wait([box["ref"]], timeout=60)
        t = await box["ref"]  # on the actor's loop, which the fetch does not block
        return len(ready), int(t.sum())


@dataclasses.dataclass
class Box:
    ref: object
    tag: str


def _apart(cluster):
    """A producer and a consumer on different worker processes."""
    for _ in range(6):
        p, c = Producer.remote(), Consumer.remote()
        if actorrt.get(p.pid.remote(), timeout=60) != actorrt.get(c.pid.remote(), timeout=60):
            return p, c
    pytest.fail("the placer kept a producer and a consumer on one process")


def _wait_for(predicate, within=20.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_a_large_result_goes_producer_to_consumer_without_the_driver(cluster):
    p, c = _apart(cluster)
    before_bytes, before_rss = cluster.payload_bytes_in, _rss()
    ref = p.make.remote(64 * MB, 1)
    assert actorrt.get(c.total.remote(ref), timeout=120) == (64 * MB, 64 * MB)  # top-level
    assert actorrt.get(c.total_nested.remote({"ref": ref}), timeout=120) == 64 * MB  # nested
    nested = p.make_nested.remote(64 * MB)
    assert actorrt.get(c.total_dict.remote({"ref": nested}), timeout=120) == 3 * 64 * MB
    received = cluster.payload_bytes_in - before_bytes
    assert received < 1 * MB, f"the driver received {received} payload bytes"
    assert _rss() - before_rss < 48 * MB
    assert ref.done() and "object" in repr(ref)
    # The control: getting the value here does bring its bytes to the driver.
    assert int(actorrt.get(ref, timeout=120).sum()) == 64 * MB
    assert cluster.payload_bytes_in - before_bytes >= 64 * MB


def test_a_nested_large_result_keeps_its_shape(cluster):
    p, c = _apart(cluster)
    ref = p.make_nested.remote(8 * MB)
    value = actorrt.get(ref, timeout=60)
    assert value["note"] == "x" and int(value["t"].sum()) == 3 * 8 * MB


def test_a_mid_size_result_comes_back_and_is_still_fetched_from_its_producer(cluster):
    p, c = _apart(cluster)
    before = cluster.payload_bytes_in
    ref = p.make.remote(4 * MB, 1)  # between ACTORRT_INLINE_BYTES and ACTORRT_PULL_BYTES
    assert int(actorrt.get(ref, timeout=60).sum()) == 4 * MB
    assert cluster.payload_bytes_in - before >= 4 * MB  # the copy came with the reply
    assert ref._loc is not None and ref._loc.owner != cluster.name  # and it stayed there
    served = actorrt.get(p.served.remote(), timeout=30)
    assert actorrt.get(c.total.remote(ref), timeout=60) == (4 * MB, 4 * MB)
    assert actorrt.get(p.served.remote(), timeout=30) == served + 1  # fetched from p
    # the caller reads its copy again, with and without a timeout: nothing is fetched
    assert int(actorrt.get(ref).sum()) == int(actorrt.get(ref, timeout=30).sum()) == 4 * MB
    assert actorrt.get(p.served.remote(), timeout=30) == served + 1


def test_put_tensors_are_copied_once_and_read_in_place_by_the_processes_of_their_host(cluster):
    """A put of large CPU tensors (one, or in dicts and lists) is copied into shared
    memory (a later change to the tensor does not reach the object, as Ray's put
    copies), and a process of the owner's host maps that copy instead of fetching it: no
    fetch reaches the owner. A write to the mapped tensor changes only the writer's own
    pages."""
    p, c = _apart(cluster)
    other = Consumer.remote()
    refs = actorrt.get(p.make_refs.remote(2 * MB, 2), timeout=60)  # put by p, fills 0 and 1
    served = actorrt.get(p.served.remote(), timeout=30)
    assert actorrt.get(c.total_list.remote(refs), timeout=60) == [0, 2 * MB]
    assert int(actorrt.get(refs[1], timeout=60).sum()) == 2 * MB  # the driver maps it too
    assert actorrt.get(c.bump_and_total.remote(refs[1:]), timeout=60) == 4 * MB
    assert actorrt.get(other.bump_and_total.remote(refs[1:]), timeout=60) == 4 * MB
    assert int(actorrt.get(refs[1], timeout=60).sum()) == 2 * MB
    assert actorrt.get(p.served.remote(), timeout=30) == served  # nothing was fetched
    assert all(ref._loc.sealed is not None for ref in refs)

    mine = torch.ones(2 * MB, dtype=torch.uint8)
    ref = actorrt.put(mine)
    mine.fill_(7)
    served_here = cluster.objects.fetches_served
    assert actorrt.get(c.total_list.remote([ref]), timeout=60) == [2 * MB]
    assert int(actorrt.get(ref).sum()) == 2 * MB  # the owner reads the object, not `mine`
    # tensors in dicts and lists (a state dict) too: one memfd for the value
    state = actorrt.put({"t": torch.full((2 * MB,), 3, dtype=torch.uint8), "note": "x"})
    assert actorrt.get(c.total_dict.remote({"ref": state}), timeout=60) == 6 * MB
    assert cluster.objects.fetches_served == served_here
    assert state._loc.sealed is not None
    ids = [r._loc.object_id for r in refs]
    oid = ref._loc.object_id
    del refs, ref
    assert _wait_for(lambda: not actorrt.get(p.keeps_any.remote(ids), timeout=30))
    assert _wait_for(lambda: oid not in cluster.objects._values)


def test_a_small_result_still_comes_back_inline(cluster):
    p = Producer.remote()
    ref = p.small.remote()
    assert actorrt.get(ref, timeout=30).tolist() == [0, 1, 2, 3]
    assert ref._loc is None  # nothing kept at the producer


def test_a_small_result_passed_on_travels_as_its_value(cluster, monkeypatch):
    """A top-level ref whose value came back inline is sent as that value, as Ray sends
    it: the call's payload stays plain, and the actor rebuilds and resolves no ref."""
    sent = []
    pack_call = type(cluster).pack_call

    def spy(self, target, worker, seq, method, args, kwargs, pins=None):
        sent.append((str(method), args))
        return pack_call(self, target, worker, seq, method, args, kwargs, pins)

    monkeypatch.setattr(type(cluster), "pack_call", spy)
    p, c = _apart(cluster)
    answered = p.small.remote()
    actorrt.wait([answered], timeout=30)
    pending = p.make_slowly.remote(16, 5, 0.3)  # under ACTORRT_INLINE_BYTES: inline
    assert actorrt.get(c.echo.remote(answered), timeout=30).tolist() == [0, 1, 2, 3]
    assert int(actorrt.get(c.echo.remote(pending), timeout=30).sum()) == 80
    echoes = [args for method, args in sent if method == "echo"]
    assert [type(args[0]) for args in echoes] == [torch.Tensor, torch.Tensor], echoes


def test_a_ref_its_owner_returns_is_held_directly_by_the_caller(cluster):
    """A ref that its object's owner returns in a value travels as the caller's own
    direct hold, counted by the owner as the reply goes: no lease (a torch RRef made at
    rank 0 and forked), and each copy the caller receives lets go once, however often
    the reply is read. Refs the owner holds itself keep the object on their own."""
    p = Producer.remote()
    call = p.put_kept.remote(2 * MB)
    (ref,) = actorrt.get(call, timeout=30)
    assert actorrt.get(call, timeout=30)[0] is ref  # the reply read again: the same ref
    oid = ref._loc.object_id
    assert ref._loc.rref is None and ref._direct
    again = actorrt.get(p.give_kept.remote(), timeout=30)["ref"]  # a second copy
    assert again is not ref and again._loc.rref is None
    holds = actorrt.get(p.holds.remote(oid), timeout=30)
    assert holds == ({cluster.name: 2, p.worker: 1}, 0), holds
    del call, ref
    assert _wait_for(lambda: actorrt.get(p.holds.remote(oid), timeout=30)[0].get(cluster.name) == 1)
    assert int(actorrt.get(again, timeout=30).sum()) == 2 * MB
    assert actorrt.get(p.drop_kept.remote(), timeout=30)
    assert actorrt.get(p.keeps_any.remote([oid]), timeout=30) == [oid]  # the driver's copy
    del again
    assert _wait_for(lambda: not actorrt.get(p.keeps_any.remote([oid]), timeout=30))
    # Yielded in a stream, the same.
    streamed = [actorrt.get(item, timeout=30)[0] for item in p.stream_puts.remote(2)]
    assert [r._loc.rref for r in streamed] == [None, None] and all(r._direct for r in streamed)
    assert [int(actorrt.get(r, timeout=30)[0]) for r in streamed] == [0, 1]
    ids = [r._loc.object_id for r in streamed]
    del streamed
    assert _wait_for(lambda: not actorrt.get(p.keeps_any.remote(ids), timeout=30))
    # Inside a value fetched from the owner (a put of refs), the same.
    (outer,) = actorrt.get(p.put_nested.remote(), timeout=30)
    inner = actorrt.get(outer, timeout=30)
    assert [r._loc.rref for r in inner] == [None, None] and all(r._direct for r in inner)
    ids = [r._loc.object_id for r in inner]
    del outer
    assert [int(actorrt.get(r, timeout=30)[0]) for r in inner] == [0, 1]
    del inner
    assert _wait_for(lambda: not actorrt.get(p.keeps_any.remote(ids), timeout=30))
    # A reply nobody read still lets its refs go once it is dropped.
    before = actorrt.get(p.kept_ids.remote(), timeout=30)
    unread = p.put_kept.remote(16)
    assert actorrt.wait([unread], timeout=30)[0] == [unread]
    assert actorrt.get(p.drop_kept.remote(), timeout=30)
    made = list(actorrt.get(p.kept_ids.remote(), timeout=30) - before)
    assert len(made) == 1, made  # held by the reply's copy alone now
    del unread
    assert _wait_for(lambda: not actorrt.get(p.keeps_any.remote(made), timeout=30))


def test_refs_another_process_returns_are_handed_over_without_a_lease(cluster):
    """A ref of one process's object returned by another (a replay buffer's sample of
    refs its collectors made, a ref borrowed for the call and returned) travels as the
    caller's own direct hold: the sender tells the owner that the caller holds it, and
    only then lets its own hold go. No lease (an RRef made at rank 0 and forked); the
    owner's counts name the caller and, once the sender let go, only the caller."""
    p, c = _apart(cluster)
    refs = actorrt.get(p.make_refs.remote(MB, 3), timeout=60)
    oids = [r._loc.object_id for r in refs]
    for r in refs:
        assert actorrt.get(c.keep.remote({"ref": r}), timeout=30)
    del refs, r
    back = actorrt.get(c.sample.remote([0, 0, 2]), timeout=30)
    assert back[0] is back[1]  # one ref, sent once
    assert [r._loc.rref for r in back] == [None] * 3 and all(r._direct for r in back)
    expected = [({cluster.name: 1, c.worker: 1}, 0)] * 2

    def holds():
        return [actorrt.get(p.holds.remote(oids[i]), timeout=30) for i in (0, 2)]

    assert _wait_for(lambda: holds() == expected), holds()
    for _ in range(30):  # samples read and dropped: each one's holds come and go
        assert len(actorrt.get(c.sample.remote([0, 1, 2]), timeout=30)) == 3
    assert _wait_for(lambda: holds() == expected), holds()
    assert actorrt.get(c.drop.remote(), timeout=30)  # the buffer lets its refs go
    assert _wait_for(
        lambda: actorrt.get(p.keeps_any.remote(oids), timeout=30) == [oids[0], oids[2]]
    )
    assert [int(actorrt.get(r, timeout=30).sum()) for r in back] == [0, 0, 2 * MB]
    # Borrowed for the call and returned: held by the caller twice (its own ref and
    # the one that came back), and no longer by the callee once the owner heard.
    echoed = actorrt.get(c.echo.remote({"ref": back[2]}), timeout=30)["ref"]
    assert echoed is not back[2] and echoed._direct and echoed._loc.rref is None
    expected = ({cluster.name: 2}, 0)
    assert _wait_for(lambda: actorrt.get(p.holds.remote(oids[2]), timeout=30) == expected), (
        actorrt.get(p.holds.remote(oids[2]), timeout=30)
    )
    # Yielded in a stream, the same.
    streamed = actorrt.get(next(c.stream_back.remote({"ref": echoed})), timeout=30)
    assert streamed._direct and streamed._loc.rref is None
    expected = ({cluster.name: 3}, 0)
    assert _wait_for(lambda: actorrt.get(p.holds.remote(oids[2]), timeout=30) == expected)
    del back, echoed
    assert int(actorrt.get(streamed, timeout=30).sum()) == 2 * MB
    del streamed
    assert _wait_for(lambda: not actorrt.get(p.keeps_any.remote(oids), timeout=30))


def _together():
    """Two consumers on one worker process, and a producer on another."""
    seen = {}
    for _ in range(8):
        c = Consumer.remote()
        pid = actorrt.get(c.pid.remote(), timeout=60)
        if pid in seen:
            break
        seen[pid] = c
    else:
        pytest.fail("the placer put eight consumers on eight processes")
    for _ in range(6):
        p = Producer.remote()
        if actorrt.get(p.pid.remote(), timeout=60) != pid:
            return p, seen[pid], c
    pytest.fail("the placer kept putting the producer with the consumers")


def test_refs_returned_within_one_process_are_handed_over_without_a_lease(cluster):
    """A buffer and a learner on one process: the refs of a third process's objects the
    buffer returns come to the learner as direct holds too (was: a lease per ref, as a
    reply a process sent itself). Their owner counts both holds under that process's
    name, and neither one's going frees an object the other still holds."""
    p, learner, buffer = _together()
    refs = actorrt.get(p.make_refs.remote(MB, 2), timeout=60)
    oids = [r._loc.object_id for r in refs]
    for r in refs:
        assert actorrt.get(buffer.keep.remote({"ref": r}), timeout=30)
    del refs, r

    def holds():
        return [actorrt.get(p.holds.remote(oid), timeout=30) for oid in oids]

    def the_buffers_alone():  # once the owner heard the buffer kept them, and we let go
        return all(len(h[0]) == 1 and cluster.name not in h[0] for h in holds())

    assert _wait_for(the_buffers_alone), holds()
    ((worker, _),) = holds()[0][0].items()
    got = actorrt.get(learner.sample_from.remote(buffer, [0, 0, 1]), timeout=30)
    assert got == [(True, True)] * 3  # no lease; held directly
    expected = [({worker: 2}, 0)] * 2  # the buffer's ref and the learner's
    assert _wait_for(lambda: holds() == expected), holds()
    churn = actorrt.get(learner.sample_and_drop.remote(buffer, [1, 0], 30), timeout=60)
    assert churn == [(True, True)] * 60
    assert _wait_for(lambda: holds() == expected), holds()
    assert actorrt.get(buffer.drop.remote(), timeout=30)
    assert _wait_for(lambda: holds() == [({worker: 1}, 0)] * 2), holds()
    assert actorrt.get(learner.total_kept.remote(), timeout=60) == [0, 0, MB]
    assert actorrt.get(learner.drop.remote(), timeout=30)
    assert _wait_for(lambda: not actorrt.get(p.keeps_any.remote(oids), timeout=30))


def test_a_put_of_refs_makes_no_lease_and_its_readers_hold_them_directly(cluster):
    """A put value holding refs is measured, not sent, when it is put: its refs make no
    lease there (was: a lease per ref, an RRef made at rank 0). Whoever fetches the
    value gets them as its own direct holds, told to their owner by the putter."""
    p, c = _apart(cluster)
    (inner,) = actorrt.get(p.put_kept.remote(MB), timeout=30)  # p's object, ours directly
    oid = inner._loc.object_id
    outer = actorrt.put([inner])
    assert inner._direct and inner._loc.rref is None
    assert actorrt.get(c.open_box.remote(outer), timeout=30) == [(True, True)]
    expected = ({cluster.name: 1, p.worker: 1, c.worker: 1}, 0)
    assert _wait_for(lambda: actorrt.get(p.holds.remote(oid), timeout=30) == expected), actorrt.get(
        p.holds.remote(oid), timeout=30
    )
    del inner, outer
    assert actorrt.get(p.drop_kept.remote(), timeout=30)
    assert _wait_for(lambda: actorrt.get(p.holds.remote(oid), timeout=30) == ({c.worker: 1}, 0))
    assert actorrt.get(c.total_kept.remote(), timeout=30) == [MB]
    assert actorrt.get(c.drop.remote(), timeout=30)
    assert _wait_for(lambda: not actorrt.get(p.keeps_any.remote([oid]), timeout=30))


def test_a_put_of_an_unanswered_ref_lends_it_only_when_fetched(cluster, monkeypatch):
    """A put only measures its value: a ref inside whose call has not answered is not lent
    then (was: a loan, with its lease RRef, made and dropped for nothing), only when a
    consumer fetches the value."""
    lent = []
    lend = cluster.objects.lend
    monkeypatch.setattr(cluster.objects, "lend", lambda ref: lent.append(ref) or lend(ref))
    p, c = _apart(cluster)
    slow = p.make_slowly.remote(16, 7, 3.0)
    box = actorrt.put([slow])
    assert lent == []
    assert actorrt.get(c.total_list.remote(box), timeout=60) == [16 * 7]
    assert lent == [slow]  # lent once, as the consumer fetched the put value


def test_a_put_on_the_driver_serves_eight_consumers(cluster):
    value = torch.arange(4 * MB, dtype=torch.int32)
    ref = actorrt.put(value)
    # the object is the copy made at the put (as Ray's), which the owner reads in place
    assert actorrt.get(ref) is not value and torch.equal(actorrt.get(ref), value)
    assert actorrt.get(ref) is cluster.objects.value(ref._loc.object_id)
    assert cluster.objects.stats()[0] >= 1
    consumers = [Consumer.remote() for _ in range(8)]
    out = actorrt.get([c.total.remote(ref) for c in consumers], timeout=120)
    assert out == [(int(value.sum()), 4 * MB)] * 8


def test_a_put_in_an_actor_serves_eight_consumers_directly(cluster):
    p = Producer.remote()
    refs = actorrt.get(p.make_refs.remote(2 * MB, 3), timeout=60)
    assert [r._loc.owner for r in refs] == [refs[0]._loc.owner] * 3
    assert refs[0]._loc.owner != cluster.name  # owned by the actor's process
    consumers = [Consumer.remote() for _ in range(8)]
    before = cluster.payload_bytes_in
    got = actorrt.get([c.total_list.remote(refs) for c in consumers], timeout=120)
    assert got == [[0, 2 * MB, 4 * MB]] * 8
    assert cluster.payload_bytes_in - before < 1 * MB


def test_refs_travel_inside_values_to_a_third_actor(cluster):
    p, c = _apart(cluster)
    other = Consumer.remote()
    ref = p.make.remote(8 * MB, 2)
    assert actorrt.get(c.pass_on.remote(Box(ref, "t"), other), timeout=120) == (16 * MB, 8 * MB)
    # a pending ref inside a value: the receiver borrows it from this process
    slow = p.make.remote(8 * MB, 1)
    assert actorrt.get(c.total_nested.remote({"ref": slow}), timeout=120) == 8 * MB


def test_a_ref_that_travelled_and_came_back_is_equal_to_the_one_sent(cluster):
    p, c = _apart(cluster)

    class Boom(Exception):
        pass

    @actorrt.remote
    def fail():
        raise Boom("no")

    refs = {
        "inline": p.small.remote(),
        "kept": p.make.remote(2 * MB, 1),
        "pending": p.make_slowly.remote(16, 1, 1.0),  # lent: not answered when sent
        "failed": fail.remote(),
        "put": actorrt.put(torch.ones(4)),
    }
    actorrt.wait([refs["inline"], refs["kept"], refs["failed"]], num_returns=3, timeout=60)
    box = {"refs": list(refs.values())}
    back = actorrt.get(c.echo.remote(box), timeout=60)["refs"]
    # the actor saw the ids the driver's refs have, and what came back compares equal
    assert actorrt.get(c.hexes.remote(box), timeout=60) == [r.hex() for r in refs.values()]
    assert back == list(refs.values())
    assert not any(b is r for b, r in zip(back, refs.values(), strict=True))
    by_ref = {ref: name for name, ref in refs.items()}
    assert [by_ref[ref] for ref in back] == list(refs)
    assert len(set(refs.values()) | set(back)) == 5
    # each call (and each of num_returns' refs) has its own id
    two = p.make_two.remote(4)
    assert len({*two, p.small.remote(), p.small.remote()}) == 4
    assert p.small.remote() != refs["inline"] and refs["inline"] != refs["inline"].hex()
    # a ref and its copy are one ref to wait, as in Ray
    with pytest.raises(ValueError, match="same ObjectRef twice"):
        actorrt.wait([refs["kept"], back[1]], timeout=5)
    assert actorrt.get(back[2], timeout=60).sum() == 16
    with pytest.raises(Boom):
        actorrt.get(back[3], timeout=60)


def test_an_async_actor_awaits_a_ref_it_was_given(cluster):
    p = Producer.remote()
    ref = p.make.remote(40 * MB, 1)  # kept at p only: the await fetches it
    assert actorrt.get(AsyncConsumer.remote().total.remote({"ref": ref}), timeout=60) == (
        1,
        40 * MB,
    )


def test_wait_says_ready_without_fetching(cluster):
    p = Producer.remote()
    ref = p.make.remote(64 * MB)  # at least ACTORRT_PULL_BYTES: no copy comes along
    before = cluster.payload_bytes_in
    ready, _ = actorrt.wait([ref], timeout=60)
    assert ready == [ref]
    assert cluster.payload_bytes_in - before < MB


def test_wait_with_fetch_local_says_ready_once_the_values_are_here(cluster):
    p = Producer.remote()
    refs = [p.make.remote(64 * MB), p.make.remote(64 * MB)]
    before = cluster.payload_bytes_in
    ready, not_ready = actorrt.wait(refs, num_returns=2, timeout=60, fetch_local=True)
    assert ready == refs and not_ready == []
    assert cluster.payload_bytes_in - before >= 2 * 64 * MB  # both fetched (Ray's default)
    assert all(ref.future().done() for ref in refs)
    with pytest.raises(TypeError, match="fetch_local"):
        actorrt.wait(refs, fetch_local="yes")


def test_a_ref_passed_inside_a_call_is_borrowed_and_held_only_by_a_callee_that_keeps_it(cluster):
    """Was: a ref nested in a call's arguments got a lease (an RRef owned by rank 0, whose
    fork each receiver confirmed and told), 250-450 us a call, even when the callee only
    read it. Now it travels borrowed for the call: the caller holds the object until the
    reply, and a callee that keeps the ref holds it from then on, told to the owner by
    the caller before it lets go, as Ray's borrowers report in their task's reply."""
    p, c = _apart(cluster)
    ref = p.make.remote(4 * MB, 2)
    oid = actorrt.get(ref, timeout=60) is not None and ref._loc.object_id
    assert actorrt.get(c.total_nested.remote({"ref": ref}), timeout=60) == 8 * MB
    assert ref._direct  # no lease was made: the driver still holds it directly
    assert actorrt.get(p.holds.remote(oid), timeout=30) == ({cluster.name: 1}, 0)

    assert actorrt.get(c.keep.remote({"ref": ref}), timeout=60) == 1
    assert ref._direct
    # told to the owner by the driver once the reply came (not before the get returns)
    both = ({cluster.name: 1, c.worker: 1}, 0)
    assert _wait_for(lambda: actorrt.get(p.holds.remote(oid), timeout=30) == both)
    del ref
    assert _wait_for(lambda: actorrt.get(p.holds.remote(oid), timeout=30) == ({c.worker: 1}, 0)), (
        actorrt.get(p.holds.remote(oid), timeout=30)
    )
    assert actorrt.get(c.total_kept.remote(), timeout=60) == [8 * MB]
    assert actorrt.get(c.drop.remote(), timeout=30)
    assert _wait_for(lambda: not actorrt.get(p.keeps.remote(oid), timeout=30))


def test_a_borrowed_ref_sent_on_before_its_call_answered_stays_held(cluster):
    """The callee sends the ref on, inside another call's arguments, and answers before
    that call does: it holds the object until its own call there answers, and the last
    callee, which keeps it, holds it after every sender let go."""
    p, c = _apart(cluster)
    last = Consumer.remote()
    ref = p.make.remote(2 * MB, 3)
    oid = actorrt.get(ref, timeout=60) is not None and ref._loc.object_id
    assert actorrt.get(c.forward.remote({"ref": ref}, last, 1.0), timeout=60)
    del ref  # the driver's hold goes; c's forwarding call still holds it
    assert _wait_for(lambda: actorrt.get(last.kept_count.remote(), timeout=30) == 1)
    assert _wait_for(
        lambda: actorrt.get(p.holds.remote(oid), timeout=30) == ({last.worker: 1}, 0)
    ), actorrt.get(p.holds.remote(oid), timeout=30)
    assert actorrt.get(last.total_kept.remote(), timeout=60) == [6 * MB]
    assert actorrt.get(last.drop.remote(), timeout=30)
    assert _wait_for(lambda: not actorrt.get(p.keeps.remote(oid), timeout=30))


def test_a_borrowed_ref_returned_by_its_callee_outlives_the_one_sent(cluster):
    p, c = _apart(cluster)
    ref = p.make.remote(2 * MB, 5)
    oid = actorrt.get(ref, timeout=60) is not None and ref._loc.object_id
    back = actorrt.get(c.echo.remote({"ref": ref}), timeout=60)["ref"]
    del ref
    time.sleep(0.5)
    assert int(actorrt.get(back, timeout=60).sum()) == 10 * MB
    assert actorrt.get(p.keeps.remote(oid), timeout=30)
    del back
    assert _wait_for(lambda: not actorrt.get(p.keeps.remote(oid), timeout=30))


def test_a_borrowed_ref_that_leaves_its_callee_any_other_way_is_held_then_freed(cluster):
    """A borrowed ref yielded in a stream, put inside an object, or kept by an async
    actor: readable after the caller's own ref went, and freed once the last is gone (the
    owner's counts of holds and leases come back to nothing whatever order they came in)."""
    p, c = _apart(cluster)
    a = AsyncConsumer.remote()
    refs = [p.make.remote(MB + i, 1) for i in range(3)]
    oids = [actorrt.get(r, timeout=60) is not None and r._loc.object_id for r in refs]
    streamed = c.stream_back.remote({"ref": refs[0]})
    boxed = actorrt.get(c.put_box.remote({"ref": refs[1]}), timeout=60)
    assert actorrt.get(a.keep.remote({"ref": refs[2]}), timeout=60) == 1
    del refs
    time.sleep(0.5)
    back = actorrt.get(next(streamed), timeout=60)
    inner = actorrt.get(boxed, timeout=60)["ref"]
    assert [int(actorrt.get(r, timeout=60).sum()) for r in (back, inner)] == [MB, MB + 1]
    assert actorrt.get(a.total_kept.remote(), timeout=60) == [MB + 2]
    assert actorrt.get(p.keeps_any.remote(oids), timeout=30) == oids
    del back, inner, boxed, streamed
    assert actorrt.get(a.drop.remote(), timeout=30)
    assert _wait_for(lambda: actorrt.get(p.keeps_any.remote(oids), timeout=30) == []), (
        actorrt.get(p.keeps_any.remote(oids), timeout=30),
        [actorrt.get(p.holds.remote(oid), timeout=30) for oid in oids],
    )


def test_an_object_is_freed_when_its_last_ref_goes(cluster):
    c = Consumer.remote()
    ref = actorrt.put(torch.ones(MB))
    oid = ref._loc.object_id
    assert actorrt.get(c.keep.remote({"ref": ref}), timeout=30) == 1
    del ref
    time.sleep(0.5)
    assert oid in cluster.objects._values  # the consumer still holds a ref
    assert actorrt.get(c.drop.remote(), timeout=30)
    assert _wait_for(lambda: oid not in cluster.objects._values), "it outlived its refs"


def test_a_result_object_is_freed_at_its_producer(cluster):
    p = Producer.remote()
    ref = p.make.remote(4 * MB)
    assert actorrt.get(ref, timeout=60).numel() == 4 * MB
    oid = ref._loc.object_id
    assert actorrt.get(p.keeps.remote(oid), timeout=30)
    del ref
    assert _wait_for(lambda: not actorrt.get(p.keeps.remote(oid), timeout=30))


def test_a_large_result_nobody_read_is_freed_at_its_producer(cluster):
    # A ref dropped before its reply was read (only waited for, or dropped while the call
    # ran, or one of num_returns' refs) still lets its producer free the value.
    p = Producer.remote()
    before = actorrt.get(p.kept_ids.remote(), timeout=30)
    waited = p.make.remote(4 * MB)
    assert actorrt.wait([waited], timeout=60)[0] == [waited]
    del waited
    p.make_slowly.remote(4 * MB, 1, 0.5)  # dropped at once, answered later
    first, second = p.make_two.remote(2 * MB)
    assert actorrt.get(first, timeout=60).numel() == 2 * MB
    del second  # never read
    assert actorrt.get(p.make.remote(4 * MB), timeout=60).numel() == 4 * MB  # read and dropped

    def left():
        return actorrt.get(p.kept_ids.remote(), timeout=30) - before

    assert _wait_for(lambda: len(left()) <= 1), f"kept for good: {left()}"
    del first
    assert _wait_for(lambda: not left()), f"kept for good: {left()}"


def test_two_hundred_puts_of_100_mb_keep_the_owner_bounded(cluster):
    p = Producer.remote()
    growth, _, ids = actorrt.get(p.put_loop.remote(200, 100 * MB, 4 << 30), timeout=200)
    assert growth < 1 << 30, f"the owner's RSS grew by {growth / MB:.0f} MB"
    # rank 0 tells the owner to let the last ones go (leases are rank 0's RRefs). The
    # loop's own objects are named: a count of all the process owns also moves with the
    # objects of earlier tests' actors there (a DQN learner's weights), freed meanwhile.
    assert len(ids) == 200
    assert _wait_for(lambda: actorrt.get(p.keeps_any.remote(ids), timeout=30) == [])


@actorrt.actor
class Holder:
    def __init__(self, x):
        self.x = x

    def get(self):
        return self.x


def test_a_constructor_with_a_pending_ref_returns_at_once(cluster):
    @actorrt.actor
    class Slow:
        def value(self, s):
            time.sleep(s)
            return 5

    slow = Slow.remote()
    start = time.monotonic()
    h = Holder.remote(slow.value.remote(2.0))
    assert time.monotonic() - start < 1.5  # the handle came at once
    assert actorrt.get(h.get.remote(), timeout=60) == 5


def test_a_constructor_whose_ref_failed_fails_its_calls(cluster):
    @actorrt.actor
    class Bad:
        def boom(self):
            raise ValueError("upstream broke")

    h = Holder.remote(Bad.remote().boom.remote())
    with pytest.raises(actorrt.ActorDiedError, match="upstream broke"):
        actorrt.get(h.get.remote(), timeout=60)


def test_status_counts_each_process_objects(cluster):
    ref = actorrt.put(torch.ones(2 * MB, dtype=torch.uint8))
    text = actorrt.status()
    assert "OBJECTS" in text
    driver_row = next(line for line in text.splitlines() if line.startswith(cluster.name))
    assert "MB)" in driver_row
    del ref


def test_bad_input_fails_at_the_call(cluster):
    with pytest.raises(TypeError, match="cannot be sent"):
        actorrt.put(threading.Lock())
    ref = actorrt.put(1)
    with pytest.raises(TypeError, match="pass the ref itself|already be passed"):
        actorrt.put(ref)
    with pytest.raises(TypeError, match="expected an ObjectRef"):
        actorrt.get([ref, 5])
    with pytest.raises(TypeError):
        actorrt.get(5)


OWN_CLUSTER = """
import os, signal, time
import torch
import actorrt

@actorrt.actor
class Producer:
    def make(self, n):
        return torch.ones(n, dtype=torch.uint8)
    def put(self, n):
        return [actorrt.put(torch.ones(n, dtype=torch.uint8))]
    def put_in_dict(self, n):
        return {"ref": actorrt.put(torch.ones(n, dtype=torch.uint8))}
    def give(self, other, n):  # a ref put here goes to another actor in a value
        ref = actorrt.put(torch.ones(n, dtype=torch.uint8))
        assert actorrt.get(other.keep.remote([ref]), timeout=30)
        return ref._loc.object_id
    def keeps(self, object_id):
        from actorrt.runtime.runtime import current_or_none
        return object_id in current_or_none().objects._values
    def lend(self, other, seconds):
        return [other.slowly.remote(seconds)]  # unanswered as it leaves: lent from here
    def make_after(self, n, fill, seconds):
        time.sleep(seconds)
        return torch.full((n,), fill, dtype=torch.uint8)
    def kept_fills(self):  # the first byte of each tensor kept here, sorted
        from actorrt.runtime.runtime import current_or_none
        kept = current_or_none().objects._values.values()
        return sorted(int(v[0]) for v in kept if isinstance(v, torch.Tensor))
    def pid(self):
        return os.getpid()
    def fork_holder(self, seconds):
        return fork_holder(seconds)  # scripts.REPORT_HELPER's

@actorrt.actor
class Consumer:
    def total(self, t):
        return int(t.sum())
    def slowly(self, seconds):
        time.sleep(seconds)
        return 1
    def total_of_first(self, box):
        return int(actorrt.get(box[0], timeout=30).sum())
    def keep(self, box):
        self.box = box
        return True
    def drop(self):
        self.box = None
        return True
    def pid(self):
        return os.getpid()

def outcome(get):
    try:
        get()
        return "value"
    except actorrt.ObjectLostError as exc:
        return str(exc)
    except actorrt.GetTimeoutError:
        return "timeout"

def start_apart():  # two workers; a producer and a consumer on different ones
    rt = actorrt.start(num_workers=2, heartbeat_timeout=5)
    pids = list(rt.local_worker_pids)
    report(pids=pids)
    p, c = Producer.remote(), Consumer.remote()
    while actorrt.get(p.pid.remote(), timeout=30) == actorrt.get(c.pid.remote(), timeout=30):
        c = Consumer.remote()
    return rt, pids, p, c
"""


def test_owner_death_makes_get_raise_object_lost(tmp_path):
    body = """
    rt, pids, p, c = start_apart()
    ref = p.make.remote(40 << 20)  # over ACTORRT_PULL_BYTES: only the producer has it
    assert actorrt.wait([ref], timeout=30)[0] == [ref]
    os.kill(actorrt.get(p.pid.remote(), timeout=30), signal.SIGKILL)
    start = time.monotonic()
    got = outcome(lambda: actorrt.get(ref, timeout=60))
    took = time.monotonic() - start
    passed = outcome(lambda: actorrt.get(c.total.remote(ref), timeout=60))
    report(outcome=got, took=took, passed=passed, owner=ref._loc.owner)
    actorrt.shutdown()
    """
    reports = run_script(tmp_path, OWN_CLUSTER, body, timeout=180)
    final = reports[-1]
    assert final["owner"] in final["outcome"] and "lost" in final["outcome"]
    assert final["took"] < 10, final
    assert final["owner"] in final["passed"]


def test_a_fetch_from_an_owner_that_died_with_its_connections_open_fails(tmp_path):
    """A fetch is failed when its owner is marked dead, as a call is, however its
    connection behaves. Was: nothing held the fetch's RPC future, so the death notice
    could not reach it, and a fetch the connection never failed waited for ever (here its
    sockets stay open in a forked child, so neither the driver's nor a worker's fails)."""
    body = """
    rt, pids, p, c = start_apart()
    ref = p.make.remote(40 << 20)  # over ACTORRT_PULL_BYTES: only the producer has it
    assert actorrt.wait([ref], timeout=30)[0] == [ref]
    child = actorrt.get(p.fork_holder.remote(90), timeout=30)
    report(pids=[*pids, child])  # cleaned up even if what follows hangs
    actorrt.get(c.total.remote(ref), timeout=30)  # the consumer's connection is open too
    os.kill(actorrt.get(p.pid.remote(), timeout=30), signal.SIGKILL)
    start = time.monotonic()
    got = outcome(lambda: actorrt.get(ref, timeout=40))
    took = time.monotonic() - start
    passed = outcome(lambda: actorrt.get(c.total.remote(ref), timeout=40))
    os.kill(child, signal.SIGKILL)
    report(outcome=got, took=took, passed=passed, owner=ref._loc.owner)
    actorrt.shutdown()
    """
    final = run_script(tmp_path, OWN_CLUSTER, body, timeout=180)[-1]
    assert final["owner"] in final["outcome"] and "lost" in final["outcome"], final
    assert final["took"] < 10, final
    assert final["owner"] in final["passed"] and "lost" in final["passed"], final


def test_a_result_whose_copy_came_back_travels_with_it_once_its_owner_died(tmp_path):
    """Its owner cannot be fetched from any more, and the caller has the value."""
    body = """
    rt, pids, p, c = start_apart()
    ref = p.make.remote(4 << 20)  # over INLINE_BYTES, under PULL_BYTES: a copy came back
    assert int(actorrt.get(ref, timeout=30).sum()) == 4 << 20 and ref._loc is not None
    os.kill(actorrt.get(p.pid.remote(), timeout=30), signal.SIGKILL)
    deadline = time.monotonic() + 60
    while p.worker not in rt.dead_workers and time.monotonic() < deadline:
        time.sleep(0.05)
    dead = (
        actorrt.get(c.total.remote(ref), timeout=60),
        actorrt.get(c.total_of_first.remote([ref]), timeout=60),
    )
    while p.worker in rt.dead_workers and time.monotonic() < deadline:
        time.sleep(0.05)  # until a new process took its name
    replaced = (
        actorrt.get(c.total.remote(ref), timeout=60),
        actorrt.get(c.total_of_first.remote([ref]), timeout=60),
    )
    report(pids=pids + list(rt.local_worker_pids), dead=dead, replaced=replaced)
    actorrt.shutdown()
    """
    final = run_script(tmp_path, OWN_CLUSTER, body, timeout=180)[-1]
    assert final["dead"] == final["replaced"] == [4 << 20, 4 << 20], final


def test_a_callee_that_kept_a_borrowed_ref_and_died_before_its_owner_heard_holds_nothing(
    tmp_path,
):
    """The caller tells the owner that its callee kept the ref after the reply; the
    callee may die first, and its death may reach the owner first (here the caller's word
    is held back until then). Was: the owner counted the dead callee's hold after its
    death had let go of its holds, and the object stayed until the cluster ended. Words
    now carry the process's RPC id, and the owner counts only the live process's."""
    body = """
    import threading
    from actorrt.runtime.objects import ObjectStore

    rt, pids, p, c = start_apart()
    told = threading.Event()
    hold = ObjectStore.hold

    def hold_after_the_death(store, *args):  # the owner is the caller here: its own word
        def later():
            deadline = time.monotonic() + 60
            while c.worker not in rt.dead_workers and time.monotonic() < deadline:
                time.sleep(0.05)
            hold(store, *args)
            told.set()
        threading.Thread(target=later, daemon=True).start()

    ObjectStore.hold = hold_after_the_death
    ref = actorrt.put(torch.ones(2 << 20, dtype=torch.uint8))
    oid = ref._loc.object_id
    assert actorrt.get(c.keep.remote([ref]), timeout=30)
    os.kill(actorrt.get(c.pid.remote(), timeout=30), signal.SIGKILL)
    in_time = told.wait(60)
    ObjectStore.hold = hold
    holders = dict(rt.objects._holders.get(oid, {}))
    del ref
    deadline = time.monotonic() + 20
    while oid in rt.objects._values and time.monotonic() < deadline:
        time.sleep(0.05)
    report(pids=pids + list(rt.local_worker_pids), in_time=in_time, holders=holders,
           freed=oid not in rt.objects._values, driver=rt.name)
    actorrt.shutdown()
    """
    final = run_script(tmp_path, OWN_CLUSTER, body, timeout=180)[-1]
    assert final["in_time"], final
    assert final["holders"] == {final["driver"]: 1}, final
    assert final["freed"], final


def test_objects_of_an_owner_whose_process_was_replaced_say_that_it_died(tmp_path):
    """The new process under the dead owner's name does not blame dropped refs."""
    body = """
    rt, pids, p, c = start_apart()
    ref = p.make.remote(40 << 20)  # over ACTORRT_PULL_BYTES: only the producer has it
    box = actorrt.get(p.put.remote(8), timeout=30)
    lent = actorrt.get(p.lend.remote(c, 3), timeout=30)
    assert actorrt.wait([ref], timeout=30)[0] == [ref]
    os.kill(actorrt.get(p.pid.remote(), timeout=30), signal.SIGKILL)
    deadline = time.monotonic() + 60
    while p.worker not in rt.dead_workers and time.monotonic() < deadline:
        time.sleep(0.05)
    while p.worker in rt.dead_workers and time.monotonic() < deadline:
        time.sleep(0.05)  # until a new process took its name
    report(
        pids=pids + list(rt.local_worker_pids),
        replaced=p.worker not in rt.dead_workers,
        got=outcome(lambda: actorrt.get(ref, timeout=60)),
        passed=outcome(lambda: actorrt.get(c.total.remote(ref), timeout=60)),
        put=outcome(lambda: actorrt.get(box[0], timeout=60)),
        lent=outcome(lambda: actorrt.get(lent[0], timeout=60)),
    )
    actorrt.shutdown()
    """
    final = run_script(tmp_path, OWN_CLUSTER, body, timeout=180)[-1]
    assert final["replaced"], final
    for what in ("got", "passed", "put"):
        assert "owner process died" in final[what], final
    assert "the process that lent it died" in final["lent"], final
    for what in ("got", "passed", "put", "lent"):
        assert "took the dead one's name" in final[what] and "dropped" not in final[what], final


def test_a_hung_owner_makes_get_raise_object_lost_within_the_heartbeat_bound(tmp_path):
    body = """
    rt = actorrt.start(num_workers=2, heartbeat_timeout=3)
    report(pids=list(rt.local_worker_pids))
    p = Producer.remote()
    ref = p.make.remote(40 << 20)  # over ACTORRT_PULL_BYTES: only the producer has it
    actorrt.wait([ref], timeout=30)
    os.kill(actorrt.get(p.pid.remote(), timeout=30), signal.SIGSTOP)  # alive, silent
    start = time.monotonic()
    got = outcome(lambda: actorrt.get(ref, timeout=60))
    report(outcome=got, took=time.monotonic() - start, owner=ref._loc.owner)
    actorrt.shutdown()
    """
    final = run_script(tmp_path, OWN_CLUSTER, body, timeout=180)[-1]
    assert final["owner"] in final["outcome"] and "lost" in final["outcome"], final
    assert final["took"] < 3 + 10, final  # the heartbeat bound, and then some


def test_a_lent_ref_is_resolved_once_and_its_loan_ends(cluster):
    p, c = _apart(cluster)
    slow = p.make_slowly.remote(2 * MB, 5, 0.5)  # unanswered when sent nested: lent
    total = c.total_nested.remote({"ref": slow})
    loans = cluster.objects._loans
    (token,) = [t for t, r in list(loans.items()) if r is slow]  # lent as it was packed
    assert actorrt.get(total, timeout=60) == 10 * MB
    del slow, total
    assert _wait_for(lambda: token not in loans), "the loan never ended"
    # The lender answers with the ref itself: the borrower holds it directly, no lease.
    slow = p.make_slowly.remote(2 * MB, 5, 0.5)
    assert actorrt.get(c.keep_lent.remote({"ref": slow}), timeout=60) == (10 * MB, True, True)
    oid = slow._loc.object_id
    expected = ({cluster.name: 1, c.worker: 1}, 0)
    assert _wait_for(lambda: actorrt.get(p.holds.remote(oid), timeout=30) == expected), actorrt.get(
        p.holds.remote(oid), timeout=30
    )
    del slow
    assert _wait_for(lambda: actorrt.get(p.holds.remote(oid), timeout=30) == ({c.worker: 1}, 0))
    assert actorrt.get(c.drop.remote(), timeout=30)
    assert _wait_for(lambda: not actorrt.get(p.keeps.remote(oid), timeout=30))


def test_a_ref_kept_past_shutdown_raises_a_clear_error(tmp_path):
    body = """
    rt = actorrt.start(num_workers=1)
    report(pids=list(rt.local_worker_pids))
    p = Producer.remote()
    ref = p.make.remote(40 << 20)  # over ACTORRT_PULL_BYTES: only the producer has it
    mine = actorrt.put(torch.ones(4 << 20))
    actorrt.wait([ref], timeout=30)
    actorrt.shutdown()
    report(errors=[outcome(lambda r=r: actorrt.get(r, timeout=10)) for r in (ref, mine)])
    """
    reports = run_script(tmp_path, OWN_CLUSTER, body, timeout=120)
    assert all("shut down" in e for e in reports[-1]["errors"]), reports[-1]


def test_an_object_whose_ref_left_its_maker_in_a_value_goes_soon_after_its_last_ref(tmp_path):
    """Was: kept about 10 s after its last ref went, when the ref had left the process
    that put it inside a value (a method's result ``[ref]`` or ``{"ref": ref}``, an
    argument of another actor's call): that process sent the RRef of the object's lease
    (rank 0's) and held it ``rref_keeper.SENT_HOLD_S`` after each send, as torch shows
    no sign of the receiver's accept; puts returned in a loop grew the owner's memory by
    gigabytes. The receiver now says when torch accepted it: the object goes about two
    seconds later (``rref_keeper.ACCEPTED_SETTLE_S``, and the holds that wait for rank 0's
    confirmation, ``rref_keeper.SETTLE_S``)."""
    body = """
    rt, pids, p, c = start_apart()

    def freed_after(object_id, drop):
        # Seconds from dropping the last ref until the owner let the object go (<= 30).
        kept = actorrt.get(p.keeps.remote(object_id), timeout=30)
        start = time.monotonic()
        drop()
        while time.monotonic() - start < 30:
            if not actorrt.get(p.keeps.remote(object_id), timeout=30):
                break
            time.sleep(0.05)
        return kept, time.monotonic() - start

    took = []
    for _ in range(2):
        boxes = [actorrt.get(p.put.remote(1 << 20), timeout=30)]
        took.append(freed_after(boxes[0][0]._loc.object_id, boxes.clear))  # to the driver
        boxes = [actorrt.get(p.put_in_dict.remote(1 << 20), timeout=30)]
        took.append(freed_after(boxes[0]["ref"]._loc.object_id, boxes.clear))
        given = actorrt.get(p.give.remote(c, 1 << 20), timeout=30)  # to another worker
        took.append(freed_after(given, lambda: actorrt.get(c.drop.remote(), timeout=30)))
    report(took=took)
    actorrt.shutdown()
    """
    final = run_script(tmp_path, OWN_CLUSTER, body, timeout=180)[-1]
    assert all(kept for kept, _ in final["took"]), final  # held while its ref lived
    # A bound the old hold (SENT_HOLD_S, 10 s from the send) always exceeds.
    assert max(seconds for _, seconds in final["took"]) < 8, final


DEAD_HOLDERS = """
@actorrt.actor
class Forwarder:
    def pid(self):
        return os.getpid()
    def keep(self, box):  # every box given, kept
        self.boxes = [*getattr(self, "boxes", []), box]
        return True
    def boxes_kept(self):
        return self.boxes
    def total_kept(self, i):
        return int(actorrt.get(self.boxes[i][0], timeout=30).sum())
    def make_elsewhere(self):  # an actor made here, living on another process
        for _ in range(8):
            a = Consumer.remote()
            if actorrt.get(a.pid.remote(), timeout=30) != os.getpid():
                self.made = a
                return a.worker, a.actor_id
        raise RuntimeError("every new actor landed on this process")
    def keep_and_pass(self, box, other):  # box[0] unanswered: borrowed, and lent on
        self.boxes = [*getattr(self, "boxes", []), box]
        return actorrt.get(other.keep.remote(box), timeout=30)
    def lend_to(self, p, other, n, fill, seconds):  # lent from here, then dropped here
        ref = p.make_after.remote(n, fill, seconds)
        return actorrt.get(other.keep.remote([ref]), timeout=30)
    def pass_on(self, p, other, n):
        # a result kept at p, held directly here; sent on in a value, it gets a lease
        # made here (rpc.remote), whose fork this process holds
        self.ref = p.make.remote(n)
        actorrt.get(self.ref, timeout=30)  # answered: it travels as its location, not lent
        assert actorrt.get(other.keep.remote([self.ref]), timeout=30)
        return self.ref._loc.object_id

def apart(n):  # n consumers, each on a worker of its own, none with the producer
    rt = actorrt.start(num_workers=n + 1, heartbeat_timeout=5)
    report(pids=list(rt.local_worker_pids))
    p = Producer.remote()
    taken = {actorrt.get(p.pid.remote(), timeout=30)}
    out = []
    while len(out) < n:
        c = Forwarder.remote()
        pid = actorrt.get(c.pid.remote(), timeout=30)
        if pid not in taken:
            taken.add(pid)
            out.append((c, pid))
    return p, out

def hosted(worker, actor_id):  # whether the actor still lives in its process
    import torch.distributed.rpc as rpc
    from actorrt.runtime.status import rpc_process_stats
    return actor_id in rpc.rpc_sync(worker, rpc_process_stats, timeout=30)["calls"]

def hosted_until(h, seconds):  # whether h's actor still lives after `seconds` at most
    deadline = time.monotonic() + seconds
    while hosted(h.worker, h.actor_id):
        if time.monotonic() > deadline:
            return True
        time.sleep(0.1)
    return False

def kept_until(p, object_id, seconds):  # whether p still keeps it after `seconds` at most
    deadline = time.monotonic() + seconds
    while actorrt.get(p.keeps.remote(object_id), timeout=30):
        if time.monotonic() > deadline:
            return True
        time.sleep(0.1)
    return False
"""


def test_an_object_whose_last_ref_died_with_its_holder_goes(tmp_path):
    """Was: kept at its owner until the cluster ended (a documented limit): a process
    that died holding a copy of a ref that had travelled inside a value kept its fork of
    the object's lease at rank 0, which torch never forgets. Each receiver now tells
    rank 0 which fork it holds, and rank 0 drops a dead holder's forks: for a ref sent by
    rank 0 (the lease's owner), by a worker, and one whose lease the dead holder made.
    A ref another process still holds keeps its object."""
    body = """
    p, ((c1, pid1), (c2, pid2), (c3, pid3)) = apart(3)
    n = 2 << 20  # kept at the producer (over ACTORRT_INLINE_BYTES)
    took = {}

    # 1. Sent by rank 0: the driver got [ref] from the producer, passes it to c1, drops it.
    box = actorrt.get(p.put.remote(n), timeout=30)
    from_driver = box[0]._loc.object_id
    assert actorrt.get(c1.keep.remote(box), timeout=30)
    # 2. Sent by a worker: the producer puts and hands [ref] to c2 itself.
    from_worker = actorrt.get(p.give.remote(c2, n), timeout=30)
    # 3. A lease c3 made: a result kept at the producer, held by c3, sent on to c1.
    made_there = actorrt.get(c3.pass_on.remote(p, c1, n), timeout=30)
    # 4. Held twice, by c2 and c3: one of them dies, the other reads it after.
    both = actorrt.get(p.put.remote(n), timeout=30)
    both_id = both[0]._loc.object_id
    assert actorrt.get([c2.keep.remote(both), c3.keep.remote(both)], timeout=30) == [True] * 2
    del box, both
    ids = [from_driver, from_worker, made_there, both_id]
    before = [kept_until(p, i, 3) for i in ids]  # the holders keep them

    os.kill(pid1, signal.SIGKILL)  # held 1 and a copy of 3
    start = time.monotonic()
    gone_1 = not kept_until(p, from_driver, 20)
    took["1"] = time.monotonic() - start
    still_3 = kept_until(p, made_there, 3)  # c3 holds it still
    os.kill(pid3, signal.SIGKILL)  # made 3's lease and held it; held a copy of 4
    start = time.monotonic()
    gone_3 = not kept_until(p, made_there, 20)
    took["3"] = time.monotonic() - start
    still_4 = kept_until(p, both_id, 3)  # c2 holds it still, and reads it
    read_4 = actorrt.get(c2.total_kept.remote(1), timeout=30)
    os.kill(pid2, signal.SIGKILL)
    start = time.monotonic()
    gone_2 = not kept_until(p, from_worker, 20) and not kept_until(p, both_id, 20)
    took["2"] = time.monotonic() - start
    report(before=before, gone=[gone_1, gone_2, gone_3], still=[still_3, still_4],
           read_4=read_4, took=took)
    actorrt.shutdown()
    """
    header = OWN_CLUSTER + DEAD_HOLDERS
    final = run_script(tmp_path, header, body, timeout=240)[-1]
    assert final["before"] == [True] * 4, final
    assert final["gone"] == [True, True, True], final
    assert final["still"] == [True, True] and final["read_4"] == 2 << 20, final


def test_a_lent_ref_whose_last_borrower_died_lets_its_value_go(tmp_path):
    """Was: kept until the cluster ended. A ref passed on before its call answered is
    lent: its borrowers hold forks of the loan's lease, and the lender keeps the ref (and
    so its value) until the last goes. A borrower that died held its fork for good; the
    loan's RRef now travels as a lease's does, so rank 0 drops a dead borrower's fork.
    Lent by rank 0 and passed on by a borrower, and lent by a worker."""
    body = """
    import gc
    p, ((c1, pid1), (c2, pid2), (c3, pid3)) = apart(3)
    n = 2 << 20  # kept at the producer (over ACTORRT_INLINE_BYTES)
    # 1. Lent by rank 0 to c1, which lends it on, still unanswered, to c2.
    x = p.make_after.remote(n, 1, 3)
    assert actorrt.get(c1.keep_and_pass.remote([x], c2), timeout=30)
    # 2. Lent by a worker, c3, to c1 only.
    assert actorrt.get(c3.lend_to.remote(p, c1, n, 2, 3), timeout=30)
    del x
    gc.collect()
    deadline = time.monotonic() + 30
    while actorrt.get(p.kept_fills.remote(), timeout=30) != [1, 2]:
        assert time.monotonic() < deadline, "the lent calls' values were never kept"
        time.sleep(0.2)
    time.sleep(3)  # past the RRef keeper's holds of what was sent
    before = actorrt.get(p.kept_fills.remote(), timeout=30)

    def gone_within(seconds, fill):  # whether p lets `fill` go within `seconds`
        deadline = time.monotonic() + seconds
        while fill in actorrt.get(p.kept_fills.remote(), timeout=30):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    os.kill(pid1, signal.SIGKILL)  # the only borrower of 2, one of 1's two
    gone_2 = gone_within(20, 2)
    still_1 = not gone_within(3, 1)  # c2 still borrows it
    read_1 = actorrt.get(c2.total_kept.remote(0), timeout=30)
    # Reading it gave c2 a fork of the object's lease too: rank 0 hears of it at once, or
    # within 20 ms when c2 told it something just before (LET_GO_GATHER_S); a holder
    # that dies sooner keeps it (a documented limit).
    time.sleep(1)
    os.kill(pid2, signal.SIGKILL)
    gone_1 = gone_within(20, 1)
    report(before=before, gone=[gone_2, gone_1], still_1=still_1, read_1=read_1)
    actorrt.shutdown()
    """
    header = OWN_CLUSTER + DEAD_HOLDERS
    final = run_script(tmp_path, header, body, timeout=240)[-1]
    assert final["before"] == [1, 2], final
    assert final["gone"] == [True, True], final
    assert final["still_1"] and final["read_1"] == 2 << 20, final


def test_an_actor_whose_last_handle_died_with_its_holder_is_released(tmp_path):
    """Was: an unnamed actor lived until the cluster ended once a process holding one of
    its handles died (torch never forgets that process's fork of the actor's RRef), even
    after every other handle went. Each receiver of a handle, and a process that made an
    actor, now tells the actor's host which fork it holds, and the host drops a dead
    holder's forks. An actor whose handle another process still holds lives on."""
    body = """
    p, ((c1, pid1), (c2, pid2)) = apart(2)
    def elsewhere():  # a new actor on neither c1's nor c2's process
        while True:
            a = Consumer.remote()
            if actorrt.get(a.pid.remote(), timeout=30) not in (pid1, pid2):
                return a
    given, shared = elsewhere(), elsewhere()
    assert actorrt.get(c1.keep.remote([given, shared]), timeout=30)
    assert actorrt.get(c2.keep.remote([shared]), timeout=30)
    made_worker, made_id = actorrt.get(c1.make_elsewhere.remote(), timeout=30)
    ids = {"given": (given.worker, given.actor_id), "shared": (shared.worker, shared.actor_id),
           "made": (made_worker, made_id)}
    del given, shared
    import gc
    gc.collect()
    time.sleep(3)  # past the RRef keeper's holds of what the driver sent
    before = {k: hosted(*v) for k, v in ids.items()}
    os.kill(pid1, signal.SIGKILL)
    start = time.monotonic()
    deadline = start + 20
    while any(hosted(*ids[k]) for k in ("given", "made")) and time.monotonic() < deadline:
        time.sleep(0.1)
    after = {k: hosted(*v) for k, v in ids.items()}
    took = time.monotonic() - start
    time.sleep(2)
    shared_lives = hosted(*ids["shared"])
    (box,) = actorrt.get(c2.boxes_kept.remote(), timeout=30)
    answered = actorrt.get(box[0].pid.remote(), timeout=30)
    report(before=before, after=after, took=took, shared_lives=shared_lives,
           answered=bool(answered))
    actorrt.shutdown()
    """
    final = run_script(tmp_path, OWN_CLUSTER + DEAD_HOLDERS, body, timeout=240)[-1]
    assert final["before"] == {"given": True, "shared": True, "made": True}, final
    assert final["after"] == {"given": False, "shared": True, "made": False}, final
    assert final["shared_lives"] and final["answered"], final
