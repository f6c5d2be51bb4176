"""Where a sync actor call's time goes (``python -m benchmarks.breakdown``).

Interleaves, in one actorrt cluster, rounds of:
  raw      rpc_sync to a module-level function (what raw torch RPC costs here)
  callee   rpc_sync to the actor host's entry point (mailbox + actor thread), no ObjectRef
  full     actorrt.get(handle.ping.remote(1))
so (callee - raw) is the receiving side's overhead and (full - callee) the caller's.
"""

from __future__ import annotations

import statistics
import time

import torch.distributed.rpc as rpc

import actorrt
from actorrt.runtime import host as host_mod
from benchmarks.sys_actorrt import Target


def main(rounds: int = 10, n: int = 300) -> None:
    with actorrt.start(num_workers=1) as rt:
        t = Target.remote()
        actorrt.get(t.ping.remote(), timeout=60)
        seq = [10**6]

        def callee() -> None:
            seq[0] += 1
            rpc.rpc_sync(
                t.worker, host_mod.rpc_call, args=(t.actor_id, "bench", seq[0], "ping", (1,), {})
            )

        seq[0] = 0
        rpc.rpc_sync(t.worker, host_mod.rpc_call, args=(t.actor_id, "bench", 0, "ping", (1,), {}))
        ways = {
            "raw": lambda: rpc.rpc_sync(t.worker, host_mod.rpc_ping, args=(1,)),
            "callee": callee,
            "full": lambda: actorrt.get(t.ping.remote(1)),
        }
        samples: dict[str, list[float]] = {k: [] for k in ways}
        for _ in range(rounds):
            for name, fn in ways.items():
                for _ in range(20):
                    fn()
                for _ in range(n):
                    t0 = time.perf_counter()
                    fn()
                    samples[name].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) * 1e6 for k, v in samples.items()}
        for k, v in med.items():
            print(f"{k:7s} median {v:7.1f} us  ({v / med['raw']:.2f}x raw)")
        print(
            f"callee side adds {med['callee'] - med['raw']:.1f} us, "
            f"caller side adds {med['full'] - med['callee']:.1f} us"
        )
        del rt


if __name__ == "__main__":
    main()
