"""One standalone simulation run, described by plain JSON-able values: a point of a sweep's
grid, the unit one index of a Kubernetes Indexed Job runs, and what a result is labelled with.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Baseline = Literal["A", "B", "C"]
BASELINES: tuple[Baseline, ...] = ("A", "B", "C")
"""A: no Joulie (every node performance, Joulie's annotations ignored); B: static_partition;
C: queue_aware_v1."""


class RunSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

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
    seed: int = 1
    hours: float = Field(24.0, gt=0)
    """Hours of arrivals the generator produces."""
    limit_hours: float | None = Field(None, gt=0)
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
