"""Streaming generators in one process (no RPC): the caller's inbox and the actor's side."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import torch

from actorrt.runtime import generators
from actorrt.runtime.generators import FAILED, Inbox, Inboxes, Lost, Sender, Stream
from actorrt.runtime.mailbox import Call, Mailbox
from actorrt.runtime.protocol import CANCELLED, ERROR, OK

W = [((None, [(OK, i)])) for i in range(6)]  # six packed values


def test_values_arriving_in_any_order_are_given_in_order():
    inbox = Inbox()
    for i in (2, 0, 1):
        assert inbox.put(i, W[i])
    assert [inbox.slot(i).result(timeout=1) for i in range(3)] == W[:3]


def test_a_slot_asked_before_its_value_is_done_when_it_comes():
    inbox = Inbox()
    slot = inbox.slot(1)
    assert not slot.done()
    inbox.put(0, W[0])
    assert not slot.done()
    inbox.put(1, W[1])
    assert slot.result(timeout=1) == W[1]


def test_a_value_sent_twice_is_taken_once():
    # A call sent again after its process died yields its values again, same indexes.
    inbox = Inbox()
    assert inbox.put(0, W[0])
    assert not inbox.put(0, W[3])
    assert inbox.slot(0).result(timeout=1) == W[0]


def test_the_end_comes_after_every_counted_value_even_when_the_reply_is_first():
    inbox = Inbox()
    inbox.put(0, W[0])
    inbox.finish(3)  # the call's reply overtook values 1 and 2
    one, two, three = inbox.slot(1), inbox.slot(2), inbox.slot(3)
    assert three.result(timeout=1) is None  # no fourth value
    assert not one.done() and not two.done()
    inbox.put(2, W[2])
    inbox.put(1, W[1])
    assert (one.result(timeout=1), two.result(timeout=1)) == (W[1], W[2])
    assert not inbox.put(3, W[3])  # past the end: not wanted


def test_a_value_for_a_stream_of_a_dead_process_of_the_same_name_is_not_taken():
    """A process that took a dead one's name opens streams the dead one's generators do
    not know: a value one of them still sends is let go, not read as the new one's."""
    gone = []
    dead, new = Inboxes(lambda wire: None), Inboxes(gone.append)
    old_id, _ = dead.open()
    new_id, inbox = new.open()
    assert new_id != old_id
    new.put(old_id, 0, W[0])  # sent by the dead process's producer
    assert gone == [W[0]] and not inbox.slot(0).done()


def test_a_failed_call_ends_after_the_values_that_arrived():
    gone = []
    inboxes = Inboxes(gone.append)
    stream_id, inbox = inboxes.open()
    inboxes.put(stream_id, 0, W[0])
    inboxes.put(stream_id, 2, W[2])  # 1 never came: the call failed before it
    pending = inbox.slot(1)
    inbox.finish(None)
    assert pending.result(timeout=1) == FAILED  # the call's error goes there
    assert inbox.slot(3).result(timeout=1) is None
    inboxes.put(stream_id, 1, W[1])  # too late: let go at once
    assert gone == [W[1]]
    inbox.slot(0).result(timeout=1)
    inbox.take(0)
    inboxes.close(stream_id)  # value 2 was never given: let go now
    assert gone == [W[1], W[2]]


def test_values_a_dead_producers_reply_counted_and_that_never_came_are_lost():
    """Its reply overtook its values and it died: they never come (not waited for ever)."""
    gone = []
    inboxes = Inboxes(gone.append)
    stream_id, inbox = inboxes.open()
    other_id, other = inboxes.open()  # another producer's stream: untouched
    inboxes.put(stream_id, 0, W[0])
    inboxes.put(stream_id, 2, W[2])  # 1 is missing
    pending = inbox.slot(1)
    inbox.producer = "worker1"
    inbox.finish(4)
    other.producer = "worker2"
    other.finish(2)
    assert inbox.missing_from("worker1") and not inbox.missing_from("worker2")
    inboxes.producer_died("worker1", grace=0)
    lost = pending.result(timeout=5)
    assert type(lost) is Lost and "worker1 died after its reply" in lost
    assert inbox.slot(0).result(timeout=1) == W[0]  # what arrived stays good
    assert inbox.slot(3).result(timeout=1) is None  # the iteration ends at the loss
    assert not inbox.missing_from("worker1")
    assert not other.slot(0).done()  # worker2's values may still come
    inbox.take(0)
    inboxes.close(stream_id)
    assert gone == [W[2]]  # arrived after the loss, never given: let go


