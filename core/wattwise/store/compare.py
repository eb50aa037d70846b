"""How one run of the history differs from another: energy, whether that exceeds the uncertainty, time, power.

`wattwise runs compare` and the dashboard's comparison both show this one difference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from wattwise.store.history import RunRow

#: One run's difference from the first, as `wattwise runs compare --json` lists it under `differences`:
#: `RunDifference`'s fields in their order.
DifferenceDict = dict[str, object]


@dataclass(frozen=True)
class RunDifference:
    """`other` against `reference`: each figure of `other` minus the reference's (J, s, W)."""

    id: str
    against: str
    energy_j: float
    #: The difference's share of the reference's energy; None when the reference used none.
    energy_fraction: float | None
    #: The two runs' energy uncertainties combined in quadrature; None when either is unknown.
    energy_uncertainty_j: float | None
    #: True: the energy difference is larger than `energy_uncertainty_j`; False: within it; None: unknown.
    energy_resolved: bool | None
    time_s: float
    time_fraction: float | None
    avg_power_w: float
    #: None unless both runs ran at a known limit.
    power_limit_w: float | None

    def verdict(self, *, unknown: str, larger: str, within: str) -> str:
        """Whether the energy difference is larger than the measurements' uncertainty, in the reader's words.

        `larger` and `within` are format strings of `u`, the combined uncertainty in joules.
        """
        if self.energy_resolved is None:
            return unknown
        return (larger if self.energy_resolved else within).format(u=self.energy_uncertainty_j)

    def to_dict(self) -> DifferenceDict:
        """The difference as `wattwise runs compare --json` writes it."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def difference(reference: RunRow, other: RunRow) -> RunDifference:
    """How `other` differs from `reference` (see `RunDifference`)."""
    delta_j = other.energy_j - reference.energy_j
    if reference.energy_uncertainty_j is None or other.energy_uncertainty_j is None:
        u_j, resolved = None, None
    else:
        u_j = math.hypot(reference.energy_uncertainty_j, other.energy_uncertainty_j)
        resolved = abs(delta_j) > u_j
    limits = (reference.power_limit_w, other.power_limit_w)
    return RunDifference(
        id=other.id,
        against=reference.id,
        energy_j=delta_j,
        energy_fraction=delta_j / reference.energy_j if reference.energy_j > 0 else None,
        energy_uncertainty_j=u_j,
        energy_resolved=resolved,
        time_s=other.time_s - reference.time_s,
        time_fraction=(other.time_s - reference.time_s) / reference.time_s if reference.time_s > 0 else None,
        avg_power_w=other.avg_power_w - reference.avg_power_w,
        power_limit_w=limits[1] - limits[0] if limits[0] is not None and limits[1] is not None else None,
    )
