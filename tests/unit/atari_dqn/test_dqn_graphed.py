"""GraphedStep's order of things, with CUDA's stream, graph and event calls recorded on
the CPU: eager warm-up on a side stream, one capture, replays, the bound on replays
queued. That the captured step computes the eager one's update is tests/gpu's."""

from __future__ import annotations

import contextlib

import pytest
import torch

from examples.atari_dqn import graphed
from examples.atari_dqn.graphed import GraphedStep


class _FakeCuda:
    """Records what GraphedStep asks of torch.cuda, in order."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.capturing = False
        fake = self

        class Stream:
            def __init__(self, device=None):
                self.name = "side"

            def wait_stream(self, other):
                fake.log.append(f"{self.name} waits {other.name}")

        class CUDAGraph:
            def replay(self):
                fake.log.append("replay")

        class Event:
            made = 0

            def __init__(self, blocking=False):
                assert blocking, "a throttle's wait must sleep, not spin"
                Event.made += 1
                self.n = Event.made

            def record(self, stream):
                fake.log.append(f"record {self.n}")

            def synchronize(self):
                fake.log.append(f"wait {self.n}")

        self.Stream, self.CUDAGraph, self.Event = Stream, CUDAGraph, Event
        self._current = Stream()
        self._current.name = "current"

    def current_stream(self, device=None):
        return self._current

    @contextlib.contextmanager
    def stream(self, s):
        self.log.append(f"on {s.name}")
        yield

    @contextlib.contextmanager
    def graph(self, g, capture_error_mode="global"):
        assert capture_error_mode == "thread_local"  # other threads keep using CUDA
        self.log.append("capture")
        self.capturing = True
        yield
        self.capturing = False


@pytest.fixture
def fake(monkeypatch):
    f = _FakeCuda()
    for name in ("Stream", "CUDAGraph", "Event", "current_stream", "stream", "graph"):
        monkeypatch.setattr(graphed.torch.cuda, name, getattr(f, name))
    return f


def test_warm_up_eagerly_then_capture_once_then_replay(fake):
    step = GraphedStep(torch.device("cuda", 0), warmup=2, ahead=2)
    bodies = []

    def body():
        bodies.append("capturing" if fake.capturing else "eager")
        return (torch.tensor(float(len(bodies))),)

    outs = []
    for _ in range(5):
        step.throttle()
        outs.append(step(body))
    assert bodies == ["eager", "eager", "capturing"]  # the body runs 3 times in all
    assert step.captured
    assert outs[2] is outs[3] is outs[4]  # the graph's static outputs, overwritten
    assert fake.log == [
        "side waits current", "on side", "current waits side",  # warm-up 1
        "side waits current", "on side", "current waits side",  # warm-up 2
        "capture", "replay", "record 1",  # the call that captures also replays
        "replay", "record 2",
        "wait 1", "replay", "record 3",  # two queued: the oldest is waited for first
    ]  # fmt: skip


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="warmup=0 must be >= 1"):
        GraphedStep(torch.device("cuda", 0), warmup=0)
    with pytest.raises(ValueError, match="ahead=0 must be >= 1"):
        GraphedStep(torch.device("cuda", 0), ahead=0)
