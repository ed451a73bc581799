"""One standalone simulation run, described by plain JSON-able values: a point of a sweep's
grid, the unit one index of a Kubernetes Indexed Job runs, and what a result is labelled with;
and the embedded scenarios ``joulie simulate --scenario NAME`` starts from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Baseline = Literal["A", "B", "C", "D"]
BASELINES: tuple[Baseline, ...] = ("A", "B", "C")
"""The baselines a run compares by default. A: no Joulie (every node performance, Joulie's
annotations ignored); B: static_partition; C: queue_aware_v1 (upstream's three)."""
ALL_BASELINES: tuple[Baseline, ...] = ("A", "B", "C", "D")
"""Every baseline: also D, class_caps with performance work first in the queue
(manifests/priority), Joulie's own beyond upstream's."""

MAX_HOURS = 366 * 24.0
"""The longest run of arrivals taken: a year (the workload is generated in memory up front)."""


class RunSpec(BaseModel):
    # No inf or NaN anywhere: `--hours inf` would never end.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    scenario: str = "default"
    """Label of the scenario in tables and file names."""
    inventory: str = "default"
    """An embedded inventory (``default``, ``exp01``, ``exp01-5k`` ... ``exp03-5k``) or a path."""
    trace: str | None = None
    """A JSONL trace file; None: the generator makes the workload from ``generator`` and
    ``seed``."""
    generator: dict[str, Any] = Field(default_factory=dict)
    """Generator options (field names of ``joulie.sim.generator.GeneratorOptions``)."""
    baseline: Baseline = "A"
    seed: int = Field(1, ge=0, lt=2**63)
    hours: float = Field(24.0, gt=0, le=MAX_HOURS)
    """Hours of arrivals the generator produces."""
    limit_hours: float | None = Field(None, gt=0, le=10 * MAX_HOURS)
    """Stop the run here even if workloads remain (None: run until every workload finished,
    or at most ten times ``hours``)."""
    governors: bool = False
    """Write governor presets (GOVERNOR_CONTROL=all) in B and C."""
    lifecycle: bool = False
    """Run the node lifecycle: idle nodes drained and powered off, booted again for pending
    work (its ``lifecycle_*`` params); the baseline's label gets ``+L``."""
    params: dict[str, float | int | str | bool] = Field(default_factory=dict)
    """Overrides of the policy and intent settings and engine knobs (see
    ``joulie.sim.engine.PARAMS``)."""
    warmup_hours: float | None = Field(None, ge=0, le=MAX_HOURS)
    """Measure only from here to the end of arrivals (``hours``, or a trace's last
    submission): energy, completed work and the slowdown of the workloads submitted in that
    window are reported apart, and savings are taken over it. None: no measurement window."""

    @model_validator(mode="after")
    def _warmup_before_the_end(self) -> RunSpec:
        if self.trace is None and self.warmup_hours is not None and self.warmup_hours >= self.hours:
            raise ValueError(
                f"warmup_hours {self.warmup_hours:g} must end before the arrivals do "
                f"(hours {self.hours:g})"
            )
        return self


@dataclass(frozen=True, slots=True)
class Preset:
    """An embedded scenario: the settings ``--scenario NAME`` starts from; every option given
    on the command line still wins (``--gen`` keys on top of the preset's)."""

    description: str
    hours: float = 24.0
    seeds: tuple[int, ...] = (1,)
    generator: Mapping[str, Any] = field(default_factory=dict)
    warmup_hours: float | None = None


STEADY_STATE_LOAD = 0.6
"""The steady-state scenario's offered load: over the week, the work submitted asks for 60 % of
the CPU-only nodes' core-hours and of each GPU kind's GPU-hours (the generator's ``load``)."""

PRESETS: Mapping[str, Preset] = {
    "default": Preset("a day of Poisson arrivals at offered load 0.6 (the generator's defaults)"),
    "steady-state": Preset(
        "a week (168 h) of diurnal arrivals at offered load 0.6, the first day a warm-up: "
        "energy, work and slowdown counted from 24 h to the end of arrivals; seeds 1, 2, 3",
        hours=168.0,
        seeds=(1, 2, 3),
        generator={"arrivals": "diurnal", "load": STEADY_STATE_LOAD},
        warmup_hours=24.0,
    ),
}
"""Embedded scenarios by name; any other ``--scenario`` is a label for the default settings."""


def preset(name: str) -> Preset:
    """The embedded scenario ``name``, or the default one for a plain label."""
    return PRESETS.get(name, PRESETS["default"])
