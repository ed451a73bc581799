"""NodeTwin: desired state for one node (spec) and the digital twin's output (status).

The object is cluster-scoped and named exactly after its node.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from joulie.api.base import (
    Condition,
    K8sModel,
    NonNegativeInt,
    Number,
    ObjectMeta,
    Percent,
    Timestamp,
    Watts,
)
from joulie.api.enums import (
    Boost,
    CpuGovernorPreset,
    GpuCapScope,
    GpuGovernorPreset,
    Profile,
    SchedulableClass,
)
from joulie.api.keys import NODE_TWIN_KIND

Score = Annotated[Number, Field(ge=0, le=100)]


class CpuGovernorSpec(K8sModel):
    preset: CpuGovernorPreset
    """Vendor-neutral CPU governor preset; the agent maps it to the node's native settings."""
    boost: Boost | None = None
    """Whether the CPU may boost above its nominal frequency; unset leaves the node's setting."""


class CpuCoreCeiling(K8sModel):
    """A frequency ceiling on the cores a pod holds exclusively (the kubelet's static CPU
    manager policy), by the pod's workload class."""

    at_nominal: bool | None = None
    """Ceiling at the cores' nominal (base, non-boost) frequency; wins over the percentage on
    cores that state their nominal frequency."""
    max_freq_pct_of_max: Percent | None = None
    """Ceiling as a percentage of the cores' highest frequency."""


class CpuClassCaps(K8sModel):
    """What the cores a pod holds exclusively run at, by the pod's workload class; a class left
    out, and every core no pod holds exclusively, follow the node-level CPU intent."""

    performance: CpuCoreCeiling | None = None
    """Cores held by a performance pod."""
    standard: CpuCoreCeiling | None = None
    """Cores held by a standard pod."""


class CpuSpec(K8sModel):
    package_power_cap_watts: Watts | None = None
    """CPU power cap in watts for each package (socket), not for the node; takes precedence over
    the percentage."""
    package_power_cap_pct_of_max: Percent | None = None
    """CPU package power cap as a percentage of the node's maximum package power."""
    governor: CpuGovernorSpec | None = None
    """CPU governor preset; absent means the agent keeps (or restores) the node's own setting."""
    class_caps: CpuClassCaps | None = None
    """Frequency ceilings of exclusively held cores by their pod's class (the class_caps policy);
    absent: every core follows the governor preset."""


class GpuPowerCap(K8sModel):
    scope: GpuCapScope | None = None
    """What the cap applies to; only perGpu is defined."""
    cap_watts_per_gpu: Watts | None = None
    """Absolute cap per GPU in watts; takes precedence over the percentage."""
    cap_pct_of_max: Percent | None = None
    """Cap per GPU as a percentage of the device's maximum power limit."""


class GpuGovernorSpec(K8sModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.computeClockCeilingPctOfMax) || self.preset == 'efficient'",
                    "message": "computeClockCeilingPctOfMax is only valid with preset efficient",
                }
            ]
        }
    )

    preset: GpuGovernorPreset
    """Vendor-neutral GPU clock preset; the agent maps it to the GPUs' native settings."""
    compute_clock_ceiling_pct_of_max: Percent | None = None
    """Graphics clock ceiling as a percentage of the maximum clock (only with preset efficient)."""

    @model_validator(mode="after")
    def _ceiling_only_when_efficient(self) -> GpuGovernorSpec:
        # Mirrors the CEL rule above, so an invalid spec fails in Python before it is sent.
        if (
            self.compute_clock_ceiling_pct_of_max is not None
            and self.preset is not GpuGovernorPreset.EFFICIENT
        ):
            raise ValueError("computeClockCeilingPctOfMax is only valid with preset efficient")
        return self


class GpuClassCaps(K8sModel):
    """What each GPU runs at by the workload class of the pod on it, board by board; a class
    left out follows ``powerCap``."""

    performance: GpuPowerCap | None = None
    """A board a performance pod runs on."""
    standard: GpuPowerCap | None = None
    """A board a standard pod runs on (the board's energy-optimal cap)."""
    idle: GpuPowerCap | None = None
    """A board no pod runs on."""


class GpuSpec(K8sModel):
    power_cap: GpuPowerCap | None = None
    """Per-GPU power cap intent."""
    governor: GpuGovernorSpec | None = None
    """GPU governor preset; absent means the agent keeps (or restores) the GPUs' own setting."""
    class_caps: GpuClassCaps | None = None
    """Per-device caps by the class of each board's pod (the class_caps policy); absent: every
    board takes ``powerCap``."""


