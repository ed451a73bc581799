"""What GPUs a node has, and whether the agent can cap them.

:func:`discover_gpus` reads the NVML adapter (NVIDIA) and the DRM/hwmon files (AMD, Intel) once
and returns a frozen :class:`GpuDiscovery`: per board its identity, power-limit range, current
limit, whether its power can be measured and, when it cannot be capped, why. The node-level
figures NodeHardware reports are derived from the boards. :func:`gpu_hardware_status` turns the
result into the NodeHardware ``status.gpu`` block, recognising the model against the catalog,
with the clock governor block: the presets the boards can express
(:mod:`joulie.agent.gpu.settings`) and the per-board baseline the agent holds.

A node is described by one vendor: NVIDIA boards first, then AMD, then Intel. Boards of another
vendor on the same node are named in a warning and left alone.

Monitor-only is decided per board: power limits NVML answers NOT_SUPPORTED for, a board whose
limits the agent may not read, or whose last cap write was refused for lack of permission
(``refused``: discovery is read-only, so only a write can reveal that), an AMD board without
``power1_cap`` or its maximum, every Intel board, a board that is lost, and NVIDIA boards seen on
the PCI bus while NVML is unavailable. The node's control is available only when every board can
be capped, so a manager never counts on a cap that some boards would not honour.

NVML addresses boards by index, and indices can name other boards after a hot-plug or a driver
reload. Baseline keys name an NVIDIA board by its UUID, so a board whose UUID could not be read
has no identity to match a baseline against: it is never written (:func:`check_identity`, which
every NVML write goes through, also confirms that the index still holds the UUID discovery saw).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TypeVar

from joulie.agent.baseline import Baseline, BaselineValue
from joulie.agent.gpu.drm import DrmGpu, DrmVendor, scan_drm_gpus
from joulie.agent.gpu.nvml import (
    GpuError,
    GpuInvalidArgument,
    GpuLost,
    GpuNoPermission,
    GpuNotSupported,
    NvmlAdapter,
)
from joulie.agent.gpu.settings import (
    BoardClocks,
    ClockBoard,
    ClockMechanism,
    board_id,
    governor_status,
)
from joulie.agent.sysfs import Sysfs
from joulie.api.nodehardware import GpuCapRange, GpuHardware
from joulie.hardware.catalog import Catalog

__all__ = [
    "IDENTITY_UNKNOWN",
    "BoardChanged",
    "BoardUnknown",
    "GpuBackendKind",
    "GpuDevice",
    "GpuDiscovery",
    "MonitorOnly",
    "check_identity",
    "discover_gpus",
    "gpu_hardware_status",
]

PCI_DEVICES = "/sys/bus/pci/devices"
_NVIDIA_VENDOR = "0x10de"
_MW_PER_W = 1000.0
_UW_PER_W = 1_000_000.0

IDENTITY_UNKNOWN = "board identity unknown: not written, as its baseline could not be matched"


class BoardUnknown(GpuError):
    """An NVIDIA board's UUID could not be read, so nothing may be written to it: a baseline
    recorded under its index could later be taken for another board's, or its own cap for its
    baseline."""


class BoardChanged(GpuError):
    """The NVML index no longer holds the board discovery found there (boards renumbered after a
    hot-plug or a driver reload, or the board is gone): discover again before writing."""


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
    """NVML index for NVIDIA boards; position among the vendor's cards otherwise."""
    vendor: str
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
        mechanism: ClockMechanism | None = None
        if self.backend is GpuBackendKind.NVML and self.monitor_only is not MonitorOnly.LOST:
            mechanism = ClockMechanism.NVML
        elif self.vendor == "amd" and self.performance_level_file is not None:
            mechanism = ClockMechanism.SYSFS
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


_T = TypeVar("_T")


