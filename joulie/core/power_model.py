"""Deterministic power and performance model of one node (CPU packages and GPU boards).

The simulator uses this module as its physics; it is pure: no I/O, no clock reads. Time only
enters through the ``t`` arguments of :func:`initial_state` and :func:`advance`, so a run is
reproducible bit for bit whatever the speed of the host.

Three rules shape every formula here, because the upstream simulator broke them:

* A cap that lowers power also lowers the speed of the work. Power is bought with clock (or, below
  the lowest clock, with duty cycling), so the model always solves for the clock a cap affords and
  reports the throughput of that clock.
* Being managed is not a saving in itself: at zero load every cap and every preset draws plain idle
  power, except the GPU presets that hold clocks up, which draw *more*.
* Time steps are explicit and exact: power settles with a first-order lag solved in closed form, so
  one long step and many short ones give the same trajectory and the same energy.

Every speed is relative to the same work on the same part uncontrolled (1.0); how fast one part
is against another is :class:`Throughput`, applied by :func:`work_speed`.

CPU (per socket; the node has ``sockets`` identical sockets sharing the load and the cap evenly)::

    wall(u, r) = platform + package(u, r)
    package(u, r) = (idle - platform) + (full - idle) * shape(u) * r ** CLOCK_POWER_EXPONENT
    f_nat(u) = boost - (boost - all_core) * u          (GHz, the clock uncontrolled work gets)
    r = f / f_nat(u)

``u`` is the demanded utilisation: the share of the CPU the running work keeps busy (a batch
view: a slower clock makes that work slower rather than spreading it over more cores).
Uncontrolled, a lightly loaded part boosts and a fully loaded one runs at its all-core clock
(linear in between: an assumption), and that clock is what a measured curve was measured at.
A preset is a clock ceiling (``efficiency``: nominal; ``balanced``: halfway to boost;
``performance``: boost), so it slows work only where it sits below ``f_nat(u)``. A package cap
is compared with package power, never with the wall power of the whole socket share: the
``platform`` part (memory, fans, power-supply losses) is not under RAPL. A binding cap lowers
``r`` until the package meets it; below the lowest DVFS clock the package duty-cycles, which
saves power only in proportion to speed.

GPU (per board; every board of the node is judged on its own work)::

    P(u) = idle' + (max - idle') * u ** util_exponent * c ** CLOCK_POWER_EXPONENT
    y = (cap - idle) / (P(u) - idle)                        (share of the work's dynamic draw)
    speed = c * y ** exponent                               (y >= knee share: the DVFS regime)
    speed = c * knee ** exponent * (y - floor) / (knee - floor)   (below the knee)

``c`` is the graphics clock ceiling (``efficient``: the ceiling percentage; ``low``: the lowest
supported clock; otherwise 1). ``idle'`` is raised above ``idle`` by the presets that hold clocks
(``peak``, ``sustained``): held clocks cost power when the device has nothing to do. The knee and
the floor are the board's (``knee_w``, ``floor_w`` for a fully busy board, as shares of its
dynamic range): above the knee the limiter lowers voltage with the clock, so throughput follows
the cap with a small exponent and energy per unit of work falls; below it the voltage is at its
floor, throughput falls linearly towards zero at ``floor_w`` and the energy per unit of work rises
again, so it has a single minimum, at or above the knee. Fitted to measured boards in
``docs/calibration.md``.
"""

from __future__ import annotations

import functools
import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from joulie.api.enums import CpuGovernorPreset, GpuGovernorPreset

__all__ = [
    "CLOCK_POWER_EXPONENT",
    "CPU_UTIL_EXPONENT",
    "DEFAULT_CAP_EXPONENT",
    "DEFAULT_FLOOR_SHARE",
    "DEFAULT_GPU_CLOCK_CEILING_PCT",
    "DEFAULT_KNEE_SHARE",
    "PUE_MAX",
    "PUE_MIN",
    "Controls",
    "CpuPowerSpec",
    "GpuPowerSpec",
    "Load",
    "NodePowerSpec",
    "NodePowerState",
    "Steady",
    "Throughput",
    "advance",
    "board_energy_per_work",
    "board_steady",
    "cpu_clock_ratio",
    "effective_cpu_cap_w",
    "effective_gpu_cap_w",
    "energy_optimal_cap_w",
    "facility",
    "gpu_clock_ratio",
    "initial_state",
    "steady_state",
    "work_speed",
]

CPU_UTIL_EXPONENT = 1.2
"""Analytic curve exponent: slightly convex, as the top of the load range runs at boost voltage."""

CLOCK_POWER_EXPONENT = 2.5
"""Dynamic power ~ f * V**2 with voltage falling with the clock; measured parts land near f**2.5."""

DEFAULT_CPU_MIN_CLOCK_RATIO = 0.4
"""Lowest DVFS clock relative to boost when the spec gives none (typical server parts: 0.3-0.5)."""

DEFAULT_GPU_CLOCK_CEILING_PCT = 80.0
"""Ceiling of the ``efficient`` preset when the controls give none (the spec's eco default)."""