class PolicySpec(K8sModel):
    name: str | None = None
    """The policy that produced this spec (provenance, for humans and debugging)."""


class NodeTwinSpec(K8sModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.nodeName == oldSelf.nodeName", "message": "nodeName is immutable"}
            ]
        }
    )

    node_name: Annotated[str, Field(min_length=1, max_length=253)]
    """Name of the node this twin describes (equal to the object's name)."""
    profile: Profile
    """Power profile the node should run at."""
    cpu: CpuSpec | None = None
    """CPU power intent."""
    gpu: GpuSpec | None = None
    """GPU power intent."""
    policy: PolicySpec | None = None
    """Provenance of the decision."""


class PowerMeasurement(K8sModel):
    source: str | None = None
    """Where measuredNodePowerW came from (static, http, prometheus, or a failure marker)."""
    measured_node_power_w: Number | None = None
    """Measured power of the whole node in watts."""
    cpu_capped_power_w: Number | None = None
    """CPU power budget under the current cap, in watts."""
    gpu_capped_power_w: Number | None = None
    """GPU power budget under the current cap, in watts."""
    node_capped_power_w: Number | None = None
    """Node power budget under the current caps, in watts."""
    cpu_tdp_w: Number | None = None
    """Uncapped CPU power (TDP) of the node, in watts."""
    gpu_tdp_w: Number | None = None
    """Uncapped GPU power of the node, in watts."""
    node_tdp_w: Number | None = None
    """Uncapped node power, in watts."""
    power_trend_w_per_min: Number | None = None
    """Rate of change of measured power, in watts per minute."""


class EffectiveCapState(K8sModel):
    cpu_pct: Number | None = None
    """CPU cap the twin used, as a percentage of maximum."""
    gpu_pct: Number | None = None
    """GPU cap the twin used, as a percentage of maximum."""


class ControlFeedback(K8sModel):
    backend: str | None = None
    """Backend that acted (for example host-rapl, nvml, http)."""
    result: str | None = None
    """Outcome: applied, applied-unverified, equivalent, unsupported, not-applied, refused, drift,
    contended, disabled, restored or error."""
    message: str | None = None
    """Human-readable detail."""
    updated_at: Timestamp | None = None
    """When the agent last reported this outcome."""


class ControlStatus(K8sModel):
    cpu: ControlFeedback | None = None
    """Outcome of the CPU cap."""
    gpu: ControlFeedback | None = None
    """Outcome of the GPU cap."""
    cpu_governor: ControlFeedback | None = None
    """Outcome of the CPU governor preset."""
    gpu_governor: ControlFeedback | None = None
    """Outcome of the GPU governor preset."""


class NodeTwinStatus(K8sModel):
    schedulable_class: SchedulableClass | None = None
    """Class the scheduler extender filters and scores by."""
    predicted_power_headroom_score: Number | None = None
    """Unused share of the capped power budget, in percent (negative when over budget)."""
    predicted_cooling_stress_score: Score | None = None
    """Measured power against uncapped TDP, scaled by ambient temperature, 0-100."""
    predicted_psu_stress_score: Score | None = None
    """Rack (else cluster) power against a 50 kW supply, 0-100."""
    hardware_density_score: Score | None = None
    """Compute density proxy against a 192-core, 8-GPU reference node, 0-100."""
    estimated_pue: Number | None = Field(default=None, alias="estimatedPUE")
    """Power usage effectiveness implied by cooling stress (1.05-1.40)."""
    power_measurement: PowerMeasurement | None = None
    """Measured and derived power figures."""
    effective_cap_state: EffectiveCapState | None = None
    """The cap percentages the twin computed with."""
    control_status: ControlStatus | None = None
    """Feedback from the node agent on the last control attempts."""
    conditions: (
        Annotated[
            list[Condition],
            Field(
                json_schema_extra={
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["type"],
                }
            ),
        ]
        | None
    ) = None
    """Conditions, for example AgentReporting."""
    observed_generation: NonNegativeInt | None = None
    """The spec generation the controller manager last acted on."""


class NodeTwin(K8sModel):
    api_version: Literal["joulie.io/v1alpha1"] = "joulie.io/v1alpha1"
    kind: Literal["NodeTwin"] = NODE_TWIN_KIND
    metadata: ObjectMeta
    spec: NodeTwinSpec
    status: NodeTwinStatus | None = None
