"""The telemetry/control contract between node backends and their HTTP clients.

The simulator serves it for KWOK nodes; the agent's HTTP backends and the manager's ``http``
power source are its clients. One set of models on both sides, so a field cannot drift.

    GET  /telemetry/{node}  -> TelemetryReport
    POST /control/{node}    ControlRequest -> ControlResponse
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, model_validator

from joulie.api.base import K8sModel, Number, Percent, Timestamp, Watts
from joulie.api.enums import ControlResult, CpuGovernorPreset, GpuGovernorPreset

NonNegative = Annotated[Number, Field(ge=0)]
Fraction01 = Annotated[Number, Field(ge=0, le=1)]


class Strict(K8sModel):
    """Requests are validated strictly: an unknown field is a client bug worth a 400."""

    model_config = ConfigDict(extra="forbid")


class CpuControl(Strict):
    cap_watts: Watts | None = None
    """Node-wide CPU package cap in watts (all sockets); takes precedence over the percentage."""
    cap_pct_of_max: Percent | None = None
    """CPU package cap as a percentage of the node's maximum package power."""
    preset: CpuGovernorPreset | None = None
    """CPU governor preset."""
    clear_cap: bool = False
    """Remove the cap (back to uncapped)."""
    clear_preset: bool = False
    """Remove the preset (back to the hardware default)."""


class GpuControl(Strict):
    cap_watts_per_gpu: Watts | None = None
    """Per-GPU power cap in watts; takes precedence over the percentage."""
    cap_pct_of_max: Percent | None = None
    """Per-GPU cap as a percentage of the device maximum."""
    preset: GpuGovernorPreset | None = None
    """GPU governor preset."""
    clock_ceiling_pct_of_max: Percent | None = None
    """Graphics clock ceiling for the efficient preset."""
    clear_cap: bool = False
    clear_preset: bool = False


class ControlRequest(Strict):
    cpu: CpuControl | None = None
    gpu: GpuControl | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> ControlRequest:
        if self.cpu is None and self.gpu is None:
            raise ValueError("a control request needs a cpu or a gpu block")
        return self


class Outcome(K8sModel):
    result: ControlResult
    message: str = ""


class AppliedControls(K8sModel):
    """The controls in force on a node after a request."""

    cpu_cap_watts: Number | None = None
    cpu_preset: str | None = None
    gpu_cap_watts_per_gpu: Number | None = None
    gpu_preset: str | None = None
    gpu_clock_ceiling_pct_of_max: Number | None = None


class ControlResponse(K8sModel):
    node: str
    cpu_cap: Outcome | None = None
    cpu_governor: Outcome | None = None
    gpu_cap: Outcome | None = None
    gpu_governor: Outcome | None = None
    controls: AppliedControls


class PowerReading(K8sModel):
    node_w: NonNegative
    """Whole-node power (CPU packages + GPUs), watts."""
    cpu_package_w: NonNegative
    gpu_total_w: NonNegative
    gpu_per_gpu_w: NonNegative


class EnergyCounters(K8sModel):
    node_joules: NonNegative
    cpu_joules: NonNegative
    gpu_joules: NonNegative


class Utilisation(K8sModel):
    cpu: Fraction01
    """Demanded CPU utilisation of the node (0-1)."""
    gpu: Fraction01
    """Demanded average GPU utilisation (0-1)."""


class Speed(K8sModel):
    cpu: Fraction01
    """Throughput of CPU work relative to an uncapped node (1 = full speed)."""
    gpu: Fraction01


class HardwareSummary(K8sModel):
    cpu_model: str | None = None
    sockets: int
    gpu_model: str | None = None
    gpu_count: int
    cpu_max_w: NonNegative
    """Maximum CPU package power of the node (all sockets), watts."""
    gpu_max_w_per_gpu: NonNegative


class TelemetryReport(K8sModel):
    node: str
    timestamp: Timestamp
    sim_time_s: NonNegative
    power: PowerReading
    energy: EnergyCounters
    utilization: Utilisation
    speed: Speed
    controls: AppliedControls
    hardware: HardwareSummary
