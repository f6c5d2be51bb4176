"""When a message queues instead of going at once, and what the flusher does with the queue."""

from __future__ import annotations

import threading
import time

import pytest
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


# -- the burst window follows the measured round trip ---------------------------------


def _estimate(samples, estimate=None, count=0):
    from actorrt.runtime.outbox import next_round_trip

    for sample in samples:
        estimate = next_round_trip(estimate, count, sample)
        count += 1
    return estimate


def test_the_round_trip_estimate_is_a_weighted_mean_of_its_samples():
    from actorrt.runtime.outbox import RTT_GAIN, next_round_trip

    assert _estimate([400e-6]) == pytest.approx(400e-6)  # the first sample
    assert _estimate([400e-6, 200e-6]) == pytest.approx(300e-6)  # the first ones: plain mean
    assert _estimate([300e-6] * 3 + [700e-6]) == pytest.approx(400e-6)
    # later ones: weighted RTT_GAIN, as TCP's smoothed round trip
    assert next_round_trip(400e-6, 50, 100e-6) == pytest.approx(400e-6 - RTT_GAIN * 300e-6)
    assert _estimate([-1.0]) == 0.0  # a clock step back is no negative trip
    assert _estimate([60e-6] * 100) == pytest.approx(60e-6)


def test_a_slow_first_round_trip_is_soon_outweighed():
    # The first call to a process may set its connection up: milliseconds, once.
    assert _estimate([2e-3] + [400e-6] * 15) < 520e-6
    assert _estimate([2e-3] + [400e-6] * 30) < 430e-6


def test_one_slow_call_moves_the_estimate_no_more_than_the_largest_window_needs():
    from actorrt.runtime.outbox import MAX_WINDOW_S, WINDOW_FRACTION, next_round_trip

    capped = MAX_WINDOW_S / WINDOW_FRACTION
    assert next_round_trip(None, 0, 30.0) == pytest.approx(capped)  # a 30 s method
    assert next_round_trip(400e-6, 50, 30.0) == next_round_trip(400e-6, 50, capped)


@pytest.mark.parametrize(
    ("round_trip", "window"),
    [
        (None, 200e-6),  # nothing measured yet: the window tuned on the 2-core VM
        (400e-6, 200e-6),  # that VM: half its round trip
        (240e-6, 120e-6),
        (60e-6, 50e-6),  # a fast machine: a quarter of the old window, at the floor
        (3e-3, 1e-3),  # a loaded machine or slow methods: at the ceiling
    ],
)
def test_the_window_is_half_the_round_trip_within_bounds(round_trip, window):
    from actorrt.runtime.outbox import window_for

    assert window_for(round_trip) == pytest.approx(window)


class _Clock:
    """Stands in for the outbox module's ``time`` (only ``monotonic`` is read)."""

    def __init__(self):
        self.now = 100.0

    def monotonic(self):
        return self.now


def _adaptive(monkeypatch):
    from actorrt.runtime import outbox

    clock = _Clock()
    monkeypatch.setattr(outbox, "time", clock)
    return Outbox("test-flusher", lambda dest, items: None), clock


def test_round_trips_of_messages_sent_alone_set_the_window(monkeypatch):
    from actorrt.runtime.outbox import SAMPLE_EVERY_S

    box, clock = _adaptive(monkeypatch)
    assert box.round_trip("w1") is None and box.window("w1") == pytest.approx(200e-6)
    first = torch.futures.Future()
    box.sent("w1", first)  # the first message to a destination is sampled
    clock.now += 400e-6
    first.set_result(None)
    assert box.round_trip("w1") == pytest.approx(400e-6)
    assert box.window("w1") == pytest.approx(200e-6)
    assert box.window("w2") == pytest.approx(200e-6)  # per destination

    unsampled = torch.futures.Future()
    box.sent("w1", unsampled)  # within SAMPLE_EVERY_S of the last sample: not sampled
    clock.now += 1.0
    unsampled.set_result(None)
    assert box.round_trip("w1") == pytest.approx(400e-6)

    clock.now += SAMPLE_EVERY_S
    sampled = torch.futures.Future()
    box.sent("w1", sampled)
    clock.now += 80e-6
    sampled.set_result(None)
    assert box.round_trip("w1") == pytest.approx(240e-6)  # the mean of 400 and 80


def test_on_a_fast_machine_calls_paced_slower_than_its_window_go_alone(monkeypatch):
    from actorrt.runtime.outbox import SAMPLE_EVERY_S

    box, clock = _adaptive(monkeypatch)
    for _ in range(60):  # round trips of 60 us
        clock.now += SAMPLE_EVERY_S
        reply = torch.futures.Future()
        box.sent("w1", reply)
        clock.now += 60e-6
        reply.set_result(None)
    assert box.window("w1") == pytest.approx(50e-6)
    # A caller that sends one call every 40 us, each still unanswered when the next goes:
    clock.now += 1.0
    box.sent("w1", torch.futures.Future())
    clock.now += 40e-6
    box.sent("w1", torch.futures.Future())
    clock.now += 40e-6
    assert not box.busy("w1")  # 80 us since the last send but one: no burst here
    box.fixed_window = 200e-6
    assert box.busy("w1")  # where the fixed 200 us window made it queue
    box.fixed_window = None
    box.sent("w1", torch.futures.Future())  # a tight loop: a call every 10 us
    clock.now += 10e-6
    box.sent("w1", torch.futures.Future())
    clock.now += 10e-6
    assert box.busy("w1")  # still a burst: it queues


def test_batches_are_not_round_trip_samples(monkeypatch):
    # A batch is answered once all its replies are acknowledged: not one round trip.
    box, clock = _adaptive(monkeypatch)
    batch = torch.futures.Future()
    box._record("w1", batch)  # what the flusher does with a batch it sent
    clock.now += 5e-3
    batch.set_result(None)
    assert box.round_trip("w1") is None
