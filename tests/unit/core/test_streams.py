"""actorrt.runtime.streams without a GPU: which streams wait for which, and when.

torch.cuda's stream functions are replaced by stand-ins that record what is asked of
them, and a tensor subclass says it lives on cuda:0, so the rules' wiring (which tensors
they find in a message, which stream waits, what is marked) is checked here; whether
the GPU then reads the right values is tests/gpu/test_gpu_streams.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from actorrt.runtime import streams
from actorrt.runtime.batches import BatchedCall, Reply

CUDA0 = torch.device("cuda", 0)


class FakeStream:
    def __init__(self, name: str, log: list[tuple[Any, ...]]) -> None:
        self.name, self._log = name, log

    def wait_stream(self, other: FakeStream) -> None:
        self._log.append(("wait", self.name, other.name))

    def synchronize(self) -> None:
        self._log.append(("sync", self.name))


class OnCuda(torch.Tensor):
    """A CPU tensor that says it is on cuda:0 and logs record_stream."""

    log: list[tuple[Any, ...]] = []

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return CUDA0

    def record_stream(self, stream: Any) -> None:  # type: ignore[override]
        OnCuda.log.append(("record", stream.name))


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []
    OnCuda.log = calls
    monkeypatch.setattr(torch.cuda, "default_stream", lambda d=None: FakeStream("default", calls))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: FakeStream("pool", calls))
    streams.enable([CUDA0])
    yield calls
    streams.enable([])


def _on_cuda() -> OnCuda:
    return torch.zeros(4).as_subclass(OnCuda)


def test_a_received_batch_orders_the_default_stream_once_and_marks_each_tensor(log):
    a, b = _on_cuda(), _on_cuda()
    calls = [
        BatchedCall("actor", 1, "push", (None, [((a,), {})])),  # a plain wire
        BatchedCall("actor", 2, "push", (b"blob", [b, torch.zeros(2)])),  # a pickled one
    ]
    streams.arrived(calls)
    assert log == [("wait", "default", "pool"), ("record", "default"), ("record", "default")]


def test_a_reply_future_is_ordered_before_its_readers_callbacks(log):
    fut: torch.futures.Future[Any] = torch.futures.Future()
    streams.on_arrival(fut)
    fut.add_done_callback(lambda _: log.append(("reader",)))
    fut.set_result([Reply("actor", 1, (None, [_on_cuda()]))])
    assert log == [("wait", "default", "pool"), ("record", "default"), ("reader",)]


def test_a_failed_reply_orders_nothing(log):
    fut: torch.futures.Future[Any] = torch.futures.Future()
    streams.on_arrival(fut)
    fut.set_exception(RuntimeError("gone"))  # type: ignore[arg-type]
    assert log == []


def test_a_reply_with_cuda_tensors_waits_for_its_maker_and_one_without_does_not(log):
    streams.leaving((None, [(0, 5)]))
    assert log == []
    streams.leaving((b"blob", [_on_cuda(), _on_cuda()]))
    assert log == [("sync", "pool")]  # one wait per device, on the current stream


def test_cpu_tensors_and_a_process_without_cuda_rpc_cost_nothing(log):
    streams.arrived((None, [torch.zeros(3)]))
    assert log == []
    streams.enable([torch.device("cpu")])
    assert not streams.enabled()
    streams.arrived((None, [_on_cuda()]))
    streams.leaving((None, [_on_cuda()]))
    streams.leaving_all()
    fut: torch.futures.Future[Any] = torch.futures.Future()
    streams.on_arrival(fut)
    fut.set_result((None, [_on_cuda()]))
    assert log == []
