"""Tasks suite: remote functions against Ray's tasks, side by side.

Run with the others (``python -m benchmarks --suites tasks``), each system in its own
child process, on a cluster of ``WORKERS`` worker processes (Ray: ``num_cpus=WORKERS``),
functions at their default ``num_cpus=1``:

- ``one``: one call of a function that returns its argument, ``get`` right after
  (median of ``tasks_calls`` rounds), in seconds;
- ``burst``: ``tasks_burst`` such calls sent at once, then ``get`` of them all, in
  seconds for the whole burst;
- ``pass``: a function makes a 64 MB tensor and another reads it from the first one's
  ref (the bytes go worker to worker), in seconds;
- ``nested``: ``fib(10)`` by functions that call and wait for functions (177 calls),
  in seconds;
- ``stream``: a generator function yields ``tasks_stream`` small values, which the
  driver takes one by one as they come (``for ref in gen: get(ref)``), in seconds for
  the whole stream (a streaming generator: Ray's default for a generator function);
- ``stream_bp``: as ``stream``, from an async generator method of an async actor, with
  ``_generator_backpressure_num_objects=2`` (the method runs at most two values ahead
  of the driver), in seconds for the whole stream.

The report prints actorrt/Ray ratios (below 1: actorrt is faster).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import torch

from benchmarks.common import median_time

MB = 1 << 20
WORKERS = 4
PASS_BYTES = 64 * MB


def echo(x: Any) -> Any:
    return x


def make(nbytes: int) -> torch.Tensor:
    return torch.ones(nbytes, dtype=torch.uint8)


def nbytes(t: torch.Tensor) -> int:
    return int(t.nbytes)


def count(n: int) -> Iterator[int]:
    for i in range(n):  # noqa: UP028  # not `yield from`: Ray 2.60 fails on it
        yield i


class Streamer:
    """An async actor whose async generator method streams."""

    async def count(self, n: int) -> AsyncIterator[int]:
        for i in range(n):
            yield i


def _measure(get: Callable[[Any], Any], fns: dict[str, Any], cfg: dict) -> dict:
    f, mk, nb, fib, gen = fns["echo"], fns["make"], fns["nbytes"], fns["fib"], fns["count"]
    calls, burst, reps = cfg.get("tasks_calls", 300), cfg.get("tasks_burst", 2000), 3
    values = cfg.get("tasks_stream", 1000)
    get([f.remote(i) for i in range(4 * WORKERS)])  # every process has run one
    held = fns["Streamer"].remote().count.options(_generator_backpressure_num_objects=2)
    return {
        "one": median_time(lambda: get(f.remote(1)), calls),
        "burst": median_time(lambda: get([f.remote(i) for i in range(burst)]), reps),
        "pass": median_time(lambda: get(nb.remote(mk.remote(PASS_BYTES))), reps),
        "nested": median_time(lambda: get(fib.remote(10)), reps),
        "stream": median_time(lambda: [get(r) for r in gen.remote(values)], reps),
        "stream_bp": median_time(lambda: [get(r) for r in held.remote(values)], reps),
    }


def run(system: str, cfg: dict) -> dict:
    """The suite for ``system`` (``actorrt`` or ``ray``)."""
    return {"tasks": (_actorrt if system == "actorrt" else _ray)(cfg)}


def _actorrt(cfg: dict) -> dict:
    import actorrt

    @actorrt.remote
    def fib(n: int) -> int:
        if n < 2:
            return n
        return sum(actorrt.get([fib.remote(n - 1), fib.remote(n - 2)], timeout=300))

    fns = {"echo": actorrt.remote(echo), "make": actorrt.remote(make)}
    fns.update(nbytes=actorrt.remote(nbytes), fib=fib, count=actorrt.remote(count))
    fns["Streamer"] = actorrt.actor(Streamer)
    with actorrt.start(num_workers=WORKERS):
        return _measure(lambda r: actorrt.get(r, timeout=300), fns, cfg)


def _ray(cfg: dict) -> dict:
    import ray

    @ray.remote
    def fib(n: int) -> int:
        if n < 2:
            return n
        return sum(ray.get([fib.remote(n - 1), fib.remote(n - 2)]))

    fns = {"echo": ray.remote(echo), "make": ray.remote(make), "nbytes": ray.remote(nbytes)}
    fns.update(fib=fib, count=ray.remote(count), Streamer=ray.remote(Streamer))
    ray.init(num_cpus=WORKERS, include_dashboard=False, log_to_driver=False)
    try:
        return _measure(ray.get, fns, cfg)
    finally:
        ray.shutdown()


def table(doc: dict) -> str:
    """The suite's figures for every system that ran it, with actorrt/Ray ratios."""
    res = {s: r["tasks"] for s, r in doc["results"].items() if "tasks" in r}
    ours, theirs = res.get("actorrt") or {}, res.get("ray") or {}
    burst = doc.get("config", {}).get("tasks_burst", 2000)
    values = doc.get("config", {}).get("tasks_stream", 1000)
    names = {
        "one": "one call, get (s)",
        "burst": f"{burst} calls, get all (s)",
        "pass": "64 MB from one to another (s)",
        "nested": "fib(10), nested (s)",
        "stream": f"{values} values streamed (s)",
        "stream_bp": f"{values}, async actor, backpr. 2 (s)",
    }
    lines = ["what                              actorrt      ray   actorrt/ray"]
    for key, what in names.items():
        mine, other = ours.get(key), theirs.get(key)
        ratio = f"{mine / other:.2f}x" if mine and other else "-"
        m = f"{mine:.5f}" if mine is not None else "-"
        t = f"{other:.5f}" if other is not None else "-"
        lines.append(f"{what:<32}{m:>10}{t:>9}{ratio:>13}")
    return "\n".join(lines)
