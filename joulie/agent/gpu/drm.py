"""AMD and Intel GPUs as the kernel's DRM and hwmon files show them (read-only; the AMD backend
writes through :mod:`joulie.agent.gpu.amdgpu`).

A GPU is found as ``/sys/class/drm/cardN`` whose ``device`` is a PCI display device of vendor
0x1002 (AMD) or 0x8086 (Intel); connector entries (``card0-DP-1``) and render nodes are not
cards, and a card reached twice is one board (the ``device`` links are compared). Power lives
in the board's hwmon directory, in microwatts:

* AMD (amdgpu): ``power1_cap`` (read-write), ``power1_cap_min`` / ``power1_cap_max`` /
  ``power1_cap_default``, and ``power1_average`` or ``power1_input`` for the draw; the clock
  policy is ``device/power_dpm_force_performance_level`` (read-write) and the graphics clock
  levels ``device/pp_dpm_sclk`` (``1: 800Mhz *``). A board without ``power1_cap`` or without a
  usable maximum (virtual functions, some consumer boards) is monitor-only.
* Intel (i915/xe): monitor-only. Integrated graphics (the fixed slot 0000:00:02.0) is part of
  the CPU package, so it is not counted as a GPU at all.

"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from enum import StrEnum

from joulie.agent.gpu.device import GpuBackendKind, GpuDevice, MonitorOnly, watts_of
from joulie.agent.gpu.settings import ClockMechanism
from joulie.agent.sysfs import Sysfs

__all__ = [
    "DRM",
    "POWER_FILES",
    "DrmGpu",
    "DrmScan",
    "DrmVendor",
    "drm_device",
    "hwmon_power_watts",
    "scan_drm_gpus",
]

DRM = "/sys/class/drm"
_UW_PER_W = 1_000_000.0

_CARD = re.compile(r"card\d+")
_SCLK_LEVEL = re.compile(r"\s*\d+:\s*(\d+)\s*mhz", re.IGNORECASE)
LEVEL_FILE = "power_dpm_force_performance_level"
_INTEGRATED_SLOT = "0000:00:02.0"

# PCI device ids of boards the catalog knows, for drivers that publish no product name.
_AMD_MODELS = {
    "0x74a1": "AMD Instinct MI300X",
    "0x740c": "AMD Instinct MI250X",
    "0x740f": "AMD Instinct MI210",
    "0x7448": "AMD Radeon PRO W7900",
}


class DrmVendor(StrEnum):
    AMD = "amd"
    INTEL = "intel"


_VENDOR_IDS = {"0x1002": DrmVendor.AMD, "0x8086": DrmVendor.INTEL}


@dataclass(frozen=True)
class DrmGpu:
    """One AMD or Intel board as its DRM card shows it. Powers in microwatts."""

    card: str
    vendor: DrmVendor
    pci_slot: str | None
    device_id: str | None
    raw_model: str
    hwmon: str | None
    """The board's hwmon directory (node path), None when it has none."""
    cap_uw: int | None
    cap_min_uw: int | None
    cap_max_uw: int | None
    cap_default_uw: int | None
    power_file: str | None
    """The file that reads the board's power draw, when there is one."""
    energy_file: str | None
    """The file that reads the board's energy counter (µJ), when there is one."""
    performance_level: str | None
    """amdgpu's clock policy (auto, low, high, manual, profile_*), when readable."""
    sclk_mhz: tuple[int, ...] = ()
    """The graphics clock levels ``pp_dpm_sclk`` lists (empty when it cannot be read)."""

    @property
    def performance_level_file(self) -> str | None:
        """The clock policy file (node path), when the board has a readable one."""
        if self.performance_level is None:
            return None
        return f"{DRM}/{self.card}/device/{LEVEL_FILE}"

    @property
    def cap_writable(self) -> bool:
        """Whether a cap can be set: AMD, a cap file and a known maximum (never Intel)."""
        return (
            self.vendor is DrmVendor.AMD
            and self.cap_uw is not None
            and self.cap_max_uw is not None
            and self.cap_max_uw > 0
        )


