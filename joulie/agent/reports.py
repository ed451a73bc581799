"""What the agent writes about a node's control, as plain wire dicts: the ``controlStatus`` part
of its NodeTwin status, built from what the backend said. A control outcome's ``updatedAt``
changes only when the outcome does, so an unchanged outcome costs no write. (The NodeHardware
status of a simulated node is :mod:`joulie.hardware.simulated`, shared with the standalone
simulator.)
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from joulie.agent.outcomes import ComponentOutcome
from joulie.api.enums import ControlResult
from joulie.api.telemetry import ControlResponse, Outcome

OWN_SETTING = "the node's own setting is in force"

COMPONENTS = {
    "cpu": "cpu_cap",
    "gpu": "gpu_cap",
    "cpuGovernor": "cpu_governor",
    "gpuGovernor": "gpu_governor",
}
"""controlStatus key -> the ControlResponse outcome it reports."""


def control_status(
    response: ControlResponse,
    stored: Mapping[str, Any],
    backend: str,
    now: datetime,
) -> dict[str, Any]:
    """``controlStatus`` after ``response``: one entry per component the request touched, the
    others as ``stored``; an entry whose result and message did not change keeps its time."""
    status: dict[str, Any] = {k: dict(v) for k, v in stored.items() if isinstance(v, Mapping)}
    for key, field in COMPONENTS.items():
        outcome: Outcome | None = getattr(response, field)
        if outcome is not None:
            status[key] = feedback(outcome.result, outcome.message, backend, stored.get(key), now)
    return status


def host_control_status(
    outcomes: Mapping[str, ComponentOutcome],
    stored: Mapping[str, Any],
    backend: str,
    now: datetime,
) -> dict[str, Any]:
    """``controlStatus`` after a pass on the node's own hardware: one entry per component with a
    result. A component with none (nothing asked, nothing of the agent's left to restore) that
    has an entry says ``restored``: the node's own setting is what is in force."""
    status: dict[str, Any] = {k: dict(v) for k, v in stored.items() if isinstance(v, Mapping)}
    for key, outcome in outcomes.items():
        if outcome.result is not None:
            result, message = outcome.result, outcome.message
        elif key in status:
            result, message = ControlResult.RESTORED, OWN_SETTING
            if status[key].get("result") == result.value:
                message = str(status[key].get("message", message))
        else:
            continue
        status[key] = feedback(result, message, backend, stored.get(key), now)
    return status


def feedback(
    result: ControlResult,
    message: str,
    backend: str,
    previous: Mapping[str, Any] | None,
    now: datetime,
) -> dict[str, Any]:
    entry = {"backend": backend, "result": result.value, "message": message}
    if previous is not None and all(previous.get(k) == v for k, v in entry.items()):
        entry["updatedAt"] = previous.get("updatedAt") or _stamp(now)
    else:
        entry["updatedAt"] = _stamp(now)
    return entry


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
