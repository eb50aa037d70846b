"""Facility energy, emissions and cost of IT energy spread over time (pure).

Facility energy is IT energy (GPU, CPU, DRAM) times the PUE *at the time it was used*; emissions are
facility energy times the grid's carbon intensity at that time; cost is facility energy times the
price. All three are integrals over time of power times step functions (see `wattwise.carbon.series`):

    facility_j  = sum_k E_k * PUE_k
    emissions_g = sum_k E_k * PUE_k * CI_k / 3.6e6
    cost        = sum_k E_k * PUE_k * price_k / 3.6e6

where the run is cut at every instant where an input may change and E_k is the IT energy used in
piece k. An `EnergyProfile` says how much energy falls in each piece: a sampled power timeline
(piecewise linear between samples, integrated exactly) or energy spread uniformly over a span.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from wattwise.carbon.series import Series

J_PER_KWH = 3.6e6

FloatArray = npt.NDArray[np.float64]


class EnergyProfile(Protocol):
    """How IT energy is spread over time."""

    def energy_between_j(self, edges_s: FloatArray) -> FloatArray:
        """Energy (J) in each interval [edges_s[k], edges_s[k + 1]]; `edges_s` is sorted."""
        ...


@dataclass(frozen=True)
class DeviceTrace:
    """Sampled power of one device: piecewise linear between samples, zero outside them."""

    device: str
    timestamps_s: FloatArray
    power_w: FloatArray

    def cumulative_energy_j(self, at_s: FloatArray) -> FloatArray:
        """Energy (J) from the first sample to each instant of `at_s` (trapezoids, exact for the model)."""
        t, p = self.timestamps_s, self.power_w
        if len(t) < 2:
            return np.zeros_like(at_s)
        done_j = np.concatenate(([0.0], np.cumsum(0.5 * (p[1:] + p[:-1]) * np.diff(t))))
        x = np.clip(at_s, t[0], t[-1])
        i = np.clip(np.searchsorted(t, x, side="right") - 1, 0, len(t) - 2)
        dt = x - t[i]
        slope = (p[i + 1] - p[i]) / (t[i + 1] - t[i])
        return np.asarray(done_j[i] + p[i] * dt + 0.5 * slope * dt * dt, dtype=np.float64)


@dataclass(frozen=True)
class TimelineEnergy:
    """Energy from sampled power traces, multiplied by `scale` (to match an exact energy counter)."""

    traces: tuple[DeviceTrace, ...]
    scale: float = 1.0

    def energy_between_j(self, edges_s: FloatArray) -> FloatArray:
        """Energy between consecutive `edges_s` (one value fewer than edges), in joules."""
        total = np.zeros(len(edges_s) - 1)
        for trace in self.traces:
            total += np.diff(trace.cumulative_energy_j(edges_s))
        return np.asarray(total * self.scale, dtype=np.float64)


@dataclass(frozen=True)
class UniformEnergy:
    """`energy_j` spread at constant power over [start_s, end_s]."""

    energy_j: float
    start_s: float
    end_s: float

    def energy_between_j(self, edges_s: FloatArray) -> FloatArray:
        """Energy between consecutive `edges_s` (one value fewer than edges), in joules."""
        span_s = self.end_s - self.start_s
        if span_s <= 0:
            return np.zeros(len(edges_s) - 1)
        inside = np.clip(edges_s, self.start_s, self.end_s)
        return np.asarray(np.diff(inside) * (self.energy_j / span_s), dtype=np.float64)


@dataclass(frozen=True)
class CombinedEnergy:
    """Several profiles added up (e.g. GPUs from their timeline, CPU spread uniformly)."""

    parts: tuple[EnergyProfile, ...]

    def energy_between_j(self, edges_s: FloatArray) -> FloatArray:
        """Energy between consecutive `edges_s` (one value fewer than edges), in joules."""
        total = np.zeros(len(edges_s) - 1)
        for part in self.parts:
            total += part.energy_between_j(edges_s)
        return total


@dataclass(frozen=True)
class FacilityTotals:
    """IT energy over a span and what it became at the facility and on the grid."""

    it_energy_j: float
    facility_energy_j: float
    emissions_g: float | None
    cost: float | None

    @property
    def pue_effective(self) -> float:
        """Energy-weighted mean PUE: facility energy over IT energy."""
        return self.facility_energy_j / self.it_energy_j if self.it_energy_j > 0 else float("nan")

    @property
    def intensity_effective_g_per_kwh(self) -> float | None:
        """Energy-weighted mean carbon intensity: emissions over facility energy."""
        if self.emissions_g is None or self.facility_energy_j <= 0:
            return None
        return self.emissions_g / (self.facility_energy_j / J_PER_KWH)


def facility_totals(
    energy: EnergyProfile,
    start_s: float,
    end_s: float,
    *,
    pue: Series,
    intensity: Series | None = None,
    price: Series | None = None,
) -> FacilityTotals:
    """Integrate `energy` over [start_s, end_s] against the inputs; each must cover that span."""
    inputs = [s for s in (pue, intensity, price) if s is not None]
    cuts = {start_s, end_s}
    for series in inputs:
        cuts.update(series.breakpoints_s(start_s, end_s))
    edges_s = np.array(sorted(cuts), dtype=np.float64)
    it_j = energy.energy_between_j(edges_s)
    facility_j = it_j * _values_at(pue, edges_s[:-1])
    emissions_g = (
        None if intensity is None else float(np.sum(facility_j * _values_at(intensity, edges_s[:-1]))) / J_PER_KWH
    )
    cost = None if price is None else float(np.sum(facility_j * _values_at(price, edges_s[:-1]))) / J_PER_KWH
    return FacilityTotals(float(np.sum(it_j)), float(np.sum(facility_j)), emissions_g, cost)


def _values_at(series: Series, starts_s: Sequence[float] | FloatArray) -> FloatArray:
    """Each piece's value: a step series holds its value from the piece's start to its end."""
    return np.array([series.value_at(float(t)) for t in starts_s], dtype=np.float64)