def test_a_producer_that_dies_before_its_reply_leaves_the_stream_to_the_calls_error():
    inboxes = Inboxes(lambda wire: None)
    _, inbox = inboxes.open()
    inbox.producer = "worker1"
    inboxes.producer_died("worker1", grace=0)  # no reply yet: a retry may still come
    time.sleep(0.1)
    inbox.finish(None)  # the call failed: its own error, not a loss
    assert inbox.slot(0).result(timeout=1) == FAILED


def test_a_slot_cannot_be_cancelled_by_a_cancelled_wait():
    inbox = Inbox()
    slot = inbox.slot(0)

    async def wait_briefly():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(slot)), 0.05)

    asyncio.run(wait_briefly())
    inbox.put(0, W[0])
    assert slot.result(timeout=1) == W[0]


def test_closing_lets_go_of_the_values_not_taken_and_of_later_ones():
    gone = []
    inboxes = Inboxes(gone.append)
    stream_id, inbox = inboxes.open()
    inboxes.put(stream_id, 0, W[0])
    inboxes.put(stream_id, 1, W[1])
    inbox.slot(0).result(timeout=1)
    inbox.take(0)  # its ref holds value 0
    inboxes.close(stream_id)
    assert gone == [W[1]]
    inboxes.put(stream_id, 2, W[2])  # still on its way when the generator went
    assert gone == [W[1], W[2]]
    assert len(inboxes) == 0


def test_a_stream_name_survives_pickling():
    import pickle

    name = pickle.loads(pickle.dumps(Stream("rollouts", 7)))
    assert (name, type(name), name.stream_id) == ("rollouts", Stream, 7)


# -- the actor's side: the mailbox runs the generator and sends each value ------------


class Source:
    def __init__(self):
        self.closed = False
        self.gate = threading.Event()

    def count(self, n):
        yield from range(n)

    def fail_after(self, n):
        yield from range(n)
        raise ValueError("boom")

    def forever(self):
        i = 0
        try:
            while True:
                yield i
                i += 1
                self.gate.wait(0.01)
        finally:
            self.closed = True

    def plain(self):
        return 3


class AsyncSource:
    async def count(self, n):
        for i in range(n):
            await asyncio.sleep(0)
            yield i

    async def slow(self):
        yield 0
        await asyncio.sleep(30)
        yield 1


class AsyncForever:
    def __init__(self):
        self.closed = False

    async def forever(self):
        try:
            while True:
                await asyncio.sleep(0)
                yield 0
        finally:
            self.closed = True


@pytest.fixture
def sent(monkeypatch):
    """The values the mailbox sends, as (caller, stream id, index, reply)."""
    out = []
    monkeypatch.setattr(
        Sender, "send", lambda self, i, wire: out.append((self._caller, self._stream_id, i, wire))
    )
    return out


def _box(cls):
    box = Mailbox("b" * 32, lambda actor_id, why: None, lambda _caller, reply: reply)
    box.open(cls, (None, [((), {})]), class_name=cls.__name__, max_concurrency=None, gpu_ids=())
    return box


def _stream_call(seq, method, *args):
    return Call("c", seq, Stream(method, 5), (None, [(args, {})]), torch.futures.Future())


def test_each_value_goes_to_the_callers_stream_and_the_reply_counts_them(sent):
    box = _box(Source)
    call = _stream_call(0, "count", 3)
    box.deliver(call)
    assert call.future.wait() == (OK, 3)
    assert sent == [("c", 5, i, (OK, i)) for i in range(3)]


def test_an_exception_is_one_more_value_and_the_call_answers(sent):
    box = _box(Source)
    call = _stream_call(0, "fail_after", 2)
    box.deliver(call)
    assert call.future.wait() == (OK, 3)
    status, (what, summary, _, cause) = sent[2][3]
    assert (status, summary, type(cause)) == (ERROR, "ValueError: boom", ValueError)
    assert what.endswith("fail_after")


