"""A node's GPU boards as discovery found them, and the node-level figures derived from them.

Vendor-neutral: each backend (:mod:`joulie.agent.gpu.backend`) builds :class:`GpuDevice` values
for the boards its interface reaches; :func:`summarise` turns one vendor's boards into the
:class:`GpuDiscovery` the agent reports and controls.

Monitor-only is decided per board. The node's control is available only when every board can
be capped, so a manager never counts on a cap that some boards would not honour.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import StrEnum

from joulie.agent.gpu.settings import ClockBoard, ClockMechanism, board_id

__all__ = [
    "GpuBackendKind",
    "GpuDevice",
    "GpuDiscovery",
    "MonitorOnly",
    "monitor_only_warnings",
    "summarise",
    "watts_of",
]


class GpuBackendKind(StrEnum):
    NVML = "nvml"
    """NVIDIA board, read and capped through the NVML adapter (by index)."""
    HWMON = "hwmon"
    """AMD or Intel board, read (and for AMD capped) through its hwmon files."""
    NONE = "none"
    """A board seen on the bus with no interface to reach it."""


class MonitorOnly(StrEnum):
    """Why a board cannot be capped."""

    NOT_SUPPORTED = "not-supported"
    """The board has no settable power limit (NVML NOT_SUPPORTED, no power1_cap, Intel)."""
    NO_PERMISSION = "no-permission"
    """The agent may not set it (NVML NO_PERMISSION, EACCES/EPERM on the file)."""
    NO_RANGE = "no-range"
    """Limits exist but their range could not be read, so no value could be clamped."""
    LOST = "lost"
    """The board stopped answering."""
    UNAVAILABLE = "unavailable"
    """The vendor interface is not usable on this node (NVIDIA without NVML)."""


@dataclass(frozen=True)
class GpuDevice:
    """One board. Watts are per board."""

    index: int
    """The backend's index of the board (NVML's for NVIDIA; position among the vendor's cards
    otherwise)."""
    vendor: str
    """The backend that found it (:attr:`joulie.agent.gpu.backend.GpuBackend.vendor`)."""
    backend: GpuBackendKind
    raw_model: str | None
    uuid: str | None = None
    hwmon: str | None = None
    """hwmon directory (node path) of an AMD/Intel board."""
    min_watts: float | None = None
    max_watts: float | None = None
    default_watts: float | None = None
    current_cap_watts: float | None = None
    graphics_clock_min_mhz: int | None = None
    graphics_clock_max_mhz: int | None = None
    graphics_clocks_mhz: tuple[int, ...] = ()
    """Graphics clocks the board lists (NVML at its highest memory clock; amdgpu levels)."""
    performance_level: str | None = None
    """amdgpu's clock policy when discovered."""
    performance_level_file: str | None = None
    """amdgpu's clock policy file (node path), when the board has one."""
    telemetry: bool = False
    """Whether the board's power draw can be read."""
    monitor_only: MonitorOnly | None = None
    """Why the board cannot be capped; None when it can."""
    clock_mechanism: ClockMechanism | None = None
    """How its backend governs the board's clocks (None: not at all)."""

    @property
    def control(self) -> bool:
        return self.monitor_only is None

    @property
    def board_id(self) -> str:
        """How baseline keys name this board (UUID, else index)."""
        return board_id(self.uuid, self.index)

    @property
    def identity_known(self) -> bool:
        """Whether :attr:`board_id` names this board for sure. An NVML board whose UUID could not
        be read is named by an index that may be another board's later, so it is neither written
        nor matched to a baseline entry. A board without a UUID by nature (an amdgpu board whose
        PCI slot cannot be read) keeps its index: its files are found by its own card."""
        return self.uuid is not None or self.backend is not GpuBackendKind.NVML

    @property
    def clocks(self) -> ClockBoard:
        """How this board's clocks can be governed (no mechanism: not at all)."""
        lost = self.monitor_only is MonitorOnly.LOST
        mechanism = None if lost else self.clock_mechanism
        return ClockBoard(
            mechanism,
            self.graphics_clock_min_mhz,
            self.graphics_clock_max_mhz,
            self.graphics_clocks_mhz,
        )


