"""The generator's options: what a generated workload is made of, each with a default so that
``GeneratorOptions()`` is a reasonable mixed cluster day, and checked on construction so a bad
value is named before anything runs."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["ARRIVAL_PROCESSES", "GeneratorOptions", "check_number"]

ARRIVAL_PROCESSES = ("poisson", "diurnal", "bursts")
MAX_LOAD = 4.0
"""The highest offered load taken (four times the cluster's capacity over the run)."""


@dataclass(frozen=True, slots=True)
class GeneratorOptions:
    """What the generator makes; every field has a default, so ``GeneratorOptions()`` is a
    reasonable mixed cluster day."""

    arrivals: str = "poisson"
    """Arrival process: ``poisson`` (constant rate), ``diurnal`` (rate follows a day curve,
    the run starting at midnight) or ``bursts`` (constant rate plus bursts of many jobs)."""
    load: float = 0.6
    """Offered load: the share of the CPU-only nodes' core-hours, and of each GPU kind's
    GPU-hours, that the submitted work requests over the run (requests x run time at full
    speed). Above 1 means more work than the cluster can do in the time."""
    cpu_small_share: float = 0.45
    """Of the CPU batch jobs, the share that are small: 4-32 cores, 0.5-2 hours. Batch jobs
    are node-sized, as on the batch clusters these inventories model: a 5,000-node inventory
    then gets tens of thousands of jobs in a few days, not hundreds of thousands."""
    cpu_medium_share: float = 0.40
    """Medium CPU batch: 32-96 cores, 1-4 hours."""
    cpu_large_share: float = 0.15
    """Large CPU batch: 96-192 cores, 2-6 hours. The three CPU shares sum to 1."""
    gpu_inference_share: float = 0.30
    """Of the GPU jobs, the share that are debug/inference: 1-4 GPUs, 0.5-2 hours."""
    gpu_training_share: float = 0.55
    """Single-pod GPU training: 1-8 GPUs, 1-8 hours."""
    gpu_distributed_share: float = 0.15
    """Distributed GPU training, a gang of 2-4 pods of 4-8 GPUs each, 2-12 hours; a gang has
    at most a quarter of the nodes that can hold one of its pods (a gang left with one pod
    runs as a lone workload). The three GPU shares sum to 1."""
    perf_ratio: float = 0.3
    """Share of workloads marked performance. Training is marked more often than batch (weights
    in ``KINDS``), as upstream's generator did; the overall share stays ``perf_ratio``."""
    batch_priority: int = 0
    """Priority of CPU batch jobs."""
    default_priority: int = 100
    """Priority of GPU jobs."""
    urgent_priority: int = 1000
    """Priority of the urgent share, whatever their kind."""
    urgent_share: float = 0.02
    """Share of workloads submitted at ``urgent_priority``."""
    gang_all_share: float = 0.8
    """Share of distributed-training gangs with disruption ``all`` (the rest ``single``)."""
    cpu_load_on_gpu_nodes: float = 0.1
    """Only for an inventory without CPU-only nodes: CPU batch is then sized to this share of
    the GPU nodes' cores (times ``load``), as the GPU jobs use the rest of them."""
    diurnal_peak_hour: float = 16.0
    """``diurnal``: hour of the day with the highest rate; the lowest is 12 hours away."""
    diurnal_trough_ratio: float = 0.2
    """``diurnal``: the lowest rate as a share of the highest."""
    burst_share: float = 0.25
    """``bursts``: share of the arrivals that come in bursts. Burst sizes follow from it, so
    a burst is as sudden on a 5,000-node inventory as on a 41-node one."""
    bursts_per_day: float = 4.0
    """``bursts``: mean number of bursts a day (at least one burst in any run)."""
    burst_window_s: float = 300.0
    """``bursts``: seconds over which one burst's jobs arrive."""

    def __post_init__(self) -> None:
        if self.arrivals not in ARRIVAL_PROCESSES:
            raise ValueError(
                f"arrivals: {self.arrivals!r} is not one of {', '.join(ARRIVAL_PROCESSES)}"
            )
        # Upper bounds keep a typo from asking for millions of jobs (the workload is held in
        # memory): four times what the cluster can do already leaves a queue that never drains.
        check_number("load", self.load, low=0.0, low_open=True, high=MAX_LOAD)
        for name in _SHARE_FIELDS:
            check_number(name, getattr(self, name), low=0.0, high=1.0)
        for group in _MIX_GROUPS:
            total = sum(getattr(self, name) for name in group)
            if not math.isclose(total, 1.0, abs_tol=1e-6):
                raise ValueError(f"{' + '.join(group)} must sum to 1, got {total:g}")
        for name in ("batch_priority", "default_priority", "urgent_priority"):
            _integer(name, getattr(self, name))
        check_number("diurnal_peak_hour", self.diurnal_peak_hour, low=0.0, high=24.0)
        check_number("bursts_per_day", self.bursts_per_day, low=0.0, low_open=True, high=1440.0)
        check_number("burst_window_s", self.burst_window_s, low=0.0, high=86400.0)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> GeneratorOptions:
        """Options from a plain mapping (a run spec's ``generator``); unknown keys are an
        error that names them and the accepted ones."""
        accepted = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(accepted))
        if unknown:
            raise ValueError(
                f"unknown generator option(s): {', '.join(unknown)}; "
                f"accepted: {', '.join(accepted)}"
            )
        return cls(**dict(data))


_SHARE_FIELDS = (
    "cpu_small_share",
    "cpu_medium_share",
    "cpu_large_share",
    "gpu_inference_share",
    "gpu_training_share",
    "gpu_distributed_share",
    "perf_ratio",
    "urgent_share",
    "gang_all_share",
    "cpu_load_on_gpu_nodes",
    "diurnal_trough_ratio",
    "burst_share",
)
_MIX_GROUPS = (
    ("cpu_small_share", "cpu_medium_share", "cpu_large_share"),
    ("gpu_inference_share", "gpu_training_share", "gpu_distributed_share"),
)


def check_number(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    if low is not None and (value <= low if low_open else value < low):
        raise ValueError(f"{name}: must be {'>' if low_open else '>='} {low:g}, got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"{name}: must be <= {high:g}, got {value!r}")


def _integer(name: str, value: object, *, low: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    if low is not None and value < low:
        raise ValueError(f"{name}: must be >= {low}, got {value}")
