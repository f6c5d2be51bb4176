"""Moving CUDA tensors through host memory for peers that have no device map.

Without a device map, TensorPipe refuses a CUDA tensor in a message; in ``transport="cpu"``
mode (DI-engine's ``torchrpc:cpu``), or towards a peer without GPUs, the runtime copies
them to the CPU itself before sending.
"""

from __future__ import annotations

from typing import Any

from actorrt.tensor_tree import map_tensors

__all__ = ["to_cpu"]


def to_cpu(obj: Any) -> Any:
    """Returns ``obj`` with every CUDA tensor inside dicts, lists and tuples moved to the CPU."""
    return map_tensors(obj, lambda t: t.cpu() if t.is_cuda else t)
