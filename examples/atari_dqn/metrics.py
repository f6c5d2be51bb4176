"""Run outputs: TensorBoard scalars, ``metrics.csv`` and the learning-curve PNG."""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["CSV_FIELDS", "MetricsLogger", "plot_learning_curve"]

#: Columns of ``metrics.csv``; one row per progress poll, ``eval_return`` only filled on
#: rows written by an evaluation. ``loss_mean`` is the mean TD loss over the gradient steps
#: since the previous row (the progress line shows the latest step's, ``last_loss``).
CSV_FIELDS = (
    "wall_s",
    "frames",
    "fps",
    "episodes",
    "return_mean",
    "loss_mean",
    "q_mean",
    "epsilon",
    "updates",
    "replay_size",
    "eval_return",
)


class MetricsLogger:
    """Writes the same numbers to TensorBoard and to ``metrics.csv`` in ``logdir``.

    Args:
        logdir: Output folder (created).
        resume: Append to an existing ``metrics.csv`` instead of starting a new one; its
            ``wall_s`` goes on from the file's last row, so the column never goes back.
    """

    def __init__(self, logdir: str | os.PathLike, resume: bool = False) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.logdir / "metrics.csv"
        append = resume and self.csv_path.exists()
        self.wall_offset = _last_wall(self.csv_path) if append else 0.0
        self._file = open(self.csv_path, "a" if append else "w", newline="")  # noqa: SIM115
        self._csv = csv.DictWriter(self._file, fieldnames=CSV_FIELDS, extrasaction="ignore")
        if not append:
            self._csv.writeheader()
        self.tb = SummaryWriter(str(self.logdir))

    def log(self, row: Mapping[str, Any]) -> None:
        """One CSV row and one TensorBoard scalar per finite value, at step ``frames``."""
        frames = int(row["frames"])
        clean = {k: _finite_or_blank(row.get(k)) for k in CSV_FIELDS}
        if self.wall_offset and clean["wall_s"] != "":
            clean["wall_s"] += self.wall_offset
        self._csv.writerow(clean)
        self._file.flush()
        for key, value in clean.items():
            if key not in ("frames", "wall_s") and value != "":
                self.tb.add_scalar(f"dqn/{key}", value, frames)

    def log_episode(self, frames: int, episode_return: float, length: int) -> None:
        """Per-episode training return (TensorBoard only; CSV rows carry the mean)."""
        self.tb.add_scalar("episode/return", episode_return, frames)
        self.tb.add_scalar("episode/length", length, frames)

    def close(self) -> None:
        self._file.close()
        self.tb.close()


def _last_wall(path: Path) -> float:
    """The ``wall_s`` of the last row of ``path`` (0.0 for none)."""
    last = 0.0
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                last = float(row.get("wall_s") or last)
            except ValueError:  # a row cut short by a crash
                pass
    return last


def _finite_or_blank(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    return value


def _read_csv(path: Path) -> dict[str, list[tuple[float, float]]]:
    series: dict[str, list[tuple[float, float]]] = {k: [] for k in CSV_FIELDS}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if not row.get("frames"):
                continue
            x = float(row["frames"])
            if "loss" in row and "loss_mean" not in row:  # older runs named the column "loss"
                row["loss_mean"] = row["loss"]
            for k in CSV_FIELDS:
                if row.get(k):
                    series[k].append((x, float(row[k])))
    return series


def plot_learning_curve(
    csv_path: str | os.PathLike,
    png_path: str | os.PathLike,
    title: str = "",
    episodes: Sequence[tuple[int, float, int]] = (),
) -> Path:
    """Plots training and evaluation returns (and the mean TD loss) against frames.

    Args:
        csv_path: A ``metrics.csv`` written by :class:`MetricsLogger`.
        png_path: Where to write the PNG.
        title: Figure title (e.g. the env id).
        episodes: Optional per-episode ``(frame, return, length)`` tuples, drawn as faint
            dots under the mean.

    Returns:
        ``png_path`` as a Path.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display on servers; select before pyplot is imported
    import matplotlib.pyplot as plt

    series = _read_csv(Path(csv_path))
    fig, (ax_ret, ax_loss) = plt.subplots(
        2, 1, figsize=(6.4, 4.8), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    if episodes:
        ax_ret.scatter(
            [e[0] for e in episodes],
            [e[1] for e in episodes],
            s=3,
            alpha=0.25,
            color="tab:blue",
            label="episode return",
        )
    for key, style, label in (
        ("return_mean", "-", "training return (mean of recent episodes)"),
        ("eval_return", "o-", "evaluation return"),
    ):
        if series[key]:
            xs, ys = zip(*series[key], strict=True)
            ax_ret.plot(xs, ys, style, label=label, markersize=4)
    ax_ret.set_ylabel("return")
    ax_ret.grid(alpha=0.3)
    ax_ret.legend(loc="best", fontsize=8)
    if series["loss_mean"]:
        xs, ys = zip(*series["loss_mean"], strict=True)
        ax_loss.plot(xs, ys, color="tab:red", linewidth=0.8)
    ax_loss.set_ylabel("mean TD loss")
    ax_loss.set_xlabel("frames")
    ax_loss.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    png = Path(png_path)
    fig.savefig(png, dpi=80)
    plt.close(fig)
    return png
