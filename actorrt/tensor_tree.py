"""Rewriting the tensors inside a nested value (dicts, lists, tuples).

For plain values (:mod:`actorrt.runtime.payload`), which skip the pickler: every other
value has each tensor rewritten as it is pickled, which reaches tensors inside any
object, not only inside containers.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

__all__ = ["map_tensors"]


def map_tensors(obj: Any, fn: Callable[[Any], Any]) -> Any:
    """Returns ``obj`` with every tensor ``t`` inside dicts, lists and tuples replaced by ``fn(t)``.

    Containers whose tensors all come back unchanged are returned as they are (no copy);
    named tuples and dict subclasses keep their type. Other objects are not entered.
    """
    import torch  # placement imports this module and must not need torch to load

    # A plain recursive function, not a closure calling itself: that would be a reference
    # cycle holding ``fn`` (and whatever it gathered) until the next garbage collection.
    return _walk(obj, fn, torch.Tensor)


def _walk(x: Any, fn: Callable[[Any], Any], tensor: type) -> Any:
    if isinstance(x, tensor):
        return fn(x)
    if isinstance(x, dict):
        new = {k: _walk(v, fn, tensor) for k, v in x.items()}
        if all(new[k] is x[k] for k in x):
            return x
        out = copy.copy(x)  # keeps the dict's type (OrderedDict, defaultdict factory)
        out.update(new)
        return out
    if isinstance(x, (list, tuple)):
        items = [_walk(v, fn, tensor) for v in x]
        if all(a is b for a, b in zip(items, x, strict=True)):
            return x
        if isinstance(x, tuple) and hasattr(x, "_fields"):
            return type(x)(*items)
        return type(x)(items) if type(x) in (list, tuple) else items
    return x
