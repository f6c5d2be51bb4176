"""Moving CUDA tensors through host memory for peers that have no device map.

Without a device map, TensorPipe refuses a CUDA tensor in a message; in ``transport="cpu"``
mode (DI-engine's ``torchrpc:cpu``), or towards a peer without GPUs, the runtime copies
them to the CPU itself before sending.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["to_cpu"]


def to_cpu(obj: Any) -> Any:
    """Returns ``obj`` with every CUDA tensor inside dicts, lists and tuples moved to the CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.cpu() if obj.is_cuda else obj
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_cpu(v) for v in obj]
    if isinstance(obj, tuple):
        moved = [to_cpu(v) for v in obj]
        return type(obj)(*moved) if hasattr(obj, "_fields") else tuple(moved)
    return obj