DEFAULT_KNEE_SHARE = 0.55
DEFAULT_FLOOR_SHARE = 0.08
DEFAULT_CAP_EXPONENT = 0.29
"""The GPU cap law of a board nobody has measured: the knee and the floor as shares of its
dynamic range (max - idle), and the exponent above the knee. A modelling assumption: the mean of
the two boards fitted to measurements (V100 PCIe: knee 0.50, floor 0.0, exponent 0.31; A40: knee
0.59, floor 0.15, exponent 0.27; docs/calibration.md)."""

GPU_HELD_IDLE_FRACTION: dict[GpuGovernorPreset, float] = {
    # Share of the dynamic range an idle GPU draws with its clocks held: ``peak`` locks the
    # graphics clock at its maximum, ``sustained`` only keeps the device and links out of deep
    # idle, so it costs less.
    GpuGovernorPreset.PEAK: 0.15,
    GpuGovernorPreset.SUSTAINED: 0.08,
}

PUE_MIN = 1.05
PUE_MAX = 2.0
FREE_COOLING_LIMIT_C = 18.0
"""Ambient below which an air-side economiser removes the heat with fans alone."""
PUE_LOAD_COEFF = 0.05
"""Fans and pumps grow faster than the heat they move (fan laws): overhead rises with load."""
PUE_AMBIENT_COEFF = 0.015
"""PUE per kelvin above the free-cooling limit at full load (mechanical cooling takes over)."""
PUE_AMBIENT_IDLE_SHARE = 0.4
"""Share of the ambient penalty paid even at zero IT load (chillers and fans keep running)."""


# --- specs -----------------------------------------------------------------------------------


def _require_positive(owner: str, name: str, value: float) -> None:
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"{owner}.{name} must be a positive finite number, got {value!r}")


def _require_count(owner: str, name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}.{name} must be an integer >= 1, got {value!r}")


def _require_watt_range(owner: str, idle_w: float, max_w: float, min_cap_w: float) -> None:
    for name, value in (("idle_w", idle_w), ("max_w", max_w), ("min_cap_w", min_cap_w)):
        _require_positive(owner, name, value)
    if not idle_w < max_w:
        raise ValueError(f"{owner}: idle_w ({idle_w} W) must be below max_w ({max_w} W)")
    # A cap at or below idle would leave no power for work at all; hardware never accepts one,
    # and allowing it would force either zero speed or a cap the model cannot honour.
    if not idle_w < min_cap_w <= max_w:
        raise ValueError(
            f"{owner}: min_cap_w ({min_cap_w} W) must be above idle_w ({idle_w} W) "
            f"and at most max_w ({max_w} W)"
        )