@dataclass(frozen=True)
class DrmScan:
    gpus: tuple[DrmGpu, ...]
    warnings: tuple[str, ...]


def scan_drm_gpus(sysfs: Sysfs, vendor: DrmVendor | None = None) -> DrmScan:
    """Every AMD and Intel discrete GPU under ``/sys/class/drm`` (only ``vendor``'s when given),
    in card order, with warnings about those boards only."""
    wanted = vendor
    gpus: list[DrmGpu] = []
    warnings: list[str] = []
    seen: set[str] = set()
    for card in sorted(sysfs.listdir(DRM), key=_card_number):
        if not _CARD.fullmatch(card):
            continue
        device = f"{DRM}/{card}/device"
        vendor = _VENDOR_IDS.get((sysfs.try_read(f"{device}/vendor") or "").lower())
        if vendor is None or not _is_display(sysfs.try_read(f"{device}/class")):
            continue
        if wanted is not None and vendor is not wanted:
            continue
        identity = os.path.realpath(sysfs.path(device))
        if identity in seen:
            continue
        seen.add(identity)
        slot = _pci_slot(sysfs, device)
        if vendor is DrmVendor.INTEL and slot == _INTEGRATED_SLOT:
            continue  # integrated graphics: its power is the CPU package's
        gpus.append(_read_card(sysfs, card, vendor, slot, warnings))
    return DrmScan(gpus=tuple(gpus), warnings=tuple(warnings))


def _read_card(
    sysfs: Sysfs, card: str, vendor: DrmVendor, slot: str | None, warnings: list[str]
) -> DrmGpu:
    device = f"{DRM}/{card}/device"
    device_id = (sysfs.try_read(f"{device}/device") or "").lower() or None
    raw_model = _raw_model(sysfs, device, vendor, device_id)
    hwmon = _hwmon(sysfs, device, vendor)
    cap = cap_min = cap_max = cap_default = None
    power_file = energy_file = None
    if hwmon is None:
        warnings.append(f"{card} ({raw_model}): no hwmon directory, so no power readings")
    else:
        if vendor is DrmVendor.AMD:
            cap = _positive_or_none(sysfs, f"{hwmon}/power1_cap", allow_zero=True)
            cap_min = _positive_or_none(sysfs, f"{hwmon}/power1_cap_min", allow_zero=True)
            cap_max = _positive_or_none(sysfs, f"{hwmon}/power1_cap_max")
            cap_default = _positive_or_none(sysfs, f"{hwmon}/power1_cap_default")
            if cap is None:
                warnings.append(f"{card} ({raw_model}): no power1_cap, so monitor-only")
            elif cap_max is None:
                warnings.append(
                    f"{card} ({raw_model}): power1_cap_max missing or 0, "
                    "so the cap cannot be ranged: monitor-only"
                )
        for name in POWER_FILES:
            if sysfs.try_read_int(f"{hwmon}/{name}") is not None:
                power_file = f"{hwmon}/{name}"
                break
        if sysfs.try_read_int(f"{hwmon}/energy1_input") is not None:
            energy_file = f"{hwmon}/energy1_input"
    level = sysfs.try_read(f"{device}/{LEVEL_FILE}") if vendor is DrmVendor.AMD else None
    sclk = _sclk_levels(sysfs.try_read(f"{device}/pp_dpm_sclk")) if vendor is DrmVendor.AMD else ()
    return DrmGpu(
        card=card,
        vendor=vendor,
        pci_slot=slot,
        device_id=device_id,
        raw_model=raw_model,
        hwmon=hwmon,
        cap_uw=cap,
        cap_min_uw=cap_min,
        cap_max_uw=cap_max,
        cap_default_uw=cap_default,
        power_file=power_file,
        energy_file=energy_file,
        performance_level=level or None,
        sclk_mhz=sclk,
    )


def _sclk_levels(text: str | None) -> tuple[int, ...]:
    """The MHz of each numbered line of ``pp_dpm_sclk`` (a sleep line ``S: 19Mhz`` is not a
    level the board runs work at)."""
    levels = []
    for line in (text or "").splitlines():
        match = _SCLK_LEVEL.match(line)
        if match:
            levels.append(int(match.group(1)))
    return tuple(sorted(set(levels)))