def test_a_method_that_returns_no_generator_fails_the_call(sent):
    box = _box(Source)
    call = _stream_call(0, "plain")
    box.deliver(call)
    status, (_, summary, _, _) = call.future.wait()
    assert status == ERROR and "returned int, not a generator" in summary
    assert sent == []


def _running(cls, method, sent, values=1):
    """A mailbox of ``cls`` running streaming call ``method``, once it sent ``values``."""
    box = _box(cls)
    call = _stream_call(0, method)
    box.deliver(call)
    _until(lambda: len(sent) >= values)
    return box, call


def _until(predicate, within=10.0):
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "not within 10 s"
        time.sleep(0.01)


def test_a_cancel_stops_a_running_generator_between_values(sent):
    box, call = _running(Source, "forever", sent, values=3)
    box.cancel("c", 0)
    count = call.future.wait()[1]
    assert sent[-1][2] == count - 1 and sent[-1][3][0] == CANCELLED
    assert [s[3] for s in sent[:-1]] == [(OK, i) for i in range(count - 1)]
    assert box._instance.closed  # its finally ran


def test_a_kill_stops_a_running_generator(sent):
    box, call = _running(Source, "forever", sent)
    source = box._instance
    box.kill("killed")
    assert call.future.wait()[0] != OK
    _until(lambda: source.closed)  # its thread leaves the generator after the value it makes


def test_an_async_generator_streams_from_the_actors_loop(sent):
    box = _box(AsyncSource)
    call = _stream_call(0, "count", 4)
    box.deliver(call)
    assert call.future.wait() == (OK, 4)
    assert [s[3] for s in sent] == [(OK, i) for i in range(4)]


def test_a_cancel_stops_an_async_generator_where_it_awaits(sent):
    box, call = _running(AsyncSource, "slow", sent)
    box.cancel("c", 0)
    assert call.future.wait() == (OK, 2)
    assert sent[0][3] == (OK, 0) and sent[1][3][0] == CANCELLED


def test_num_returns_takes_a_generators_values(sent):
    from actorrt.runtime.protocol import MULTI, Returns

    box = _box(Source)
    call = Call("c", 0, Returns("count", 3), (None, [((3,), {})]), torch.futures.Future())
    box.deliver(call)
    assert call.future.wait() == (MULTI, (0, 1, 2))


def test_values_yielded_while_one_is_on_its_way_go_together(monkeypatch):
    messages = []

    def rpc_async(caller, fn, args):
        fut = torch.futures.Future()
        messages.append((caller, fn, args, fut))
        return fut

    monkeypatch.setattr(generators.quick_rpc, "rpc_async", rpc_async)
    sender = Sender("driver", 4)
    sender.send(0, W[0])  # nothing on its way: at once
    sender.send(1, W[1])
    sender.send(2, W[2])
    assert [m[2][:2] for m in messages] == [(4, [(0, W[0])])]
    messages[0][3].set_result(None)  # arrived: what waited goes, in one message
    assert [m[2][:2] for m in messages[1:]] == [(4, [(1, W[1]), (2, W[2])])]
    assert all(m[:2] == ("driver", generators.rpc_items) for m in messages)
    assert len({m[2][2:] for m in messages}) == 1  # each says which run of the call it is
    messages[1][3].set_result(None)
    sender.send(3, W[3])  # idle again: at once
    assert messages[2][2][:2] == (4, [(3, W[3])])


def test_values_gathered_travel_in_messages_of_a_bounded_size(monkeypatch):
    """Many values just under the object threshold, yielded while one is on its way, must
    not make one message of tens of MB ahead of the caller's heartbeat pings."""
    messages = []

    def rpc_async(caller, fn, args):
        fut = torch.futures.Future()
        messages.append((args[1], fut))
        return fut

    monkeypatch.setattr(generators.quick_rpc, "rpc_async", rpc_async)
    cap = generators.MAX_GATHERED_BYTES
    each = cap // 4 - 1000  # four fit in a message, five do not
    sender = Sender("driver", 4)
    for i in range(12):
        sender.send(i, (None, [(OK, torch.zeros(each, dtype=torch.uint8))]))
    oversized = (None, [(OK, torch.zeros(cap + 1, dtype=torch.uint8))])
    sender.send(12, oversized)  # larger than the bound alone: it goes, alone
    sender.send(13, W[0])
    for k in range(5):
        messages[k][1].set_result(None)  # arrived: the next message goes
    batches = [[index for index, _ in items] for items, _ in messages]
    assert batches == [[0], [1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11], [12], [13]]


