"""The NodeHardware status of a node the simulator stands in for: the models it simulates, their
power ranges, and every preset (the simulator accepts them all).

Written once here because two parts of Joulie publish or reason from it: the agent in pool mode
writes it to the cluster for KWOK nodes, and the standalone simulator hands the same status to
the manager's and the extender's decisions, so both see exactly what a KWOK cluster would show.
"""

from __future__ import annotations

from typing import Any

from joulie.api.enums import CpuGovernorPreset, GpuGovernorPreset
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
from joulie.api.telemetry import HardwareSummary
from joulie.hardware.catalog import Catalog, overall_quality

__all__ = ["SIMULATED", "simulated_hardware"]

SIMULATED = "simulated"
"""What a preset means on a node the simulator stands in for."""


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
