"""The DQN example's progress line and metrics.csv give their two losses two names."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")

from examples.atari_dqn.metrics import CSV_FIELDS, _read_csv  # noqa: E402
from examples.atari_dqn.monitor import progress_fields  # noqa: E402

ROW = {"fps": 412.3, "return_mean": -20.5, "epsilon": 0.731}


def test_progress_line_shows_the_latest_step_as_last_loss():
    fields = progress_fields(ROW, 0.01234, have_returns=True)
    assert fields == {"fps": "412", "ret": "-20.5", "last_loss": "0.0123", "eps": "0.73"}
    assert progress_fields(ROW, math.nan, have_returns=False)["last_loss"] == "-"
    assert progress_fields(ROW, math.nan, have_returns=False)["ret"] == "-"


def test_csv_has_the_mean_as_loss_mean_and_no_bare_loss():
    assert "loss_mean" in CSV_FIELDS and "loss" not in CSV_FIELDS
    # fps is the one number both show; no other name is shared
    assert set(progress_fields(ROW, 1.0, True)) & set(CSV_FIELDS) == {"fps"}


def test_readme_names_both():
    readme = (Path(__file__).resolve().parents[3] / "examples/atari_dqn/README.md").read_text()
    assert "`last_loss`" in readme and "`loss_mean`" in readme and "dqn/loss_mean" in readme
    assert "`dqn/loss`" not in readme


def test_plot_reads_files_written_before_the_rename(tmp_path):
    f = tmp_path / "metrics.csv"
    old = [c if c != "loss_mean" else "loss" for c in CSV_FIELDS]
    with open(f, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=old)
        w.writeheader()
        w.writerow({"frames": 10, "loss": 0.5})
    assert _read_csv(f)["loss_mean"] == [(10.0, 0.5)]