def _refuse(*_):
    raise RuntimeError("unknown destination")


def test_sending_to_a_caller_that_is_gone_does_not_raise(monkeypatch):
    monkeypatch.setattr(generators.quick_rpc, "rpc_async", _refuse)
    sender = Sender("gone", 1)
    sender.send(0, W[0])
    sender.send(1, W[1])  # nothing raised
    assert sender.gone


def _held_sends(monkeypatch) -> list:
    """The futures of the messages a Sender sends from now on, none answered yet."""
    futures: list = []

    def rpc_async(caller, fn, args):
        futures.append(torch.futures.Future())
        return futures[-1]

    monkeypatch.setattr(generators.quick_rpc, "rpc_async", rpc_async)
    return futures


def test_a_caller_that_died_with_values_on_their_way_drops_the_rest(monkeypatch):
    messages = _held_sends(monkeypatch)
    sender = Sender("driver", 4)
    sender.send(0, W[0])
    sender.send(1, W[1])
    messages[0].set_exception(RuntimeError("connection reset"))
    assert sender.gone and len(messages) == 1  # value 1 was dropped, not sent
    sender.send(2, W[2])
    assert len(messages) == 1


@pytest.mark.parametrize("cls", ["Source", "AsyncForever"])
def test_a_generator_whose_caller_is_gone_stops(monkeypatch, cls):
    monkeypatch.setattr(generators.quick_rpc, "rpc_async", _refuse)
    box = _box(Source if cls == "Source" else AsyncForever)
    call = _stream_call(0, "forever")
    box.deliver(call)
    _until(call.future.done)  # stopped after the value whose send failed
    assert call.future.wait() == (OK, 1)
    assert box._instance.closed


# -- backpressure ------------------------------------------------------------------------


def test_a_sender_with_a_limit_waits_for_values_to_be_taken():
    sender = Sender("driver", 1, limit=2)
    stop = threading.Event()
    assert sender.wait_room(0, stop.is_set) and sender.wait_room(1, stop.is_set)
    assert not sender.has_room(2)
    done = []
    waiter = threading.Thread(target=lambda: done.append(sender.wait_room(2, stop.is_set)))
    waiter.start()
    time.sleep(0.1)
    assert not done  # two values not taken: value 2 waits
    sender.taken(1)
    waiter.join(5)
    assert done == [True]
    assert not sender.has_room(3)
    stop.set()  # a cancel, a kill or a caller gone: the wait ends
    assert sender.wait_room(3, stop.is_set) is False


def test_an_async_generator_waiting_for_room_is_woken_on_its_loop(monkeypatch):
    """No polling: the report of values taken (an RPC thread) wakes the actor's loop."""
    monkeypatch.setattr(generators.quick_rpc, "rpc_async", _refuse)

    async def scenario():
        sender = Sender("driver", 1, limit=1)
        await asyncio.wait_for(sender.wait_room_async(0), 5)  # room: no wait
        waiting = asyncio.ensure_future(sender.wait_room_async(1))
        await asyncio.sleep(0.1)
        assert not waiting.done()  # value 0 not taken: value 1 waits
        threading.Thread(target=sender.taken, args=(1,)).start()
        await asyncio.wait_for(waiting, 5)  # woken, not a poll that never comes
        cancelled = asyncio.ensure_future(sender.wait_room_async(2))
        await asyncio.sleep(0.05)
        cancelled.cancel()  # a cancel or a kill: the wait it left behind is harmless
        await asyncio.sleep(0.05)
        sender.taken(2)
        gone = asyncio.ensure_future(sender.wait_room_async(3))
        await asyncio.sleep(0.05)
        threading.Thread(target=sender.send, args=(0, W[0])).start()  # refused: gone
        await asyncio.wait_for(gone, 5)
        assert sender.gone

    asyncio.run(scenario())


