"""Which GPUs the actor or remote function running on this thread was given.

An actor's threads, and each thread of a remote function's executor, are given their
GPUs once, when they start (``num_gpus``: the plan's or the process's share); this is
where they are noted, for :func:`get_gpu_ids`, as Ray's ``ray.get_gpu_ids()``.
"""

from __future__ import annotations

import threading

import torch

__all__ = ["assign", "get_gpu_ids"]

_local = threading.local()


def assign(gpu_ids: tuple[int, ...]) -> None:
    """Gives this thread ``gpu_ids``; the first becomes the current CUDA device."""
    _local.gpu_ids = gpu_ids
    if gpu_ids and torch.cuda.is_available():
        torch.cuda.set_device(gpu_ids[0])


def get_gpu_ids() -> list[int]:
    """The local CUDA indices of the GPUs given to the running actor or remote function.

    As Ray's ``ray.get_gpu_ids()``: inside an actor method or a remote function that
    asked for ``num_gpus``, the GPUs it was given (the first is the current device);
    elsewhere (the driver, an actor or function without GPUs) an empty list.

    Returns:
        The indices, as ``torch.cuda`` numbers the process's GPUs.
    """
    return list(getattr(_local, "gpu_ids", ()))
