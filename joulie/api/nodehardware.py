"""NodeHardware: what the node agent discovered about its node, and what it can control.

Agent-owned and status-oriented; the controller manager resolves it against the hardware catalog.
Cluster-scoped and named exactly after its node.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from joulie.api.base import K8sModel, NonNegative, NonNegativeInt, ObjectMeta, Timestamp
from joulie.api.enums import DiscoveryQuality
from joulie.api.keys import NODE_HARDWARE_KIND


class PresetSupport(K8sModel):
    preset: str
    """Vendor-neutral preset name."""
    native: str | None = None
    """What the preset means on this node, in the driver's own terms."""
    result: str | None = None
    """Outcome of the last attempt to apply or verify this preset."""


class CpuCapRange(K8sModel):
    type: str | None = None
    """Mechanism the range comes from (for example rapl)."""
    min_watts_per_socket: NonNegative | None = None
    """Lowest package cap the node accepts, per socket, in watts."""
    max_watts_per_socket: NonNegative | None = None
    """Highest package cap the node accepts, per socket, in watts."""


class CpuLandmarks(K8sModel):
    min_freq_m_hz: NonNegative | None = Field(default=None, alias="minFreqMHz")
    """Lowest frequency cpufreq allows, in MHz."""
    nominal_freq_m_hz: NonNegative | None = Field(default=None, alias="nominalFreqMHz")
    """Nominal (base, non-boost) frequency, in MHz."""
    max_boost_m_hz: NonNegative | None = Field(default=None, alias="maxBoostMHz")
    """Highest boost frequency, in MHz."""
    lowest_nonlinear_freq_m_hz: NonNegative | None = Field(
        default=None, alias="lowestNonlinearFreqMHz"
    )
    """Lowest frequency below which efficiency drops off (amd-pstate), in MHz."""


class CpuGovernorStatus(K8sModel):
    driver: str | None = None
    """cpufreq scaling driver (for example intel_pstate, amd-pstate-epp, acpi-cpufreq)."""
    current: str | None = None
    """Current native governor setting."""
    presets: list[PresetSupport] | None = None
    """Presets this node can express; a preset not listed is never written to it."""
    writable: bool | None = None
    """Whether the agent can change the governor."""
    baseline: dict[str, str] | None = None
    """Native settings recorded before the agent's first write; restored when control ends."""


class GpuCapRange(K8sModel):
    min_watts: NonNegative | None = None
    """Lowest per-GPU power limit the device accepts, in watts."""
    max_watts: NonNegative | None = None
    """Highest per-GPU power limit the device accepts, in watts."""
    default_watts: NonNegative | None = None
    """The device's default power limit, in watts."""


class ClockRange(K8sModel):
    min_m_hz: NonNegative | None = Field(default=None, alias="minMHz")
    """Lowest supported clock, in MHz."""
    max_m_hz: NonNegative | None = Field(default=None, alias="maxMHz")
    """Highest supported clock, in MHz."""


class GpuBaseline(K8sModel):
    index: NonNegativeInt
    """Device index on the node."""
    uuid: str | None = None
    """Device UUID, so a baseline is never restored onto a different board."""
    settings: dict[str, str] | None = None
    """Native settings recorded before the agent's first write."""


class GpuGovernorStatus(K8sModel):
    mechanism: str | None = None
    """How clocks are set (for example nvml, nvidia-smi, amd-smi, sysfs)."""
    current: str | None = None
    """Current native clock setting."""
    graphics_clock: ClockRange | None = None
    """Supported graphics clock range."""
    presets: list[PresetSupport] | None = None
    """Presets these GPUs can express; a preset not listed is never written to them."""
    writable: bool | None = None
    """Whether the agent can change GPU clocks."""
    baseline: list[GpuBaseline] | None = None
    """Per-GPU native settings recorded before the agent's first write."""


class CpuHardware(K8sModel):
    raw_model: str | None = None
    """Model string as the hardware reports it."""
    model: str | None = None
    """Hardware catalog key, when the model was recognised."""
    vendor: str | None = None
    """CPU vendor id (GenuineIntel, AuthenticAMD, ...)."""
    sockets: NonNegativeInt | None = None
    """Number of CPU packages."""
    total_cores: NonNegativeInt | None = None
    """Logical CPUs on the node (hardware threads, as the kernel counts them)."""
    cores_per_socket: NonNegativeInt | None = None
    """Logical CPUs per package."""
    physical_cores: NonNegativeInt | None = None
    """Physical cores on the node, all packages together (without SMT siblings). Hardware
    density is computed from these, never from the logical count."""
    driver_family: str | None = None
    """cpufreq driver family."""
    cap_range: CpuCapRange | None = None
    """Package power cap range found at run time."""
    landmarks: CpuLandmarks | None = None
    """cpufreq frequency landmarks."""
    governor: CpuGovernorStatus | None = None
    """cpufreq governor state and the presets the node accepts."""
    control_available: bool | None = None
    """Whether the agent can cap CPU power on this node."""
    telemetry_available: bool | None = None
    """Whether the agent can measure CPU power on this node."""
    warnings: list[str] | None = None
    """Discovery problems worth a human's attention."""


class GpuHardware(K8sModel):
    present: bool | None = None
    """Whether the node has GPUs."""
    raw_model: str | None = None
    """Model string as the driver reports it."""
    model: str | None = None
    """Hardware catalog key, when the model was recognised."""
    vendor: str | None = None
    """GPU vendor (nvidia, amd, intel)."""
    count: NonNegativeInt | None = None
    """Number of GPUs."""
    cap_range_per_gpu: GpuCapRange | None = None
    """Per-GPU power limit range found at run time."""
    current_cap_watts: NonNegative | None = None
    """Current per-GPU power limit, in watts."""
    governor: GpuGovernorStatus | None = None
    """GPU clock governor state and the presets the GPUs accept."""
    control_available: bool | None = None
    """Whether the agent can cap GPU power on this node."""
    telemetry_available: bool | None = None
    """Whether the agent can measure GPU power on this node."""
    warnings: list[str] | None = None
    """Discovery problems worth a human's attention."""


class Capabilities(K8sModel):
    cpu_control: bool | None = None
    gpu_control: bool | None = None
    cpu_telemetry: bool | None = None
    gpu_telemetry: bool | None = None


class Quality(K8sModel):
    overall: DiscoveryQuality | None = None
    """exact: every model recognised; heuristic: a raw model present but not recognised;
    unavailable: no model found."""
    warnings: list[str] | None = None
    """Why the quality is not exact."""


class NodeHardwareSpec(K8sModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.nodeName == oldSelf.nodeName", "message": "nodeName is immutable"}
            ]
        }
    )

    node_name: Annotated[str, Field(min_length=1, max_length=253)]
    """Name of the node this object describes (equal to the object's name)."""


class NodeHardwareStatus(K8sModel):
    cpu: CpuHardware | None = None
    """Discovered CPU."""
    gpu: GpuHardware | None = None
    """Discovered GPUs."""
    capabilities: Capabilities | None = None
    """What the agent can measure and control here."""
    quality: Quality | None = None
    """How well the hardware was recognised."""
    updated_at: Timestamp | None = None
    """When the agent last published this status."""


class NodeHardware(K8sModel):
    api_version: Literal["joulie.io/v1alpha1"] = "joulie.io/v1alpha1"
    kind: Literal["NodeHardware"] = NODE_HARDWARE_KIND
    metadata: ObjectMeta
    spec: NodeHardwareSpec
    status: NodeHardwareStatus | None = None
