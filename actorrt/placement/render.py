"""Show a plan: a placement table, a transport matrix, the reasons, and a picture.

Everything but :func:`draw_topology` is pure and imports nothing heavy: the picture is
laid out as plain data first (:func:`layout_scene`), so what it shows and its legend
(:func:`legend_entries`) are tested without pixels, and only drawing needs matplotlib.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from actorrt.errors import PlacementError
from actorrt.placement.node import GpuInfo, ProcessInfo, normalize_bus_id
from actorrt.placement.plan import Pair, Plan, ProcessPlan
from actorrt.placement.topology import LINK_KINDS, container_key, gpu_key, host_key, nvlinked

if TYPE_CHECKING:
    from matplotlib.typing import LineStyleType

__all__ = [
    "DRAW_FORMATS",
    "TRANSPORT_COLORS",
    "TRANSPORT_LETTERS",
    "TRANSPORT_MEANING",
    "Box",
    "LegendEntry",
    "Link",
    "Mark",
    "Scene",
    "check_draw_path",
    "draw_topology",
    "explain_dict",
    "explain_text",
    "layout_scene",
    "legend_entries",
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


# -- plan --explain ------------------------------------------------------------------


def _names(names: Sequence[str], limit: int) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def _pair_map(by_name: dict[str, ProcessPlan], pair: Pair) -> dict[str, str]:
    m = by_name[pair.src].device_maps.get(pair.dst)
    if m:
        return m
    back = by_name[pair.dst].device_maps.get(pair.src)
    return {v: k for k, v in back.items()} if back else {}


def _process_reasons(p: ProcessPlan) -> tuple[str, ...]:
    w = p.why
    if w is None:
        return ("reasons not recorded (a plan read back from JSON carries none)",)
    out = [f"transports {w.transports}", f"channels {w.channels}"]
    if w.env:
        out.append(f"env {w.env}")
    if w.guard:
        out.append(w.guard)
    return tuple(out)


def explain_text(plan: Plan, examples: int = 6) -> str:
    """Why each process got its transports, channels and env, and each pair its transport.

    Processes with the same reasons are listed together, and so are pairs (a reason names
    hosts, never processes), each group with up to ``examples`` members named, so the
    text stays short on large clusters.

    Args:
        plan: A plan made by ``make_plan`` (one read back from JSON has no reasons).
        examples: How many processes / pairs to name per group.

    Returns:
        The text, without a trailing newline.
    """
    lines = ["Why each process got its transports, channels and env:"]
    groups: dict[tuple[str, ...], list[str]] = {}
    for p in plan.processes:
        groups.setdefault(_process_reasons(p), []).append(p.name)
    for reasons, names in groups.items():
        lines.append(f"  {_names(names, examples)}:")
        lines.extend(f"    {r}" for r in reasons)
    lines += ["", "Why each pair got its transport and channels:"]
    by_name = {p.name: p for p in plan.processes}
    pair_groups: dict[tuple[str, str], list[str]] = {}
    for pair, why in plan.explain_pairs():
        m = _pair_map(by_name, pair)
        shown = f"{pair.src}<->{pair.dst}"
        if m:
            shown += " [" + ",".join(f"{a}->{b}" for a, b in m.items()) + "]"
        pair_groups.setdefault((pair.transport, why), []).append(shown)
    order = {t: i for i, t in enumerate(LINK_KINDS)}
    ranked = sorted(pair_groups.items(), key=lambda kv: (order.get(kv[0][0], 99), -len(kv[1])))
    for (transport, why), items in ranked:
        lines.append(f"  {transport}, {len(items)} pair{'s' if len(items) != 1 else ''}: {why}")
        lines.append(f"    {_names(items, examples)}")
    if not plan.pairs:
        lines.append("  no pairs")
    if plan.talks is not None:
        talks = ", ".join(f"{a}-{b}" for a, b in plan.talks)
        lines.append(
            f"  pairs whose labels do not talk (talks: {talks}) are not planned: no device "
            "map, so CUDA tensors between them are staged through host memory"
        )
    return "\n".join(lines)


def explain_dict(plan: Plan) -> dict[str, Any]:
    """The reasons of :func:`explain_text` as JSON-safe data, one entry per process and pair."""
    procs = []
    for p in plan.processes:
        w = p.why
        procs.append(
            {
                "name": p.name,
                "transports": w.transports if w else None,
                "channels": w.channels if w else None,
                "env": w.env if w else None,
                "guard_tiny_cuda": w.guard if w else None,
            }
        )
    pairs = [
        {"src": pair.src, "dst": pair.dst, "transport": pair.transport, "why": why}
        for pair, why in plan.explain_pairs()
    ]
    return {"processes": procs, "pairs": pairs}


# -- the picture -----------------------------------------------------------------------
#
# Built in two steps: layout_scene() computes every box, marker and line as plain data
# (testable without pixels: the legend is derived from what the scene holds, so it lists
# only what is drawn), then draw_topology() hands the scene to matplotlib.

_CELL = 1.6  # horizontal room per marker: a label of up to 15 characters at 6.5 pt
_ROW = 1.25  # vertical room per row of markers, with a two-line label under each
_COLS = 8  # markers per row before wrapping, so a 16-process host stays two rows high
_PAD = 0.35  # inner padding of boxes
_TITLE = 0.75  # room for a box's title line
_NOTE = 0.42  # room per summary line at the bottom of a box
_SLACK = 0.15  # the last row of a box needs less room than _ROW (no next row under it)
_GAP = 1.2  # between host boxes: room for the lines joining them and their labels
_ARC_MAX = 8  # processes in a box that fit one row get an arc per pair; more are counted
_HOST_LINKS_MAX = 16  # more lines between hosts than this would cross every box: counted
_INCH = 0.55  # inches per layout unit: fonts and markers are in points, so the figure
#               grows with the cluster instead of everything shrinking into a blur
_LABEL_COLORS = (
    "#4292c6",
    "#ef6548",
    "#807dba",
    "#e7ba52",
    "#17becf",
    "#e377c2",
    "#8c564b",
    "#bcbd22",
    "#393b79",
    "#7f7f7f",
)
_MARK_STYLE = {  # legend key -> (marker, face colour, edge colour)
    "process:free": ("o", "#ffffff", "#636363"),
    "process:driver": ("^", "#bdbdbd", "#636363"),
    "gpu:used": ("s", "#74c476", "#238b45"),
    "gpu:idle": ("s", "#edf8e9", "#74c476"),
    "hca:gdr": ("D", "#fd8d3c", "#a63603"),
    "hca:active": ("D", "#fdd0a2", "#a63603"),
    "hca:down": ("D", "#d9d9d9", "#de2d26"),
}
_MARK_TEXT = {
    "process:free": "process without a slot (may host any actor)",
    "process:driver": "driver (hosts no actors)",
    "gpu:used": "GPU given to a slot",
    "gpu:idle": "GPU not given to a slot",
    "hca:gdr": "InfiniBand adapter: port ACTIVE, GPUDirect RDMA",
    "hca:active": "InfiniBand adapter: port ACTIVE, no GPUDirect",
    "hca:down": "InfiniBand adapter: port not ACTIVE (unused)",
}
#: What each pair transport means, for the legend.
TRANSPORT_MEANING = {
    "same_process": "same process",
    "nvlink": "CUDA IPC over NVLink",
    "cuda_ipc": "CUDA IPC over PCIe",
    "shm": "shared memory",
    "gdr": "InfiniBand with GPUDirect RDMA",
    "ibv": "InfiniBand verbs",
    "tcp": "TCP",
}


class LegendEntry(NamedTuple):
    """One legend line: what a shape or colour in the picture means.

    Attributes:
        key: Stable id (``box:host``, ``process:label:learner``, ``gpu:used``,
            ``hca:down``, ``link:nvlink``, ``transport:gdr``, ...).
        kind: ``box``, ``marker`` or ``line``.
        label: The text shown.
        color: Face colour of a marker, edge colour of a box, colour of a line.
        style: Marker symbol for markers, line style for boxes and lines.
    """

    key: str
    kind: str
    label: str
    color: str
    style: str


@dataclass(frozen=True)
class Box:
    """A host (solid) or container (dashed) box, in layout units (y grows downwards)."""

    kind: str
    x0: float
    y0: float
    x1: float
    y1: float
    title: str

    @property
    def center(self) -> tuple[float, float]:
        """The middle of the box."""
        return ((self.x0 + self.x1) / 2, (self.y0 + self.y1) / 2)

    def contains(self, x: float, y: float) -> bool:
        """Whether a point lies inside the box."""
        return self.x0 <= x <= self.x1 and self.y0 <= y <= self.y1


@dataclass(frozen=True)
class Mark:
    """A process, GPU or HCA marker with its label; ``key`` is its legend entry."""

    kind: str
    x: float
    y: float
    text: str
    key: str
    group: str = ""


@dataclass(frozen=True)
class Link:
    """A line (a quadratic curve when ``bend`` is not 0) between two points.

    Attributes:
        a: One end.
        b: The other end.
        key: Its legend entry.
        bend: How far the curve bows out, as a fraction of the distance between the ends.
        count: How many pairs it stands for.
        text: Its label (``"gdr x48"``), shown at ``text_at``.
        text_at: Where the label goes.
        level: 0 between hosts (drawn under the host boxes, seen between them), 1 between
            containers of a host (under container boxes), 2 inside a box (over it).
    """

    a: tuple[float, float]
    b: tuple[float, float]
    key: str
    bend: float = 0.0
    count: int = 1
    text: str = ""
    text_at: tuple[float, float] | None = None
    level: int = 2


@dataclass
class Scene:
    """Everything the picture shows, in layout units; :meth:`legend` lists what it uses."""

    boxes: list[Box] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    notes: list[tuple[float, float, str, str]] = field(default_factory=list)  # x, y, text, key
    label_colors: dict[str, str] = field(default_factory=dict)
    width: float = 0.0
    height: float = 0.0
    top: float = 0.0  # the highest point drawn: arcs over a row of hosts rise above 0
    title: str = ""

    def used_keys(self) -> set[str]:
        """The legend keys of everything in the scene."""
        used = {f"box:{b.kind}" for b in self.boxes}
        used |= {m.key for m in self.marks}
        used |= {ln.key for ln in self.links}
        used |= {key for *_, key in self.notes}
        return used

    def color(self, key: str) -> str:
        """The colour of a legend key."""
        if key.startswith("process:label:"):
            return self.label_colors[key.split(":", 2)[2]]
        if key.startswith("transport:"):
            return TRANSPORT_COLORS.get(key.split(":", 1)[1], "#000000")
        if key in _MARK_STYLE:
            return _MARK_STYLE[key][1]
        return {"link:nvlink": TRANSPORT_COLORS["nvlink"], "link:uses": "#969696"}.get(
            key, "#525252"
        )

    def legend(self) -> list[LegendEntry]:
        """One entry per kind of box, marker and line that the scene holds, nothing else."""
        used = self.used_keys()
        out = []
        if "box:host" in used:
            out.append(LegendEntry("box:host", "box", "host (one boot id)", "#525252", "-"))
        if "box:container" in used:
            out.append(
                LegendEntry(
                    "box:container",
                    "box",
                    "container (own namespaces: no cuda_ipc across its border)",
                    "#737373",
                    "--",
                )
            )
        for label, color in self.label_colors.items():
            key = f"process:label:{label}"
            if key in used:
                out.append(LegendEntry(key, "marker", f"process with '{label}' slots", color, "o"))
        for key, text in _MARK_TEXT.items():
            if key in used:
                out.append(LegendEntry(key, "marker", text, self.color(key), _MARK_STYLE[key][0]))
        if "link:uses" in used:
            out.append(LegendEntry("link:uses", "line", "process uses GPU", "#969696", "-"))
        if "link:nvlink" in used:
            out.append(
                LegendEntry(
                    "link:nvlink", "line", "NVLink between GPUs", TRANSPORT_COLORS["nvlink"], ":"
                )
            )
        for t in LINK_KINDS:
            key = f"transport:{t}"
            if key in used:
                out.append(
                    LegendEntry(
                        key,
                        "line",
                        f"pairs over {t}: {TRANSPORT_MEANING.get(t, t)} (xN: N pairs)",
                        self.color(key),
                        "-",
                    )
                )
        return out


def legend_entries(
    processes: Sequence[ProcessInfo], plan: Plan, max_pair_edges: int = 400
) -> list[LegendEntry]:
    """The legend of the plan's picture: only what it shows, each with what it means.

    Args:
        processes: The cluster.
        plan: Its plan.
        max_pair_edges: As for :func:`draw_topology`.

    Returns:
        The entries, in legend order (boxes, processes, GPUs, adapters, links, transports).
    """
    return layout_scene(processes, plan, max_pair_edges).legend()


def _short(text: str, limit: int = 15) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _drawn_pairs(plan: Plan, max_pair_edges: int) -> tuple[list[Pair], str]:
    pairs = list(plan.pairs)
    if len(pairs) > max_pair_edges and plan.specs:
        label = plan.specs[0].label
        anchor = {p.name for p, _ in plan.holders(label)}
        kept = [p for p in pairs if p.src in anchor or p.dst in anchor]
        return kept, f"only the pairs of '{label}' drawn ({len(kept)} of {len(pairs)})"
    return pairs, ""


def _grid(n: int, x0: float, y0: float) -> list[tuple[float, float]]:
    # Marker centres of n cells, _COLS per row; the label goes under each marker.
    return [
        (x0 + (k % _COLS) * _CELL + _CELL / 2, y0 + (k // _COLS) * _ROW + 0.3) for k in range(n)
    ]


def _rows(n: int) -> int:
    return -(-n // _COLS) if n else 0


def _cols(*counts: int) -> int:
    return max(1, min(_COLS, max(counts, default=1)))


def layout_scene(processes: Sequence[ProcessInfo], plan: Plan, max_pair_edges: int = 400) -> Scene:
    """Lay out the picture of a plan: hosts, containers, processes, GPUs, HCAs, links.

    Hosts are solid boxes, in rows; a host running several containers holds a dashed box
    per container, with the GPUs only that container's processes see. Inside a box,
    processes sit in rows of eight, then GPUs (labelled ``GPU<k>`` in bus order, with
    their name), then InfiniBand adapters. Pairs inside a box of at most 8 processes (one
    row) are arcs between processes; pairs inside a larger box are counted on its bottom lines;
    pairs between containers of a host, and between hosts, are one line per transport
    and pair of boxes, labelled with their count (over the top of the boxes in between).
    Past 16 lines between hosts, each host counts its pairs to other hosts instead.

    Args:
        processes: The cluster.
        plan: Its plan.
        max_pair_edges: Above this many pairs, only the pairs of the first label's
            processes are shown.

    Returns:
        The scene, in layout units (y grows downwards).
    """
    procs = sorted(processes, key=lambda p: p.rank)
    by_name = {p.name: p for p in plan.processes}
    scene = Scene()
    labels = [s.label for s in plan.specs]
    for pp in plan.processes:
        labels += [lb for lb in pp.labels if lb not in labels]
    for i, label in enumerate(dict.fromkeys(labels)):
        scene.label_colors[label] = _LABEL_COLORS[i % len(_LABEL_COLORS)]

    pairs, note = _drawn_pairs(plan, max_pair_edges)
    host_of = {p.name: host_key(p.node) for p in procs}
    group_of = {p.name: repr(container_key(p.node)) for p in procs}
    group_size = Counter(group_of.values())
    inside: dict[str, Counter[str]] = {}
    across: Counter[tuple[str, str, str]] = Counter()  # (box a, box b, transport)
    arcs: list[Pair] = []
    for pair in pairs:
        ga, gb = group_of[pair.src], group_of[pair.dst]
        if ga == gb:
            if group_size[ga] <= _ARC_MAX:
                arcs.append(pair)
            else:
                inside.setdefault(ga, Counter())[pair.transport] += 1
            continue
        ha, hb = host_of[pair.src], host_of[pair.dst]
        # Between hosts a line joins the host boxes; between containers of one host,
        # the container boxes.
        a, b = (f"host:{ha}", f"host:{hb}") if ha != hb else (f"group:{ga}", f"group:{gb}")
        lo, hi = sorted((a, b))
        across[(lo, hi, pair.transport)] += 1

    notes_of: dict[str, list[tuple[str, str]]] = {
        group: [(f"pairs inside: {t} x{n}", f"transport:{t}") for t, n in sorted(c.items())]
        for group, c in inside.items()
    }
    host_links = [k for k in across if k[0].startswith("host:")]
    if len(host_links) > _HOST_LINKS_MAX:
        outside: dict[str, Counter[str]] = {}
        for a, b, t in host_links:
            n = across.pop((a, b, t))
            for end in (a, b):
                outside.setdefault(end, Counter())[t] += n
        for end, c in outside.items():
            notes_of[end] = [
                (f"pairs to other hosts: {t} x{n}", f"transport:{t}") for t, n in sorted(c.items())
            ]

    hosts: dict[str, list[ProcessInfo]] = {}
    for p in procs:
        hosts.setdefault(host_key(p.node), []).append(p)
    per_row = len(hosts) if len(hosts) <= 3 else math.ceil(math.sqrt(len(hosts)))
    placed = _Placed()
    x, y, row_height = 0.0, 0.0, 0.0
    for h, (hk, members) in enumerate(hosts.items()):
        if h and h % per_row == 0:
            x, y, row_height = 0.0, y + row_height + _GAP, 0.0
        box = _layout_host(scene, hk, members, by_name, notes_of, x, y, placed)
        placed.boxes[f"host:{hk}"] = box
        x = box.x1 + _GAP
        row_height = max(row_height, box.y1 - box.y0)
        scene.width = max(scene.width, box.x1)
    scene.height = y + row_height

    for p in procs:
        for g in by_name[p.name].gpus:
            info = next((gi for gi in p.node.gpus if gi.index == g), None)
            if info is not None:
                (px, py), (gx, gy) = placed.procs[p.name], placed.gpus[gpu_key(p.node, info)]
                # From under the process's label to the top of the GPU's marker.
                scene.links.append(Link((px, py + 0.72), (gx, gy - 0.2), "link:uses", level=2))
    for pair in arcs:
        scene.links.append(
            Link(
                placed.procs[pair.src],
                placed.procs[pair.dst],
                f"transport:{pair.transport}",
                bend=0.2,
                level=2,
            )
        )
    between = Counter((a, b) for a, b, _ in across)
    nth: Counter[tuple[str, str]] = Counter()
    for (a, b, t), n in sorted(across.items()):
        k = nth[(a, b)]
        nth[(a, b)] += 1
        level = 0 if a.startswith("host:") else 1
        same_level = [
            box
            for name, box in placed.boxes.items()
            if name.startswith("host:" if level == 0 else "group:")
        ]
        scene.links.append(
            _route(
                placed.boxes[a],
                placed.boxes[b],
                same_level,
                offset=(k - (between[(a, b)] - 1) / 2) * 0.45,
                key=f"transport:{t}",
                count=n,
                level=level,
            )
        )
    scene.top = min([0.0, *(ln.text_at[1] - 0.2 for ln in scene.links if ln.text_at)])
    hosts_n = len(hosts)
    scene.title = (
        f"actorrt plan: {len(plan.processes)} processes on {hosts_n} host"
        f"{'s' if hosts_n != 1 else ''}, transport={plan.transport}, strategy={plan.strategy}"
        + (f"; {note}" if note else "")
    )
    return scene


@dataclass
class _Placed:
    """Where layout_scene put things: process and GPU markers, host and container boxes."""

    procs: dict[str, tuple[float, float]] = field(default_factory=dict)
    gpus: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    boxes: dict[str, Box] = field(default_factory=dict)  # "host:<key>" / "group:<key>"


def _exit(box: Box, start: tuple[float, float], toward: tuple[float, float]) -> tuple[float, float]:
    """Where the ray from ``start`` (inside ``box``) toward ``toward`` leaves the box."""
    (sx, sy), (tx, ty) = start, toward
    dx, dy = tx - sx, ty - sy
    limits = []
    if dx:
        limits.append(((box.x1 if dx > 0 else box.x0) - sx) / dx)
    if dy:
        limits.append(((box.y1 if dy > 0 else box.y0) - sy) / dy)
    t = max(0.0, min(limits, default=0.0))
    return (sx + t * dx, sy + t * dy)


def _route(
    a: Box, b: Box, boxes: list[Box], *, offset: float, key: str, count: int, level: int
) -> Link:
    """One line for ``count`` pairs between two boxes, around the boxes in between.

    Side by side boxes get a straight line between their facing edges (several
    transports side by side, ``offset`` apart); boxes with others between them in their
    row get an arc over the top, its label at the apex, clear of everything.
    """
    (ax, ay), (bx, by) = a.center, b.center
    text = f"{key.split(':', 1)[1]} x{count}"
    same_row = a.y0 < b.y1 and b.y0 < a.y1
    in_between = [
        box
        for box in boxes
        if same_row
        and box is not a
        and box is not b
        and box.y0 < max(a.y1, b.y1)
        and box.y1 > min(a.y0, b.y0)
        and min(ax, bx) < box.center[0] < max(ax, bx)
    ]
    if in_between:
        # From the box centres (the fill hides the part inside), up and over the row.
        top = min(box.y0 for box in (a, b, *in_between))
        rise = max(ay, by) - top + 0.6 + abs(offset) * 2
        span = abs(bx - ax)
        bend = 2 * rise / span * (1 if bx > ax else -1)  # apex rise = bend * span / 2
        _, apex = _curve(Link(a.center, b.center, key, bend=bend))
        return Link(a.center, b.center, key, bend, count, text, apex, level)
    # Straight, between the facing edges, shifted sideways by `offset`.
    dx, dy = bx - ax, by - ay
    length = math.hypot(dx, dy) or 1.0
    px, py = -dy / length * offset, dx / length * offset
    sa, sb = (ax + px, ay + py), (bx + px, by + py)
    ea, eb = _exit(a, sa, sb), _exit(b, sb, sa)
    middle = ((ea[0] + eb[0]) / 2, (ea[1] + eb[1]) / 2)
    return Link(ea, eb, key, 0.0, count, text, middle, level)


def _gpu_name(name: str) -> str:
    # "NVIDIA H100 80GB HBM3" / "H100-SXM5-80GB" -> "H100": the model fits under a marker.
    short = name.removeprefix("NVIDIA ").removeprefix("GeForce ")
    if len(short) > 12:
        short = short.replace("-", " ").split()[0]
    return _short(short, 12)


def _layout_host(
    scene: Scene,
    hk: str,
    members: list[ProcessInfo],
    by_name: dict[str, ProcessPlan],
    notes_of: dict[str, list[tuple[str, str]]],
    x0: float,
    y0: float,
    placed: _Placed,
) -> Box:
    """Lay out one host with its top left corner at (x0, y0); returns its box."""
    containers: dict[str, list[ProcessInfo]] = {}
    for p in members:
        containers.setdefault(repr(container_key(p.node)), []).append(p)
    split = len(containers) > 1
    # The host's GPUs: what its processes see, one entry per physical GPU (bus id).
    gpus: dict[tuple[str, str], GpuInfo] = {}
    seen_by: dict[tuple[str, str], set[str]] = {}
    used: set[tuple[str, str]] = set()
    nvlinks: set[frozenset[tuple[str, str]]] = set()
    for p in members:
        mine = set(by_name[p.name].gpus)
        for g in p.node.gpus:
            key = gpu_key(p.node, g)
            gpus.setdefault(key, g)
            seen_by.setdefault(key, set()).add(repr(container_key(p.node)))
            if g.index in mine:
                used.add(key)
        for i, a in enumerate(p.node.gpus):
            for b in p.node.gpus[i + 1 :]:
                if nvlinked(a, b):
                    nvlinks.add(frozenset((gpu_key(p.node, a), gpu_key(p.node, b))))
            for peer in a.nvlink_peer_bus_ids:
                other = (hk, normalize_bus_id(peer))
                if other != gpu_key(p.node, a):
                    nvlinks.add(frozenset((gpu_key(p.node, a), other)))
    nvlinks = {link for link in nvlinks if link <= gpus.keys()}  # peers nobody here sees
    all_linked = len(gpus) >= 3 and len(nvlinks) == len(gpus) * (len(gpus) - 1) // 2
    order = sorted(gpus, key=lambda k: k[1])
    number = {k: i for i, k in enumerate(order)}
    own: dict[str, list[tuple[str, str]]] = {c: [] for c in containers}
    shared: list[tuple[str, str]] = []
    for key in order:
        where = seen_by[key]
        if split and len(where) == 1:
            own[next(iter(where))].append(key)
        else:
            shared.append(key)
    hcas = members[0].node.hcas

    def place_gpus(keys: list[tuple[str, str]], gx: float, gy: float, group: str) -> None:
        for key, (px, py) in zip(keys, _grid(len(keys), gx, gy), strict=True):
            g = gpus[key]
            text = f"GPU{number[key]}" + (f"\n{_gpu_name(g.name)}" if g.name else "")
            state = "gpu:used" if key in used else "gpu:idle"
            scene.marks.append(Mark("gpu", px, py, text, state, group))
            placed.gpus[key] = (px, py)

    def place_processes(ps: list[ProcessInfo], px0: float, py0: float, group: str) -> None:
        for p, (px, py) in zip(ps, _grid(len(ps), px0, py0), strict=True):
            pp = by_name[p.name]
            if not p.node.hosts_actors:
                key = "process:driver"
            elif pp.labels:
                key = f"process:label:{pp.labels[0]}"
            else:
                key = "process:free"
            text = _short(p.name) + ("\n" + _short(",".join(pp.labels)) if pp.labels else "")
            scene.marks.append(Mark("process", px, py, text, key, group))
            placed.procs[p.name] = (px, py)

    def place_notes(owner: str, nx0: float, ny0: float) -> float:
        notes = notes_of.get(owner, [])
        for k, (text, key) in enumerate(notes):
            scene.notes.append((nx0, ny0 + k * _NOTE, text, key))
        return _NOTE * len(notes)

    y = y0 + _TITLE
    if split:
        cx = x0 + _PAD
        tallest = 0.0
        for group, ps in containers.items():
            notes = _NOTE * len(notes_of.get(group, ()))
            rows = _rows(len(ps)) + _rows(len(own[group]))
            cw = 2 * _PAD + _CELL * _cols(len(ps), len(own[group]))
            ch = _TITLE + _ROW * rows - _SLACK + notes + _PAD
            box = Box("container", cx, y, cx + cw, y + ch, by_name[ps[0].name].node)
            scene.boxes.append(box)
            placed.boxes[f"group:{group}"] = box
            place_processes(ps, cx + _PAD, y + _TITLE, group)
            place_gpus(own[group], cx + _PAD, y + _TITLE + _ROW * _rows(len(ps)), group)
            place_notes(group, cx + _PAD, y + ch - _PAD - notes)
            cx += cw + _GAP * 0.8  # room for the lines between containers to show
            tallest = max(tallest, ch)
        width = cx - _GAP * 0.8 + _PAD - x0
        y += tallest + _PAD
    else:
        group, ps = next(iter(containers.items()))
        place_processes(ps, x0 + _PAD, y, group)
        width = 2 * _PAD + _CELL * _cols(len(ps))
        y += _ROW * _rows(len(ps))
    if shared:
        place_gpus(shared, x0 + _PAD, y, "")
        y += _ROW * _rows(len(shared))
    for hca, (hx, hy) in zip(hcas, _grid(len(hcas), x0 + _PAD, y), strict=True):
        state = "hca:down" if not hca.active else ("hca:gdr" if hca.gdr_capable else "hca:active")
        text = hca.name + ("" if hca.active else f"\n{hca.port_state}")
        scene.marks.append(Mark("hca", hx, hy, text, state))
    y += _ROW * _rows(len(hcas))
    # The last row of markers leaves room under it for a next row: a box ending there
    # takes that room back; one ending in a line of notes has none to give.
    slack = _SLACK
    width = max(width, 2 * _PAD + _CELL * _cols(len(shared), len(hcas)))
    top = y - _SLACK  # notes go right under the last row's labels
    notes = place_notes(next(iter(containers)), x0 + _PAD, top) if not split else 0.0
    notes += place_notes(f"host:{hk}", x0 + _PAD, top + notes)
    if notes:
        y, slack = top + notes, 0.0
    if all_linked:
        # Every pair linked (NVSwitch): one dotted stroke and a line of text say it,
        # where 28 arcs would say nothing.
        stroke = (x0 + _PAD, y + 0.14), (x0 + _PAD + 0.6, y + 0.14)
        scene.links.append(Link(*stroke, "link:nvlink", level=2))
        scene.notes.append(
            (x0 + _PAD + 0.75, y, "NVLink between every pair of GPUs", "link:nvlink")
        )
        y, slack = y + _NOTE, 0.0
    else:
        for ka, kb in sorted(tuple(sorted(link)) for link in nvlinks):
            if ka in placed.gpus and kb in placed.gpus:
                scene.links.append(
                    Link(placed.gpus[ka], placed.gpus[kb], "link:nvlink", 0.3, level=2)
                )
    box = Box("host", x0, y0, x0 + width, y + _PAD - slack, members[0].node.hostname)
    scene.boxes.append(box)
    if not split:
        placed.boxes[f"group:{next(iter(containers))}"] = box
    return box


def _curve(link: Link) -> tuple[list[tuple[float, float]], tuple[float, float]]:
    """Control points of a quadratic Bezier for a link, and the curve's midpoint."""
    (x1, y1), (x2, y2) = link.a, link.b
    mx, my = (x1 + x2) / 2, (y1 + y2) / 2
    dx, dy = x2 - x1, y2 - y1
    control = (mx + link.bend * dy, my - link.bend * dx)
    return [link.a, control, link.b], (mx + link.bend * dy / 2, my - link.bend * dx / 2)