def discover_gpus(
    nvml: NvmlAdapter | None, sysfs: Sysfs, *, refused: Collection[int] = ()
) -> GpuDiscovery:
    """The node's GPUs. ``nvml`` is an initialised adapter, or None where NVML could not be
    initialised; ``refused`` holds the indices of boards whose last cap write was refused for
    lack of permission."""
    warnings: list[str] = []
    nvidia = _nvidia_devices(nvml, sysfs, set(refused), warnings)
    drm = scan_drm_gpus(sysfs)
    warnings.extend(drm.warnings)
    amd = [_drm_device(i, g) for i, g in enumerate(_of(drm.gpus, DrmVendor.AMD))]
    intel = [_drm_device(i, g) for i, g in enumerate(_of(drm.gpus, DrmVendor.INTEL))]
    for i in refused:
        if i < len(amd) and amd[i].monitor_only is None:
            amd[i] = _blocked(amd[i], MonitorOnly.NO_PERMISSION)
    groups = [("nvidia", nvidia), ("amd", amd), ("intel", intel)]
    chosen = next(((vendor, devices) for vendor, devices in groups if devices), None)
    if chosen is None:
        return _summarise(None, (), warnings)
    vendor, devices = chosen
    for other, other_devices in groups:
        if other != vendor and other_devices:
            warnings.append(
                f"{len(other_devices)} {other} GPU(s) besides the {vendor} GPUs: not managed"
            )
    warnings.extend(_monitor_only_warnings(devices))
    return _summarise(vendor, tuple(devices), warnings)


def gpu_hardware_status(
    discovery: GpuDiscovery,
    catalog: Catalog,
    baseline: Baseline | Mapping[str, BaselineValue] | None = None,
) -> GpuHardware:
    """NodeHardware ``status.gpu`` for a discovery (the catalog key when the model is known).

    ``baseline`` is the agent's record (or its entries); its GPU entries are reported per board
    in ``governor.baseline``.
    """
    if not discovery.present:
        return GpuHardware(
            present=False,
            count=0,
            control_available=False,
            telemetry_available=False,
            warnings=list(discovery.warnings) or None,
        )
    governor, baseline_warnings = governor_status(
        [
            BoardClocks(
                index=d.index,
                uuid=d.uuid,
                clocks=d.clocks,
                writable=d.monitor_only not in _CLOCKS_BLOCKED,
                current=d.performance_level,
            )
            for d in discovery.devices
        ],
        baseline.entries() if isinstance(baseline, Baseline) else baseline or {},
    )
    warnings = [*discovery.warnings, *baseline_warnings] or None
    cap_range = None
    if discovery.min_watts is not None or discovery.max_watts is not None:
        cap_range = GpuCapRange(
            min_watts=discovery.min_watts,
            max_watts=discovery.max_watts,
            default_watts=discovery.default_watts,
        )
    return GpuHardware(
        present=True,
        raw_model=discovery.raw_model,
        model=catalog.match_gpu(discovery.raw_model).key,
        vendor=discovery.vendor,
        count=discovery.count,
        cap_range_per_gpu=cap_range,
        current_cap_watts=discovery.current_cap_watts,
        governor=governor,
        control_available=discovery.control_available,
        telemetry_available=discovery.telemetry_available,
        warnings=warnings,
    )


_CLOCKS_BLOCKED = (MonitorOnly.NO_PERMISSION, MonitorOnly.LOST, MonitorOnly.UNAVAILABLE)
"""Board states in which the agent cannot set clocks either (a cap refusal means no privilege)."""


# --- NVIDIA ------------------------------------------------------------------------------------


def check_identity(nvml: NvmlAdapter, device: GpuDevice) -> None:
    """Raise unless ``device`` may be written through NVML now: its UUID is known and its index
    still answers with that UUID. :class:`BoardUnknown` when the UUID is unknown or unreadable,
    :class:`BoardChanged` when the index holds another board or none, :class:`GpuLost` when the
    board stopped answering."""
    if device.uuid is None:
        raise BoardUnknown(f"GPU {device.index}: {IDENTITY_UNKNOWN}", index=device.index)
    try:
        now = nvml.uuid(device.index)
    except GpuLost:
        raise
    except GpuInvalidArgument as exc:
        raise BoardChanged(
            f"GPU {device.uuid} was at index {device.index}, which holds no board now ({exc}): "
            "not written",
            index=device.index,
        ) from None
    except GpuError as exc:
        raise BoardUnknown(
            f"GPU {device.index}: its UUID cannot be read now ({exc}), so {IDENTITY_UNKNOWN}",
            index=device.index,
        ) from None
    if now != device.uuid:
        raise BoardChanged(
            f"GPU {device.uuid} was at index {device.index}, which holds {now} now "
            "(boards renumbered): not written",
            index=device.index,
        )