@dataclass(frozen=True)
class GpuDiscovery:
    vendor: str | None
    """nvidia, amd or intel; None without GPUs."""
    devices: tuple[GpuDevice, ...]
    raw_model: str | None
    min_watts: float | None
    """Per-GPU cap range every board accepts (the intersection when boards differ)."""
    max_watts: float | None
    default_watts: float | None
    current_cap_watts: float | None
    """The per-GPU limit in force (the highest, when boards differ)."""
    control_available: bool
    telemetry_available: bool
    warnings: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.devices)

    @property
    def present(self) -> bool:
        return bool(self.devices)

    def board(self, board: str) -> GpuDevice | None:
        """The board a baseline key names, if it is on the node now (and known to be that
        board: never an NVML board whose UUID could not be read)."""
        return next((d for d in self.devices if d.identity_known and d.board_id == board), None)


def summarise(
    vendor: str | None, devices: tuple[GpuDevice, ...], warnings: list[str]
) -> GpuDiscovery:
    if not devices:
        return GpuDiscovery(
            vendor=None,
            devices=(),
            raw_model=None,
            min_watts=None,
            max_watts=None,
            default_watts=None,
            current_cap_watts=None,
            control_available=False,
            telemetry_available=False,
            warnings=tuple(warnings),
        )
    models = Counter(d.raw_model for d in devices if d.raw_model)
    raw_model = models.most_common(1)[0][0] if models else None
    if len(models) > 1:
        warnings.append(f"GPU models differ: {', '.join(sorted(models))}; reporting {raw_model}")
    mins = {d.min_watts for d in devices if d.min_watts is not None}
    maxes = {d.max_watts for d in devices if d.max_watts is not None}
    low, high = (max(mins) if mins else None), (min(maxes) if maxes else None)
    if len(mins) > 1 or len(maxes) > 1:
        warnings.append(f"GPU power limit ranges differ; reporting the common range {low}-{high} W")
    if low is not None and high is not None and low > high:
        warnings.append("GPU power limit ranges have nothing in common")
        low = high = None
    defaults = {d.default_watts for d in devices if d.default_watts is not None}
    currents = {d.current_cap_watts for d in devices if d.current_cap_watts is not None}
    if len(currents) > 1:
        warnings.append(
            "GPU power limits differ: " + ", ".join(f"{w:g} W" for w in sorted(currents))
        )
    return GpuDiscovery(
        vendor=vendor,
        devices=devices,
        raw_model=raw_model,
        min_watts=low,
        max_watts=high,
        default_watts=max(defaults) if defaults else None,
        current_cap_watts=max(currents) if currents else None,
        control_available=all(d.control for d in devices),
        telemetry_available=all(d.telemetry for d in devices),
        warnings=tuple(warnings),
    )


_WHY = {
    MonitorOnly.NOT_SUPPORTED: "power limits are not supported: monitor-only",
    MonitorOnly.NO_PERMISSION: "the agent may not set power limits: monitor-only",
    MonitorOnly.NO_RANGE: "power limit range unknown: monitor-only",
    MonitorOnly.LOST: "lost (not answering): no readings, no caps",
}


def monitor_only_warnings(devices: list[GpuDevice]) -> list[str]:
    """One line per reason and model ("GPU 0, 1 (model): why"), not one per board. Boards
    without an interface were reported with the reason already."""
    groups: dict[tuple[MonitorOnly, str | None], list[int]] = {}
    for device in devices:
        if device.monitor_only is not None and device.monitor_only in _WHY:
            groups.setdefault((device.monitor_only, device.raw_model), []).append(device.index)
    lines = []
    for (why, model), indices in groups.items():
        label = "GPU " + ", ".join(map(str, indices))
        lines.append(f"{label}{f' ({model})' if model else ''}: {_WHY[why]}")
    return lines


def watts_of(native: int | None, per_watt: float) -> float | None:
    return native / per_watt if native is not None else None
