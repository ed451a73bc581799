"""The GPU settings the agent changes: how their baseline entries are named, and what each GPU
governor preset sets them to on one board. Pure: no I/O.

Baseline keys name the board and the unit of the value kept, ``gpu/<board>/<setting>``. The
board is its UUID (NVML ``GPU-...``; the PCI slot for amdgpu boards), so that a value is only
ever put back on the board it was read from. The index stands in only for a board that has no
UUID by nature (an amdgpu board whose PCI slot cannot be read, found by its own card's files); an
NVIDIA board whose UUID could not be read is not written at all, since a baseline under its index
could later be matched to another board, or its own cap taken for its baseline. Settings:

* ``power-limit-mw``: NVML power management limit, milliwatts.
* ``power1_cap-uw``: amdgpu hwmon ``power1_cap``, microwatts.
* ``locked-clocks-mhz``: NVML locked graphics clocks, ``<min>-<max>`` in MHz or ``unlocked``.
* ``power_dpm_force_performance_level``: amdgpu clock policy, as the file holds it.

Presets (the spec's vendor-neutral names) on each mechanism:

========== ========================================== ======================================
preset     NVML (locked graphics clocks)              amdgpu power_dpm_force_performance_level
========== ========================================== ======================================
auto       unlocked (the driver's own management)     ``auto``
efficient  [lowest supported, ceiling % of maximum]   not expressible with the level alone
low        locked at the lowest supported clock       ``low``
peak       locked at the highest clock                ``profile_peak``
sustained  not implemented                            not implemented
========== ========================================== ======================================

The ceiling is snapped down to a clock the board lists, so what is written is what the driver
keeps (the spec's H100 NVL example: 80 % of 1785 MHz is locked as 1425 MHz).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from joulie.api.enums import GpuGovernorPreset
from joulie.api.nodehardware import ClockRange, GpuBaseline, GpuGovernorStatus, PresetSupport

__all__ = [
    "CAP_SETTINGS",
    "CLOCK_SETTINGS",
    "DEFAULT_CEILING_PCT",
    "GPU_KEY_PREFIX",
    "LOCKED_CLOCKS_MHZ",
    "PERFORMANCE_LEVEL",
    "POWER1_CAP_UW",
    "POWER_LIMIT_MW",
    "UNLOCKED",
    "BoardClocks",
    "ClockBoard",
    "ClockMechanism",
    "PresetTarget",
    "board_id",
    "expressible_presets",
    "governor_status",
    "gpu_key",
    "parse_lock",
    "preset_target",
    "split_gpu_key",
    "why_not_expressible",
]

GPU_KEY_PREFIX = "gpu/"
POWER_LIMIT_MW = "power-limit-mw"
POWER1_CAP_UW = "power1_cap-uw"
LOCKED_CLOCKS_MHZ = "locked-clocks-mhz"
PERFORMANCE_LEVEL = "power_dpm_force_performance_level"
CAP_SETTINGS = frozenset({POWER_LIMIT_MW, POWER1_CAP_UW})
CLOCK_SETTINGS = frozenset({LOCKED_CLOCKS_MHZ, PERFORMANCE_LEVEL})

UNLOCKED = "unlocked"
"""The value of ``locked-clocks-mhz`` when no lock is in force."""

DEFAULT_CEILING_PCT = 80.0
"""The ``efficient`` ceiling when the spec states none (the spec's default)."""


# --- baseline keys -----------------------------------------------------------------------------


def board_id(uuid: str | None, index: int) -> str:
    """How a baseline key names a board: its UUID, else its index (see the module's note on
    boards without a UUID)."""
    return uuid or str(index)


def gpu_key(board: str, setting: str) -> str:
    return f"{GPU_KEY_PREFIX}{board}/{setting}"


def split_gpu_key(key: str) -> tuple[str, str] | None:
    """(board, setting) of a GPU baseline key; None for any other key."""
    if not key.startswith(GPU_KEY_PREFIX):
        return None
    board, _, setting = key[len(GPU_KEY_PREFIX) :].rpartition("/")
    return (board, setting) if board and setting else None


# --- presets -----------------------------------------------------------------------------------


class ClockMechanism(StrEnum):
    NVML = "nvml"
    """Locked graphics clocks through NVML (set / reset)."""
    SYSFS = "sysfs"
    """amdgpu's ``power_dpm_force_performance_level`` file."""


@dataclass(frozen=True)
class ClockBoard:
    """What the preset mapping needs to know of one board."""

    mechanism: ClockMechanism | None
    min_mhz: int | None = None
    """Lowest supported graphics clock."""
    max_mhz: int | None = None
    """Highest graphics clock."""
    supported_mhz: tuple[int, ...] = ()
    """Graphics clocks the board lists (empty: unknown)."""


@dataclass(frozen=True)
class PresetTarget:
    """One preset on one board."""

    preset: GpuGovernorPreset
    value: str
    """The setting's value, in the format its baseline entry keeps."""
    native: str
    """What it means, in the driver's terms (NodeHardware ``presets[].native``)."""


_LEVELS = {
    GpuGovernorPreset.AUTO: "auto",
    GpuGovernorPreset.LOW: "low",
    GpuGovernorPreset.PEAK: "profile_peak",
}


def preset_target(
    board: ClockBoard, preset: GpuGovernorPreset, ceiling_pct: float | None = None
) -> PresetTarget | None:
    """What ``preset`` sets on ``board``; None when the board cannot express it."""
    if board.mechanism is ClockMechanism.SYSFS:
        level = _LEVELS.get(preset)
        if level is None:
            return None
        return PresetTarget(preset, level, f"{PERFORMANCE_LEVEL}={level}")
    if board.mechanism is not ClockMechanism.NVML:
        return None
    if preset is GpuGovernorPreset.AUTO:
        return PresetTarget(preset, UNLOCKED, "clocks unlocked (driver default)")
    low, high = board.min_mhz, board.max_mhz
    if low is None or high is None or low > high:
        return None
    if preset is GpuGovernorPreset.LOW:
        pair = (low, low)
    elif preset is GpuGovernorPreset.PEAK:
        pair = (high, high)
    elif preset is GpuGovernorPreset.EFFICIENT:
        pair = (low, _ceiling(board, low, high, ceiling_pct))
    else:
        return None
    native = f"locked {pair[0]}-{pair[1]} MHz" if pair[0] != pair[1] else f"locked {pair[0]} MHz"
    return PresetTarget(preset, f"{pair[0]}-{pair[1]}", native)


def _ceiling(board: ClockBoard, low: int, high: int, pct: float | None) -> int:
    if pct is None or not math.isfinite(pct):
        pct = DEFAULT_CEILING_PCT
    wanted = high * min(max(pct, 0.0), 100.0) / 100.0
    listed = [c for c in board.supported_mhz if low <= c <= wanted]
    ceiling = max(listed) if listed else math.floor(wanted)
    return max(low, min(ceiling, high))


def expressible_presets(board: ClockBoard) -> tuple[PresetTarget, ...]:
    """The presets ``board`` can express (``efficient`` at the default ceiling), in spec order."""
    found = (preset_target(board, p) for p in GpuGovernorPreset)
    return tuple(t for t in found if t is not None)


def why_not_expressible(board: ClockBoard, preset: GpuGovernorPreset) -> str:
    if preset is GpuGovernorPreset.SUSTAINED:
        return "sustained is not implemented by this agent"
    if board.mechanism is ClockMechanism.SYSFS:
        return (
            f"amdgpu's {PERFORMANCE_LEVEL} has no level for {preset.value} "
            "(a clock range needs manual sclk, which this agent does not write)"
        )
    if board.mechanism is ClockMechanism.NVML:
        return "the board's graphics clock range is unknown"
    return "no interface to set this board's clocks"


def parse_lock(value: str) -> tuple[int, int] | None:
    """The (min, max) MHz of a ``locked-clocks-mhz`` value; None for ``unlocked``."""
    if value == UNLOCKED:
        return None
    low, sep, high = value.partition("-")
    if not sep:
        raise ValueError(f"not a locked clock pair: {value!r}")
    return int(low), int(high)


# --- NodeHardware status.gpu.governor ----------------------------------------------------------


@dataclass(frozen=True)
class BoardClocks:
    """One board as the governor status block sees it."""

    index: int
    uuid: str | None
    clocks: ClockBoard
    writable: bool
    """No known reason the agent could not set it (no refusal, not lost)."""
    current: str | None = None
    """The native clock setting now, where it can be read (amdgpu's level)."""


def governor_status(
    boards: Sequence[BoardClocks], entries: Mapping[str, str | int]
) -> tuple[GpuGovernorStatus, tuple[str, ...]]:
    """The ``status.gpu.governor`` block of a node's boards, and warnings about baseline
    entries of boards that are not on the node now.

    A preset is listed only when every board can express it (the manager writes only listed
    presets, so one unlisted board keeps it off the node); its native text names each distinct
    mapping. ``baseline`` holds the clock entries ``entries`` has, per board."""
    mechanisms = {b.clocks.mechanism for b in boards}
    mechanism = next(iter(mechanisms)) if len(mechanisms) == 1 else None
    presets: list[PresetSupport] = []
    for preset in GpuGovernorPreset:
        targets = [preset_target(b.clocks, preset) for b in boards]
        if boards and all(t is not None for t in targets):
            natives = list(dict.fromkeys(t.native for t in targets if t is not None))
            presets.append(PresetSupport(preset=preset.value, native="; ".join(natives)))
    lows = [b.clocks.min_mhz for b in boards if b.clocks.min_mhz is not None]
    highs = [b.clocks.max_mhz for b in boards if b.clocks.max_mhz is not None]
    clock_range = None
    if lows or highs:
        clock_range = ClockRange(
            min_m_hz=max(lows) if lows else None, max_m_hz=min(highs) if highs else None
        )
    currents = list(dict.fromkeys(b.current for b in boards if b.current is not None))
    baseline, warnings = _baseline_per_board(boards, entries)
    status = GpuGovernorStatus(
        mechanism=mechanism.value if mechanism is not None else None,
        current="; ".join(currents) or None,
        graphics_clock=clock_range,
        presets=presets or None,
        writable=mechanism is not None and all(b.writable for b in boards),
        baseline=baseline or None,
    )
    return status, warnings


def _baseline_per_board(
    boards: Sequence[BoardClocks], entries: Mapping[str, str | int]
) -> tuple[list[GpuBaseline], tuple[str, ...]]:
    settings: dict[str, dict[str, str]] = {}
    for key, value in entries.items():
        split = split_gpu_key(key)
        if split is not None:
            settings.setdefault(split[0], {})[split[1]] = str(value)
    by_id = {board_id(b.uuid, b.index): b for b in boards}
    found: list[GpuBaseline] = []
    warnings: list[str] = []
    for board, recorded in settings.items():
        known = by_id.get(board)
        if known is None:
            warnings.append(
                f"baseline of GPU {board} ({', '.join(sorted(recorded))}) is kept, "
                "but no such board is on the node: it cannot be restored"
            )
            continue
        # The block shows clock settings only, as the CPU's shows cpufreq only: a cap baseline
        # here would read as a clock mechanism that discovery did not find.
        clocks = {k: v for k, v in recorded.items() if k not in CAP_SETTINGS}
        if clocks:
            found.append(GpuBaseline(index=known.index, uuid=known.uuid, settings=clocks))
    found.sort(key=lambda b: b.index)
    return found, tuple(warnings)
