"""When a message queues instead of going at once, and what the flusher does with the queue."""

from __future__ import annotations

import threading
import time

import torch

from actorrt.runtime.outbox import Outbox


def _outbox(window=10.0):
    """An outbox whose flusher blocks in its first send until ``gate`` is set."""
    sent = []
    gate = threading.Event()
    sending = threading.Event()

    def send_batch(dest, items):
        sending.set()
        gate.wait(10)
        sent.append((dest, list(items)))
        return torch.futures.Future()  # never answered: the burst goes on

    return Outbox("test-flusher", send_batch, window=window), sent, gate, sending


def test_quiet_destination_sends_at_once_and_a_burst_queues():
    box, *_ = _outbox()
    assert not box.busy("w1")  # nothing sent yet
    box.sent("w1", torch.futures.Future())
    assert not box.busy("w1")  # one message in flight is no burst (push, then a request)
    answered = torch.futures.Future()
    answered.set_result(None)
    box.sent("w1", answered)
    assert not box.busy("w1")  # the last message was answered: a sync caller's pattern
    box.sent("w1", torch.futures.Future())
    assert box.busy("w1")  # two recent sends, the last unanswered: a burst
    assert not box.busy("w2")  # per destination


def test_an_old_unanswered_message_does_not_make_a_burst():
    # A long-running call must not push every later call to its worker onto the queue.
    box, *_ = _outbox(window=0.05)
    box.sent("w1", torch.futures.Future())
    box.sent("w1", torch.futures.Future())
    assert box.busy("w1")
    time.sleep(0.1)
    assert not box.busy("w1")


def test_what_queues_while_the_flusher_sends_goes_out_as_one_batch():
    box, sent, gate, sending = _outbox()
    assert box.put("w1", 0)
    assert sending.wait(10)  # the flusher took [0] and is sending it
    for i in range(1, 5):
        assert box.put("w1", i)
    gate.set()
    deadline = time.monotonic() + 10
    while len(sent) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sent == [("w1", [0]), ("w1", [1, 2, 3, 4])]
    assert box.batches_sent == 2
    assert box.busy("w1")  # the last batch is unanswered


def test_close_hands_back_what_was_never_sent():
    box, sent, gate, sending = _outbox()
    assert box.put("w1", "a")
    assert sending.wait(10)
    assert box.put("w2", "b")
    assert box.close() == [("w2", "b")]
    assert not box.put("w1", "c")
    gate.set()


def test_keep_alive_keeps_the_handle_until_the_reply_even_when_the_ref_goes_first():
    import gc
    import weakref

    from actorrt.runtime.outbox import KeepAlive

    class Handle:
        pass

    handle = Handle()
    gone = weakref.ref(handle)
    reply = torch.futures.Future()
    flag = KeepAlive(reply, keep=handle)
    del handle
    box, *_ = _outbox()
    box.sent("w1", torch.futures.Future())
    box.sent("w1", flag)
    assert box.busy("w1")
    flag.let_go()  # the caller's ObjectRef was collected before the reply
    gc.collect()
    assert gone() is not None, "the handle went before the reply"
    reply.set_result("value")
    gc.collect()
    assert gone() is None and not box.busy("w1")
    assert flag._future is None  # the outbox no longer holds the reply either