def test_a_reporter_tells_the_latest_count_one_message_at_a_time(monkeypatch):
    from actorrt.runtime import backpressure

    messages = []

    def rpc_async(to, fn, args):
        messages.append((to, fn, args, torch.futures.Future()))
        return messages[-1][3]

    monkeypatch.setattr(backpressure.quick_rpc, "rpc_async", rpc_async)
    reporter = backpressure.Reporter("driver", 9, limit=1)
    reporter.received(0)  # value 0 came: nothing known of the producer yet (its run)
    reporter.took(1)  # nobody to tell
    assert messages == []
    reporter.run_began("worker1")  # its run: told at once
    assert [m[:3] for m in messages] == [("worker1", backpressure.rpc_taken, ("driver", 9, 1))]
    reporter.received(1)  # the producer made value 1: it knew of value 0 taken
    reporter.took(2)  # one on its way: this waits for it
    assert len(messages) == 1
    messages[0][3].set_result(None)
    assert messages[1][2] == ("driver", 9, 2) and len(messages) == 2  # the latest
    reporter.run_began("worker2")  # the call runs again elsewhere: told afresh
    messages[1][3].set_result(None)
    assert messages[2][:3] == ("worker2", backpressure.rpc_taken, ("driver", 9, 2))


def test_acknowledgements_wait_for_their_values_to_be_taken_and_carry_the_count(
    monkeypatch,
):
    from actorrt.runtime import backpressure

    messages = []

    def rpc_async(to, fn, args):
        fut = torch.futures.Future()
        fut.set_result(None)
        messages.append(args)
        return fut

    monkeypatch.setattr(backpressure.quick_rpc, "rpc_async", rpc_async)
    reporter = backpressure.Reporter("driver", 9, limit=2)
    reporter.run_began("worker1")  # a new run is told once
    assert messages == [("driver", 9, 0)]
    # A caller that keeps up: each value's message is acknowledged once the value is
    # taken, with the count, so the producer hears of every take and no report goes.
    first, second = reporter.received(0), reporter.received(1)  # two on their way
    assert not first.done() and not second.done()
    reporter.took(1)
    assert first.wait() == 1 and not second.done()
    reporter.took(2)
    assert second.wait() == 2
    for i in range(2, 10):
        ack = reporter.received(i)
        reporter.took(i + 1)
        assert ack.wait() == i + 1
    assert messages == [("driver", 9, 0)]
    # A value taken before its message came (sent again by a new run): answered at once
    assert reporter.received(5).wait() == 10
    # A message of two values is acknowledged once both are taken; the producer needs
    # only the first taken to make its next value (has_room): a report says so.
    both = reporter.received(11)  # values 10 and 11
    reporter.took(11)  # value 10 taken
    assert not both.done() and messages[-1] == ("driver", 9, 11)
    reporter.took(12)
    assert both.wait() == 12 and len(messages) == 2  # the acknowledgement told the rest
    held = reporter.received(12)
    reporter.took(backpressure.ALL)  # the caller's generator went: the held one tells it
    assert held.wait() == backpressure.ALL and len(messages) == 2
    other = backpressure.Reporter("driver", 10, limit=2)
    other.run_began("worker1")
    other.took(backpressure.ALL)  # nothing held: a report tells it
    assert messages[-1] == ("driver", 10, backpressure.ALL)


def test_a_senders_acknowledged_count_makes_room(monkeypatch):
    acks = _held_sends(monkeypatch)
    sender = Sender("driver", 3, limit=2)
    sender.send(0, W[0])
    sender.send(1, W[1])  # with a limit, each value goes at once: two on their way
    assert len(acks) == 2 and not sender.has_room(2)
    acks[0].set_result(1)  # answered once the caller took value 0
    assert sender.has_room(2) and not sender.has_room(3)
    sender.send(2, W[2])
    acks[2].set_result(None)  # a stream nobody takes from any more answers nothing
    acks[1].set_result(2)
    assert sender.has_room(3) and not sender.gone


def test_with_backpressure_two_messages_travel_and_the_values_yielded_meanwhile_gather(
    monkeypatch,
):
    sent = []

    def rpc_async(to, fn, args):
        sent.append((fn, [index for index, _ in args[1]], torch.futures.Future()))
        return sent[-1][2]

    monkeypatch.setattr(generators.quick_rpc, "rpc_async", rpc_async)
    sender = Sender("driver", 3, limit=8)
    for i in range(5):
        sender.send(i, W[i % len(W)])
    assert [indexes for _, indexes, _ in sent] == [[0], [1]]  # MAX_IN_FLIGHT on their way
    assert all(fn is generators.rpc_items_held for fn, _, _ in sent)
    sent[0][2].set_result(1)  # value 0 taken: the three waiting go together
    assert [indexes for _, indexes, _ in sent] == [[0], [1], [2, 3, 4]]
    assert sender.has_room(8) and not sender.has_room(9)


