"""Where a sync actor call's time goes (``python -m benchmarks.breakdown``).

Interleaves, in one actorrt cluster and against the same worker, rounds of:
  raw      rpc_sync to a module-level function (what raw torch RPC costs here)
  quick    the same request sent the way actorrt sends its calls (runtime/quick_rpc.py:
           torch's C++ send without its Python wrapper), then waited on
  handoff  rpc_sync to a function that hands the request to a dedicated thread over a
           SimpleQueue and replies from there: raw torch plus the least an actor
           running on its own thread can cost
  callee   the actor host's entry point (mailbox + actor thread), sent as ``quick``
           (``raw`` on an actorrt without it), no ObjectRef
  full     actorrt.get(handle.ping.remote(1))
  rref     an actor written with raw torch RPC: ``rref.rpc_sync().ping(1)`` on an object
           created with ``rpc.remote`` (what the issue measured at 550 us against 330 us
           for a plain function)
so (handoff - raw) is the floor of running on the actor's thread, (callee - quick) the
receiving side's overhead, (full - callee) the caller's, and (raw - quick) what torch's
Python wrapper of ``rpc_async`` costs, which actorrt's calls do not pay. Interleaving
puts every way under the same machine load, which separate processes measured minutes
apart are not.
"""

from __future__ import annotations

import queue
import statistics
import threading
import time
from typing import Any

import torch
import torch.distributed.rpc as rpc

import actorrt
from actorrt.runtime import host as host_mod
from actorrt.runtime import payload

try:
    from actorrt.runtime import quick_rpc
except ImportError:  # an actorrt from before it (to measure the change): no "quick" way
    quick_rpc = None  # type: ignore[assignment]

_handoff_queue: queue.SimpleQueue | None = None
_handoff_lock = threading.Lock()


def _handoff_loop(q: queue.SimpleQueue) -> None:
    while True:
        future, value = q.get()
        future.set_result(value)


@rpc.functions.async_execution
def rpc_handoff(value: Any) -> torch.futures.Future:
    """Replies ``value`` from a dedicated thread (started on first use)."""
    global _handoff_queue
    if _handoff_queue is None:
        with _handoff_lock:
            if _handoff_queue is None:
                q: queue.SimpleQueue = queue.SimpleQueue()
                threading.Thread(target=_handoff_loop, args=(q,), daemon=True).start()
                _handoff_queue = q
    future: torch.futures.Future = torch.futures.Future()
    _handoff_queue.put((future, value))
    return future


class _RawActor:
    """An actor as one writes it with raw torch RPC (an object behind an RRef)."""

    def ping(self, x: Any = None) -> Any:
        return x


BLOCK = 10  # calls of one way in a row before the next way's turn


def interleaved(handle: Any, rounds: int = 10, n: int = 300) -> dict[str, float]:
    """Median microseconds of each way: ``rounds * n`` calls each against ``handle``.

    The ways take turns every ``BLOCK`` calls, so that a change in the machine's load
    (other processes come and go within a second here) falls on all of them alike.
    """
    worker = handle.worker
    seq = [10**9]
    wire = payload.pack(((1,), {}))  # packed once: "callee" leaves out the caller's work
    send = quick_rpc.rpc_async if quick_rpc is not None else None

    def callee() -> None:
        seq[0] += 1
        args = (handle.actor_id, "bench", seq[0], "ping", wire)
        if send is None:
            rpc.rpc_sync(worker, host_mod.rpc_call, args=args)
        else:
            send(worker, host_mod.rpc_call, args).wait()

    seq[0] = 0
    rpc.rpc_sync(worker, host_mod.rpc_call, args=(handle.actor_id, "bench", 0, "ping", wire))
    rref = rpc.remote(worker, _RawActor)
    ways = {"raw": lambda: rpc.rpc_sync(worker, host_mod.rpc_ping, args=(1,))}
    if send is not None:
        ways["quick"] = lambda: send(worker, host_mod.rpc_ping, (1,)).wait()
    ways.update(
        {
            "handoff": lambda: rpc.rpc_sync(worker, rpc_handoff, args=(1,)),
            "callee": callee,
            "full": lambda: actorrt.get(handle.ping.remote(1)),
            "rref": lambda: rref.rpc_sync().ping(1),
        }
    )
    samples: dict[str, list[float]] = {k: [] for k in ways}
    for fn in ways.values():
        for _ in range(20):
            fn()
    for _ in range(max(1, rounds * n // BLOCK)):
        for name, fn in ways.items():
            for _ in range(BLOCK):
                t0 = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e6 for k, v in samples.items()}


@actorrt.actor
class Pinged:
    def ping(self, x: Any = None) -> Any:
        return x


def main() -> None:
    # By module name, not as __main__: the worker resolves `rpc_handoff` (and the class)
    # by its module.
    from benchmarks import breakdown

    with actorrt.start(num_workers=1):
        t = breakdown.Pinged.remote()
        actorrt.get(t.ping.remote(), timeout=60)
        med = breakdown.interleaved(t)
    for k, v in med.items():
        print(f"{k:8s} median {v:7.1f} us  ({v / med['raw']:.2f}x raw)")
    sent = med.get("quick", med["raw"])  # how "callee" was sent
    print(
        f"a thread handoff costs {med['handoff'] - med['raw']:.1f} us; torch's rpc_async "
        f"wrapper {med['raw'] - sent:.1f} us; the callee side adds "
        f"{med['callee'] - sent:.1f} us, the caller side "
        f"{med['full'] - med['callee']:.1f} us"
    )


if __name__ == "__main__":
    main()
