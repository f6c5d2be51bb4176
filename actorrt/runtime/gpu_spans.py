"""The GPU's side of a profiled span: when the device ran the work the host queued.

A CUDA kernel launch returns before the kernel runs, so a span timed on the host
(:func:`actorrt.profile`) shows how long the host took to queue the work, not when the
GPU did it. ``actorrt.profile(name, cuda=True)`` also records a CUDA event on the
thread's current stream where the span opens and one where it closes; once the second
has completed, the pair becomes a span on the process's ``cuda:N`` track, placed on the
host's clock through an *anchor*: one event per device whose completion the host waited
for, so that any later event's time is the anchor's plus their elapsed time.

The span's ``lag_ms`` (how long after the host closed the span the GPU finished it)
tells the two limits apart: near zero, the GPU keeps up and waits for the host (Python
or kernel launches are the limit); growing to many milliseconds, the host runs ahead and
the GPU is the limit.

Plain state, no import of the recorder: :mod:`actorrt.runtime.trace` asks
:meth:`GpuSpans.finished` for what is done and records it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["GpuSpan", "GpuSpans"]


@dataclass(frozen=True)
class GpuSpan:
    """A span the GPU finished: its times on the host's clock (nanoseconds)."""

    track: str
    name: str
    begin: int
    end: int
    detail: dict[str, Any]


def _cuda_event() -> Any:
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


class GpuSpans:
    """The spans whose GPU work is queued, oldest first, and the per-device anchors.

    Args:
        clock: The host clock the spans are placed on (nanoseconds).
        new_event: Makes a timing event (a stand-in in tests without a GPU).
        device_of: The calling thread's current device index.
    """

    def __init__(
        self,
        clock: Callable[[], int] = time.time_ns,
        new_event: Callable[[], Any] = _cuda_event,
        device_of: Callable[[], int] = torch.cuda.current_device,
    ) -> None:
        self._clock, self._new_event, self._device_of = clock, new_event, device_of
        self._anchors: dict[int, tuple[Any, int]] = {}  # device -> (event, its host time)
        # (device, name, host end, start event, end event, detail); appended by the
        # threads that close spans, popped under the lock by whoever drains
        self._queued: deque[tuple[int, str, int, Any, Any, dict[str, Any]]] = deque()
        self._lock = threading.Lock()

    def opened(self) -> tuple[int, Any]:
        """A span opens on this thread: its device and start event (recorded now)."""
        device = self._device_of()
        if device not in self._anchors:
            self._anchor(device)
        start = self._new_event()
        start.record()
        return device, start

    def _anchor(self, device: int) -> None:
        # Once per device: waits for the stream's queued work, so the event's time is
        # known to within the wait's return (tens of microseconds).
        event = self._new_event()
        event.record()
        event.synchronize()
        with self._lock:
            self._anchors.setdefault(device, (event, self._clock()))

    def closed(
        self, opened: tuple[int, Any], name: str, host_end: int, detail: dict[str, Any]
    ) -> None:
        """The span closes on the host at ``host_end``: its end event is recorded now."""
        device, start = opened
        end = self._new_event()
        end.record()
        self._queued.append((device, name, host_end, start, end, detail))

    def finished(self, wait: bool = False) -> list[GpuSpan]:
        """The queued spans the GPU has finished, oldest first (all of them if ``wait``)."""
        done: list[GpuSpan] = []
        with self._lock:
            while self._queued:
                device, name, host_end, start, end, detail = self._queued[0]
                if wait:
                    end.synchronize()
                elif not end.query():
                    break  # later spans on its stream are not done either
                self._queued.popleft()
                anchor, anchor_ns = self._anchors[device]
                begin = anchor_ns + int(anchor.elapsed_time(start) * 1e6)
                finish = anchor_ns + int(anchor.elapsed_time(end) * 1e6)
                lag_ms = round((finish - host_end) / 1e6, 3)
                detail = {**detail, "lag_ms": lag_ms}
                done.append(GpuSpan(f"cuda:{device}", name, begin, finish, detail))
        return done

    def clear(self) -> None:
        """Forgets the queued spans and the anchors (tracing restarts)."""
        with self._lock:
            self._queued.clear()
            self._anchors.clear()
