"""``profile(cuda=True)``: the GPU's side of a span, placed on the host clock (no GPU here:
stand-in events whose GPU times the test sets)."""

from __future__ import annotations

from actorrt.runtime.gpu_spans import GpuSpans

MS = 1_000_000  # ns


class FakeGpu:
    """One stream: each recorded event runs ``queued`` ms after the previous one."""

    def __init__(self) -> None:
        self.now = 0.0  # ms the GPU has reached
        self.tail = 0.0  # ms at which the last queued work ends
        self.queued = 0.0  # work queued before the next event
        self.synced = 0

    def event(self) -> FakeEvent:
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu, self.at = gpu, None

    def record(self) -> None:
        self.gpu.tail = max(self.gpu.tail, self.gpu.now) + self.gpu.queued
        self.gpu.queued = 0.0
        self.at = self.gpu.tail

    def query(self) -> bool:
        return self.gpu.now >= self.at

    def synchronize(self) -> None:
        self.gpu.synced += 1
        self.gpu.now = max(self.gpu.now, self.at)

    def elapsed_time(self, other: FakeEvent) -> float:
        assert self.query() and other.query(), "elapsed_time of an event not done yet"
        return other.at - self.at


def _spans(gpu, host):
    return GpuSpans(clock=lambda: host[0], new_event=gpu.event, device_of=lambda: 0)


def test_a_gpu_behind_the_host_shows_its_lag_and_its_own_times():
    gpu, host = FakeGpu(), [1_000 * MS]
    spans = _spans(gpu, host)
    gpu.queued = 5.0  # work queued before tracing: the anchor waits for it
    opened = spans.opened()
    assert gpu.synced == 1 and gpu.now == 5.0  # anchor at GPU 5 ms = host 1000 ms
    gpu.queued = 20.0  # the span's kernels: 20 ms of GPU work, queued in 1 ms of host time
    spans.closed(opened, "step", 1_001 * MS, {"n": 1})
    assert spans.finished() == []  # the GPU has not reached the end event
    gpu.now = 25.0
    (done,) = spans.finished()
    assert (done.track, done.name) == ("cuda:0", "step")
    assert (done.begin, done.end) == (1_000 * MS, 1_020 * MS)
    assert done.detail == {"n": 1, "lag_ms": 19.0}  # finished 19 ms after the host closed it
    assert spans.finished() == []  # reported once


def test_oldest_first_and_wait_drains_everything():
    gpu, host = FakeGpu(), [0]
    spans = _spans(gpu, host)
    for i in range(3):
        opened = spans.opened()
        gpu.queued = 2.0
        spans.closed(opened, f"s{i}", 0, {})
    gpu.now = 2.0  # only the first is done
    assert [s.name for s in spans.finished()] == ["s0"]
    assert [s.name for s in spans.finished(wait=True)] == ["s1", "s2"]
    assert gpu.now == 6.0 and gpu.synced == 3  # the anchor, then the last span's end


def test_clear_forgets_the_anchor_and_the_queue():
    gpu, host = FakeGpu(), [0]
    spans = _spans(gpu, host)
    spans.closed(spans.opened(), "s", 0, {})
    spans.clear()
    assert spans.finished(wait=True) == []
    spans.opened()
    assert gpu.synced == 2  # a new anchor after clearing
