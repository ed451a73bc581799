"""NVIDIA boards through NVML: discovery, power limits in milliwatts, locked graphics clocks.

NVML addresses boards by index, and indices can name other boards after a hot-plug or a driver
reload. Baseline keys name an NVIDIA board by its UUID, so a board whose UUID could not be read
has no identity to match a baseline against: it is never written (:func:`check_identity`, which
every write goes through, also confirms that the index still holds the UUID discovery saw).

Monitor-only here: power limits NVML answers NOT_SUPPORTED for, limits the agent may not read,
a board whose last cap write was refused for lack of permission (only a write can reveal that),
a lost board, and NVIDIA boards seen on the PCI bus while NVML is unavailable.

NVML has no query for locked clocks on most drivers, so the lock in force before the agent's
first write cannot be read. It is taken as ``unlocked``: what every reboot and driver reload
leaves, and what restoring (a reset) puts back. An adapter that can read locks back
(:class:`~joulie.agent.gpu.nvml.LockedClocksReader`) is read like a file.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TypeVar

import structlog

from joulie.agent.gpu.backend import ClockAccess, PowerLimit, VendorBoards
from joulie.agent.gpu.device import GpuBackendKind, GpuDevice, MonitorOnly, watts_of
from joulie.agent.gpu.errors import (
    IDENTITY_UNKNOWN,
    BoardChanged,
    BoardUnknown,
    GpuError,
    GpuInvalidArgument,
    GpuLost,
    GpuNoPermission,
    GpuNotSupported,
    GpuUnavailable,
)
from joulie.agent.gpu.nvml import LockedClocksReader, NvmlAdapter, PynvmlAdapter
from joulie.agent.gpu.settings import (
    LOCKED_CLOCKS_MHZ,
    POWER_LIMIT_MW,
    UNLOCKED,
    ClockMechanism,
    parse_lock,
)
from joulie.agent.sysfs import Sysfs

__all__ = ["NvidiaBackend", "check_identity", "open_nvml"]

log = structlog.get_logger("joulie.agent.gpu")

PCI_DEVICES = "/sys/bus/pci/devices"
_NVIDIA_VENDOR = "0x10de"
_MW_PER_W = 1000.0

_T = TypeVar("_T")


def open_nvml() -> NvmlAdapter | None:
    """An initialised NVML adapter, or None on a node without NVIDIA's driver or library."""
    adapter = PynvmlAdapter()
    try:
        adapter.init()
    except GpuUnavailable as exc:
        log.info("NVML not available: NVIDIA GPUs, if any, are not managed", reason=str(exc))
        return None
    return adapter


class NvidiaBackend:
    """NVIDIA boards through an initialised NVML adapter (None: NVML is not usable here, and
    the boards on the PCI bus are reported as unavailable)."""

    vendor = "nvidia"
    limit_setting = POWER_LIMIT_MW
    clock_setting = LOCKED_CLOCKS_MHZ

    def __init__(self, nvml: NvmlAdapter | None, sysfs: Sysfs) -> None:
        self.nvml = nvml
        self.sysfs = sysfs

    def discover(self, refused: Collection[int]) -> VendorBoards:
        warnings: list[str] = []
        devices = _nvidia_devices(self.nvml, self.sysfs, set(refused), warnings)
        return VendorBoards(tuple(devices), tuple(warnings))

    def power_limit(self, device: GpuDevice) -> PowerLimit:
        assert device.max_watts is not None  # only ranged boards get this far
        if self.nvml is None or device.backend is not GpuBackendKind.NVML:
            raise GpuNotSupported(f"GPU {device.index}: no NVML adapter")
        return _NvmlLimit(self.nvml, device, device.min_watts, device.max_watts)

    def clocks(self, device: GpuDevice) -> ClockAccess | None:
        if device.clocks.mechanism is not ClockMechanism.NVML:
            return None
        index = device.index
        return ClockAccess(
            LOCKED_CLOCKS_MHZ,
            lambda: self._read_lock(index),
            lambda value: self._write_lock(index, value),
            lambda: check_identity(self._adapter(index), device),
            unread_value=UNLOCKED,
        )

    def power_watts(self, device: GpuDevice) -> float | None:
        if self.nvml is None or device.backend is not GpuBackendKind.NVML:
            return None
        try:
            return self.nvml.power_usage_mw(device.index) / _MW_PER_W
        except GpuError:
            return None

    def close(self) -> None:
        if self.nvml is not None:
            self.nvml.shutdown()

    def _adapter(self, index: int) -> NvmlAdapter:
        if self.nvml is None:
            raise GpuUnavailable(f"GPU {index}: no NVML adapter")
        return self.nvml

    def _read_lock(self, index: int) -> str | None:
        nvml = self._adapter(index)
        if not isinstance(nvml, LockedClocksReader):
            return None
        try:
            lock = nvml.locked_gpu_clocks(index)
        except GpuNotSupported:
            return None
        return UNLOCKED if lock is None else f"{lock[0]}-{lock[1]}"

    def _write_lock(self, index: int, value: str) -> None:
        nvml = self._adapter(index)
        try:
            pair = parse_lock(value)
        except ValueError as exc:  # a baseline file edited by hand
            raise GpuInvalidArgument(f"GPU {index}: {exc}") from None
        if pair is None:
            nvml.reset_locked_gpu_clocks(index)
        else:
            nvml.set_locked_gpu_clocks(index, *pair)


class _NvmlLimit(PowerLimit):
    per_watt = 1000
    step = 1

    def __init__(
        self, nvml: NvmlAdapter, device: GpuDevice, low: float | None, high: float
    ) -> None:
        super().__init__(low, high)
        self.nvml, self.device, self.index = nvml, device, device.index

    def check_identity(self) -> None:
        check_identity(self.nvml, self.device)

    def read(self) -> int:
        return self.nvml.power_limit_mw(self.index)

    def write(self, native: int) -> None:
        # NVML's v1 setter (see nvml.PynvmlAdapter): it reports a refusal, the v2 wrapper not.
        self.nvml.set_power_limit_mw(self.index, native)


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
        clock_mechanism=ClockMechanism.NVML,
        uuid=uuid,
        min_watts=watts_of(low, _MW_PER_W),
        max_watts=watts_of(high, _MW_PER_W),
        default_watts=watts_of(default_mw, _MW_PER_W),
        current_cap_watts=watts_of(current_mw, _MW_PER_W),
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


def _any(problems: list[GpuError], kind: type[GpuError]) -> bool:
    return any(isinstance(p, kind) for p in problems)
