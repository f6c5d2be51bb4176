"""CallRetries against a fake runtime: what is resent, where, in which order, and the errors."""

import gc
import itertools
import threading
import time
import weakref

import pytest
import torch

from actorrt.errors import ActorDiedError, TaskCancelledError
from actorrt.runtime.protocol import LocalFailure
from actorrt.runtime.retries import CallRetries


class Handle:
    """A ``runtime.protocol.Target``, as an ``ActorHandle`` is one."""

    _moves = True

    def __init__(self, retries, worker="w1"):
        self._actor_id = "a1"
        self._worker = worker
        self._class_name = "Env"
        self._max_task_retries = retries


class Slot:
    def __init__(self):
        self.reply = None
        self.error = None
        self.cancel = None

    def attach(self, reply, worker, keep, ticket):
        self.reply = reply
        self.cancel = ticket

    def fail(self, error):
        self.error = error


class FakeRuntime:
    """Records every attempt; the actor moves as ``homes`` says (None: it is gone)."""

    def __init__(self, homes):
        self.stopped = threading.Event()
        self.homes = list(homes)
        self.sent = []  # (worker, seq, method, args, future)
        self.dead = set()
        self._seqs = {}
        self.cancels = []  # (worker, actor_id, seq, recursive)
        self.skips = []  # (actor_id, worker, seq) given up

    def is_down(self, worker):
        return worker in self.dead

    def seq_at(self, actor_id, worker):
        return next(self._seqs.setdefault((actor_id, worker), itertools.count()))

    def numbering(self, worker):
        return worker  # no process is replaced here

    def pack_call(self, target, worker, seq, method, args, kwargs, pins=None):
        return args, kwargs

    def post(self, target, worker, seq, method, wire, may_queue):
        fut = torch.futures.Future()
        self.sent.append((worker, seq, method, wire[0], fut))
        return fut, None

    def worker_unreachable(self, worker):
        self.dead.add(worker)

    def cancel_call(self, worker, actor_id, seq, recursive):
        self.cancels.append((worker, actor_id, seq, recursive))

    def skip_at(self, actor_id, worker, seq):
        self.skips.append((actor_id, worker, seq))

    def moved_from_replaced(self, target):
        return None  # no process is replaced here

    def locate_away(self, actor_id, dead):
        home = self.homes.pop(0)
        return (home, "") if home else (None, "it has no restarts left (max_restarts=1)")

    def attempts(self, worker, n):
        deadline = time.monotonic() + 10
        while len([s for s in self.sent if s[0] == worker]) < n:
            assert time.monotonic() < deadline, self.sent
            time.sleep(0.01)
        return [s for s in self.sent if s[0] == worker]


def call(retries, rt, handle, method, *args):
    slot = Slot()
    retries.send(handle, rt.seq_at(handle._actor_id, handle._worker), method, args, {}, slot,
                 raise_now=True)  # fmt: skip
    return slot


def lost():
    return RuntimeError("pipe closed (the connection was reset)")


def reply(i):
    """A plain reply's wire, as the payload pipeline makes it: (OK, value), unpickled."""
    return (None, [(0, ("reply", i))])


def test_calls_lost_with_their_process_are_resent_in_the_order_they_were_made():
    rt = FakeRuntime(["w2"])
    retries = CallRetries(rt, settle=2.0)
    handle = Handle(retries=2)
    slots = [call(retries, rt, handle, "step", i) for i in range(3)]
    first = rt.attempts("w1", 3)
    for _, _, _, _, fut in reversed(first):  # they come back failed in any order
        fut.set_exception(lost())
    again = rt.attempts("w2", 3)
    assert [(seq, args) for _, seq, _, args, _ in again] == [(0, (0,)), (1, (1,)), (2, (2,))]
    later = call(retries, rt, handle, "step", 3)  # the handle points at w2 now
    assert handle._worker == "w2" and rt.sent[-1][:2] == ("w2", 3)
    for i, (*_, fut) in enumerate(rt.sent[-4:]):
        fut.set_result(reply(i))
    for s in [*slots, later]:
        _done_within(s.reply)
    assert [s.reply.wait() for s in [*slots, later]] == [reply(i) for i in range(4)]


