"""Round-trip latency by message size: DI-engine's table (seed 002) on this host's CPU paths.

What DI-engine measured (``ding/framework/message_queue/perfs``): the sender times one
float32 tensor of each size going to a peer process and the peer's small acknowledgement
coming back. Each system here does the same: the payload is a float32 CPU tensor of
exactly that many bytes, the peer answers with ``tensor.nbytes`` (an int, checked), and
the time is the round trip seen by the sender.

- ``actorrt``: ``actorrt.get(sink.nbytes.remote(t))`` on a local cluster forced onto TCP
  (TensorPipe's ``uv`` transport and ``basic`` channel, shared memory off).
- ``torch``: ``rpc_sync`` to a function, TensorPipe options ``_transports=["uv"]``,
  ``_channels=["basic"]``.
- ``ray``: ``ray.get(actor.nbytes.remote(t))`` (Ray's own same-host path: its object store
  for large arguments).
- ``pynng``: REQ/REP over ``tcp://127.0.0.1``, the tensor pickled into the message and
  unpickled by the peer, as DI-engine's NNG message queue did.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from benchmarks.common import SEED_SIZES, child_env, free_port, latency_stats, time_for

# Bytes a system may hold at its peak per payload byte: pynng, the hungriest, has the
# tensor, its pickle, the outgoing message, and on the peer the message, the received
# bytes and the unpickled tensor, plus slack.
PEAK_COPIES = 8


def ladder(max_bytes: int) -> list[int]:
    """DI-engine's sizes (bytes) up to ``max_bytes``; at least the smallest one."""
    if max_bytes < SEED_SIZES[0]:
        raise ValueError(
            f"latency_max_bytes={max_bytes} is below the smallest size ({SEED_SIZES[0]} bytes)"
        )
    return [s for s in SEED_SIZES if s <= max_bytes]


def fitting(sizes: list[int], available: int) -> tuple[list[int], list[int]]:
    """Splits ``sizes`` into those whose peak (``PEAK_COPIES`` x size) fits ``available``."""
    keep = [s for s in sizes if s * PEAK_COPIES <= available]
    return keep, [s for s in sizes if s not in keep]


def sweep(call: Callable[[Any], int], sizes: list[int], cfg: dict) -> dict[str, dict]:
    """Round-trip stats (us) of ``call(tensor)`` for each size; the reply must be the size.

    The sizes take turns over ``cfg["latency_rounds"]`` rounds, each size timed for
    ``latency_time / rounds`` seconds (at least ``latency_min_reps`` calls) per round,
    so a burst of load from other work on the machine lands on every size alike.
    """
    import torch

    rounds = int(cfg["latency_rounds"])
    samples: dict[int, list[float]] = {size: [] for size in sizes}
    for _ in range(rounds):
        for size in sizes:
            payload = torch.ones(size // 4, dtype=torch.float32)
            got = call(payload)  # also the warm-up
            if got != size:
                raise RuntimeError(f"the peer acknowledged {got} bytes of a {size}-byte payload")
            samples[size] += time_for(
                lambda p=payload: call(p),
                cfg["latency_time"] / rounds,
                min_iters=cfg["latency_min_reps"],
                warmup=0,
            )
            del payload
    return {str(size): latency_stats(s) for size, s in samples.items()}


def run(system: str, cfg: dict) -> dict:
    import psutil

    sizes, skipped = fitting(
        ladder(int(cfg["latency_max_bytes"])), psutil.virtual_memory().available
    )
    runner = {"actorrt": _actorrt, "torch": _torch, "ray": _ray, "pynng": _pynng}[system]
    return {"latency_by_size": runner(sizes, cfg), "latency_skipped": skipped}


def _actorrt(sizes: list[int], cfg: dict) -> dict:
    from benchmarks import sys_actorrt

    sys_actorrt.use_tcp_only()
    import actorrt

    with actorrt.start(num_workers=1):
        sink = sys_actorrt.Target.remote()
        return sweep(lambda t: actorrt.get(sink.nbytes.remote(t), timeout=600), sizes, cfg)


def _torch(sizes: list[int], cfg: dict) -> dict:
    import torch.distributed.rpc as rpc

    from benchmarks import sys_torch

    procs = sys_torch.start_group(2, tcp_only=True)
    try:
        return sweep(lambda t: rpc.rpc_sync("w1", sys_torch.nbytes, args=(t,)), sizes, cfg)
    finally:
        sys_torch.stop_group(procs)


def _ray(sizes: list[int], cfg: dict) -> dict:
    import ray

    from benchmarks import sys_ray

    sys_ray.init(2)
    try:
        sink = sys_ray.RTarget.remote()
        return sweep(lambda t: ray.get(sink.nbytes.remote(t)), sizes, cfg)
    finally:
        ray.shutdown()


_NNG_TIMEOUT_MS = 600_000  # one message of the largest size on a loaded machine
_STOP = b"."  # not a pickle (those start with b"\\x80"); nng cannot carry an empty message


def _pynng(sizes: list[int], cfg: dict) -> dict:
    import threading

    import pynng

    url = f"tcp://127.0.0.1:{free_port()}"
    peer = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.latency_by_size", "pynng-peer", url], env=child_env()
    )
    req = pynng.Req0(dial=url, block_on_dial=False, recv_timeout=_NNG_TIMEOUT_MS)
    # A peer that dies would leave recv waiting for the whole timeout: closing the socket
    # ends that wait at once (recv raises pynng.Closed).
    threading.Thread(target=lambda: (peer.wait(), req.close()), daemon=True).start()
    try:

        def call(t: Any) -> int:
            req.send(pickle.dumps(t, protocol=pickle.HIGHEST_PROTOCOL))
            try:
                return int.from_bytes(req.recv(), "little")
            except pynng.Closed:
                raise RuntimeError(f"the pynng peer exited (code {peer.poll()})") from None

        out = sweep(call, sizes, cfg)
        req.send(_STOP)
        req.recv()
        return out
    finally:
        try:
            peer.wait(30)
        except subprocess.TimeoutExpired:
            peer.kill()
            peer.wait(10)
        req.close()


def _pynng_peer(url: str) -> None:
    """Answers each pickled tensor with its byte count (8 bytes), until ``_STOP``."""
    import pynng

    # recv_max_size=0: no limit (nng refuses messages over 1 MiB by default).
    with pynng.Rep0(listen=url, recv_max_size=0, recv_timeout=_NNG_TIMEOUT_MS) as rep:
        while True:
            msg = rep.recv()
            if msg == _STOP:
                rep.send(_STOP)
                return
            rep.send(pickle.loads(msg).nbytes.to_bytes(8, "little"))


if __name__ == "__main__":
    if sys.argv[1:2] != ["pynng-peer"]:
        raise SystemExit("usage: python -m benchmarks.latency_by_size pynng-peer URL")
    _pynng_peer(sys.argv[2])