@dataclass(frozen=True)
class CpuPowerSpec:
    """Power behaviour of the CPU packages of one node; watts are per socket.

    ``idle_w`` and ``curve`` are the socket's share of the server's power (what a wall meter
    sees); ``platform_w`` of it is not package power (memory, fans, power-supply losses) and is
    never under a package cap. ``max_w`` and ``min_cap_w`` are the package-cap range (package
    watts): the uncapped package draw at full load (``full_load_w - platform_w``) must fit under
    ``max_w``. ``curve`` is a measured (load %, watts per socket) table, used as measured: power
    at a load is the linear interpolation of the table (clamped at its ends); its value at 0 %
    must be ``idle_w``. Without a curve the package draws ``max_w`` at full load.
    """

    sockets: int
    idle_w: float
    max_w: float
    min_cap_w: float
    curve: tuple[tuple[float, float], ...] = ()
    nominal_ghz: float = 2.0
    boost_ghz: float = 3.0
    min_ghz: float | None = None
    """Lowest DVFS clock; below it a cap duty-cycles. None: 0.4 x boost, at most nominal."""
    all_core_ghz: float | None = None
    """Clock with every core busy and nothing controlled. None: the nominal clock."""
    platform_w: float = 0.0

    def __post_init__(self) -> None:
        owner = "CpuPowerSpec"
        _require_count(owner, "sockets", self.sockets)
        for name in ("idle_w", "max_w", "min_cap_w"):
            _require_positive(owner, name, getattr(self, name))
        if not (math.isfinite(self.platform_w) and 0.0 <= self.platform_w < self.idle_w):
            raise ValueError(
                f"{owner}: platform_w ({self.platform_w} W) must be >= 0 and below "
                f"idle_w ({self.idle_w} W): the package draws something at idle"
            )
        # A cap at or below the package's idle would leave no power for work at all; hardware
        # never accepts one, and allowing it would force zero speed.
        if not self.package_idle_w < self.min_cap_w <= self.max_w:
            raise ValueError(
                f"{owner}: min_cap_w ({self.min_cap_w} W) must be above the package's idle "
                f"(idle_w less platform_w: {self.package_idle_w} W) and at most max_w "
                f"({self.max_w} W)"
            )
        _require_positive(owner, "nominal_ghz", self.nominal_ghz)
        _require_positive(owner, "boost_ghz", self.boost_ghz)
        if self.nominal_ghz > self.boost_ghz:
            raise ValueError(
                f"{owner}: nominal_ghz ({self.nominal_ghz}) must not exceed "
                f"boost_ghz ({self.boost_ghz})"
            )
        if self.all_core_ghz is not None and not (
            math.isfinite(self.all_core_ghz)
            and self.nominal_ghz <= self.all_core_ghz <= self.boost_ghz
        ):
            raise ValueError(
                f"{owner}: all_core_ghz ({self.all_core_ghz}) must lie between nominal_ghz "
                f"({self.nominal_ghz}) and boost_ghz ({self.boost_ghz})"
            )
        if self.min_ghz is not None:
            _require_positive(owner, "min_ghz", self.min_ghz)
            if self.min_ghz > self.nominal_ghz:
                raise ValueError(
                    f"{owner}: min_ghz ({self.min_ghz}) must not exceed "
                    f"nominal_ghz ({self.nominal_ghz})"
                )
        curve = _validated_curve(self.curve)
        object.__setattr__(self, "curve", curve)
        if curve:
            start = _interp(curve, 0.0)
            # A mismatch would either hide idle power or let a preset change it (a managed-idle
            # bonus), so the two descriptions of idle must agree (to rounding of a socket split).
            if not math.isclose(start, self.idle_w, rel_tol=1e-6, abs_tol=1e-9):
                raise ValueError(
                    f"{owner}: curve at 0 % load ({start} W) must equal idle_w ({self.idle_w} W)"
                )
            top = _interp(curve, 100.0)
            if top <= self.idle_w:
                raise ValueError(f"{owner}: curve must rise above idle_w ({self.idle_w} W)")
            if top - self.platform_w > self.max_w * (1.0 + 1e-9):
                raise ValueError(
                    f"{owner}: the package draws {top - self.platform_w} W at 100 % load "
                    f"(curve {top} W less platform {self.platform_w} W), above max_w "
                    f"({self.max_w} W); max_w is the top of the package-cap range and must "
                    "cover the uncapped draw"
                )
        elif self.max_w <= self.package_idle_w:
            raise ValueError(
                f"{owner}: max_w ({self.max_w} W) must be above the package's idle "
                f"(idle_w less platform_w: {self.package_idle_w} W)"
            )

    @classmethod
    def from_curve(
        cls,
        sockets: int,
        curve: tuple[tuple[float, float], ...],
        min_cap_w: float,
        nominal_ghz: float = 2.0,
        boost_ghz: float = 3.0,
        min_ghz: float | None = None,
    ) -> CpuPowerSpec:
        """A spec whose idle and maximum power are the measured curve's end points (all of it
        package power)."""
        points = _validated_curve(curve)
        if not points:
            raise ValueError("CpuPowerSpec.from_curve needs a non-empty curve")
        return cls(
            sockets=sockets,
            idle_w=points[0][1],
            max_w=points[-1][1],
            min_cap_w=min_cap_w,
            curve=points,
            nominal_ghz=nominal_ghz,
            boost_ghz=boost_ghz,
            min_ghz=min_ghz,
        )

    @property
    def package_idle_w(self) -> float:
        return self.idle_w - self.platform_w

    @property
    def full_load_w(self) -> float:
        """Uncapped power per socket (wall share) at 100 % load and the all-core clock."""
        return _interp(self.curve, 100.0) if self.curve else self.max_w + self.platform_w

    @property
    def all_core(self) -> float:
        """The all-core clock in GHz (the nominal clock where none is given)."""
        return self.nominal_ghz if self.all_core_ghz is None else self.all_core_ghz

    @property
    def min_clock_ratio(self) -> float:
        """Lowest DVFS clock relative to boost."""
        if self.min_ghz is not None:
            return self.min_ghz / self.boost_ghz
        return min(DEFAULT_CPU_MIN_CLOCK_RATIO, self.nominal_ghz / self.boost_ghz)

    def natural_ghz(self, util: float) -> float:
        """The clock uncontrolled work runs at, at utilisation ``util``: boost when nearly idle,
        the all-core clock with every core busy, linear in between (a modelling assumption)."""
        return self.boost_ghz - (self.boost_ghz - self.all_core) * _unit(util)

    def shape(self, util: float) -> float:
        """Normalised dynamic power at utilisation ``util``: 0 at idle, 1 at full load."""
        u = _unit(util)
        if not self.curve:
            return math.pow(u, CPU_UTIL_EXPONENT)
        # Normalised by the curve's own end points, so idle is exactly 0 and full load exactly 1
        # even where idle_w differs from the first point by the rounding the check allows.
        low = _interp(self.curve, 0.0)
        return (_interp(self.curve, 100.0 * u) - low) / (self.full_load_w - low)


