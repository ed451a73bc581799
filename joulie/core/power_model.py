"""Deterministic power and performance model of one node (CPU packages and GPUs).

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

CPU (per socket; the node has ``sockets`` identical sockets sharing the load and the cap evenly)::

    P(u, f) = idle + (full - idle) * shape(u) * f ** CLOCK_POWER_EXPONENT
    analytic:  full = max_w,       shape(u) = u ** CPU_UTIL_EXPONENT
    measured:  full = curve(100),  shape(u) = (curve(100 u) - curve(0)) / (full - curve(0))

so at the boost clock a measured curve is reproduced exactly (linear interpolation).

``u`` is the demanded utilisation: the share of the CPU the running work keeps busy (a batch
view: a slower clock makes that work slower rather than spreading it over more cores), so the
work's speed is the clock ratio ``f`` (compute-bound work, the conservative case). ``f`` is the
clock relative to boost: 1.0 for ``performance``, ``nominal / boost`` for ``efficiency`` and
halfway between for ``balanced``. A binding cap lowers ``f`` until ``P`` meets the cap; below the
lowest DVFS clock the package duty-cycles, which saves power only in proportion to speed.

GPU (per device)::

    P(u) = idle' + (max - idle') * u ** util_exponent * c ** CLOCK_POWER_EXPONENT
    speed = c * (min(P, cap) / P) ** speed_exponent

``c`` is the graphics clock ceiling (``efficient``: the ceiling percentage; ``low``: the lowest
supported clock; otherwise 1). ``idle'`` is raised above ``idle`` by the presets that hold clocks
(``peak``, ``sustained``): held clocks cost power when the device has nothing to do.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass

from joulie.api.enums import CpuGovernorPreset, GpuGovernorPreset

__all__ = [
    "CLOCK_POWER_EXPONENT",
    "CPU_UTIL_EXPONENT",
    "DEFAULT_GPU_CLOCK_CEILING_PCT",
    "PUE_MAX",
    "PUE_MIN",
    "Controls",
    "CpuPowerSpec",
    "GpuPowerSpec",
    "Load",
    "NodePowerSpec",
    "NodePowerState",
    "Steady",
    "advance",
    "cpu_clock_ratio",
    "effective_cpu_cap_w",
    "effective_gpu_cap_w",
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

    ``curve`` is a measured (load %, watts per socket) table, used as measured: power at a load is
    the linear interpolation of the table (clamped at its ends). Its value at 0 % must be
    ``idle_w``; its full-load value may sit below ``max_w``, which then only bounds the caps the
    hardware accepts (measured wall power and TDP rarely agree). :meth:`from_curve` takes both
    from the curve.
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

    def __post_init__(self) -> None:
        owner = "CpuPowerSpec"
        _require_count(owner, "sockets", self.sockets)
        _require_watt_range(owner, self.idle_w, self.max_w, self.min_cap_w)
        _require_positive(owner, "nominal_ghz", self.nominal_ghz)
        _require_positive(owner, "boost_ghz", self.boost_ghz)
        if self.nominal_ghz > self.boost_ghz:
            raise ValueError(
                f"{owner}: nominal_ghz ({self.nominal_ghz}) must not exceed "
                f"boost_ghz ({self.boost_ghz})"
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
            if top > self.max_w:
                raise ValueError(
                    f"{owner}: curve at 100 % load ({top} W) exceeds max_w ({self.max_w} W); "
                    "max_w is the top of the cap range and must cover the uncapped draw"
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
        """A spec whose idle and maximum power are the measured curve's end points."""
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
    def full_load_w(self) -> float:
        """Uncapped power per socket at 100 % load and the boost clock."""
        return _interp(self.curve, 100.0) if self.curve else self.max_w

    @property
    def min_clock_ratio(self) -> float:
        """Lowest DVFS clock relative to boost."""
        if self.min_ghz is not None:
            return self.min_ghz / self.boost_ghz
        return min(DEFAULT_CPU_MIN_CLOCK_RATIO, self.nominal_ghz / self.boost_ghz)

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
    """Power behaviour of the GPUs of one node; watts are per device, all devices alike.

    ``speed_exponent`` says how much throughput a power limit costs: work that the limit holds to
    ``r`` of the power it would draw runs at ``r ** speed_exponent``. 0.6 sits between
    compute-bound kernels (near 1 with the clock) and memory-bound ones (barely affected).
    """

    count: int
    idle_w: float
    max_w: float
    min_cap_w: float
    speed_exponent: float = 0.6
    util_exponent: float = 1.0
    """Shape of power against average utilisation; board power tracks busy time nearly linearly."""
    min_clock_ratio: float = 0.2
    """Lowest supported graphics clock relative to the maximum (the ``low`` preset's clock)."""

    def __post_init__(self) -> None:
        owner = "GpuPowerSpec"
        _require_count(owner, "count", self.count)
        _require_watt_range(owner, self.idle_w, self.max_w, self.min_cap_w)
        _require_positive(owner, "speed_exponent", self.speed_exponent)
        _require_positive(owner, "util_exponent", self.util_exponent)
        _require_positive(owner, "min_clock_ratio", self.min_clock_ratio)
        if self.min_clock_ratio > 1.0:
            raise ValueError(
                f"GpuPowerSpec.min_clock_ratio must be at most 1, got {self.min_clock_ratio!r}"
            )


