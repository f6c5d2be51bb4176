"""The burst window at several loads: fixed 200 us against one that follows the round trip.

``python -m benchmarks.burst`` starts a 1-worker cluster and, at each load (0, 1 and 2
extra processes spinning on the CPU, started and killed here), measures the sync round
trip and the window the adaptive outbox picked from it, then, in interleaved rounds of
both windows (the caller's call outbox and the worker's reply outbox set alike), one
caller sending calls paced ``pace`` us apart (0: a tight loop; the caller sleeps, so the
measured gap is what it got): calls/s until every reply is in, and the median delay
from ``.remote()`` to the method starting (the actor reads the same monotonic clock).
A call that queues pays the flusher's wake-up; a burst that does not queue pays one RPC
per call.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from typing import Any

import actorrt
from actorrt.runtime import context
from actorrt.runtime.batches import CallBatches, ReplyBatches

FIXED_S = 200e-6  # the window before it followed the round trip


@actorrt.actor
class Clocked:
    def start(self, _i: int) -> float:
        return time.perf_counter()

    def set_window(self, window: float | None) -> None:
        context.part(ReplyBatches).outbox.fixed_window = window

    def ping(self) -> None:
        return None


def _paced(handle: Any, n: int, pace_s: float) -> tuple[float, float, float]:
    """Calls/s, the mean gap between calls (us) and the median delay to the method (us).

    The caller sleeps between calls (a spinning caller would load the two cores it
    measures), so a pace under the kernel's timer slack (about 60 us) comes out longer:
    the gap is measured.
    """
    issued = []
    refs = []
    t0 = time.perf_counter()
    due = t0
    for i in range(n):
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        issued.append(time.perf_counter())
        refs.append(handle.start.remote(i))
        due += pace_s
    started = actorrt.get(refs, timeout=300)
    seconds = time.perf_counter() - t0
    gap = (issued[-1] - issued[0]) / (n - 1)
    delay = statistics.median(s - i for s, i in zip(started, issued, strict=True))
    return n / seconds, gap * 1e6, delay * 1e6


def _spinners(count: int) -> list[subprocess.Popen[bytes]]:
    code = "while True: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]


def main() -> None:
    # By module name, not as __main__: the worker resolves the class by its module.
    from benchmarks import burst

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", default="0,1,2", help="spinning processes, per load")
    parser.add_argument("--paces", default="0,50,100,200", help="us between calls")
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with actorrt.start(num_workers=1):
        a = burst.Clocked.remote()
        actorrt.get(a.ping.remote(), timeout=60)
        calls = context.part(CallBatches).outbox
        for load in (int(x) for x in args.loads.split(",")):
            spinners = _spinners(load)
            try:
                time.sleep(0.5)
                rtt = []
                for _ in range(300):
                    t = time.perf_counter()
                    actorrt.get(a.ping.remote())
                    rtt.append(time.perf_counter() - t)
                    time.sleep(0.001)  # lets the outbox sample round trips
                estimate = calls.round_trip(a.worker) or 0.0
                print(
                    f"load {load}: sync round trip median {statistics.median(rtt) * 1e6:.0f} us; "
                    f"estimate {estimate * 1e6:.0f} us -> adaptive window "
                    f"{calls.window(a.worker) * 1e6:.0f} us"
                )
                results: dict[tuple[str, float], list[tuple[float, float, float]]] = {}
                for _ in range(args.rounds):
                    for mode, window in (("fixed", FIXED_S), ("adaptive", None)):
                        calls.fixed_window = window
                        actorrt.get(a.set_window.remote(window), timeout=60)
                        for pace in (float(p) for p in args.paces.split(",")):
                            key = (mode, pace)
                            got = _paced(a, args.calls, pace * 1e-6)
                            results.setdefault(key, []).append(got)
                for (mode, pace), runs in sorted(results.items(), key=lambda kv: kv[0][1]):
                    rates = sorted(r for r, _, _ in runs)
                    gap = statistics.median(g for _, g, _ in runs)
                    delays = sorted(d for _, _, d in runs)
                    print(
                        f"  pace {pace:4.0f} us (gap {gap:4.0f})  {mode:8s}  calls/s "
                        f"{statistics.median(rates):6.0f} [{rates[0]:.0f}-{rates[-1]:.0f}]  "
                        f"delay {statistics.median(delays):6.0f} us "
                        f"[{delays[0]:.0f}-{delays[-1]:.0f}]"
                    )
            finally:
                for p in spinners:
                    p.kill()
                    p.wait()
                calls.fixed_window = None
                actorrt.get(a.set_window.remote(None), timeout=60)


if __name__ == "__main__":
    main()
