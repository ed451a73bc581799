"""What the agent writes about a node, as plain wire dicts: its NodeHardware status and the
``controlStatus`` part of its NodeTwin status.

Both are built from what the backend said, and both keep their time stamps only where they mean
something: NodeHardware's ``updatedAt`` is the heartbeat (the caller decides when one is due), and
a control outcome's ``updatedAt`` changes only when the outcome does, so an unchanged outcome
costs no write.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from joulie.agent.outcomes import ComponentOutcome
from joulie.api.enums import ControlResult, CpuGovernorPreset, GpuGovernorPreset
from joulie.api.nodehardware import (
    Capabilities,
    CpuCapRange,
    CpuGovernorStatus,
    CpuHardware,
    GpuCapRange,
    GpuGovernorStatus,
    GpuHardware,
    NodeHardwareStatus,
    PresetSupport,
    Quality,
)
from joulie.api.telemetry import ControlResponse, HardwareSummary, Outcome
from joulie.hardware.catalog import Catalog, overall_quality

OWN_SETTING = "the node's own setting is in force"

SIMULATED = "simulated"
"""What a preset means on a node the simulator stands in for."""

COMPONENTS = {
    "cpu": "cpu_cap",
    "gpu": "gpu_cap",
    "cpuGovernor": "cpu_governor",
    "gpuGovernor": "gpu_governor",
}
"""controlStatus key -> the ControlResponse outcome it reports."""


def simulated_hardware(summary: HardwareSummary, catalog: Catalog) -> dict[str, Any]:
    """NodeHardware.status (wire form, without ``updatedAt``) of a node served through the HTTP
    backend: the models the simulator models, its power ranges, and every preset, since the
    simulator accepts them all."""
    sockets = max(summary.sockets, 1)
    cpu_match = catalog.match_cpu(summary.cpu_model)
    cpu_key = cpu_match.key
    gpus = summary.gpu_count > 0
    gpu_match = catalog.match_gpu(summary.gpu_model) if gpus else None
    gpu_key = gpu_match.key if gpu_match else None
    quality = overall_quality(cpu_match.quality, *([gpu_match.quality] if gpu_match else []))
    status = NodeHardwareStatus(
        cpu=CpuHardware(
            raw_model=summary.cpu_model,
            model=cpu_key,
            sockets=summary.sockets,
            cap_range=CpuCapRange(type=SIMULATED, max_watts_per_socket=summary.cpu_max_w / sockets),
            governor=CpuGovernorStatus(
                driver=SIMULATED,
                presets=[
                    PresetSupport(preset=p.value, native=SIMULATED) for p in CpuGovernorPreset
                ],
                writable=True,
            ),
            control_available=True,
            telemetry_available=True,
        ),
        gpu=GpuHardware(
            present=gpus,
            raw_model=summary.gpu_model if gpus else None,
            model=gpu_key,
            count=summary.gpu_count,
            cap_range_per_gpu=GpuCapRange(max_watts=summary.gpu_max_w_per_gpu) if gpus else None,
            governor=GpuGovernorStatus(
                mechanism=SIMULATED,
                presets=[
                    PresetSupport(preset=p.value, native=SIMULATED) for p in GpuGovernorPreset
                ],
                writable=True,
            )
            if gpus
            else None,
            control_available=gpus,
            telemetry_available=gpus,
        ),
        capabilities=Capabilities(
            cpu_control=True, gpu_control=gpus, cpu_telemetry=True, gpu_telemetry=gpus
        ),
        quality=Quality(overall=quality),
    )
    return status.to_wire()


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
