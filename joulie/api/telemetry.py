"""The telemetry/control contract between node backends and their HTTP clients.

The simulator serves it for KWOK nodes; the agent's HTTP backends and the manager's ``http``
power source are its clients. One set of models on both sides, so a field cannot drift.

    GET  /telemetry/{node}  -> TelemetryReport
    POST /control/{node}    ControlRequest -> ControlResponse

GPU boards are named by an ID (``HardwareSummary.gpuIds``, in board order; the simulator makes
them up for KWOK nodes). A control request may cap boards one by one (``gpu.boardCaps``), and a
report may say which pod holds which boards (``podDevices``), as a kubelet's PodResources API
does on a real node. Everything a peer sends is bounded in count and length.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from joulie.api.base import K8sModel, Number, Percent, Timestamp, Watts
from joulie.api.enums import ControlResult, CpuGovernorPreset, GpuGovernorPreset

NonNegative = Annotated[Number, Field(ge=0)]
Fraction01 = Annotated[Number, Field(ge=0, le=1)]

MAX_BOARDS = 64
"""Most GPU boards a report or a request may name (a node has at most a few dozen)."""
MAX_PODS_WITH_DEVICES = 256
"""Most pods a report may list with devices (at most one per board, time-slicing aside)."""
BoardId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$"),
]
"""A GPU board's ID (an NVIDIA ``GPU-<uuid>``, a PCI address): what a device plugin names."""


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


class BoardCap(Strict):
    """One GPU board's cap. Watts take precedence over the percentage; neither: uncapped."""

    board: BoardId
    cap_watts: Watts | None = None
    cap_pct_of_max: Percent | None = None


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
    board_caps: Annotated[list[BoardCap], Field(max_length=MAX_BOARDS)] | None = None
    """Caps board by board, each in place of the per-GPU cap for the board it names; a board not
    named keeps the per-GPU cap. An empty list removes every per-board cap; absent: the
    per-board caps in force stay as they are."""

    @model_validator(mode="after")
    def _boards_once(self) -> GpuControl:
        if self.board_caps is not None:
            named = [b.board for b in self.board_caps]
            if len(set(named)) != len(named):
                raise ValueError("boardCaps names a board more than once")
        return self


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


class BoardOutcome(Outcome):
    """What a request did to one board it named."""

    board: str


class BoardControl(K8sModel):
    """One board's cap in force, when caps are set board by board."""

    board: str
    cap_watts: Number | None = None
    """None: the board is uncapped."""


class AppliedControls(K8sModel):
    """The controls in force on a node after a request."""

    cpu_cap_watts: Number | None = None
    cpu_preset: str | None = None
    gpu_cap_watts_per_gpu: Number | None = None
    gpu_preset: str | None = None
    gpu_clock_ceiling_pct_of_max: Number | None = None
    gpu_boards: Annotated[list[BoardControl], Field(max_length=MAX_BOARDS)] | None = None
    """Each board's cap, in board order, while caps are set board by board; absent otherwise."""


class ControlResponse(K8sModel):
    node: str
    cpu_cap: Outcome | None = None
    cpu_governor: Outcome | None = None
    gpu_cap: Outcome | None = None
    gpu_governor: Outcome | None = None
    gpu_boards: Annotated[list[BoardOutcome], Field(max_length=MAX_BOARDS)] | None = None
    """One outcome per board the request's ``gpu.boardCaps`` named."""
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
    gpu_ids: Annotated[list[BoardId], Field(max_length=MAX_BOARDS)] | None = None
    """The boards' IDs in board order (as many as ``gpuCount``); absent where unknown."""


class PodDevices(K8sModel):
    """The GPU boards one pod holds."""

    namespace: Annotated[str, Field(min_length=1, max_length=63)]
    name: Annotated[str, Field(min_length=1, max_length=253)]
    devices: Annotated[
        list[Annotated[str, Field(max_length=128)]], Field(min_length=1, max_length=MAX_BOARDS)
    ]
    """Device IDs as a device plugin gives them (checked again by whoever reads them)."""


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
    pod_devices: Annotated[list[PodDevices], Field(max_length=MAX_PODS_WITH_DEVICES)] | None = None
    """Which pod holds which GPU boards; absent where the backend does not know."""