def draw_topology(
    processes: Sequence[ProcessInfo],
    plan: Plan,
    path: str | os.PathLike[str],
    max_pair_edges: int = 400,
) -> Path:
    """Draw the plan: hosts with their containers, processes, GPUs, adapters and links.

    See :func:`layout_scene` for what goes where. The legend lists only what the picture
    shows (:meth:`Scene.legend`), each entry saying what its shape or colour means.

    Args:
        processes: The cluster.
        plan: Its plan.
        path: Output file; the extension (``.png``, ``.svg``, ``.pdf``) picks the format.
        max_pair_edges: Above this many pairs, draw only the first label's pairs.

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
        from matplotlib.patches import FancyBboxPatch, PathPatch
        from matplotlib.patches import Patch as BoxPatch
        from matplotlib.path import Path as MplPath
    except ImportError as e:
        raise PlacementError(
            "drawing a plan needs matplotlib: pip install matplotlib (or actorrt[plot])"
        ) from e

    scene = layout_scene(processes, plan, max_pair_edges)
    width, height, top = max(scene.width, 6.0), scene.height, scene.top - 1.2
    fig = Figure(figsize=((width + 1.0) * _INCH, (height - top + 0.4) * _INCH))
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_axis_off()
    ax.set_xlim(-0.5, width + 0.5)
    ax.set_ylim(height + 0.4, top)  # y grows downwards, as the scene is laid out
    ax.text(0.0, top + 0.5, scene.title, fontsize=10, va="center", ha="left")

    for box in scene.boxes:
        host = box.kind == "host"
        ax.add_patch(
            FancyBboxPatch(
                (box.x0, box.y0),
                box.x1 - box.x0,
                box.y1 - box.y0,
                boxstyle="round,pad=0,rounding_size=0.15",
                facecolor="#fafafa" if host else "#ffffff",
                edgecolor="#525252" if host else "#737373",
                linestyle="-" if host else "--",
                linewidth=1.2 if host else 1.0,
                zorder=1 if host else 2,
            )
        )
        ax.text(
            box.x0 + _PAD,
            box.y0 + _TITLE / 2,
            box.title,
            fontsize=9 if host else 7.5,
            fontweight="bold" if host else "normal",
            va="center",
            ha="left",
            zorder=6,
        )
    for link in scene.links:
        color = scene.color(link.key)
        points, _ = _curve(link)
        if link.key == "link:uses":
            style = {"linewidth": 0.7, "alpha": 0.6, "linestyle": "-", "zorder": 3}
        elif link.key == "link:nvlink":
            style = {"linewidth": 1.4, "alpha": 0.9, "linestyle": ":", "zorder": 3}
        elif link.level < 2:
            # Under the boxes it joins (hosts: 1, containers: 2), so only the part
            # between them shows; thicker for more pairs.
            lw = min(6.0, 1.0 + 1.2 * math.log2(link.count))
            style = {"linewidth": lw, "alpha": 0.8, "linestyle": "-", "zorder": 0.5 + link.level}
        else:
            style = {"linewidth": 1.0, "alpha": 0.55, "linestyle": "-", "zorder": 3}
        codes = [MplPath.MOVETO, MplPath.CURVE3, MplPath.CURVE3]
        ax.add_patch(PathPatch(MplPath(points, codes), facecolor="none", edgecolor=color, **style))
        if link.text and link.text_at:
            ax.text(
                *link.text_at,
                link.text,
                fontsize=7,
                color=color,
                ha="center",
                va="center",
                zorder=7,
                bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": color},
            )
    for x, y, text, key in scene.notes:
        ax.text(x, y, text, fontsize=7, color=scene.color(key), va="top", ha="left", zorder=6)
    sizes = {"process": 170, "gpu": 130, "hca": 110}
    for mark in scene.marks:
        if mark.key.startswith("process:label:"):
            shape, face, edge = "o", scene.color(mark.key), "#252525"
        else:
            shape, face, edge = _MARK_STYLE[mark.key]
        ax.scatter(
            [mark.x],
            [mark.y],
            s=sizes[mark.kind],
            marker=shape,
            c=[face],
            edgecolors=edge,
            linewidths=0.8,
            zorder=4,
        )
        ax.text(mark.x, mark.y + 0.27, mark.text, fontsize=6.5, ha="center", va="top", zorder=5)

    handles: list[Any] = []
    for entry in scene.legend():
        if entry.kind == "box":
            handles.append(
                BoxPatch(
                    facecolor="none",
                    edgecolor=entry.color,
                    # A box's or a line's style is a line style ("-", "--", ":").
                    linestyle=cast("LineStyleType", entry.style),
                    label=entry.label,
                )
            )
        elif entry.kind == "marker":
            edge = _MARK_STYLE.get(entry.key, ("", "", "#252525"))[2]
            handles.append(
                Line2D(
                    [0],
                    [0],
                    marker=entry.style,
                    linestyle="none",
                    markerfacecolor=entry.color,
                    markeredgecolor=edge,
                    markersize=8,
                    label=entry.label,
                )
            )
        else:
            handles.append(
                Line2D(
                    [0],
                    [0],
                    color=entry.color,
                    linestyle=cast("LineStyleType", entry.style),
                    lw=2,
                    label=entry.label,
                )
            )
    ax.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=8,
        frameon=False,
        title="legend",
        title_fontsize=8,
    )
    # Agg refuses images past 2^16 pixels a side: big clusters get a lower resolution.
    dpi = max(30.0, min(120.0, 20000.0 / max(fig.get_size_inches())))
    try:
        fig.savefig(out, dpi=dpi, bbox_inches="tight")
    except OSError as e:  # checked above, but the disk may be full or the file read-only
        raise PlacementError(f"cannot draw to {path}: {e.strerror or e}") from e
    return out