@dataclass(frozen=True)
class NodePowerSpec:
    cpu: CpuPowerSpec
    gpu: GpuPowerSpec | None = None

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
    hardware itself does; unknown presets raise ValueError."""

    cpu_cap_w: float | None = None
    cpu_preset: str | None = None
    gpu_cap_w: float | None = None
    gpu_preset: str | None = None
    gpu_clock_ceiling_pct: float | None = None

    def __post_init__(self) -> None:
        _optional_watts("Controls", "cpu_cap_w", self.cpu_cap_w)
        _optional_watts("Controls", "gpu_cap_w", self.gpu_cap_w)
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
    """Demanded utilisation; values outside [0, 1] (and NaN) are clamped on construction."""

    cpu_util: float = 0.0
    gpu_util: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "cpu_util", _unit(self.cpu_util))
        object.__setattr__(self, "gpu_util", _unit(self.gpu_util))


# --- steady state ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Steady:
    """Where power and speed settle for a constant load and constant controls."""

    cpu_w: float
    gpu_w_per_gpu: float
    cpu_speed: float
    gpu_speed: float
    gpu_count: int = 0
    cpu_cap_binding: bool = False
    """The CPU cap, not the load, sets the power (telemetry's 'cap saturated')."""
    gpu_cap_binding: bool = False

    @property
    def node_w(self) -> float:
        return self.cpu_w + self.gpu_w_per_gpu * self.gpu_count


def work_speed(steady: Steady, cpu_share: float, gpu_share: float) -> float:
    """How fast a piece of work runs on a node at ``steady`` (1.0: as fast as uncapped), when
    ``cpu_share`` of its run time is bound by the CPU clock and ``gpu_share`` by the GPU clock
    (the rest, waiting on I/O or the network, does not move with either). Each share stretches
    by the inverse of its part's speed, so the work never runs faster than at full clocks."""
    stretch = (1.0 - cpu_share - gpu_share) + cpu_share / steady.cpu_speed
    if gpu_share:
        stretch += gpu_share / steady.gpu_speed
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
    """Node-wide CPU cap the hardware enforces: the requested one clamped to its range."""
    return _cpu_socket_cap_w(spec, controls) * spec.sockets


def effective_gpu_cap_w(spec: GpuPowerSpec, controls: Controls) -> float:
    """Per-GPU cap the hardware enforces: the requested one clamped to its range."""
    if controls.gpu_cap_w is None:
        return spec.max_w
    return min(spec.max_w, max(spec.min_cap_w, controls.gpu_cap_w))


# Both solvers below compare shares of the dynamic range (0 at idle, 1 at max_w) rather than
# watts: an uncapped part at full load then sits exactly at share 1.0 and is never mistaken for a
# capped one by a rounding error in the last bit.


def _cpu_steady(spec: CpuPowerSpec, util: float, controls: Controls) -> tuple[float, float, bool]:
    """(node CPU watts, speed, cap binding)."""
    span = spec.full_load_w - spec.idle_w
    f_ceiling = cpu_clock_ratio(spec, controls.cpu_preset)
    shape = spec.shape(util)
    demanded = shape * math.pow(f_ceiling, CLOCK_POWER_EXPONENT)
    cap = _cpu_socket_cap_w(spec, controls)
    allowed = (cap - spec.idle_w) / span  # above 1 when the cap exceeds the full-load draw
    if demanded <= allowed:
        return (spec.idle_w + span * demanded) * spec.sockets, f_ceiling, False
    # Invert the curve: the clock whose power at this load meets the cap. cap > idle
    # (validated), so allowed > 0 and the work never stops.
    f = math.pow(allowed / shape, 1.0 / CLOCK_POWER_EXPONENT)
    f_min = spec.min_clock_ratio
    if f < f_min:
        # Below the lowest clock the package duty-cycles at f_min: power and speed fall together.
        duty = allowed / (shape * math.pow(f_min, CLOCK_POWER_EXPONENT))
        return cap * spec.sockets, f_min * duty, True
    return cap * spec.sockets, f, True


def _gpu_steady(spec: GpuPowerSpec, util: float, controls: Controls) -> tuple[float, float, bool]:
    """(watts per GPU, speed, cap binding)."""
    preset = None if controls.gpu_preset is None else GpuGovernorPreset(controls.gpu_preset)
    held = 0.0 if preset is None else GPU_HELD_IDLE_FRACTION.get(preset, 0.0)
    idle = spec.idle_w + held * (spec.max_w - spec.idle_w)
    span = spec.max_w - idle
    clock = gpu_clock_ratio(spec, controls.gpu_preset, controls.gpu_clock_ceiling_pct)
    demanded = math.pow(util, spec.util_exponent) * math.pow(clock, CLOCK_POWER_EXPONENT)
    cap = effective_gpu_cap_w(spec, controls)
    if demanded <= (cap - idle) / span:
        return idle + span * demanded, clock, False
    # The power limiter lowers clocks until the board meets the cap; cap > idle_w (validated),
    # though it may sit below the raised idle of a held-clock preset, which it then pulls down.
    return cap, clock * math.pow(cap / (idle + span * demanded), spec.speed_exponent), True


def steady_state(spec: NodePowerSpec, load: Load, controls: Controls) -> Steady:
    """Power and speed the node settles at for this load under these controls."""
    cpu_w, cpu_speed, cpu_binding = _cpu_steady(spec.cpu, _unit(load.cpu_util), controls)
    if spec.gpu is None:
        return Steady(cpu_w, 0.0, cpu_speed, 1.0, 0, cpu_binding, False)
    gpu_w, gpu_speed, gpu_binding = _gpu_steady(spec.gpu, _unit(load.gpu_util), controls)
    return Steady(cpu_w, gpu_w, cpu_speed, gpu_speed, spec.gpu.count, cpu_binding, gpu_binding)


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
