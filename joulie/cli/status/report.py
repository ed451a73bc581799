"""The status report: a cluster summary and one row per node, from nodes, twins and pods (pure).

A twin counts as fresh while the manager's Lease is current and its last power reading worked
(the extender's rule: a stale twin scores neutral, so the operator should see which ones are).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from joulie.api import keys
from joulie.api.text_table import aligned
from joulie.cli.status.views import CONTROL_KEYS, TwinView
from joulie.core.twin import measurement_failed
from joulie.kube.projections import SlimNode, SlimPod

UNSET = "-"


@dataclass(frozen=True)
class NodeRow:
    node: str
    profile: str
    schedulable_class: str
    power_w: float | None
    budget_w: float | None
    headroom: float | None
    cooling: float | None
    cpu_cap: str
    gpu_cap: str
    cpu_preset: str
    gpu_preset: str
    controls: dict[str, str]
    agent: str
    fresh: bool


@dataclass(frozen=True)
class Summary:
    nodes: int
    """Nodes with a NodeTwin (the ones Joulie manages)."""
    nodes_without_twin: int
    by_profile: dict[str, int]
    by_class: dict[str, int]
    power_w: float
    """Sum of the measured power of the nodes that report one."""
    budget_w: float
    mean_headroom: float | None
    min_headroom: float | None
    mean_cooling: float | None
    peak_cooling: float | None
    running_pods: dict[str, int]
    """Running pods per workload class (performance / standard)."""
    pending_pods: dict[str, int]
    agents_not_reporting: int
    stale_twins: int
    manager_lease_current: bool
    control_results: dict[str, int] = field(default_factory=dict)
    """How many control entries (CPU cap, GPU cap, presets) report each result."""


@dataclass(frozen=True)
class Report:
    summary: Summary
    rows: list[NodeRow]

    def to_json(self) -> dict[str, Any]:
        return {"summary": asdict(self.summary), "nodes": [asdict(row) for row in self.rows]}


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def workload_class(pod: SlimPod) -> str:
    """A pod's class as the manager and the extender read it (anything else is standard)."""
    value = pod.annotations.get(keys.WORKLOAD_CLASS_ANNOTATION, "")
    return "performance" if value == "performance" else "standard"


def build(
    nodes: Iterable[SlimNode],
    twins: Iterable[TwinView],
    pods: Iterable[SlimPod],
    *,
    manager_lease_current: bool,
) -> Report:
    """The report over the nodes, twins and pods as the caches hold them."""
    twin_list = sorted(twins, key=lambda t: t.name)
    twinned = {t.name for t in twin_list}
    rows = [
        NodeRow(
            node=t.name,
            profile=t.profile or UNSET,
            schedulable_class=t.schedulable_class or UNSET,
            power_w=t.power_w,
            budget_w=t.budget_w,
            headroom=t.headroom,
            cooling=t.cooling,
            cpu_cap=t.cpu_cap or UNSET,
            gpu_cap=t.gpu_cap or UNSET,
            cpu_preset=t.cpu_preset or UNSET,
            gpu_preset=t.gpu_preset or UNSET,
            controls=dict(t.controls),
            agent=t.agent or UNSET,
            fresh=manager_lease_current and not measurement_failed(t.source or None),
        )
        for t in twin_list
    ]
    running: Counter[str] = Counter()
    pending: Counter[str] = Counter()
    for pod in pods:
        if pod.deleting:
            continue
        if pod.phase == "Running":
            running[workload_class(pod)] += 1
        elif pod.phase == "Pending":
            pending[workload_class(pod)] += 1
    headrooms = [r.headroom for r in rows if r.headroom is not None]
    coolings = [r.cooling for r in rows if r.cooling is not None]
    results = Counter(result for t in twin_list for result in t.controls.values())
    summary = Summary(
        nodes=len(rows),
        nodes_without_twin=sum(1 for n in nodes if n.name not in twinned),
        by_profile=dict(sorted(Counter(r.profile for r in rows).items())),
        by_class=dict(sorted(Counter(r.schedulable_class for r in rows).items())),
        power_w=math.fsum(r.power_w for r in rows if r.power_w is not None),
        budget_w=math.fsum(r.budget_w for r in rows if r.budget_w is not None),
        mean_headroom=_mean(headrooms),
        min_headroom=min(headrooms) if headrooms else None,
        mean_cooling=_mean(coolings),
        peak_cooling=max(coolings) if coolings else None,
        running_pods={c: running[c] for c in ("performance", "standard")},
        pending_pods={c: pending[c] for c in ("performance", "standard")},
        agents_not_reporting=sum(1 for t in twin_list if not t.agent_ok),
        stale_twins=sum(1 for r in rows if not r.fresh),
        manager_lease_current=manager_lease_current,
        control_results=dict(sorted(results.items())),
    )
    return Report(summary, rows)


# --- text ------------------------------------------------------------------------------------


def _num(value: float | None, digits: int = 0) -> str:
    return UNSET if value is None else f"{value:.{digits}f}"


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {name}" for name, n in counts.items()) or "none"


def controls_text(controls: Mapping[str, str]) -> str:
    """One result when every control agrees, else each control with its own."""
    if not controls:
        return UNSET
    distinct = set(controls.values())
    if len(distinct) == 1:
        return next(iter(distinct))
    return " ".join(f"{key}={controls[key]}" for key in CONTROL_KEYS if key in controls)


def summary_lines(summary: Summary) -> list[str]:
    """The cluster summary as a few lines of text (the live demo view uses them too)."""
    s = summary
    lease = "current" if s.manager_lease_current else "NOT current (every twin is stale)"
    untwinned = f" ({s.nodes_without_twin} more without a twin)" if s.nodes_without_twin else ""
    return [
        f"nodes {s.nodes}{untwinned}: by profile {_counts(s.by_profile)}; "
        f"by class {_counts(s.by_class)}",
        f"power {s.power_w / 1000:.2f} kW of {s.budget_w / 1000:.2f} kW budget; headroom mean "
        f"{_num(s.mean_headroom)} min {_num(s.min_headroom)}; cooling stress mean "
        f"{_num(s.mean_cooling)} peak {_num(s.peak_cooling)}",
        f"pods running {_counts(s.running_pods)}; pending {_counts(s.pending_pods)}",
        f"agents not reporting {s.agents_not_reporting}; stale twins {s.stale_twins}; "
        f"manager Lease {lease}",
        f"control results {_counts(s.control_results)}",
    ]


COLUMNS = (
    "NODE",
    "PROFILE",
    "CLASS",
    "POWER-W",
    "BUDGET-W",
    "HEADROOM",
    "COOLING",
    "CPU-CAP",
    "GPU-CAP",
    "CPU-GOV",
    "GPU-GOV",
    "CONTROL",
    "AGENT",
)


def table(report: Report) -> str:
    """The summary, then one aligned row per node."""
    cells = [
        (
            r.node,
            r.profile,
            r.schedulable_class + ("" if r.fresh else " (stale)"),
            _num(r.power_w),
            _num(r.budget_w),
            _num(r.headroom),
            _num(r.cooling),
            r.cpu_cap,
            r.gpu_cap,
            r.cpu_preset,
            r.gpu_preset,
            controls_text(r.controls),
            r.agent,
        )
        for r in report.rows
    ]
    lines = [*summary_lines(report.summary), "", *aligned([COLUMNS, *cells])]
    return "\n".join(lines)
