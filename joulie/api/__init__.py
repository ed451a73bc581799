"""Joulie's contracts: the NodeTwin and NodeHardware models, keys, enums and shared formats."""

from joulie.api.enums import (
    Boost,
    ControlResult,
    CpuGovernorPreset,
    DiscoveryQuality,
    GpuGovernorPreset,
    Profile,
    SchedulableClass,
    WorkloadClass,
)
from joulie.api.gpu import GpuResourceKind, gpu_resource_kind, pod_gpu_count
from joulie.api.nodehardware import NodeHardware, NodeHardwareSpec, NodeHardwareStatus
from joulie.api.nodetwin import NodeTwin, NodeTwinSpec, NodeTwinStatus

__all__ = [
    "Boost",
    "ControlResult",
    "CpuGovernorPreset",
    "DiscoveryQuality",
    "GpuGovernorPreset",
    "GpuResourceKind",
    "NodeHardware",
    "NodeHardwareSpec",
    "NodeHardwareStatus",
    "NodeTwin",
    "NodeTwinSpec",
    "NodeTwinStatus",
    "Profile",
    "SchedulableClass",
    "WorkloadClass",
    "gpu_resource_kind",
    "pod_gpu_count",
]
