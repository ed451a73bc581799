"""A node's whole NodeHardware status from what discovery found: the CPU and GPU blocks, what the
agent can measure and control, and how well the hardware was recognised.

Pure: discovery has done the reading. Quality is that of the least recognised device class
present (``joulie.hardware.catalog.overall_quality``), with the reasons listed.
"""

from __future__ import annotations

from joulie.agent.baseline import Baseline
from joulie.agent.cpu_discovery import CpuDiscovery
from joulie.agent.cpu_hardware_status import cpu_hardware_status
from joulie.agent.gpu.device import GpuDiscovery
from joulie.agent.gpu.discovery import gpu_hardware_status
from joulie.api.enums import DiscoveryQuality
from joulie.api.nodehardware import Capabilities, NodeHardwareStatus, Quality
from joulie.hardware.catalog import Catalog, overall_quality

__all__ = ["node_hardware_status"]


def node_hardware_status(
    cpu: CpuDiscovery, gpu: GpuDiscovery, catalog: Catalog, baseline: Baseline | None = None
) -> NodeHardwareStatus:
    """NodeHardware.status without ``updatedAt`` (the publisher stamps its heartbeat);
    ``baseline``: the agent's record, whose GPU entries the GPU governor block lists."""
    cpu_status = cpu_hardware_status(cpu, catalog)
    gpu_block = gpu_hardware_status(gpu, catalog, baseline)
    qualities = [cpu_status.quality]
    reasons = list(cpu_status.quality_warnings)
    if gpu.present:
        match = catalog.match_gpu(gpu.raw_model)
        qualities.append(match.quality)
        if match.quality is DiscoveryQuality.HEURISTIC:
            reasons.append(f"GPU model {gpu.raw_model!r} is not in the hardware catalog")
        elif match.quality is DiscoveryQuality.UNAVAILABLE:
            reasons.append("GPUs found, but no model name")
    return NodeHardwareStatus(
        cpu=cpu_status.cpu,
        gpu=gpu_block,
        capabilities=Capabilities(
            cpu_control=cpu.control_available,
            gpu_control=gpu.present and gpu.control_available,
            cpu_telemetry=cpu.telemetry_available,
            gpu_telemetry=gpu.present and gpu.telemetry_available,
        ),
        quality=Quality(overall=overall_quality(*qualities), warnings=reasons or None),
    )
