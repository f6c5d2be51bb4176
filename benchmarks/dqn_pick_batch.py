"""Which learner batch to give a timed Pong run, from ``benchmarks.dqn_throughput`` runs.

``python -m benchmarks.dqn_pick_batch FILE.json ...`` reads the JSON files of throughput
runs taken on the machine that will train (``gpu_check.sh`` names them
``throughput-<run>.json``), one run per batch size, and prints each run's figures and
the batch to pick.

The rule, a heuristic rather than a measurement of learning: among the runs that kept
at least ``--min-frames-per-s`` (the issue's 15,000), the most gradient steps per second
times the square root of their batch. Learning rates follow the batch's square root
(``config.with_batch_size``), so a step of 512 counts as about two of 128, not four.
A run within ``--tie`` (5%) of the best with a larger batch wins: it makes the fewer
steps, so the fewer host launches for the same progress, and batch 512 is the recipe's
measured default.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["Run", "main", "pick", "read_run"]


@dataclasses.dataclass(frozen=True)
class Run:
    """One throughput run's figures that the pick reads.

    Attributes:
        name: Where it came from (the file's stem).
        batch_size: The learner's batch.
        frames_per_s: Emulator frames/s collected while training.
        updates_per_s: Gradient steps/s (spare steps included).
        replay_ratio: Samples per transition the learner kept.
    """

    name: str
    batch_size: int
    frames_per_s: float
    updates_per_s: float
    replay_ratio: float

    @property
    def score(self) -> float:
        """Gradient steps/s times the square root of the batch."""
        return self.updates_per_s * math.sqrt(self.batch_size)


def read_run(path: Path) -> Run:
    """The figures of one ``benchmarks.dqn_throughput --json`` file.

    Raises:
        ValueError: The file holds no DQN phase (a run that failed before it).
    """
    data: dict[str, Any] = json.loads(path.read_text())
    dqn = data.get("dqn")
    if not isinstance(dqn, dict):
        raise ValueError(f"{path}: no 'dqn' figures (did the run fail before training?)")
    return Run(
        name=path.stem,
        batch_size=int(dqn["batch_size"]),
        frames_per_s=float(dqn["frames_per_s"]),
        updates_per_s=float(dqn["updates_per_s"]),
        replay_ratio=float(dqn["replay_ratio"]),
    )


def pick(runs: Sequence[Run], min_frames_per_s: float = 15_000.0, tie: float = 0.05) -> Run | None:
    """The run whose batch to train with (the rule in this module's docstring).

    Args:
        runs: Throughput runs from one machine.
        min_frames_per_s: Runs collecting fewer frames/s are left out.
        tie: A larger batch's run wins when its score is within this fraction of the best.

    Returns:
        The picked run, or None when no run collected ``min_frames_per_s``.
    """
    fast = [r for r in runs if r.frames_per_s >= min_frames_per_s]
    if not fast:
        return None
    best = max(r.score for r in fast)
    close = [r for r in fast if r.score >= (1.0 - tie) * best]
    return max(close, key=lambda r: (r.batch_size, r.score))


def main(argv: Sequence[str] | None = None) -> int:
    """Prints each run and the pick; returns 1 when none collected enough frames/s."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.dqn_pick_batch", description=__doc__)
    p.add_argument("files", nargs="+", type=Path, help="benchmarks.dqn_throughput --json files")
    p.add_argument("--min-frames-per-s", type=float, default=15_000.0)
    p.add_argument("--tie", type=float, default=0.05, help="fraction of the best score")
    opts = p.parse_args(argv)
    runs = []
    for path in opts.files:
        try:
            runs.append(read_run(path))
        except (OSError, ValueError, KeyError) as exc:
            print(f"skipped {path}: {exc}")
    print(f"{'run':<32} {'batch':>5} {'frames/s':>9} {'steps/s':>8} {'ratio':>6} {'score':>8}")
    for r in runs:
        print(
            f"{r.name:<32} {r.batch_size:>5} {r.frames_per_s:>9,.0f} {r.updates_per_s:>8.1f} "
            f"{r.replay_ratio:>6.1f} {r.score:>8,.0f}"
        )
    chosen = pick(runs, opts.min_frames_per_s, opts.tie)
    if chosen is None:
        print(f"pick: none (no run collected {opts.min_frames_per_s:,.0f} frames/s)")
        return 1
    print(f"pick: --batch-size {chosen.batch_size} ({chosen.name})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
