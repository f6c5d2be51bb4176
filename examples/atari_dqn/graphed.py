"""A gradient step captured once as a CUDA graph, then replayed (``DQNConfig.cuda_graph``).

Why: an eager step on a GPU is about a hundred small kernels, each queued by Python.
In the example the training thread, not the GPU, set the learner's pace: on an H200 it
made about 100 steps/s among 12 collectors against 260 alone, every part of a slow step
stretched alike while the thread waited for a core or the GIL (docs/performance.md).
Replaying a captured graph queues the whole step with one call, so the thread needs the
CPU for microseconds a step and the GPU's work sets the pace.

The step (sampling included: ``FrameReplay.sample(graph_safe=True)``) is run eagerly
``warmup`` times on a side stream first, as PyTorch's CUDA graph notes ask: those are
real gradient steps, and they make what the step creates lazily (Adam's state, cuDNN's
chosen algorithms, the gradients) before the capture. The capture itself runs nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import torch

__all__ = ["GraphedStep"]


class GraphedStep:
    """Runs a step's ``body`` eagerly for its first ``warmup`` calls, then as a graph.

    Each call is one step. The body is passed to each call rather than kept, so that a
    learner holding this object holds no reference to itself through it. Call
    :meth:`throttle` before each step: the host then never runs more than ``ahead``
    steps ahead of the GPU. A replay only queues work and the learner's backpressure
    counts queued steps, so without this bound the replays queued (and the age of the
    weights the collectors act on) could grow until CUDA's launch queue filled.

    Args:
        device: The CUDA device the step runs on.
        warmup: Eager calls before the capture (at least 1: Adam's state must exist).
        ahead: Replays queued at most before :meth:`throttle` waits for the oldest.
    """

    def __init__(self, device: torch.device, *, warmup: int = 3, ahead: int = 2) -> None:
        if warmup < 1:
            raise ValueError(f"warmup={warmup} must be >= 1")
        if ahead < 1:
            raise ValueError(f"ahead={ahead} must be >= 1")
        self._device = device
        self._warmup_left = warmup
        self._ahead = ahead
        self._side = torch.cuda.Stream(device)
        self._graph: torch.cuda.CUDAGraph | None = None
        self._outputs: tuple[torch.Tensor, ...] = ()
        self._queued: deque[torch.cuda.Event] = deque()

    @property
    def captured(self) -> bool:
        """Whether the step is a graph now (its warm-up calls are done)."""
        return self._graph is not None

    def throttle(self) -> None:
        """Waits until fewer than ``ahead`` replays are queued (no lock should be held)."""
        while len(self._queued) >= self._ahead:
            self._queued.popleft().synchronize()  # lets go of the GIL while it waits

    def __call__(self, body: Callable[[], tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
        """One step of ``body`` (sample, loss, backward, optimizer update; it returns
        tensors such as the loss). After the capture the returned tensors are the
        graph's static outputs, which the next replay overwrites: copy what must be kept.
        """
        current = torch.cuda.current_stream(self._device)
        if self._warmup_left > 0:
            self._warmup_left -= 1
            self._side.wait_stream(current)
            with torch.cuda.stream(self._side):
                out = body()
            current.wait_stream(self._side)
            return out
        if self._graph is None:
            graph = torch.cuda.CUDAGraph()
            # thread_local: the learner's other threads (pushes arriving, weights read)
            # may use CUDA meanwhile; only this thread's calls must be capturable.
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self._outputs = body()
            self._graph = graph
        self._graph.replay()
        # blocking: throttle's wait sleeps instead of spinning a core the host lacks
        done = torch.cuda.Event(blocking=True)
        done.record(current)
        self._queued.append(done)
        return self._outputs
