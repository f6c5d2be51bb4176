"""The road a tensor takes to one peer: what the payload pipeline does to each tensor it sends.

TensorPipe has traps a single tensor can walk into, and the plan alone cannot keep a value
out of them, so each tensor of a payload passes through its peer's road once, inside the
one walk of :func:`actorrt.runtime.payload.pack`:

- No device map to the peer: a CUDA tensor goes through host memory (torch refuses it
  otherwise).
- An empty CUDA tensor: TensorPipe aborts the sending process (``std::runtime_error`` in
  ``cudaDeviceForPointer``; tensorpipe issue 447), since an empty tensor has no device
  pointer to ask the device of. It travels as its shape and dtype and is made anew on the
  device the map sends it to.
- cuda_gdr can crash on CUDA tensors under 32 bytes (pytorch issue 57136): where the plan
  says cuda_gdr may run (``guard_tiny_cuda``), those go through host memory.
- A large CPU tensor to a peer on this host is swapped for a shared-memory handle
  (:mod:`actorrt.runtime.shm`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from actorrt.placement.transports import GDR_MIN_BYTES
from actorrt.runtime import shm

__all__ = ["EmptyCudaTensor", "Road", "tensor_road"]

Road = Callable[[torch.Tensor], Any]
"""Rewrites one tensor on its way out: a tensor, or a stand-in that unpickles as one."""


def _empty(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=device)


class EmptyCudaTensor:
    """What travels instead of an empty CUDA tensor; unpickles as one on ``device``."""

    __slots__ = ("device", "dtype", "shape")

    def __init__(self, tensor: torch.Tensor, device: str) -> None:
        self.shape = tuple(tensor.shape)
        self.dtype = tensor.dtype
        self.device = device

    def __reduce__(self) -> tuple[Callable[..., torch.Tensor], tuple[Any, ...]]:
        return _empty, (self.shape, self.dtype, self.device)


def tensor_road(
    device_map: Mapping[str, str] | None,
    *,
    cuda: bool,
    guard_tiny: bool,
    to_shm: bool,
) -> Road | None:
    """The road to one peer, or None when every tensor travels as it is.

    Args:
        device_map: This process's device map to the peer (``{"cuda:0": "cuda:1"}``), or
            None when it has none: CUDA tensors then go through host memory.
        cuda: Whether this process can hold CUDA tensors at all.
        guard_tiny: cuda_gdr may carry tensors to the peer: keep tiny ones off it.
        to_shm: The peer proved it can map this process's shared-memory segments.
    """
    if not cuda and not to_shm:
        return None

    def road(t: torch.Tensor) -> Any:
        if t.is_cuda:
            if device_map is None:
                t = t.cpu()
            elif t.numel() == 0:
                target = device_map.get(str(t.device))
                # A device the map does not name: torch refuses it with its own error.
                return t if target is None else EmptyCudaTensor(t, target)
            elif guard_tiny and t.nbytes < GDR_MIN_BYTES:
                t = t.cpu()
            else:
                return t
        return shm.swap_one(t) if to_shm else t

    return road
