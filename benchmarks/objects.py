"""Objects suite: refs passed actor to actor, puts fanned out, a state dict broadcast.

Run with the others (``python -m benchmarks --suites objects``), each system in its own
child process, side by side with Ray:

- ``pass``: actor A holds a CPU tensor of 1, 64 or 256 MB; the driver passes the ref of
  A's result to actor B (``B.nbytes(A.tensor())``), against A calling B with the tensor
  itself (the direct call). Ray does the same with its actors and object store.
- ``fanout``: the driver puts 256 MB once and N = 1, 4, 8 actors each get it.
- ``broadcast``: a learner actor publishes a 100 MB state dict (10 tensors of 10 MB) as
  one object and 8 collector actors each load it.
- ``chain``: the driver passes the ref of A's small result, unanswered, to B
  (``B.echo(A.small())``): a top-level ref, so the call goes once A answered, its small
  value inline (both systems resolve it at the caller); per call.
- ``nested``: the driver passes a 1 MB put's ref inside a list to B, which gets it
  (``B.first([ref])``): borrowed for the call by both (no lease, as B keeps no copy);
  per call.
- ``unread`` and ``kept``: the same ref in a list to B, which does not read it
  (``B.unread([ref])``), or stores it in place of the last one (``B.keep([ref])``, so
  B becomes a holder); per call. With ``nested``, they take apart what a ref inside a
  value costs over a plain call (``plain``: ``B.unread(1)``).
- ``returned``: A puts a small tensor and returns its ref in a list, and the driver gets
  the list, then the value (fetched from A); per call.
- ``sampled``: B, a replay buffer, stores the refs of 8 small puts A made, and the
  driver gets B's list of them (``B.sample()``, refs of another process's objects
  returned), not their values; per call.

Each figure is the median of ``objects_reps`` rounds, in seconds; the report prints
actorrt/Ray ratios (below 1: actorrt is faster) and ref/direct for the pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.common import median_time

MB = 1 << 20
PASS_SIZES = (1 * MB, 64 * MB, 256 * MB)
FANOUT_BYTES = 256 * MB
FANOUT_NS = (1, 4, 8)
BROADCAST_TENSORS = 10  # of 10 MB: a 100 MB state dict
WORKERS = 4
SMALL_CALLS = 50  # chain and nested: calls per timed round (each is under a millisecond)
NESTED_BYTES = 1 * MB
SAMPLED = 8  # refs in a replay buffer's sample


class Holder:
    """Actor A: holds a tensor, returns it, or sends it to B itself (the direct call)."""

    def __init__(self) -> None:
        self.t: dict[int, torch.Tensor] = {}

    def make(self, nbytes: int) -> int:
        self.t[nbytes] = torch.ones(nbytes, dtype=torch.uint8)
        return nbytes

    def tensor(self, nbytes: int) -> torch.Tensor:
        return self.t[nbytes]

    def pid(self) -> int:
        return os.getpid()

    def small(self) -> int:
        return 1

    def state(self) -> dict[str, torch.Tensor]:
        return {f"layer{i}": torch.ones(10 * MB // 4) for i in range(BROADCAST_TENSORS)}


class Sink:
    """Actor B (and the fan-out consumers): reads what it was given."""

    def nbytes(self, t: Any) -> int:
        if isinstance(t, dict):
            return sum(v.nbytes for v in t.values())
        return int(t.nbytes)

    def ping(self) -> int:
        return 0

    def echo(self, x: Any) -> Any:
        return x

    def unread(self, box: Any) -> int:
        return 1

    def keep(self, box: Any) -> int:
        self.box = box
        return 1

    def fill(self, refs: list[Any]) -> int:
        self.stored = refs
        return len(refs)

    def sample(self) -> list[Any]:
        return list(self.stored)

    def pid(self) -> int:
        return os.getpid()


def run(system: str, cfg: dict) -> dict:
    """The suite for ``system`` (``actorrt`` or ``ray``)."""
    reps = cfg.get("objects_reps", 3)
    return {"objects": (_actorrt if system == "actorrt" else _ray)(reps)}


def _measure(
    get: Callable[[Any], Any], put: Callable[[Any], Any], a: Any, b: Any, sinks: list, reps: int
) -> dict:
    """The suite's figures with one system's ``get`` and ``put``, its A, B and sinks."""
    out: dict[str, Any] = {"pass": {}, "fanout": {}}
    get([s.ping.remote() for s in [b, *sinks]])
    for n in PASS_SIZES:
        get(a.make.remote(n))
        ref = median_time(lambda n=n: get(b.nbytes.remote(a.tensor.remote(n))), reps)
        direct = median_time(lambda n=n: get(a.direct.remote(b, n)), reps)
        out["pass"][str(n)] = {"ref": ref, "direct": direct}
    value = torch.ones(FANOUT_BYTES, dtype=torch.uint8)
    for k in FANOUT_NS:
        out["fanout"][str(k)] = median_time(
            lambda k=k: get([s.nbytes.remote(r) for r in [put(value)] for s in sinks[:k]]), reps
        )
    # publish() returns the ref of the state dict it put, in a list (Ray gets a nested ref
    # as itself only there), so the sinks fetch the state dict from A's process
    out["broadcast"] = median_time(
        lambda: get([s.nbytes.remote(r) for r in get(a.publish.remote()) for s in sinks]), reps
    )
    chain = median_time(
        lambda: [get(b.echo.remote(a.small.remote())) for _ in range(SMALL_CALLS)], reps
    )
    boxed = put(torch.ones(NESTED_BYTES, dtype=torch.uint8))
    out["chain"] = chain / SMALL_CALLS
    get(b.fill.remote(get(a.put_many.remote(SAMPLED))))  # B holds refs of A's puts
    for key, call in (
        ("plain", lambda: b.unread.remote(1)),
        ("unread", lambda: b.unread.remote([boxed])),
        ("kept", lambda: b.keep.remote([boxed])),
        ("nested", lambda: b.first.remote([boxed])),
        ("returned", lambda: get(a.put_small.remote())[0]),  # a put's ref, from its owner
        ("sampled", lambda: b.sample.remote()),  # refs of A's objects, from B
    ):
        per_round = median_time(lambda call=call: [get(call()) for _ in range(SMALL_CALLS)], reps)
        out[key] = per_round / SMALL_CALLS
    return out


def _actorrt(reps: int) -> dict:
    import actorrt

    @actorrt.actor
    class A(Holder):
        def direct(self, sink: Any, nbytes: int) -> int:
            return actorrt.get(sink.nbytes.remote(self.t[nbytes]), timeout=300)

        def publish(self) -> Any:
            return [actorrt.put(self.state())]

        def put_small(self) -> Any:
            return [actorrt.put(torch.ones(16))]

        def put_many(self, k: int) -> Any:
            return [actorrt.put(torch.ones(16)) for _ in range(k)]

    @actorrt.actor
    class B(Sink):
        def first(self, box: list[Any]) -> int:
            return int(actorrt.get(box[0], timeout=300).nbytes)

    with actorrt.start(num_workers=WORKERS):
        a, b = A.remote(), B.remote()
        while actorrt.get(a.pid.remote()) == actorrt.get(b.pid.remote()):
            b = B.remote()  # actors share processes here: A and B must not (as in Ray)
        sinks = [B.remote() for _ in range(max(FANOUT_NS))]
        return _measure(lambda r: actorrt.get(r, timeout=300), actorrt.put, a, b, sinks, reps)


def _ray(reps: int) -> dict:
    import ray

    @ray.remote(num_cpus=0)
    class A(Holder):
        def direct(self, sink: Any, nbytes: int) -> int:
            return ray.get(sink.nbytes.remote(self.t[nbytes]))

        def publish(self) -> Any:
            return [ray.put(self.state())]

        def put_small(self) -> Any:
            return [ray.put(torch.ones(16))]

        def put_many(self, k: int) -> Any:
            return [ray.put(torch.ones(16)) for _ in range(k)]

    @ray.remote(num_cpus=0)
    class B(Sink):
        def first(self, box: list[Any]) -> int:
            return int(ray.get(box[0]).nbytes)

    ray.init(num_cpus=WORKERS, include_dashboard=False, log_to_driver=False)
    try:
        a, b = A.remote(), B.remote()
        sinks = [B.remote() for _ in range(max(FANOUT_NS))]
        return _measure(ray.get, ray.put, a, b, sinks, reps)
    finally:
        ray.shutdown()


def table(doc: dict) -> str:
    """The suite's figures for every system that ran it, with actorrt/Ray ratios."""
    res = {s: r["objects"] for s, r in doc["results"].items() if "objects" in r}
    ours, ray_ = res.get("actorrt"), res.get("ray")
    lines = ["what                          actorrt s   ray s   actorrt/ray   ref/direct (actorrt)"]

    def row(
        what: str, mine: float | None, theirs: float | None, extra: str = "", places: int = 4
    ) -> None:
        ratio = f"{mine / theirs:.2f}x" if mine and theirs else "-"
        m = f"{mine:.{places}f}" if mine is not None else "-"
        t = f"{theirs:.{places}f}" if theirs is not None else "-"
        lines.append(f"{what:<30}{m:>9}{t:>9}{ratio:>13}   {extra}")

    for n in PASS_SIZES:
        mine = ours["pass"][str(n)] if ours else None
        theirs = ray_["pass"][str(n)] if ray_ else None
        extra = f"{mine['ref'] / mine['direct']:.2f}x" if mine else ""
        row(
            f"pass A->B {n // MB} MB",
            mine["ref"] if mine else None,
            theirs["ref"] if theirs else None,
            extra,
        )
    for k in FANOUT_NS:
        row(
            f"put 256 MB, get by {k}",
            ours["fanout"][str(k)] if ours else None,
            ray_["fanout"][str(k)] if ray_ else None,
        )
    row(
        "100 MB state dict to 8",
        ours["broadcast"] if ours else None,
        ray_["broadcast"] if ray_ else None,
    )
    for key, what in (
        ("chain", "small result A->B, unanswered"),
        ("nested", "1 MB ref in a list"),
        ("plain", "a plain call, for the three"),
        ("unread", "ref in a list, not read"),
        ("kept", "ref in a list, kept by B"),
        ("returned", "a put's ref returned, got"),
        ("sampled", f"{SAMPLED} refs sampled from B"),
    ):
        # per call, under a millisecond: two more places
        row(what, ours.get(key) if ours else None, ray_.get(key) if ray_ else None, places=6)
    return "\n".join(lines)