POWER_FILES = ("power1_average", "power1_input")
"""The hwmon files that read a board's power draw in microwatts, the first one found."""


def hwmon_power_watts(sysfs: Sysfs, hwmon: str | None) -> float | None:
    """A board's power draw now from its hwmon directory, None when it cannot be read."""
    if hwmon is None:
        return None
    for name in POWER_FILES:
        microwatts = sysfs.try_read_int(f"{hwmon}/{name}")
        if microwatts is not None:
            return microwatts / 1e6
    return None


def _card_number(name: str) -> tuple[int, str]:
    digits = re.match(r"card(\d+)", name)
    return (int(digits.group(1)) if digits else 1 << 30, name)


def _is_display(pci_class: str | None) -> bool:
    """PCI base class 0x03 (VGA, XGA, 3D, other display controllers; accelerators such as
    the Instinct boards report 0x0380xx). An unreadable class is taken as display, as the
    DRM card exists only for display devices anyway."""
    if pci_class is None:
        return True
    try:
        return (int(pci_class, 16) >> 16) == 0x03
    except ValueError:
        return True


def _pci_slot(sysfs: Sysfs, device: str) -> str | None:
    for line in (sysfs.try_read(f"{device}/uevent") or "").splitlines():
        key, _, value = line.partition("=")
        if key == "PCI_SLOT_NAME" and value:
            return value.strip().lower()
    real = os.path.basename(os.path.realpath(sysfs.path(device)))
    return real.lower() if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d", real) else None


def _raw_model(sysfs: Sysfs, device: str, vendor: DrmVendor, device_id: str | None) -> str:
    product = sysfs.try_read(f"{device}/product_name")
    if product:
        return product
    if vendor is DrmVendor.AMD and device_id in _AMD_MODELS:
        return _AMD_MODELS[device_id]
    label = "AMD GPU" if vendor is DrmVendor.AMD else "Intel GPU"
    return f"{label} {device_id}" if device_id else label


def _hwmon(sysfs: Sysfs, device: str, vendor: DrmVendor) -> str | None:
    base = f"{device}/hwmon"
    entries = [e for e in sysfs.listdir(base) if e.startswith("hwmon")]
    wanted = {"amdgpu"} if vendor is DrmVendor.AMD else {"i915", "xe"}
    for entry in entries:
        if sysfs.try_read(f"{base}/{entry}/name") in wanted:
            return f"{base}/{entry}"
    return f"{base}/{entries[0]}" if entries else None


def _positive_or_none(sysfs: Sysfs, path: str, *, allow_zero: bool = False) -> int | None:
    value = sysfs.try_read_int(path)
    if value is None or value < 0 or (value == 0 and not allow_zero):
        return None
    return value


def drm_device(index: int, gpu: DrmGpu) -> GpuDevice:
    """A DRM board as a device (every Intel board monitor-only; an AMD one without a cap file or
    a usable maximum too)."""
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
        min_watts=watts_of(gpu.cap_min_uw, _UW_PER_W) if capped else None,
        max_watts=watts_of(gpu.cap_max_uw, _UW_PER_W) if capped else None,
        default_watts=watts_of(gpu.cap_default_uw, _UW_PER_W) if capped else None,
        current_cap_watts=watts_of(gpu.cap_uw, _UW_PER_W) if capped and gpu.cap_uw else None,
        graphics_clock_min_mhz=gpu.sclk_mhz[0] if gpu.sclk_mhz else None,
        graphics_clock_max_mhz=gpu.sclk_mhz[-1] if gpu.sclk_mhz else None,
        graphics_clocks_mhz=gpu.sclk_mhz,
        performance_level=gpu.performance_level,
        performance_level_file=gpu.performance_level_file,
        telemetry=gpu.power_file is not None or gpu.energy_file is not None,
        monitor_only=monitor_only,
        clock_mechanism=ClockMechanism.SYSFS
        if capped and gpu.performance_level_file is not None
        else None,
    )
