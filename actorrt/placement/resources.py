"""``Resources``: what an actor or a layout slot reserves. The one place they are validated.

``@actor(num_cpus=, num_gpus=)`` and a layout's ``{"count": 8, "num_gpus": 0.25}`` ask for
the same thing, so both build a :class:`Resources` and get the same checks and messages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["GPU_UNIT", "Resources"]

#: Capacities are counted in thousandths, so fractions never drift.
GPU_UNIT = 1000


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


@dataclass(frozen=True)
class Resources:
    """CPUs and GPUs reserved by one actor or one layout slot.

    Attributes:
        num_cpus: CPUs reserved on the host (0 reserves none, as Ray does for actors).
        num_gpus: 0 (CPU only), a fraction below 1 (a share of one physical GPU), or a
            whole number of whole GPUs.

    Raises:
        TypeError: A value is not a number (as Ray's ``num_cpus="2"``).
        ValueError: A value is below 0, not a number (NaN) or infinite (as Ray refuses
            them), or ``num_gpus`` is a fraction above 1.
    """

    num_cpus: float = 0.0
    num_gpus: float = 0.0

    def __post_init__(self) -> None:
        for field in ("num_cpus", "num_gpus"):
            value = getattr(self, field)
            rule = f"{field}={value!r} must be a number >= 0, e.g. {field}=1."
            if not _is_number(value):
                raise TypeError(rule)
            if not value >= 0 or value == math.inf:  # NaN compares false to everything
                raise ValueError(rule)
        if self.num_gpus > 1 and self.num_gpus != int(self.num_gpus):
            raise ValueError(
                f"num_gpus={self.num_gpus!r}: fractions are only allowed below 1 (a share of "
                "one GPU); use a whole number of GPUs above 1."
            )

    @property
    def gpu_units(self) -> int:
        """GPU share in thousandths (1000 = one whole GPU)."""
        return round(self.num_gpus * GPU_UNIT)

    @property
    def cpu_units(self) -> int:
        """CPU share in thousandths."""
        return round(self.num_cpus * GPU_UNIT)

    @property
    def whole_gpus(self) -> int:
        """How many GPUs it occupies: whole GPUs, or 1 for a fraction, or 0."""
        if not self.num_gpus:
            return 0
        return int(self.num_gpus) if self.num_gpus >= 1 else 1

    def as_dict(self) -> dict[str, float]:
        """``{"CPU": num_cpus, "GPU": num_gpus}`` as floats, a zero left out (Ray's form)."""
        both = {"CPU": float(self.num_cpus), "GPU": float(self.num_gpus)}
        return {key: value for key, value in both.items() if value}

    def fits_in(self, other: Resources) -> bool:
        """Whether this request fits inside ``other`` (an actor inside a slot)."""
        return self.cpu_units <= other.cpu_units and self.gpu_units <= other.gpu_units