def _nvidia_devices(
    nvml: NvmlAdapter | None, sysfs: Sysfs, refused: set[int], warnings: list[str]
) -> list[GpuDevice]:
    reason = "no NVML adapter"
    if nvml is not None:
        try:
            count = nvml.device_count()
        except GpuError as exc:
            reason = str(exc)
        else:
            return [_nvml_device(nvml, i, i in refused, warnings) for i in range(count)]
    on_bus = _nvidia_on_pci_bus(sysfs)
    if on_bus:
        warnings.append(
            f"{on_bus} NVIDIA GPU(s) on the PCI bus but NVML is not usable ({reason}): "
            "no power readings and no caps"
        )
    return [
        GpuDevice(
            index=i,
            vendor="nvidia",
            backend=GpuBackendKind.NONE,
            raw_model=None,
            monitor_only=MonitorOnly.UNAVAILABLE,
        )
        for i in range(on_bus)
    ]


def _nvml_device(nvml: NvmlAdapter, index: int, refused: bool, warnings: list[str]) -> GpuDevice:
    problems: list[GpuError] = []

    def read(call: Callable[[], _T]) -> _T | None:
        try:
            return call()
        except GpuError as exc:
            problems.append(exc)
            return None

    lost = _lost_device(index)
    name = read(lambda: nvml.name(index))
    if _any(problems, GpuLost):
        return lost
    uuid = read(lambda: nvml.uuid(index))
    if uuid is None and not _any(problems, GpuLost):
        warnings.append(f"GPU {index}: UUID unreadable ({problems[-1]}): nothing is written to it")
    limits_problems_from = len(problems)
    constraints = read(lambda: nvml.power_limit_constraints_mw(index))
    limit_problems = problems[limits_problems_from:]
    default_mw = read(lambda: nvml.default_power_limit_mw(index))
    current_mw = read(lambda: nvml.power_limit_mw(index))
    usage = read(lambda: nvml.power_usage_mw(index))
    clock_min, clock_max, clocks = _graphics_clock_range(nvml, index)
    if _any(problems, GpuLost):
        return lost

    monitor_only: MonitorOnly | None = None
    if _any(limit_problems, GpuNotSupported):
        monitor_only = MonitorOnly.NOT_SUPPORTED
    elif _any(limit_problems, GpuNoPermission) or refused:
        monitor_only = MonitorOnly.NO_PERMISSION
    elif constraints is None or constraints[1] <= 0:
        monitor_only = MonitorOnly.NO_RANGE
        if not limit_problems:
            warnings.append(f"GPU {index}: NVML reports a power limit range of {constraints}")
    for problem in limit_problems:
        if not isinstance(problem, GpuNotSupported | GpuNoPermission):
            warnings.append(f"GPU {index}: {problem}")
    if name is None:
        warnings.append(f"GPU {index}: model name unreadable")
    low, high = constraints if constraints is not None and constraints[1] > 0 else (None, None)
    return GpuDevice(
        index=index,
        vendor="nvidia",
        backend=GpuBackendKind.NVML,
        raw_model=name,
        uuid=uuid,
        min_watts=_watts(low, _MW_PER_W),
        max_watts=_watts(high, _MW_PER_W),
        default_watts=_watts(default_mw, _MW_PER_W),
        current_cap_watts=_watts(current_mw, _MW_PER_W),
        graphics_clock_min_mhz=clock_min,
        graphics_clock_max_mhz=clock_max,
        graphics_clocks_mhz=clocks,
        telemetry=usage is not None,
        monitor_only=monitor_only,
    )


