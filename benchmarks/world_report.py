"""The world-size suite's table (``benchmarks/world_size.py``)."""

from __future__ import annotations

import re

from benchmarks.report import format_table

SYSTEMS = ("actorrt", "torch", "ray")
HEADER = [
    "world",
    "system",
    "answered",
    "start-up (s)",
    "actorrt/this",
    "driver RSS (MB)",
    "member RSS (MB)",
    "member PSS (MB)",
    "all PSS (MB)",
    "notes",
]


_LIST = re.compile(r"\[([^\[\]]*)\]")
NOTE_CHARS = 200


def compact(message: str, limit: int = NOTE_CHARS) -> str:
    """``message`` for a table cell: lists of more than 3 items counted, then cut to ``limit``.

    torch names every follower that timed out (``Followers ['worker37', ...]``): 127
    names at 128 processes.
    """

    def count(m: re.Match[str]) -> str:
        items = [i for i in m.group(1).split(",") if i.strip()]
        return f"[{len(items)} names]" if len(items) > 3 else m.group(0)

    text = _LIST.sub(count, message)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _rows_of(doc: dict, system: str) -> dict[int, dict]:
    data = doc["results"].get(system, {}).get("world_size") or {}
    return {int(k): v for k, v in data.items()}


def _num(row: dict, key: str, digits: int = 0) -> str:
    v = row.get(key)
    return "-" if v is None else f"{v:,.{digits}f}"


def row_cells(row: dict, system: str, mine: dict | None) -> list[str]:
    """The table cells of one (world, system) row; ``mine`` is actorrt's row of that world."""
    world = str(row["world"])
    if "skipped" in row or "failed" in row:
        what = row.get("skipped") or f"failed: {compact(row['failed'])}"
        took = _num(row, "seconds", 1) if "failed" in row else "-"
        return [world, system, "-", took, "-", "-", "-", "-", "-", what]
    answered = f"{row['answered']}/{row['members']}"
    note = ""
    if "budget_s" in row:
        note = f"{row['answered']} of {row['members']} answered within {row['budget_s']:.0f} s"
    # A ratio needs both worlds formed in full; Ray stopped by the budget did not.
    ok = mine is not None and "answered" in mine and "budget_s" not in row
    ratio = f"{mine['seconds'] / row['seconds']:.2f}x" if ok and system != "actorrt" else "-"
    if row["answered"] < row["members"] and not note:
        note = "some members share a process"
    return [
        world,
        system,
        answered,
        _num(row, "seconds", 1),
        ratio,
        _num(row, "driver_rss_mb"),
        _num(row, "member_rss_mb"),
        _num(row, "member_pss_mb"),
        _num(row, "tree_pss_mb"),
        note,
    ]


def rows(doc: dict) -> list[list[str]]:
    """One row per world size and system, smallest world first."""
    data = {s: _rows_of(doc, s) for s in SYSTEMS}
    worlds = sorted({w for d in data.values() for w in d})
    out = []
    for world in worlds:
        mine = data["actorrt"].get(world)
        for system in SYSTEMS:
            row = data[system].get(world)
            if row is not None:
                out.append(row_cells(row, system, mine))
    return out


def table(doc: dict) -> str:
    return format_table(HEADER, rows(doc))