def test_senders_find_the_sender_the_caller_tells():
    from actorrt.runtime.backpressure import Senders

    senders = Senders()
    sender = Sender("driver", 3, limit=1)
    senders.open("driver", 3, sender)
    senders.taken("driver", 3, 5)
    assert sender.has_room(5) and not sender.has_room(6)
    senders.close("driver", 3, sender)
    senders.taken("driver", 3, 50)  # ended: nothing to tell
    assert not sender.has_room(6) and len(senders) == 0


def test_a_mailbox_waits_for_room_before_asking_for_the_next_value(sent):
    box = _box(Source)
    call = Call("c", 0, Stream("count", 5, 2), (None, [((10,), {})]), torch.futures.Future())
    box.deliver(call)
    _until(lambda: len(sent) == 2)
    time.sleep(0.2)
    assert len(sent) == 2 and not call.future.done()  # waits: nobody told it of takes
    box.cancel("c", 0)
    _until(call.future.done)
    assert call.future.wait() == (OK, 3) and sent[2][3][0] == CANCELLED


def test_an_inbox_says_when_values_come_from_a_new_run_of_the_call():
    inboxes = Inboxes(lambda wire: None)
    stream_id, inbox = inboxes.open()
    runs = []
    inbox.on_run = runs.append
    inboxes.put(stream_id, 0, W[0], ("worker1", 7))
    inboxes.put(stream_id, 1, W[1], ("worker1", 7))
    inboxes.put(stream_id, 0, W[0], ("worker1", 8))  # sent again: the same name, a new run
    inboxes.put(stream_id, 2, W[2], ("worker2", 1))
    assert runs == ["worker1", "worker1", "worker2"]


def test_a_long_stream_keeps_no_record_of_each_value():
    inbox = Inbox()
    for i in range(10_000):
        inbox.put(i, W[0])
        inbox.take(i)
    assert not inbox._got and not inbox._slots  # nothing grows with the stream's length
    assert not inbox.put(5, W[0])  # and a value sent twice is still refused


def test_a_value_racing_the_calls_failure_is_let_go_not_raised():
    # value 3 is accepted (2 has not come), then the call fails before it is set: the
    # failure puts the end at 2 and settles slot 3 as "no value"; the value loses
    gone = []
    inboxes = Inboxes(gone.append)
    stream_id, inbox = inboxes.open()
    slot = inbox.slot(3)
    inbox.finish(None)  # settles 3 (past the end) first
    assert slot.result(timeout=1) is None
    inbox._end = None  # as if put() had passed its check before finish() took the lock
    inboxes.put(stream_id, 3, W[3])  # nothing raised: let go
    assert gone == [W[3]]


def test_work_from_a_generators_del_runs_on_the_inboxes_thread():
    inboxes = Inboxes(lambda wire: None)
    ran = []
    inboxes.later(lambda: ran.append("too early"))  # no thread yet: dropped
    inboxes.start_later()
    inboxes.start_later()  # once
    done = threading.Event()

    def work():
        ran.append(threading.current_thread().name)
        done.set()

    inboxes.later(lambda: 1 / 0)  # a failing one does not stop the thread
    inboxes.later(work)
    assert done.wait(5) and ran == ["actorrt-streams"]


def test_no_work_runs_once_the_runtime_ended():
    """A generator dropped as the interpreter ends must not send: a thread inside torch's
    C++ when the interpreter's end overtakes it aborts the process (exit status -6)."""
    inboxes = Inboxes(lambda wire: None)
    inboxes.start_later()
    gate, queued = threading.Event(), threading.Event()
    ran = []
    inboxes.later(lambda: (queued.set(), gate.wait(5)))  # holds the thread
    assert queued.wait(5)
    inboxes.later(lambda: ran.append("queued before the end"))
    inboxes.shut()
    inboxes.later(lambda: ran.append("after the end"))
    gate.set()
    time.sleep(0.3)
    assert ran == []
