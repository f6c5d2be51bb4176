"""Where a traced run's time went: ``python -m examples.atari_dqn.timeline_report timeline.json``.

Reads the timeline a ``--trace`` run wrote (actorrt's Chrome trace, with the example's
spans: the learner's ``train step`` and its parts, their GPU twins on the learner's
``cuda:N`` track, the collectors' ``collect`` and ``wait for learner``) and prints, over
the training phase (from the first gradient step to the last):

- the learner: how busy its training thread was with steps, the parts' shares of a step,
  and on a GPU how busy the GPU was with steps and how far it trailed the thread
  (``lag_ms``: near zero, the GPU waits for Python; many milliseconds, the GPU is the
  limit);
- the collectors: the share of their time spent collecting (emulators and acting) and
  waiting for the learner;
- which of these looks like the limit, read in the second half of the phase: its first
  part holds the start-up's catch-up (the learner training on what was collected before
  its first step, the collectors held meanwhile), which says little of the run's pace.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from typing import Any

__all__ = ["BUSY", "main", "report", "summarize"]

#: A share of the training phase above which a thread or the GPU counts as saturated.
BUSY = 0.85

_PARTS = ("sample", "loss and backward", "optimizer")


def _threads(events: list[dict[str, Any]]) -> dict[tuple[int, int], str]:
    return {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"
    }


def _clipped(spans: list[dict[str, Any]], lo: float, hi: float) -> float:
    """Microseconds of ``spans`` inside [lo, hi] (spans of one track do not overlap)."""
    return sum(max(0.0, min(hi, s["ts"] + s["dur"]) - max(lo, s["ts"])) for s in spans)


def summarize(trace: dict[str, Any]) -> dict[str, Any]:
    """The figures of :func:`report`, as a dict.

    Args:
        trace: The loaded timeline (a dict with ``traceEvents``).

    Returns:
        ``window_s`` (the training phase), ``steps``, ``learner_busy`` (share of the
        phase in steps), ``parts`` (each part's share of the steps' time), ``gpu_busy``
        and ``gpu_lag_ms`` (median; None without a GPU track), ``collect_share`` and
        ``wait_share`` (means over collector processes, each over its own first to
        last span in the phase; None without collectors), ``late`` (the same shares
        in the second half of the phase), ``limit`` (a sentence, read from ``late``),
        all shares in [0, 1].

    Raises:
        ValueError: The timeline has no ``train step`` span (not a traced training run).
    """
    events = trace["traceEvents"]
    threads = _threads(events)
    spans = [e for e in events if e.get("cat") == "span" and e.get("ph") == "X"]
    on_gpu = [e for e in spans if threads.get((e["pid"], e["tid"]), "").startswith("cuda:")]
    gpu_ids = {id(e) for e in on_gpu}
    host = [e for e in spans if id(e) not in gpu_ids]
    steps = [e for e in host if e["name"] == "train step"]
    if not steps:
        raise ValueError("no 'train step' span: was the run traced (--trace) and did it train?")
    lo = min(s["ts"] for s in steps)
    hi = max(s["ts"] + s["dur"] for s in steps)
    window = max(hi - lo, 1e-9)
    step_time = sum(s["dur"] for s in steps)
    parts = {
        p: sum(e["dur"] for e in host if e["name"] == p) / max(step_time, 1e-9) for p in _PARTS
    }
    gpu_steps = [e for e in on_gpu if e["name"] == "train step"]
    lags = [e["args"]["lag_ms"] for e in gpu_steps if "lag_ms" in e.get("args", {})]
    out: dict[str, Any] = {
        "window_s": window / 1e6,
        "steps": len(steps),
        "parts": parts,
        "gpu_lag_ms": statistics.median(lags) if lags else None,
        **_shares(host, steps, gpu_steps, lo, hi),
    }
    out["late"] = _shares(host, steps, gpu_steps, lo + window / 2, hi)
    out["limit"] = _limit({**out, **out["late"]}, step_time / len(steps) / 1000)
    return out


def _shares(
    host: list[dict[str, Any]],
    steps: list[dict[str, Any]],
    gpu_steps: list[dict[str, Any]],
    lo: float,
    hi: float,
) -> dict[str, float | None]:
    """How busy the learner, its GPU and the collectors were in [lo, hi] (microseconds)."""
    window = max(hi - lo, 1e-9)
    # Each collector over its own part of the window (its first span to its last): once
    # it has collected its frames, the learner may still train on what it owes.
    per_pid: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in host:
        if e["name"] in ("collect", "wait for learner"):
            per_pid[e["pid"]].append(e)
    collect: list[float] = []
    wait: list[float] = []
    for mine in per_pid.values():
        start = max(lo, min(e["ts"] for e in mine))
        end = min(hi, max(e["ts"] + e["dur"] for e in mine))
        if end <= start:
            continue
        for name, shares in (("collect", collect), ("wait for learner", wait)):
            spent = _clipped([e for e in mine if e["name"] == name], start, end)
            shares.append(spent / (end - start))
    return {
        "learner_busy": _clipped(steps, lo, hi) / window,
        "gpu_busy": _clipped(gpu_steps, lo, hi) / window if gpu_steps else None,
        "collect_share": statistics.mean(collect) if collect else None,
        "wait_share": statistics.mean(wait) if wait else None,
    }


def _limit(f: dict[str, Any], step_ms: float) -> str:
    if f["learner_busy"] >= BUSY:
        if f["gpu_busy"] is None:
            return "the learner's gradient steps (on the CPU)"
        if f["gpu_lag_ms"] is not None and f["gpu_lag_ms"] >= step_ms:
            return "the learner's GPU (it trails the training thread by a step or more)"
        return "the learner's training thread (Python and kernel launches: the GPU keeps up)"
    if f["collect_share"] is not None and f["collect_share"] >= BUSY:
        return "the collectors (emulators and acting)"
    return "none saturated: look for waits (the learner's mailbox, pushes held, start-up)"


def report(trace: dict[str, Any]) -> str:
    """The figures of :func:`summarize` as lines of text."""
    f = summarize(trace)
    pct = "{:.0%}".format
    if any(f["parts"].values()):
        parts = ", ".join(f"{p} {pct(v)}" for p, v in f["parts"].items()) + " of a step"
    else:  # a step replayed as one CUDA graph (--cuda-graph) has no parts of its own
        parts = "no parts: each step one CUDA graph replay"
    lines = [
        f"training phase: {f['window_s']:.1f} s, {f['steps']:,} gradient steps",
        f"learner thread in steps: {pct(f['learner_busy'])} ({parts})",
    ]
    if f["gpu_busy"] is not None:
        lag = f["gpu_lag_ms"]
        lines.append(
            f"learner GPU in steps: {pct(f['gpu_busy'])}, trailing the thread by "
            f"{lag:.2f} ms (median)"
            if lag is not None
            else f"learner GPU in steps: {pct(f['gpu_busy'])}"
        )
    if f["collect_share"] is not None:
        lines.append(
            f"collectors: collecting {pct(f['collect_share'])}, waiting for the learner "
            f"{pct(f['wait_share'])} (mean over processes)"
        )
    late = f["late"]
    busy = [f"learner thread in steps {pct(late['learner_busy'])}"]
    if late["gpu_busy"] is not None:
        busy.append(f"GPU {pct(late['gpu_busy'])}")
    if late["collect_share"] is not None:
        busy.append(
            f"collectors collecting {pct(late['collect_share'])}, waiting {pct(late['wait_share'])}"
        )
    lines.append(f"second half of the phase: {', '.join(busy)}")
    lines.append(f"the limit (in the second half): {f['limit']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """The command line: prints :func:`report` of a timeline file."""
    p = argparse.ArgumentParser(
        prog="python -m examples.atari_dqn.timeline_report", description=__doc__.splitlines()[0]
    )
    p.add_argument("timeline", help="the timeline.json a --trace run wrote into its logdir")
    args = p.parse_args(argv)
    with open(args.timeline, encoding="utf-8") as fh:
        trace = json.load(fh)
    try:
        print(report(trace))
    except ValueError as exc:
        raise SystemExit(f"{args.timeline}: {exc}") from None


if __name__ == "__main__":
    main()
