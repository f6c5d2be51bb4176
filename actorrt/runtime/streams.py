"""CUDA work kept in order where a value changes threads on its way.

torch RPC orders a message's CUDA tensors with the streams it knows: the sender's
current streams when it sends, and on the receiver the streams it took from its pool for
the copy, which are current while the entry point (or a reply future's callback) runs.
actorrt hands values on to other threads: a call's arguments to the actor's thread, a
reply to whoever reads the ref, an object to later fetches. Those threads queue their
work on each device's default stream, which nothing orders after the pool streams; and
a reply completed on the actor's thread is sent by the agent on its own streams, which
nothing orders after the actor's work (what that did: docs/performance.md, "The DQN on
one H200"). Two rules, each free where no CUDA tensor is involved:

- :func:`arrived`, where torch hands over a received message: each device's default
  stream waits (on the GPU, not here) for the current stream that copied the tensors
  in, and each tensor is marked as used on the default stream, so the caching allocator
  does not give its memory to the next copy on the pool stream while it is still read.
- :func:`leaving`, where a value made on this thread leaves it other than by this
  thread's own send (a reply, a kept object): this thread waits until its current
  streams have made it.

Work a method queues on a stream of its own is ordered after the default stream by the
method, as torch asks of any code that uses side streams.
"""

from __future__ import annotations

from typing import Any

import torch

from actorrt.tensor_tree import map_tensors

__all__ = ["arrived", "enable", "enabled", "leaving", "leaving_all", "on_arrival"]

_devices: tuple[torch.device, ...] = ()  # this process's CUDA devices under RPC


def enable(devices: list[torch.device]) -> None:
    """Turns the rules on for this process's RPC devices (its device maps' CUDA devices)."""
    global _devices
    _devices = tuple(d for d in devices if d.type == "cuda")


def enabled() -> bool:
    """Whether CUDA tensors can reach or leave this process by RPC."""
    return bool(_devices)


def _cuda_tensors(value: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []

    def note(t: Any) -> Any:
        if t.is_cuda:
            found.append(t)
        return t

    map_tensors(value, note)
    return found


def arrived(value: Any) -> None:
    """Orders the default streams after the copies that brought ``value``'s CUDA tensors.

    Call it where torch hands the message over (an RPC entry point, a reply future's
    callback), with the message's wires; it finds tensors inside lists, tuples (named
    too) and dicts, where a wire keeps them.
    """
    if not _devices:
        return
    waited: set[torch.device] = set()
    for t in _cuda_tensors(value):
        default = torch.cuda.default_stream(t.device)
        if t.device not in waited:
            waited.add(t.device)
            default.wait_stream(torch.cuda.current_stream(t.device))
        t.record_stream(default)


def _arrived_reply(fut: torch.futures.Future[Any]) -> None:
    try:
        value = fut.value()
    except Exception:  # a failed call: nothing arrived
        return
    arrived(value)


def on_arrival(fut: torch.futures.Future[Any]) -> None:
    """:func:`arrived` as the first callback of a reply's future (before any reader's)."""
    if _devices:
        fut.add_done_callback(_arrived_reply)


def leaving(value: Any) -> None:
    """Waits until this thread's current streams have made ``value``'s CUDA tensors.

    For a packed reply: the agent sends it on streams that do not wait for this thread's.
    """
    if not _devices:
        return
    for device in {t.device for t in _cuda_tensors(value)}:
        torch.cuda.current_stream(device).synchronize()


def leaving_all() -> None:
    """:func:`leaving` for a value whose tensors may hide in any object (a kept object).

    Waits for the current stream of each of this process's RPC devices.
    """
    for device in _devices:
        torch.cuda.current_stream(device).synchronize()
