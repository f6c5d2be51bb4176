"""Layouts: which labels a cluster runs, how many of each, what each slot reserves, who talks.

A layout is the ``[labels]`` table of a cluster file (with an optional ``[talks]`` table
and ``[plan] strategy``), given to ``actorrt.start(labels=...)`` as a dict or a TOML path,
or to ``actorrt plan --labels``. Both hand the same :class:`Layout` to the same planner.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actorrt.errors import PlacementError
from actorrt.placement.resources import Resources

__all__ = [
    "DEFAULT_STRATEGY",
    "LABEL_PATTERN",
    "STRATEGIES",
    "LabelSpec",
    "Layout",
    "check_label",
    "load_layout",
    "load_toml",
    "parse_label_specs",
    "parse_layout",
]

STRATEGIES = ("pack", "spread", "nearest")
#: Collectors go to different hosts unless the layout asks to pack them.
DEFAULT_STRATEGY = "spread"
LABEL_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
_SPEC_KEYS = {"count", "num_cpus", "num_gpus"}
_LAYOUT_KEYS = {"plan", "labels", "talks"}
_CLUSTER_ONLY_KEYS = {"nodes", "processes", "device_maps", "cuda_device_map"}


def check_label(label: object, where: str = "label") -> str:
    """Return ``label`` if it is a valid label name, else raise ``PlacementError``."""
    if not isinstance(label, str) or not LABEL_PATTERN.match(label):
        raise PlacementError(
            f"{where}={label!r} is not a valid label: use letters, digits, '_', '.', '-' "
            "(starting with a letter or '_'), e.g. 'learner'."
        )
    return label


@dataclass(frozen=True)
class LabelSpec:
    """How many slots a label needs and what each slot reserves.

    Attributes:
        label: The label (``"learner"``).
        count: Number of slots carrying the label.
        num_gpus: GPUs per slot (see :class:`~actorrt.placement.resources.Resources`).
        num_cpus: CPUs per slot, counted against the host's CPUs.
    """

    label: str
    count: int = 1
    num_gpus: float = 0
    num_cpus: float = 0

    def __post_init__(self) -> None:
        if not self.label or not isinstance(self.label, str):
            raise PlacementError(f"a label spec needs a non-empty label name, got {self.label!r}")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise PlacementError(
                f"label {self.label!r}: count must be an integer >= 0, got {self.count!r}"
            )
        try:
            Resources(self.num_cpus, self.num_gpus)
        except (TypeError, ValueError) as exc:  # a layout's errors are all PlacementError
            raise PlacementError(f"label {self.label!r}: {exc}") from None

    @property
    def resources(self) -> Resources:
        """What one slot of this label reserves."""
        return Resources(self.num_cpus, self.num_gpus)

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form (the ``[labels]`` table of a cluster file, the plan's JSON)."""
        return {
            "label": self.label,
            "count": self.count,
            "num_gpus": self.num_gpus,
            "num_cpus": self.num_cpus,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LabelSpec:
        """Builds a spec from :meth:`to_dict`'s form; ``count`` defaults to 1, shares to 0."""
        return cls(
            str(d["label"]),
            int(d.get("count", 1)),
            d.get("num_gpus", 0),
            d.get("num_cpus", 0),
        )


def parse_label_specs(specs: Mapping[str, Any]) -> tuple[LabelSpec, ...]:
    """Parse ``{"learner": {"count": 1, "num_gpus": 1}, "collector": 14, ...}``.

    A bare integer is a count of slots that reserve nothing. Order is kept (it is the
    order slots are placed in).
    """
    if not isinstance(specs, Mapping):
        raise PlacementError(
            f"labels must be a table of label -> {{count, num_cpus, num_gpus}}, got {specs!r}"
        )
    out = []
    for label, value in specs.items():
        check_label(label)
        if isinstance(value, bool):
            raise PlacementError(f"label {label!r}: expected a count or a table, got {value!r}")
        if isinstance(value, int):
            out.append(LabelSpec(label, count=value))
            continue
        if not isinstance(value, Mapping):
            raise PlacementError(f"label {label!r}: expected a count or a table, got {value!r}")
        unknown = set(value) - _SPEC_KEYS
        if unknown:
            raise PlacementError(
                f"label {label!r}: unknown field(s) {sorted(unknown)}; use count, num_cpus "
                "and num_gpus"
            )
        out.append(
            LabelSpec(
                label,
                count=value.get("count", 1),
                num_gpus=value.get("num_gpus", 0),
                num_cpus=value.get("num_cpus", 0),
            )
        )
    return tuple(out)


def _parse_talks(
    talks: Mapping[str, Any] | Iterable[Any] | None, labels: tuple[str, ...]
) -> tuple[tuple[str, str], ...] | None:
    if talks is None:
        return None
    pairs: list[tuple[str, str]] = []
    if isinstance(talks, Mapping):  # {"collector": ["learner"]}, the TOML [talks] form
        for a, bs in talks.items():
            if isinstance(bs, str) or not isinstance(bs, Iterable):
                raise PlacementError(
                    f'talks: {a!r} must map to a list of labels, e.g. {a} = ["learner"]'
                )
            pairs.extend((a, b) for b in bs)
    else:
        for item in talks:
            if isinstance(item, str) or not isinstance(item, Iterable) or len(tuple(item)) != 2:
                raise PlacementError(
                    f"talks: {item!r} is not a pair of labels; write talks=[('collector', "
                    "'learner')] or a [talks] table"
                )
            a, b = tuple(item)
            pairs.append((a, b))
    out: set[tuple[str, str]] = set()
    for a, b in pairs:
        for x in (a, b):
            if x not in labels:
                offered = ", ".join(labels) or "none"
                raise PlacementError(f"talks: label {x!r} is not in the layout (labels: {offered})")
        out.add((a, b) if a <= b else (b, a))
    return tuple(sorted(out))


def check_strategy(strategy: str, labels: Iterable[str]) -> str:
    """Return ``strategy`` if it names a known strategy (and, for ``nearest:L``, a label)."""
    base, _, anchor = str(strategy).partition(":")
    if base not in STRATEGIES or (anchor and base != "nearest"):
        raise PlacementError(
            f"unknown placement strategy {strategy!r}; use pack, spread, nearest or nearest:LABEL"
        )
    if anchor and anchor not in set(labels):
        raise PlacementError(f"strategy {strategy!r}: label {anchor!r} is not in the spec")
    return strategy


@dataclass(frozen=True)
class Layout:
    """What to place: label specs, which labels talk, and the strategy.

    Attributes:
        specs: Label specs, in placement order.
        talks: Label pairs that exchange data (sorted, each pair once); None means every
            pair. Device maps and transports are planned only for processes whose labels
            talk (and for the driver and processes with no slot, which may talk to anyone).
        strategy: ``spread`` (default), ``pack``, ``nearest`` or ``nearest:LABEL``.
    """

    specs: tuple[LabelSpec, ...] = ()
    talks: tuple[tuple[str, str], ...] | None = None
    strategy: str = DEFAULT_STRATEGY

    def __post_init__(self) -> None:
        labels = [s.label for s in self.specs]
        if len(set(labels)) != len(labels):
            raise PlacementError(f"a label appears twice in the spec: {labels}")
        check_strategy(self.strategy, labels)

    @property
    def labels(self) -> tuple[str, ...]:
        """The layout's labels, in the order they were given."""
        return tuple(s.label for s in self.specs)

    def spec(self, label: str) -> LabelSpec | None:
        """The spec of ``label``, or None when the layout does not have it."""
        return next((s for s in self.specs if s.label == label), None)

    def talk(self, a: str, b: str) -> bool:
        """Whether labels ``a`` and ``b`` exchange data."""
        return self.talks is None or ((a, b) if a <= b else (b, a)) in self.talks


def parse_layout(
    labels: Mapping[str, Any] | str | os.PathLike[str] | Layout | None,
    talks: Mapping[str, Any] | Iterable[Any] | None = None,
    strategy: str | None = None,
) -> Layout:
    """Build a :class:`Layout` from ``start(labels=..., talks=..., strategy=...)``.

    Args:
        labels: ``{"learner": {"count": 1, "num_gpus": 1}, ...}``, a path to a TOML file
            holding a ``[labels]`` table (and optionally ``[talks]`` and ``[plan]
            strategy``), a ready :class:`Layout`, or None (no labels).
        talks: Label pairs that exchange data; overrides the file's ``[talks]``.
        strategy: Overrides the file's strategy (default ``spread``).

    Raises:
        PlacementError: The layout is malformed; the message names the field.
    """
    if isinstance(labels, Layout):
        base = labels
    elif isinstance(labels, (str, os.PathLike)):
        base = load_layout(labels)
    else:
        base = Layout(specs=parse_label_specs(labels or {}))
    new_talks = base.talks if talks is None else _parse_talks(talks, base.labels)
    return Layout(base.specs, new_talks, strategy or base.strategy)


def layout_from_tables(data: Mapping[str, Any], source: str) -> Layout:
    """The layout held by a parsed TOML file's ``[labels]``, ``[talks]``, ``[plan]``."""
    specs = parse_label_specs(data.get("labels", {}))
    plan_opts = data.get("plan", {})
    strategy = (
        plan_opts.get("strategy", DEFAULT_STRATEGY) if isinstance(plan_opts, Mapping) else None
    )
    if not isinstance(strategy, str):
        raise PlacementError(f"{source} [plan] strategy: expected a string, got {strategy!r}")
    return Layout(specs, _parse_talks(data.get("talks"), tuple(s.label for s in specs)), strategy)


def load_layout(path: str | os.PathLike[str]) -> Layout:
    """Read a layout from a TOML file (a cluster file works too: its nodes are ignored)."""
    data = load_toml(Path(path))
    unknown = sorted(set(data) - _LAYOUT_KEYS - _CLUSTER_ONLY_KEYS)
    if unknown:
        raise PlacementError(
            f"layout file {path}: unknown table(s) {unknown}; a layout has [labels], "
            "[talks] and [plan] strategy"
        )
    if "labels" not in data:
        raise PlacementError(
            f"layout file {path} has no [labels] table; add one, e.g.\n[labels]\n"
            "learner = { count = 1, num_gpus = 1 }\ncollector = { count = 8 }"
        )
    try:
        return layout_from_tables(data, str(path))
    except PlacementError as exc:
        if str(path) in str(exc):
            raise
        raise PlacementError(f"layout file {path}: {exc}") from None  # which file, too


def load_toml(path: Path) -> dict[str, Any]:
    """Read a TOML file, with errors that name the file and say what is wrong."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        try:
            import tomli as tomllib
        except ImportError as e:
            raise PlacementError(
                "reading TOML on Python 3.10 needs the 'tomli' package: pip install tomli"
            ) from e
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise PlacementError(f"cannot read {path}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise PlacementError(f"{path} is not UTF-8 text ({e.reason}); save it as UTF-8") from e
    except tomllib.TOMLDecodeError as e:
        raise PlacementError(f"{path} is not valid TOML: {e}") from e