def _validated_curve(curve: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
    points: list[tuple[float, float]] = []
    for point in curve:
        if len(point) != 2:
            raise ValueError(f"CpuPowerSpec.curve points are (load %, watts), got {point!r}")
        load, watts = float(point[0]), float(point[1])
        if not (math.isfinite(load) and 0.0 <= load <= 100.0):
            raise ValueError(f"CpuPowerSpec.curve load must be within 0..100 %, got {load!r}")
        if not math.isfinite(watts) or watts <= 0.0:
            raise ValueError(f"CpuPowerSpec.curve watts must be positive, got {watts!r}")
        if points and load <= points[-1][0]:
            raise ValueError("CpuPowerSpec.curve loads must be strictly increasing")
        # Power that fell with load would make more work look cheaper; no measured part does that.
        if points and watts < points[-1][1]:
            raise ValueError("CpuPowerSpec.curve watts must not decrease with load")
        points.append((load, watts))
    if len(points) == 1:
        raise ValueError("CpuPowerSpec.curve needs at least two points")
    if points and points[-1][1] <= points[0][1]:
        raise ValueError("CpuPowerSpec.curve must rise between its first and last point")
    return tuple(points)


def _interp(curve: tuple[tuple[float, float], ...], load: float) -> float:
    """Linear interpolation in a (load, watts) table, clamped to its end points."""
    if load <= curve[0][0]:
        return curve[0][1]
    if load >= curve[-1][0]:
        return curve[-1][1]
    i = bisect_right([x for x, _ in curve], load)
    (x0, y0), (x1, y1) = curve[i - 1], curve[i]
    return y0 + (y1 - y0) * (load - x0) / (x1 - x0)


@dataclass(frozen=True)
class GpuPowerSpec:
    """Power behaviour of the GPU boards of one node; watts are per board, all boards alike.

    The cap law (module docstring): ``knee_w`` is where a fully busy board's limiter runs out of
    voltage to lower, ``floor_w`` where throughput below the knee would reach zero, and
    ``cap_exponent`` how throughput follows the cap above the knee. None: the default shares of
    the dynamic range (:data:`DEFAULT_KNEE_SHARE`, :data:`DEFAULT_FLOOR_SHARE`), a modelling
    assumption for boards nobody has measured.
    """

    count: int
    idle_w: float
    max_w: float
    min_cap_w: float
    knee_w: float | None = None
    floor_w: float | None = None
    cap_exponent: float = DEFAULT_CAP_EXPONENT
    util_exponent: float = 1.0
    """Shape of power against a board's busy share; board power tracks busy time nearly linearly."""
    min_clock_ratio: float = 0.2
    """Lowest supported graphics clock relative to the maximum (the ``low`` preset's clock)."""
    knee_share: float = field(init=False, repr=False, compare=False)
    floor_share: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        owner = "GpuPowerSpec"
        _require_count(owner, "count", self.count)
        _require_watt_range(owner, self.idle_w, self.max_w, self.min_cap_w)
        span = self.max_w - self.idle_w
        knee = self.idle_w + DEFAULT_KNEE_SHARE * span if self.knee_w is None else self.knee_w
        floor = self.idle_w + DEFAULT_FLOOR_SHARE * span if self.floor_w is None else self.floor_w
        if not (math.isfinite(floor) and self.idle_w <= floor < self.min_cap_w):
            # A floor at or above the lowest cap would let an accepted cap stop the work.
            raise ValueError(
                f"{owner}: floor_w ({floor} W) must be at least idle_w ({self.idle_w} W) and "
                f"below min_cap_w ({self.min_cap_w} W)"
            )
        if not (math.isfinite(knee) and floor < knee < self.max_w):
            raise ValueError(
                f"{owner}: knee_w ({knee} W) must lie above floor_w ({floor} W) and below "
                f"max_w ({self.max_w} W)"
            )
        if not (math.isfinite(self.cap_exponent) and 0.0 < self.cap_exponent < 1.0):
            raise ValueError(
                f"{owner}.cap_exponent must lie strictly between 0 and 1, got {self.cap_exponent!r}"
            )
        _require_positive(owner, "util_exponent", self.util_exponent)
        _require_positive(owner, "min_clock_ratio", self.min_clock_ratio)
        if self.min_clock_ratio > 1.0:
            raise ValueError(
                f"GpuPowerSpec.min_clock_ratio must be at most 1, got {self.min_clock_ratio!r}"
            )
        object.__setattr__(self, "knee_share", (knee - self.idle_w) / span)
        object.__setattr__(self, "floor_share", (floor - self.idle_w) / span)


@dataclass(frozen=True)
class Throughput:
    """How fast this node's parts do work against the reference parts (1.0), per kind of work:
    ``cpu`` for a CPU-bound core, ``gpu_compute`` for compute-bound GPU work (training),
    ``gpu_memory`` for memory-bound GPU work (inference)."""

    cpu: float = 1.0
    gpu_compute: float = 1.0
    gpu_memory: float = 1.0

    def __post_init__(self) -> None:
        for name in ("cpu", "gpu_compute", "gpu_memory"):
            _require_positive("Throughput", name, getattr(self, name))


@dataclass(frozen=True)
class NodePowerSpec:
    cpu: CpuPowerSpec
    gpu: GpuPowerSpec | None = None
    throughput: Throughput = Throughput()

    @property
    def gpu_count(self) -> int:
        return 0 if self.gpu is None else self.gpu.count

    @property
    def idle_w(self) -> float:
        """Power of the node with nothing running and nothing controlled."""
        gpu = 0.0 if self.gpu is None else self.gpu.idle_w * self.gpu.count
        return self.cpu.idle_w * self.cpu.sockets + gpu


# --- inputs ----------------------------------------------------------------------------------


def _unit(value: float) -> float:
    """Clamp to [0, 1]; NaN (an unknown reading) counts as no load."""
    if math.isnan(value):
        return 0.0
    return min(1.0, max(0.0, value))


def _optional_watts(owner: str, name: str, value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise ValueError(f"{owner}.{name} must be a finite number of watts or None, got {value!r}")


@dataclass(frozen=True)
class Controls:
    """What is applied to the node. Caps outside the hardware range are clamped into it, as the
    hardware itself does; unknown presets raise ValueError. The GPU cap is per board, the same
    on every board (that is how the agent writes it)."""

    cpu_cap_w: float | None = None
    cpu_preset: str | None = None
    gpu_cap_w: float | None = None
    gpu_preset: str | None = None
    gpu_clock_ceiling_pct: float | None = None
    gpu_board_caps_w: tuple[float | None, ...] = ()
    """Per-board caps in board order (a cap by the class of each board's pod), each in place of
    ``gpu_cap_w`` for its board (None: uncapped); boards past its end take ``gpu_cap_w``."""

    def __post_init__(self) -> None:
        _optional_watts("Controls", "cpu_cap_w", self.cpu_cap_w)
        _optional_watts("Controls", "gpu_cap_w", self.gpu_cap_w)
        for cap in self.gpu_board_caps_w:
            _optional_watts("Controls", "gpu_board_caps_w", cap)
        if self.cpu_preset is not None:
            try:
                CpuGovernorPreset(self.cpu_preset)
            except ValueError:
                allowed = ", ".join(p.value for p in CpuGovernorPreset)
                raise ValueError(
                    f"Controls.cpu_preset {self.cpu_preset!r} is not one of: {allowed}"
                ) from None
        if self.gpu_preset is not None:
            try:
                GpuGovernorPreset(self.gpu_preset)
            except ValueError:
                allowed = ", ".join(p.value for p in GpuGovernorPreset)
                raise ValueError(
                    f"Controls.gpu_preset {self.gpu_preset!r} is not one of: {allowed}"
                ) from None
        pct = self.gpu_clock_ceiling_pct
        if pct is not None and (not math.isfinite(pct) or pct <= 0.0):
            raise ValueError(f"Controls.gpu_clock_ceiling_pct must be positive, got {pct!r}")


@dataclass(frozen=True)
class Load:
    """Demanded utilisation; values outside [0, 1] (and NaN) are clamped on construction.

    ``gpu_boards`` is the busy share of each board that has work, in board order (boards past
    its end are idle); empty means every board at ``gpu_util``, the node's average. A power
    limit binds per board, so one busy board of eight is judged on its own work, never on the
    node's average.
    """

    cpu_util: float = 0.0
    gpu_util: float = 0.0
    gpu_boards: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "cpu_util", _unit(self.cpu_util))
        object.__setattr__(self, "gpu_util", _unit(self.gpu_util))
        if self.gpu_boards:
            object.__setattr__(self, "gpu_boards", tuple(_unit(u) for u in self.gpu_boards))


# --- steady state ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Steady:
    """Where power and speed settle for a constant load and constant controls.

    ``gpu_board_w`` and ``gpu_board_speed`` are per board; ``gpu_w_per_gpu`` is their mean and
    ``gpu_speed`` the slowest board's speed."""

    cpu_w: float
    gpu_w_per_gpu: float
    cpu_speed: float
    gpu_speed: float
    gpu_count: int = 0
    cpu_cap_binding: bool = False
    """The CPU cap, not the load, sets the power (telemetry's 'cap saturated')."""
    gpu_cap_binding: bool = False
    """The cap sets the power of at least one board."""
    gpu_board_w: tuple[float, ...] = ()
    gpu_board_speed: tuple[float, ...] = ()

    @property
    def node_w(self) -> float:
        return self.cpu_w + self.gpu_w_per_gpu * self.gpu_count


def work_speed(
    cpu_speed: float,
    gpu_speed: float,
    cpu_share: float,
    gpu_share: float,
    throughput: Throughput = Throughput(),
    *,
    on_gpu: bool = False,
    memory_bound: bool = False,
) -> float:
    """How fast a piece of work runs (1.0: as fast as uncontrolled on the reference parts).

    ``cpu_share`` of its run time is bound by the CPU clock, ``gpu_share`` by the GPU clock and
    the rest by neither (I/O, the network; on a GPU, memory). Each clock-bound share stretches by
    the inverse of its part's speed. Work ``on_gpu`` runs everything but its CPU share on the
    board, so that part also scales with the board's throughput for its kind (compute-bound, or
    ``memory_bound``); the CPU share scales with the CPU's."""
    stretch = cpu_share / (cpu_speed * throughput.cpu)
    rest = 1.0 - cpu_share - gpu_share
    if on_gpu:
        board = throughput.gpu_memory if memory_bound else throughput.gpu_compute
        stretch += (rest + (gpu_share / gpu_speed if gpu_share else 0.0)) / board
    else:
        stretch += rest + (gpu_share / gpu_speed if gpu_share else 0.0)
    return 1.0 / stretch


def cpu_clock_ratio(spec: CpuPowerSpec, preset: str | None) -> float:
    """Clock ceiling relative to boost that a CPU preset sets (before any cap)."""
    nominal = spec.nominal_ghz / spec.boost_ghz
    if preset is None or preset == CpuGovernorPreset.PERFORMANCE:
        return 1.0
    if preset == CpuGovernorPreset.EFFICIENCY:
        # Efficiency keeps the part at its nominal (non-boost) clock.
        return nominal
    # Balanced boosts, but less eagerly: modelled as halfway between nominal and boost.
    return (1.0 + nominal) / 2.0


def gpu_clock_ratio(spec: GpuPowerSpec, preset: str | None, ceiling_pct: float | None) -> float:
    """Graphics clock ceiling relative to the maximum that a GPU preset sets."""
    if preset == GpuGovernorPreset.EFFICIENT:
        pct = DEFAULT_GPU_CLOCK_CEILING_PCT if ceiling_pct is None else ceiling_pct
        return min(1.0, max(spec.min_clock_ratio, pct / 100.0))
    if preset == GpuGovernorPreset.LOW:
        return spec.min_clock_ratio
    return 1.0


def _cpu_socket_cap_w(spec: CpuPowerSpec, controls: Controls) -> float:
    # The node-wide cap is split evenly: the model treats the sockets as sharing the load evenly.
    if controls.cpu_cap_w is None:
        return spec.max_w
    return min(spec.max_w, max(spec.min_cap_w, controls.cpu_cap_w / spec.sockets))


def effective_cpu_cap_w(spec: CpuPowerSpec, controls: Controls) -> float:
    """Node-wide package cap the hardware enforces: the requested one clamped to its range."""
    return _cpu_socket_cap_w(spec, controls) * spec.sockets


def effective_gpu_cap_w(spec: GpuPowerSpec, controls: Controls) -> float:
    """Per-board cap the hardware enforces: the requested one clamped to its range."""
    if controls.gpu_cap_w is None:
        return spec.max_w
    return min(spec.max_w, max(spec.min_cap_w, controls.gpu_cap_w))


# A demand within this relative margin of what the cap allows is not capped: an uncapped part at
# full load sits exactly at its limit, and a rounding error in the last bit must not slow it.
_AT_LIMIT = 1e-12


def _cpu_steady(spec: CpuPowerSpec, util: float, controls: Controls) -> tuple[float, float, bool]:
    """(node CPU watts at the wall, speed relative to uncontrolled, cap binding)."""
    natural = spec.natural_ghz(util)
    ceiling = cpu_clock_ratio(spec, controls.cpu_preset) * spec.boost_ghz
    ratio = min(1.0, ceiling / natural)
    dynamic = (spec.full_load_w - spec.idle_w) * spec.shape(util)
    package_idle = spec.package_idle_w
    cap = _cpu_socket_cap_w(spec, controls)
    allowed = cap - package_idle  # > 0: min_cap_w is above the package's idle (validated)
    demanded = dynamic * math.pow(ratio, CLOCK_POWER_EXPONENT)
    if demanded <= allowed * (1.0 + _AT_LIMIT):
        return (spec.idle_w + demanded) * spec.sockets, ratio, False
    # Invert the curve: the clock whose package power at this load meets the cap.
    capped = math.pow(allowed / dynamic, 1.0 / CLOCK_POWER_EXPONENT)
    lowest = spec.min_clock_ratio * spec.boost_ghz / natural
    watts = (cap + spec.platform_w) * spec.sockets
    if capped < lowest:
        # Below the lowest clock the package duty-cycles there: power and speed fall together.
        duty = allowed / (dynamic * math.pow(lowest, CLOCK_POWER_EXPONENT))
        return watts, lowest * duty, True
    return watts, capped, True


def _cap_law_speed(spec: GpuPowerSpec, share: float) -> float:
    """Throughput of a board held at ``share`` of the dynamic power its work would draw."""
    knee = spec.knee_share
    if share >= knee:
        return math.pow(share, spec.cap_exponent)
    # Below the knee: linear towards zero at the floor (share > floor: caps stay above it).
    floor = spec.floor_share
    return math.pow(knee, spec.cap_exponent) * (share - floor) / (knee - floor)


def board_steady(spec: GpuPowerSpec, util: float, controls: Controls) -> tuple[float, float, bool]:
    """(watts, speed, cap binding) of one board whose work keeps it ``util`` busy."""
    preset = None if controls.gpu_preset is None else GpuGovernorPreset(controls.gpu_preset)
    held = 0.0 if preset is None else GPU_HELD_IDLE_FRACTION.get(preset, 0.0)
    idle = spec.idle_w + held * (spec.max_w - spec.idle_w)
    clock = gpu_clock_ratio(spec, controls.gpu_preset, controls.gpu_clock_ceiling_pct)
    demanded = idle + (spec.max_w - idle) * math.pow(_unit(util), spec.util_exponent) * math.pow(
        clock, CLOCK_POWER_EXPONENT
    )
    cap = effective_gpu_cap_w(spec, controls)
    if demanded <= cap * (1.0 + _AT_LIMIT):
        return demanded, clock, False
    # The limiter holds the board at the cap. The law reads shares of the work's draw above the
    # plain idle: cap > idle_w (validated), though the cap may sit below the raised idle of a
    # held-clock preset, which it then pulls down.
    share = (cap - spec.idle_w) / (demanded - spec.idle_w)
    return cap, clock * _cap_law_speed(spec, share), True


def board_energy_per_work(spec: GpuPowerSpec, cap_w: float, util: float = 1.0) -> float:
    """Joules per unit of work of one board ``util`` busy under a cap of ``cap_w`` (relative:
    watts over speed, 1.0 being the uncapped speed)."""
    watts, speed, _ = board_steady(spec, util, Controls(gpu_cap_w=cap_w))
    return watts / speed if speed > 0.0 else math.inf


@functools.lru_cache(maxsize=1024)
def energy_optimal_cap_w(spec: GpuPowerSpec) -> float:
    """The cap at which a fully busy board does its work for the least energy: the minimum of
    :func:`board_energy_per_work` over the board's cap range, searched on a 1 W grid and at the
    knee (the law has exactly one minimum, at or above the knee).
    Compute-bound work at full utilisation is the case a cap binds hardest; lighter work never
    reaches a cap at this point."""
    low, high = spec.min_cap_w, spec.max_w
    steps = max(1, math.ceil(high - low))
    caps = [low + (high - low) * i / steps for i in range(steps + 1)]
    # Exactly, not a grid step off: the law's kink, where the minimum of a fully busy board
    # usually lies, and the stationary point above it (watts over speed, c / ((c - idle) /
    # span) ** e, is least at c = idle / (1 - e)), which a steep exponent puts above the knee.
    knee = spec.idle_w + spec.knee_share * (spec.max_w - spec.idle_w)
    stationary = spec.idle_w / (1.0 - spec.cap_exponent)
    caps += [min(high, max(low, cap)) for cap in (knee, stationary)]
    return min(caps, key=lambda cap: (board_energy_per_work(spec, cap), -cap))


def _gpu_steady(
    spec: GpuPowerSpec, load: Load, controls: Controls
) -> tuple[tuple[float, ...], tuple[float, ...], bool]:
    """(watts per board, speed per board, any cap binding)."""
    if load.gpu_boards:
        boards: Sequence[float] = load.gpu_boards[: spec.count]
        boards = (*boards, *(0.0,) * (spec.count - len(boards)))
    else:
        boards = (load.gpu_util,) * spec.count
    per_board: list[tuple[float, float, bool]]
    caps = controls.gpu_board_caps_w
    if not caps:
        solved: dict[float, tuple[float, float, bool]] = {}
        for u in boards:
            if u not in solved:
                solved[u] = board_steady(spec, u, controls)
        per_board = [solved[u] for u in boards]
    else:
        # Each board under its own cap (a board past the list keeps the node's).
        by_cap: dict[tuple[float, float | None, bool], tuple[float, float, bool]] = {}
        per_board = []
        for i, u in enumerate(boards):
            own = i < len(caps)
            cap = caps[i] if own else controls.gpu_cap_w
            key = (u, cap, own)
            if key not in by_cap:
                board = replace(controls, gpu_cap_w=cap, gpu_board_caps_w=())
                by_cap[key] = board_steady(spec, u, board)
            per_board.append(by_cap[key])
    return (
        tuple(w for w, _, _ in per_board),
        tuple(s for _, s, _ in per_board),
        any(b for _, _, b in per_board),
    )


def steady_state(spec: NodePowerSpec, load: Load, controls: Controls) -> Steady:
    """Power and speed the node settles at for this load under these controls."""
    cpu_w, cpu_speed, cpu_binding = _cpu_steady(spec.cpu, _unit(load.cpu_util), controls)
    if spec.gpu is None:
        return Steady(cpu_w, 0.0, cpu_speed, 1.0, 0, cpu_binding, False)
    watts, speeds, binding = _gpu_steady(spec.gpu, load, controls)
    return Steady(
        cpu_w,
        math.fsum(watts) / spec.gpu.count,
        cpu_speed,
        min(speeds),
        spec.gpu.count,
        cpu_binding,
        binding,
        watts,
        speeds,
    )


# --- dynamics --------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodePowerState:
    """Power of the node at time ``t`` and the energy it has used so far.

    ``gpu_energy_j`` is the energy of all GPUs together; ``gpu_w_per_gpu`` is per device.
    """

    t: float
    cpu_w: float
    gpu_w_per_gpu: float
    cpu_energy_j: float
    gpu_energy_j: float
    gpu_count: int = 0

    @property
    def node_w(self) -> float:
        return self.cpu_w + self.gpu_w_per_gpu * self.gpu_count

    @property
    def energy_j(self) -> float:
        return self.cpu_energy_j + self.gpu_energy_j


def initial_state(spec: NodePowerSpec, t: float) -> NodePowerState:
    """A node idling, uncontrolled, at time ``t`` with no energy used yet."""
    _require_finite_time(t)
    gpu_w = 0.0 if spec.gpu is None else spec.gpu.idle_w
    return NodePowerState(t, spec.cpu.idle_w * spec.cpu.sockets, gpu_w, 0.0, 0.0, spec.gpu_count)


def _require_finite_time(t: float) -> None:
    if not math.isfinite(t):
        raise ValueError(f"time must be a finite number of seconds, got {t!r}")


def _settle(start_w: float, target_w: float, dt: float, tau_s: float) -> tuple[float, float]:
    """(power at the end, energy over the step) of a first-order lag, in closed form.

    P(s) = target + (start - target) * exp(-s / tau); its integral over [0, dt] is
    target * dt + (start - target) * tau * (1 - exp(-dt / tau)). expm1 keeps short steps exact.
    """
    if tau_s == 0.0:
        return target_w, target_w * dt
    decay = -math.expm1(-dt / tau_s)  # 1 - exp(-dt / tau)
    gap = start_w - target_w
    return target_w + gap * (1.0 - decay), target_w * dt + gap * tau_s * decay


def advance(
    spec: NodePowerSpec,
    state: NodePowerState,
    load: Load,
    controls: Controls,
    t: float,
    tau_s: float = 2.0,
) -> NodePowerState:
    """The state at time ``t``, with ``load`` and ``controls`` held since ``state.t``.

    Power relaxes toward :func:`steady_state` with time constant ``tau_s`` (0: at once; it stands
    for RAPL and GPU power-limiter settling plus the averaging of telemetry). The solution is
    exact, so the result does not depend on how the interval is cut into steps. A step that does
    not move time forward returns ``state`` unchanged.
    """
    _require_finite_time(t)
    if not math.isfinite(tau_s) or tau_s < 0.0:
        raise ValueError(f"tau_s must be a non-negative number of seconds, got {tau_s!r}")
    dt = t - state.t
    if dt <= 0.0:
        return state
    target = steady_state(spec, load, controls)
    cpu_w, cpu_j = _settle(state.cpu_w, target.cpu_w, dt, tau_s)
    gpu_w, gpu_j = _settle(state.gpu_w_per_gpu, target.gpu_w_per_gpu, dt, tau_s)
    return NodePowerState(
        t=t,
        cpu_w=cpu_w,
        gpu_w_per_gpu=gpu_w,
        cpu_energy_j=state.cpu_energy_j + cpu_j,
        gpu_energy_j=state.gpu_energy_j + gpu_j * spec.gpu_count,
        gpu_count=spec.gpu_count,
    )


# --- facility --------------------------------------------------------------------------------


def facility(ambient_c: float, it_power_w: float, peak_it_power_w: float) -> tuple[float, float]:
    """(PUE, cooling power in watts) of the room around the IT load.

    With ``L = it / peak`` clamped to [0, 1] and ``H = max(0, ambient - 18 °C)``::

        PUE = clamp(1.05 + 0.05 L + 0.015 H (0.4 + 0.6 L), 1.05, 2.0)
        cooling = it * (PUE - 1)

    Below 18 °C an economiser cools with fans, so only the load term remains; above it mechanical
    cooling adds overhead per kelvin, mostly in proportion to the heat it must move. Both terms
    only grow, so PUE never falls as the room warms or the load rises.
    """
    if not math.isfinite(ambient_c):
        raise ValueError(f"ambient temperature must be finite, got {ambient_c!r}")
    if not (math.isfinite(it_power_w) and math.isfinite(peak_it_power_w)):
        raise ValueError(f"IT power must be finite, got it={it_power_w!r} peak={peak_it_power_w!r}")
    it = max(0.0, it_power_w)
    # With no peak known yet, any load present is the peak so far.
    peak = peak_it_power_w if peak_it_power_w > 0.0 else it
    load = min(1.0, it / peak) if peak > 0.0 else 0.0
    heat = max(0.0, ambient_c - FREE_COOLING_LIMIT_C)
    pue = (
        PUE_MIN
        + PUE_LOAD_COEFF * load
        + PUE_AMBIENT_COEFF
        * heat
        * (PUE_AMBIENT_IDLE_SHARE + (1.0 - PUE_AMBIENT_IDLE_SHARE) * load)
    )
    pue = min(PUE_MAX, max(PUE_MIN, pue))
    return pue, it * (pue - 1.0)
