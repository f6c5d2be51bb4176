"""benchmarks.dqn_pick_batch: the batch a timed Pong run gets from throughput runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks.dqn_pick_batch import Run, main, pick, read_run


def _run(batch: int, fps: float, steps: float, name: str = "") -> Run:
    return Run(name or f"b{batch}", batch, fps, steps, steps * batch * 4 / fps)


def test_the_score_is_steps_times_the_batchs_square_root():
    assert _run(256, 30_000, 500.0).score == pytest.approx(500.0 * 16)
    assert _run(512, 30_000, 300.0).score == pytest.approx(300.0 * math.sqrt(512))


def test_the_best_score_wins_among_runs_fast_enough():
    runs = [_run(512, 29_000, 300.0), _run(256, 28_000, 520.0), _run(128, 9_000, 2_000.0)]
    # 256: 520 x 16 = 8,320 against 512: 300 x 22.6 = 6,788; 128 is too slow to count
    assert pick(runs).batch_size == 256
    assert pick(runs, min_frames_per_s=5_000).batch_size == 128
    assert pick(runs, min_frames_per_s=40_000) is None


def test_a_larger_batch_within_the_tie_wins():
    big, small = _run(512, 30_000, 300.0), _run(256, 30_000, 300.0 * math.sqrt(2) * 1.04)
    assert small.score > big.score  # 4% better: within the 5% tie
    assert pick([small, big]).batch_size == 512
    assert pick([small, big], tie=0.01).batch_size == 256


def test_the_command_reads_throughput_files_and_names_the_pick(tmp_path, capsys):
    def write(name: str, batch: int, fps: float, steps: float) -> Path:
        path = tmp_path / f"{name}.json"
        dqn = {"batch_size": batch, "frames_per_s": fps, "updates_per_s": steps}
        path.write_text(json.dumps({"dqn": {**dqn, "replay_ratio": 20.0}, "ratio": 0.3}))
        return path

    a = write("throughput-cpu-graph-m32", 512, 29_500.0, 290.0)
    b = write("throughput-cpu-graph-b256-m32", 256, 29_000.0, 480.0)
    broken = tmp_path / "throughput-cuda.json"
    broken.write_text(json.dumps({"raw": []}))  # a run that failed before training
    assert read_run(a) == Run("throughput-cpu-graph-m32", 512, 29_500.0, 290.0, 20.0)
    with pytest.raises(ValueError, match="no 'dqn' figures"):
        read_run(broken)
    assert main([str(a), str(b), str(broken)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "pick: --batch-size 256 (throughput-cpu-graph-b256-m32)"
    assert any(line.startswith(f"skipped {broken}") for line in out)
    assert main([str(a), "--min-frames-per-s", "30000"]) == 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("pick: none")
