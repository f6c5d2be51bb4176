"""The latency-by-size suite: DI-engine's ladder, the memory guard, the sweep and its report."""

from __future__ import annotations

import importlib.util

import pytest

from benchmarks import latency_by_size as lbs
from benchmarks import latency_report
from benchmarks.common import SEED_SIZES

MB = 2**20


def test_the_ladder_is_the_seeds_header():
    # The column heads of DI-engine's table (seed 002), 1.25 KB to 2.5 GB.
    assert [latency_report.size_label(s) for s in SEED_SIZES] == [
        "1.25 KB",
        "20 KB",
        "1.25 MB",
        "10 MB",
        "40 MB",
        "640 MB",
        "1.25 GB",
        "2.5 GB",
    ]
    assert lbs.ladder(40 * MB) == SEED_SIZES[:5]
    assert lbs.ladder(SEED_SIZES[-1]) == SEED_SIZES


def test_a_ladder_below_the_smallest_size_is_refused_by_name():
    with pytest.raises(ValueError, match="latency_max_bytes=1000 is below the smallest size"):
        lbs.ladder(1000)


def test_sizes_whose_peak_does_not_fit_are_set_aside():
    sizes = SEED_SIZES[:6]  # up to 640 MB
    keep, skipped = lbs.fitting(sizes, available=40 * MB * lbs.PEAK_COPIES)
    assert keep == SEED_SIZES[:5] and skipped == [SEED_SIZES[5]]
    assert lbs.fitting(sizes, available=1) == ([], sizes)


def test_sweep_times_every_size_in_every_round_and_checks_the_reply():
    seen = []

    def call(t):
        seen.append(t.nbytes)
        return t.nbytes

    cfg = {"latency_rounds": 3, "latency_time": 0.0, "latency_min_reps": 2}
    out = lbs.sweep(call, SEED_SIZES[:2], cfg)
    assert sorted(out) == sorted(str(s) for s in SEED_SIZES[:2])
    # per round and size: one checked call, then min_reps timed ones
    assert all(out[str(s)]["n"] == 6 for s in SEED_SIZES[:2])
    assert seen[:6] == [SEED_SIZES[0]] * 3 + [SEED_SIZES[1]] * 3  # sizes take turns
    assert out[str(SEED_SIZES[0])]["p10_us"] <= out[str(SEED_SIZES[0])]["p90_us"]


def test_sweep_refuses_a_peer_that_acknowledges_the_wrong_size():
    cfg = {"latency_rounds": 1, "latency_time": 0.0, "latency_min_reps": 1}
    with pytest.raises(RuntimeError, match="acknowledged 8 bytes of a 1280-byte payload"):
        lbs.sweep(lambda t: 8, [1280], cfg)


def _stats(median_ms, lo_ms, hi_ms):
    return {"median_us": median_ms * 1e3, "p10_us": lo_ms * 1e3, "p90_us": hi_ms * 1e3}


def _doc():
    k, m = str(SEED_SIZES[0]), str(SEED_SIZES[2])
    return {
        "machine": {"cores": 2},
        "results": {
            "actorrt": {"latency_by_size": {k: _stats(1.0, 0.8, 1.5), m: _stats(3.0, 2, 4)}},
            "torch": {"latency_by_size": {k: _stats(0.5, 0.4, 0.6), m: _stats(2.0, 1, 3)}},
            "pynng": {
                "latency_by_size": {k: _stats(0.25, 0.2, 0.3)},
                "latency_skipped": [SEED_SIZES[6]],
            },
        },
    }


def test_rows_give_median_and_spread_per_system_and_actorrts_ratios():
    rows = latency_report.rows(_doc())
    assert [r[0] for r in rows] == ["1.25 KB", "1.25 MB"]
    small, big = rows
    assert small[1:5] == ["1 [0.8-1.5]", "0.5 [0.4-0.6]", "-", "0.25 [0.2-0.3]"]
    assert small[5:] == ["2.00x", "-", "4.00x"]  # actorrt/torch, /ray (not run), /pynng
    assert big[4] == "-" and big[5] == "1.50x"


def test_the_table_names_sizes_left_out_for_memory():
    text = latency_report.table(_doc())
    assert "pynng TCP: not run for lack of memory: 1.25 GB" in text
    assert text.splitlines()[0].split(" | ")[:2] == ["size   ", "actorrt TCP (ms)"]


def test_plot_series_are_in_ms_sorted_by_size_per_system():
    data = latency_report.series(_doc())
    assert list(data) == ["actorrt TCP", "torch rpc TCP", "pynng TCP"]
    assert data["actorrt TCP"]["size"] == [float(SEED_SIZES[0]), float(SEED_SIZES[2])]
    assert data["actorrt TCP"]["median_ms"] == [1.0, 3.0]
    assert data["torch rpc TCP"]["p90_ms"] == [0.6, 3.0]


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs matplotlib")
def test_the_plot_is_written(tmp_path):
    path = latency_report.plot(_doc(), str(tmp_path / "lat.png"))
    assert path and (tmp_path / "lat.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = {"machine": {"cores": 2}, "results": {}}
    assert latency_report.plot(empty, str(tmp_path / "x")) is None
