"""When generated workloads arrive: uniformly over the run (a Poisson process, given its count),
following a day curve, or with bursts on top of a uniform stream.

Given the number of arrivals, the arrival times of a Poisson process are independent draws from
its normalised rate, which is what is sampled here; the generator fixes the count from its work
budget.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from joulie.sim.generator_options import GeneratorOptions

__all__ = ["arrival_times", "diurnal_rate"]

FloatArray = NDArray[np.float64]


def arrival_times(
    rng: np.random.Generator, n: int, horizon_s: float, options: GeneratorOptions
) -> FloatArray:
    """``n`` arrival times in [0, horizon_s) of the chosen process (unsorted)."""
    if options.arrivals == "diurnal":
        return _diurnal(rng, n, horizon_s, options)
    if options.arrivals == "bursts":
        return _bursts(rng, n, horizon_s, options)
    return rng.uniform(0.0, horizon_s, n)


def diurnal_rate(hour_of_day: FloatArray, peak_hour: float, trough_ratio: float) -> FloatArray:
    """Relative arrival rate over the day: 1 at ``peak_hour``, ``trough_ratio`` twelve hours
    away, a cosine in between."""
    phase = 2 * np.pi * (hour_of_day - peak_hour) / 24.0
    return trough_ratio + (1.0 - trough_ratio) * (1.0 + np.cos(phase)) / 2.0


def _diurnal(
    rng: np.random.Generator, n: int, horizon_s: float, options: GeneratorOptions
) -> FloatArray:
    # Inverse transform sampling on a one-minute grid of the rate's integral.
    grid = np.linspace(0.0, horizon_s, max(2, math.ceil(horizon_s / 60.0) + 1))
    rate = diurnal_rate(
        (grid / 3600.0) % 24.0, options.diurnal_peak_hour, options.diurnal_trough_ratio
    )
    cumulative = np.concatenate(([0.0], np.cumsum((rate[1:] + rate[:-1]) / 2 * np.diff(grid))))
    return np.interp(rng.uniform(0.0, cumulative[-1], n), cumulative, grid)


def _bursts(
    rng: np.random.Generator, n: int, horizon_s: float, options: GeneratorOptions
) -> FloatArray:
    in_bursts = round(n * options.burst_share)
    count = max(1, int(rng.poisson(options.bursts_per_day * horizon_s / 86400.0)))
    # Bursts of uneven size: each takes a share between 1 and 3 parts of the burst arrivals.
    weights = rng.uniform(1.0, 3.0, count)
    sizes = rng.multinomial(in_bursts, weights / weights.sum())
    window = min(options.burst_window_s, horizon_s)
    starts = rng.uniform(0.0, horizon_s - window, count)
    burst_times = np.repeat(starts, sizes) + rng.uniform(0.0, window, in_bursts)
    base = rng.uniform(0.0, horizon_s, n - in_bursts)
    return np.minimum(np.concatenate((base, burst_times)), np.nextafter(horizon_s, 0))
