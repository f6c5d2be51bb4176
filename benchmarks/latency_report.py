"""The latency-by-size suite's table and plot (``benchmarks/latency_by_size.py``)."""

from __future__ import annotations

from benchmarks.report import format_table

# (system key in the results, label in the table and the plot)
SYSTEMS = (
    ("actorrt", "actorrt TCP"),
    ("torch", "torch rpc TCP"),
    ("ray", "ray"),
    ("pynng", "pynng TCP"),
)

# DI-engine's own figures for its TCP rows (ms, mean of its repeats), from its
# "Inter-node GPU-P2P performance" table (seed 002, "Notes on using torchrpc"): A100
# nodes with 200G HCAs, GPU tensors, so each includes a device-to-host and a
# host-to-device copy. Drawn dashed beside ours for scale, never compared as ratios.
DI_ENGINE_TCP_MS = {
    "DI-engine nng-TCP (their cluster)": {
        20480: 5.7353,
        1310720: 9.6782,
        10485760: 30.5187,
        41943040: 172.9719,
        671088640: 3450.7418,
        1342177280: 7083.6372,
        2684354560: 14072.1213,
    },
    "DI-engine torchrpc-TCP (their cluster)": {
        20480: 5.6691,
        1310720: 5.4707,
        10485760: 14.0155,
        41943040: 39.4443,
        671088640: 580.333,
        1342177280: 1154.0793,
        2684354560: 2297.3776,
    },
}


def size_label(n: int) -> str:
    """DI-engine's way of naming a size: ``1.25 KB``, ``640 MB``, ``2.5 GB``."""
    for unit, k in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= k:
            return f"{round(n / k, 2):g} {unit}"
    return f"{n} B"


def _by_size(doc: dict, system: str) -> dict[int, dict]:
    data = doc["results"].get(system, {}).get("latency_by_size") or {}
    return {int(k): v for k, v in data.items()}


def series(doc: dict) -> dict[str, dict[str, list[float]]]:
    """Per system label: sizes (bytes) and median / p10 / p90 round trips (ms), by size."""
    out = {}
    for system, label in SYSTEMS:
        data = _by_size(doc, system)
        if not data:
            continue
        sizes = sorted(data)
        out[label] = {
            "size": [float(s) for s in sizes],
            "median_ms": [data[s]["median_us"] / 1e3 for s in sizes],
            "p10_ms": [data[s]["p10_us"] / 1e3 for s in sizes],
            "p90_ms": [data[s]["p90_us"] / 1e3 for s in sizes],
        }
    return out


def _cell(stats: dict | None) -> str:
    if not stats:
        return "-"
    med, lo, hi = (stats[k] / 1e3 for k in ("median_us", "p10_us", "p90_us"))
    return f"{_ms(med)} [{_ms(lo)}-{_ms(hi)}]"


def _ms(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def _ratio(a: dict | None, b: dict | None) -> str:
    if not a or not b or not b["median_us"]:
        return "-"
    return f"{a['median_us'] / b['median_us']:.2f}x"


def rows(doc: dict) -> list[list[str]]:
    """One row per size: each system's median [p10-p90] in ms, and actorrt's ratios."""
    data = {system: _by_size(doc, system) for system, _ in SYSTEMS}
    sizes = sorted({s for d in data.values() for s in d})
    out = []
    for size in sizes:
        cells = {system: data[system].get(size) for system, _ in SYSTEMS}
        mine = cells["actorrt"]
        out.append(
            [size_label(size)]
            + [_cell(cells[system]) for system, _ in SYSTEMS]
            + [_ratio(mine, cells[other]) for other in ("torch", "ray", "pynng")]
        )
    return out


def table(doc: dict) -> str:
    """The printed table; a note names the sizes left out for memory."""
    header = ["size", *(f"{label} (ms)" for _, label in SYSTEMS)]
    header += ["actorrt/torch", "actorrt/ray", "actorrt/pynng"]
    text = format_table(header, rows(doc))
    for system, label in SYSTEMS:
        skipped = doc["results"].get(system, {}).get("latency_skipped")
        if skipped:
            names = ", ".join(size_label(s) for s in skipped)
            text += f"\n{label}: not run for lack of memory: {names}"
    return text


def plot(doc: dict, path: str) -> str | None:
    """Log-log round trip against size, one line per system (p10-p90 shaded)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    data = series(doc)
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for label, s in data.items():
        (line,) = ax.plot(s["size"], s["median_ms"], marker="o", label=label)
        ax.fill_between(s["size"], s["p10_ms"], s["p90_ms"], color=line.get_color(), alpha=0.15)
    top = max(max(s["size"]) for s in data.values())
    for (label, figures), style in zip(DI_ENGINE_TCP_MS.items(), ("--", ":"), strict=True):
        xs = [x for x in sorted(figures) if x <= top]
        ax.plot(xs, [figures[x] for x in xs], ls=style, lw=1.2, color="grey", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("payload (bytes, float32 tensor)")
    ax.set_ylabel("round trip, median (ms)")
    ax.set_title(f"latency by message size, one host ({doc['machine']['cores']} cores)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
