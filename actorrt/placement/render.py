"""Show a plan: a placement table, a transport matrix, and a drawing of the topology."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from actorrt.errors import PlacementError
from actorrt.placement.node import ProcessInfo
from actorrt.placement.plan import Plan
from actorrt.placement.topology import LINK_KINDS, build_topology, host_key

__all__ = [
    "DRAW_FORMATS",
    "TRANSPORT_COLORS",
    "TRANSPORT_LETTERS",
    "check_draw_path",
    "draw_topology",
    "placement_table",
    "transport_matrix",
]

#: One letter per transport in the matrix.
TRANSPORT_LETTERS = {
    "same_process": "=",
    "nvlink": "N",
    "cuda_ipc": "C",
    "shm": "S",
    "gdr": "G",
    "ibv": "I",
    "tcp": "T",
}
TRANSPORT_COLORS = {
    "same_process": "#000000",
    "nvlink": "#2ca02c",
    "cuda_ipc": "#17becf",
    "shm": "#1f77b4",
    "gdr": "#9467bd",
    "ibv": "#ff7f0e",
    "tcp": "#d62728",
}

#: The formats a drawing may be written in, named by the file's extension.
DRAW_FORMATS = ("png", "svg", "pdf")


def check_draw_path(path: str | os.PathLike[str]) -> Path:
    """Checks that a drawing can be written to ``path``, before any planning or drawing.

    Args:
        path: The output file; its extension picks the format (one of :data:`DRAW_FORMATS`).

    Returns:
        ``path`` as a Path.

    Raises:
        PlacementError: The extension is not a known format, or the folder does not exist
            or cannot be written to (one line that says which).
    """
    out = Path(path)
    kinds = ", ".join(f".{f}" for f in DRAW_FORMATS)
    fmt = out.suffix.lower().lstrip(".")
    if fmt not in DRAW_FORMATS:
        what = f"unknown format {out.suffix!r}" if out.suffix else "no extension"
        raise PlacementError(
            f"cannot draw to {path}: {what}; name the file {kinds} (the extension picks the format)"
        )
    if out.is_dir():
        raise PlacementError(f"cannot draw to {path}: it is a folder; name a file ({kinds})")
    folder = out.parent
    if not folder.is_dir():
        raise PlacementError(f"cannot draw to {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PlacementError(f"cannot draw to {path}: folder {folder} is not writable")
    return out


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def placement_table(plan: Plan) -> str:
    """One line per process: node, labels, GPUs, devices, transports, channels."""
    rows = [["rank", "name", "node", "labels", "gpus", "devices", "transports", "channels"]]
    for p in plan.processes:
        labels = Counter(s.label for s in p.slots)
        rows.append(
            [
                str(p.rank),
                p.name,
                p.node,
                ",".join(f"{lb}x{n}" if n > 1 else lb for lb, n in labels.items()) or "-",
                ",".join(map(str, p.gpus)) or "-",
                ",".join(d.replace("cuda:", "") for d in p.devices) or "-",
                ",".join(p.transports) if p.transports else "default",
                ",".join(p.channels) if p.channels else "default",
            ]
        )
    return _table(rows)


def transport_matrix(plan: Plan, max_processes: int = 40) -> str:
    """The transport between every two processes, one letter each, with a legend.

    Past ``max_processes`` a matrix is unreadable: a count per transport is printed instead.
    """
    counts = Counter(p.transport for p in plan.pairs)
    legend = "  ".join(f"{TRANSPORT_LETTERS[t]}={t}" for t in LINK_KINDS if t in TRANSPORT_LETTERS)
    summary = ", ".join(f"{t}: {counts[t]}" for t in LINK_KINDS if counts.get(t))
    n = len(plan.processes)
    if n > max_processes:
        return f"{n} processes, {len(plan.pairs)} pairs ({summary or 'none'})"
    index = {p.name: i for i, p in enumerate(plan.processes)}
    # "." marks a pair whose labels do not talk (the layout's talks): nothing planned.
    grid = [["=" if i == j else "." for j in range(n)] for i in range(n)]
    if plan.talks is not None:
        legend += "  .=do not talk (no device map)"
    for src, dst, t in plan.pairs:
        letter = TRANSPORT_LETTERS.get(t, "?")
        grid[index[src]][index[dst]] = grid[index[dst]][index[src]] = letter
    rows = [["", *[str(p.rank) for p in plan.processes]]]
    for i, p in enumerate(plan.processes):
        rows.append([f"{p.rank} {p.name}", *grid[i]])
    return f"{_table(rows)}\n\n{legend}\npairs: {summary or 'none'}"


def draw_topology(
    processes: Sequence[ProcessInfo],
    plan: Plan,
    path: str | os.PathLike[str],
    max_pair_edges: int = 400,
) -> Path:
    """Draw hosts, GPUs, HCAs and processes with process links coloured by transport.

    Each host is a column: processes on top, GPUs below, HCAs at the bottom. When there
    are more than ``max_pair_edges`` pairs, only the pairs that touch a process holding
    the first label of the spec (the learner, usually) are drawn.

    Args:
        processes: The cluster.
        plan: Its plan.
        path: Output file; the extension (``.png``, ``.svg``, ``.pdf``) picks the format.
        max_pair_edges: Above this many pairs, draw only the anchor label's pairs.

    Returns:
        The written path.

    Raises:
        PlacementError: ``path`` cannot be written or names an unknown format (see
            :func:`check_draw_path`), or matplotlib is not installed.
    """
    out = check_draw_path(path)
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
    except ImportError as e:
        raise PlacementError(
            "drawing a plan needs matplotlib: pip install matplotlib (or actorrt[plot])"
        ) from e
    import networkx as nx

    g = build_topology(processes, plan)
    host_of_rank = {p.rank: host_key(p.node) for p in processes}
    hosts = [n for n, d in g.nodes(data=True) if d["kind"] == "host"]
    col = {h: i for i, h in enumerate(hosts)}
    pos: dict[object, tuple[float, float]] = {}
    per_host: dict[tuple[object, str], int] = Counter()
    width = 1.0
    for node, data in g.nodes(data=True):
        kind = data["kind"]
        if kind == "host":
            pos[node] = (col[node] * 3.0, 0.0)
            continue
        hk = ("host", node[1]) if kind in ("gpu", "hca") else None
        if kind == "process":
            hk = ("host", host_of_rank[node[1]])
        k = per_host[(hk, kind)]
        per_host[(hk, kind)] += 1
        y = {"process": 2.0, "gpu": -1.5, "hca": -3.0}[kind] + (k // 4) * (
            0.6 if kind == "process" else -0.5
        )
        pos[node] = (col[hk] * 3.0 + (k % 4) * 0.7 - width, y)

    pairs = list(plan.pairs)
    if len(pairs) > max_pair_edges and plan.specs:
        anchor = {p.name for p, _ in plan.holders(plan.specs[0].label)}
        pairs = [p for p in pairs if p.src in anchor or p.dst in anchor]
    rank_of = {p.name: p.rank for p in plan.processes}

    fig = Figure(figsize=(max(8.0, 3.2 * len(hosts)), 7.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_axis_off()
    structural = [(u, v) for u, v, d in g.edges(data=True) if d.get("kind") != "transport"]
    nx.draw_networkx_edges(g, pos, edgelist=structural, ax=ax, edge_color="#bbbbbb", width=0.8)
    nvl = [(u, v) for u, v, d in g.edges(data=True) if d["link"] == "nvlink"]
    nx.draw_networkx_edges(
        g, pos, edgelist=nvl, ax=ax, edge_color=TRANSPORT_COLORS["nvlink"], width=1.5
    )
    for transport, color in TRANSPORT_COLORS.items():
        edges = [
            (("process", rank_of[p.src]), ("process", rank_of[p.dst]))
            for p in pairs
            if p.transport == transport
        ]
        if edges:
            nx.draw_networkx_edges(
                g,
                pos,
                edgelist=edges,
                ax=ax,
                edge_color=color,
                width=1.2,
                alpha=0.7,
                connectionstyle="arc3,rad=0.2",
                arrows=True,
                arrowstyle="-",
            )
    styles = {
        "host": ("s", "#dddddd", 900),
        "gpu": ("o", "#a6d96a", 250),
        "hca": ("D", "#fdae61", 200),
        "process": ("o", "#9ecae1", 350),
    }
    for kind, (shape, color, size) in styles.items():
        nodes = [n for n, d in g.nodes(data=True) if d["kind"] == kind]
        colors = [
            "#cccccc"
            if kind == "hca" and not g.nodes[n]["active"]
            else ("#6baed6" if kind == "process" and g.nodes[n].get("labels") else color)
            for n in nodes
        ]
        nx.draw_networkx_nodes(
            g, pos, nodelist=nodes, ax=ax, node_shape=shape, node_color=colors, node_size=size
        )
    labels = {}
    for n, d in g.nodes(data=True):
        if d["kind"] == "process":
            labels[n] = d["label"] + ("\n" + ",".join(d["labels"]) if d.get("labels") else "")
        elif d["kind"] in ("host", "hca"):
            labels[n] = d["label"]
    nx.draw_networkx_labels(g, pos, labels=labels, ax=ax, font_size=6)
    handles = [
        Line2D([0], [0], color=c, lw=2, label=t)
        for t, c in TRANSPORT_COLORS.items()
        if t != "same_process"
    ]
    ax.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False
    )
    ax.set_title(
        f"actorrt plan: {len(plan.processes)} processes, "
        f"transport={plan.transport}, strategy={plan.strategy}"
    )
    try:
        fig.savefig(out, dpi=120, bbox_inches="tight")
    except OSError as e:  # checked above, but the disk may be full or the file read-only
        raise PlacementError(f"cannot draw to {path}: {e.strerror or e}") from e
    return out