def _graphics_clock_range(
    nvml: NvmlAdapter, index: int
) -> tuple[int | None, int | None, tuple[int, ...]]:
    """Lowest and highest supported graphics clock, and the clocks listed (at the highest
    memory clock)."""
    try:
        high = nvml.max_clocks_mhz(index).graphics_mhz
        memory = nvml.supported_memory_clocks_mhz(index)
        graphics = nvml.supported_graphics_clocks_mhz(index, max(memory)) if memory else []
    except GpuError:
        return None, None, ()
    listed = tuple(sorted(set(graphics)))
    return (listed[0] if listed else None), (high or None), listed


def _lost_device(index: int) -> GpuDevice:
    return GpuDevice(
        index=index,
        vendor="nvidia",
        backend=GpuBackendKind.NVML,
        raw_model=None,
        monitor_only=MonitorOnly.LOST,
    )


def _nvidia_on_pci_bus(sysfs: Sysfs) -> int:
    count = 0
    for entry in sysfs.listdir(PCI_DEVICES):
        base = f"{PCI_DEVICES}/{entry}"
        if (sysfs.try_read(f"{base}/vendor") or "").lower() != _NVIDIA_VENDOR:
            continue
        pci_class = sysfs.try_read(f"{base}/class") or ""
        try:
            if int(pci_class, 16) >> 16 == 0x03:  # display controllers, not audio or NVSwitch
                count += 1
        except ValueError:
            continue
    return count


# --- AMD / Intel -------------------------------------------------------------------------------


def _of(gpus: tuple[DrmGpu, ...], vendor: DrmVendor) -> list[DrmGpu]:
    return [g for g in gpus if g.vendor is vendor]


def _drm_device(index: int, gpu: DrmGpu) -> GpuDevice:
    if gpu.vendor is DrmVendor.INTEL or gpu.cap_uw is None:
        monitor_only: MonitorOnly | None = MonitorOnly.NOT_SUPPORTED
    elif not gpu.cap_writable:
        monitor_only = MonitorOnly.NO_RANGE
    else:
        monitor_only = None
    capped = gpu.vendor is DrmVendor.AMD
    return GpuDevice(
        index=index,
        vendor=gpu.vendor.value,
        backend=GpuBackendKind.HWMON,
        raw_model=gpu.raw_model,
        uuid=gpu.pci_slot,
        hwmon=gpu.hwmon,
        min_watts=_watts(gpu.cap_min_uw, _UW_PER_W) if capped else None,
        max_watts=_watts(gpu.cap_max_uw, _UW_PER_W) if capped else None,
        default_watts=_watts(gpu.cap_default_uw, _UW_PER_W) if capped else None,
        current_cap_watts=_watts(gpu.cap_uw, _UW_PER_W) if capped and gpu.cap_uw else None,
        graphics_clock_min_mhz=gpu.sclk_mhz[0] if gpu.sclk_mhz else None,
        graphics_clock_max_mhz=gpu.sclk_mhz[-1] if gpu.sclk_mhz else None,
        graphics_clocks_mhz=gpu.sclk_mhz,
        performance_level=gpu.performance_level,
        performance_level_file=gpu.performance_level_file,
        telemetry=gpu.power_file is not None or gpu.energy_file is not None,
        monitor_only=monitor_only,
    )


def _blocked(device: GpuDevice, why: MonitorOnly) -> GpuDevice:
    return replace(device, monitor_only=why)


# --- the node's figures ------------------------------------------------------------------------


def _summarise(
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


def _monitor_only_warnings(devices: list[GpuDevice]) -> list[str]:
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


def _any(problems: list[GpuError], kind: type[GpuError]) -> bool:
    return any(isinstance(p, kind) for p in problems)


def _watts(native: int | None, per_watt: float) -> float | None:
    return native / per_watt if native is not None else None
