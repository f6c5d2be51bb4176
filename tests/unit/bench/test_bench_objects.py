"""The objects suite's table: every row, its ratios, and a run from before a row existed."""

from __future__ import annotations

from benchmarks import objects


def _figures(s: float, small: bool = True) -> dict:
    out = {
        "pass": {str(n): {"ref": 0.01 * s, "direct": 0.005 * s} for n in objects.PASS_SIZES},
        "fanout": {str(k): 0.02 * s for k in objects.FANOUT_NS},
        "broadcast": 0.08 * s,
    }
    if small:
        out["chain"], out["nested"] = 0.0004 * s, 0.0012 * s
        out["plain"], out["unread"], out["kept"] = 0.0002 * s, 0.0003 * s, 0.0005 * s
    return {"objects": out}


def test_the_table_has_a_row_per_figure_with_its_ratio_to_ray():
    doc = {"results": {"actorrt": _figures(1), "ray": _figures(4)}}
    lines = objects.table(doc).splitlines()
    chain = next(line for line in lines if line.startswith("small result A->B"))
    assert chain.split()[-3:] == ["0.000400", "0.001600", "0.25x"], chain
    nested = next(line for line in lines if line.startswith("1 MB ref in a list"))
    assert nested.split()[-3:] == ["0.001200", "0.004800", "0.25x"], nested
    kept = next(line for line in lines if line.startswith("ref in a list, kept by B"))
    assert kept.split()[-3:] == ["0.000500", "0.002000", "0.25x"], kept
    unread = next(line for line in lines if line.startswith("ref in a list, not read"))
    assert unread.split()[-3:] == ["0.000300", "0.001200", "0.25x"], unread
    first = next(line for line in lines if line.startswith("pass A->B 1 MB"))
    assert first.split()[-4:] == ["0.0100", "0.0400", "0.25x", "2.00x"], first


def test_a_run_from_before_the_small_rows_shows_dashes_there():
    doc = {"results": {"actorrt": _figures(1, small=False), "ray": _figures(4)}}
    chain = next(line for line in objects.table(doc).splitlines() if line.startswith("small"))
    assert chain.split()[-3:] == ["-", "0.001600", "-"], chain