def test_retries_used_up_and_restarts_used_up_say_which():
    rt = FakeRuntime(["w2", "w3"])
    retries = CallRetries(rt, settle=2.0)
    slot = call(retries, rt, Handle(retries=1), "step", 0)
    rt.attempts("w1", 1)[0][-1].set_exception(lost())
    rt.attempts("w2", 1)[0][-1].set_exception(lost())  # the one retry is used
    with pytest.raises(LocalFailure) as info:
        slot.reply.wait()
    assert isinstance(info.value.error, ActorDiedError)
    assert "retries are used up (max_task_retries=1)" in str(info.value.error)
    assert "recreated on 'w3'" in str(info.value.error)

    rt = FakeRuntime(["w2", None])
    retries = CallRetries(rt, settle=2.0)
    slot = call(retries, rt, Handle(retries=-1), "step", 0)
    rt.attempts("w1", 1)[0][-1].set_exception(lost())
    rt.attempts("w2", 1)[0][-1].set_exception(lost())
    with pytest.raises(LocalFailure, match="no restarts left"):
        slot.reply.wait()


def test_an_error_that_is_not_a_lost_process_is_not_retried():
    rt = FakeRuntime(["w2"])
    retries = CallRetries(rt, settle=2.0)
    slot = call(retries, rt, Handle(retries=3), "step", 0)
    rt.sent[0][-1].set_exception(RuntimeError("Can't pickle local object 'f.<locals>.g'"))
    with pytest.raises(RuntimeError, match="pickle"):
        slot.reply.wait()
    time.sleep(0.1)
    assert len(rt.sent) == 1  # not sent again
    # it may never have reached the mailbox (torch failed to unpickle it there)
    assert rt.skips == [("a1", "w1", 0)]


def test_a_call_numbered_before_its_actor_moved_is_numbered_for_the_new_instance():
    # Another thread recovered the actor onto w2 between the caller taking the number
    # (for w1) and sending: w2's mailbox starts at 0 and would wait for 5 for ever.
    rt = FakeRuntime([])
    retries = CallRetries(rt, settle=2.0)
    handle = Handle(retries=1, worker="w1")
    for _ in range(5):
        rt.seq_at(handle._actor_id, "w1")
    seq = rt.seq_at(handle._actor_id, "w1")
    handle._worker = "w2"
    slot = Slot()
    retries.send(handle, seq, "step", (0,), {}, slot, raise_now=True, seq_worker="w1")
    assert rt.sent[-1][:2] == ("w2", 0)
    again = Slot()
    retries.send(handle, rt.seq_at(handle._actor_id, "w2"), "step", (1,), {}, again,
                 raise_now=True, seq_worker="w2")  # fmt: skip
    assert rt.sent[-1][:2] == ("w2", 1)


def test_a_cancelled_call_is_cancelled_where_it_went_and_not_sent_again():
    rt = FakeRuntime(["w2"])
    retries = CallRetries(rt, settle=2.0)
    handle = Handle(retries=3)
    doomed, kept = call(retries, rt, handle, "step", 0), call(retries, rt, handle, "step", 1)
    doomed.cancel(False)  # actorrt.cancel(ref, recursive=False)
    assert rt.cancels == [("w1", "a1", 0, False)]
    for *_, fut in rt.attempts("w1", 2):
        fut.set_exception(lost())  # the process died with both in flight
    again = rt.attempts("w2", 1)
    assert [args for _, _, _, args, _ in again] == [(1,)], "the cancelled call went again"
    _done_within(doomed.reply)
    with pytest.raises(LocalFailure) as info:
        doomed.reply.wait()
    assert isinstance(info.value.error, TaskCancelledError)
    assert "before it was sent again" in str(info.value.error)
    again[0][-1].set_result(reply(1))
    _done_within(kept.reply)
    assert kept.reply.wait() == reply(1)


def test_a_ref_does_not_keep_its_actors_handle_once_its_call_is_answered():
    rt = FakeRuntime([])
    retries = CallRetries(rt, settle=2.0)
    handle = Handle(retries=1)
    slot = call(retries, rt, handle, "step", 0)
    rt.sent[0][-1].set_result(reply(0))
    _done_within(slot.reply)
    gone = weakref.ref(handle)
    del handle
    gc.collect()
    assert gone() is None, "the ref's way to cancel its call kept the actor's handle"
    slot.cancel(True)  # answered and let go of: nothing to cancel
    assert rt.cancels == []


def _done_within(future, timeout=10):
    done = threading.Event()
    future.add_done_callback(lambda _: done.set())
    assert done.wait(timeout), f"no answer in {timeout} s"
