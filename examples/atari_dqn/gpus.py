"""GPU shares that fit the machine: the learner's and each collector's ``num_gpus``.

By default the learner asks for a GPU when there is one (or ``--transport cuda``), and
with ``--transport cuda`` every collector asks for one too. On a machine with fewer GPUs
than that, :func:`share_gpus` shrinks the defaults to fractions that fit, the way
``tests/gpu`` sets them by hand (one GPU, four collectors: learner 0.5, collectors
0.125 each): the learner keeps as much as it can (it is the one that computes), and the
collectors share the rest equally.

Fractions are powers of two (1, 1/2, 1/4, ...): their sums are exact in floating point,
and a GPU's free share is then always a whole number of collector shares, so whatever
GPU actorrt's placement puts each collector on, they all fit when their count does.
"""

from __future__ import annotations

import dataclasses
import math

__all__ = ["GpuShares", "MIN_SHARE", "share_gpus"]

MIN_SHARE = 1 / 64
"""The smallest share tried: 64 collectors per GPU."""


@dataclasses.dataclass(frozen=True)
class GpuShares:
    """What the learner and each collector ask for, and why (for the run's output).

    Attributes:
        learner: The learner's ``num_gpus``.
        collector: Each collector's ``num_gpus``.
        note: One line saying what was chosen and from what ("" when nothing was shared).
    """

    learner: float
    collector: float
    note: str = ""


def _power_of_two_shares(start: float) -> list[float]:
    """``start`` (at most 1) and every power-of-two fraction below it, down to MIN_SHARE."""
    out, share = [], 1.0
    while share >= MIN_SHARE:
        if share <= start:
            out.append(share)
        share /= 2
    return out


def _fits(gpus: int, learner: float, collector: float, collectors: int) -> bool:
    """Whether the learner and ``collectors`` collectors fit on ``gpus`` GPUs of one node."""
    free = [1.0] * gpus
    if learner >= 1:  # whole GPUs of its own
        whole = math.ceil(learner)
        if whole > gpus:
            return False
        free = free[whole:]
    elif learner > 0:
        if not free:
            return False
        free[0] -= learner
    if collector <= 0:
        return True
    if collector >= 1:
        return sum(1 for f in free if f >= 1) >= collectors * math.ceil(collector)
    room = sum(math.floor(f / collector + 1e-9) for f in free)
    return room >= collectors


def share_gpus(
    gpus: int | None,
    collectors: int,
    transport: str,
    learner_gpus: float | None = None,
    collector_gpus: float | None = None,
) -> GpuShares:
    """The GPUs of the learner and of each collector, shared to fit ``gpus`` GPUs.

    Values given (``--learner-gpus``, ``--collector-gpus``) are kept as they are; only
    defaults are shrunk. The defaults: the learner 1 when there is a GPU (``gpus`` > 0)
    or the transport is ``cuda``, else 0; each collector 1 with ``cuda``, else 0.

    Args:
        gpus: GPUs the local cluster's processes see (None: unknown, as on several
            nodes, where the defaults are returned whole).
        collectors: Collector actors.
        transport: ``"cpu"`` or ``"cuda"``.
        learner_gpus: ``--learner-gpus`` (None: default).
        collector_gpus: ``--collector-gpus`` (None: default).

    Returns:
        The shares, with a note when defaults were shrunk (or could not be made to fit).
    """
    cuda = transport == "cuda"
    default_learner = 1.0 if (cuda or bool(gpus)) else 0.0
    default_collector = 1.0 if cuda else 0.0
    learner = default_learner if learner_gpus is None else float(learner_gpus)
    collector = default_collector if collector_gpus is None else float(collector_gpus)
    if gpus is None or _fits(gpus, learner, collector, collectors):
        return GpuShares(learner, collector)
    learner_options = [learner] if learner_gpus is not None or learner < 1 else None
    collector_options = [collector] if collector_gpus is not None or not cuda else None
    for lrn in learner_options or _power_of_two_shares(1.0):
        for col in collector_options or _power_of_two_shares(1.0):
            if _fits(gpus, lrn, col, collectors):
                note = (
                    f"GPUs: {gpus} here for the learner and {collectors} collector(s) "
                    f"(transport {transport}): learner {lrn:g} GPU, each collector {col:g} "
                    "GPU (--learner-gpus / --collector-gpus override)"
                )
                return GpuShares(lrn, col, note)
    note = (
        f"GPUs: {gpus} here; the learner ({learner:g}) and {collectors} collector(s) "
        f"({collector:g} each) do not fit, even shared down to {MIN_SHARE:g}; the placement "
        "will say which slot found no GPU"
    )
    return GpuShares(learner, collector, note)
