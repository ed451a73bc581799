"""What the status reads of a NodeTwin, projected once per change (never the whole object).

Every field is read defensively: a twin written by an older manager, or edited by hand, shows
its readable fields and leaves the rest empty instead of failing the whole view.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from joulie.api import keys

CONTROL_KEYS = ("cpu", "gpu", "cpuGovernor", "gpuGovernor")
"""NodeTwin ``status.controlStatus`` entries, in the order the table shows them."""


@dataclass(frozen=True, slots=True)
class TwinView:
    name: str
    profile: str
    """``spec.profile`` (the plan: performance or eco)."""
    schedulable_class: str
    """``status.schedulableClass`` (what the extender enforces; draining during a downgrade)."""
    power_w: float | None
    budget_w: float | None
    """``powerMeasurement.nodeCappedPowerW``: what the node may draw under its caps."""
    headroom: float | None
    cooling: float | None
    source: str
    """``powerMeasurement.source``: where the power figures came from, or why they failed."""
    cpu_cap: str
    gpu_cap: str
    cpu_preset: str
    gpu_preset: str
    controls: Mapping[str, str]
    """Control result per ``CONTROL_KEYS`` entry the agent reported."""
    agent: str
    """The AgentReporting condition's reason (its status when there is no reason)."""
    agent_ok: bool


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _cap(block: Mapping[str, Any], watts_key: str, pct_key: str) -> str:
    watts, pct = _number(block.get(watts_key)), _number(block.get(pct_key))
    if watts is not None:
        return f"{watts:g}W"
    if pct is not None:
        return f"{pct:g}%"
    return ""


def twin_view(raw: Mapping[str, Any]) -> TwinView:
    """A NodeTwin as the status shows it."""
    spec, status = _map(raw.get("spec")), _map(raw.get("status"))
    cpu, gpu = _map(spec.get("cpu")), _map(spec.get("gpu"))
    measurement = _map(status.get("powerMeasurement"))
    reporting: Mapping[str, Any] = {}
    conditions = status.get("conditions")
    for condition in conditions if isinstance(conditions, list) else ():
        if _map(condition).get("type") == keys.AGENT_REPORTING_CONDITION:
            reporting = _map(condition)
    controls = _map(status.get("controlStatus"))
    return TwinView(
        name=str(_map(raw.get("metadata")).get("name", "")),
        profile=_text(spec.get("profile")),
        schedulable_class=_text(status.get("schedulableClass")),
        power_w=_number(measurement.get("measuredNodePowerW")),
        budget_w=_number(measurement.get("nodeCappedPowerW")),
        headroom=_number(status.get("predictedPowerHeadroomScore")),
        cooling=_number(status.get("predictedCoolingStressScore")),
        source=_text(measurement.get("source")),
        cpu_cap=_cap(cpu, "packagePowerCapWatts", "packagePowerCapPctOfMax"),
        gpu_cap=_cap(_map(gpu.get("powerCap")), "capWattsPerGpu", "capPctOfMax"),
        cpu_preset=_text(_map(cpu.get("governor")).get("preset")),
        gpu_preset=_text(_map(gpu.get("governor")).get("preset")),
        controls={
            key: result
            for key in CONTROL_KEYS
            if (result := _text(_map(controls.get(key)).get("result")))
        },
        agent=_text(reporting.get("reason")) or _text(reporting.get("status")),
        agent_ok=reporting.get("status") == "True",
    )
