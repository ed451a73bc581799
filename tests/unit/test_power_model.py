"""Properties of the node power model the simulator runs on.

Each test states something a user of the simulator would notice if it broke: caps that save power
without slowing work, savings that come from merely being managed, or results that change with
the size of the time step.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joulie.core.power_model import (
    PUE_MAX,
    PUE_MIN,
    Controls,
    CpuPowerSpec,
    GpuPowerSpec,
    Load,
    NodePowerSpec,
    NodePowerState,
    Steady,
    Throughput,
    advance,
    board_energy_per_work,
    effective_cpu_cap_w,
    effective_gpu_cap_w,
    energy_optimal_cap_w,
    facility,
    initial_state,
    steady_state,
    work_speed,
)

CPU_PRESETS = [None, "performance", "balanced", "efficiency"]
GPU_PRESETS = [None, "auto", "efficient", "low", "peak", "sustained"]
HELD_CLOCK_PRESETS = {"peak", "sustained"}
TOL = 1e-9

# A measured SPECpower curve of a 2-socket EPYC 9654 node, halved to watts per socket.
EPYC_9654_CURVE = tuple(
    (10.0 * i, w / 2.0)
    for i, w in enumerate([128, 257, 300, 340, 378, 410, 442, 498, 577, 697, 817])
)

utils = st.floats(min_value=0.0, max_value=1.0)
caps = st.none() | st.floats(min_value=0.0, max_value=5000.0)


@st.composite
def curves(draw: st.DrawFn, idle_w: float, max_w: float) -> tuple[tuple[float, float], ...]:
    loads = sorted(
        draw(st.lists(st.floats(0.0, 100.0), min_size=2, max_size=11, unique=True)),
    )
    steps = draw(st.lists(st.floats(0.0, 1.0), min_size=len(loads) - 1, max_size=len(loads) - 1))
    steps[-1] += 0.01  # a curve must rise somewhere
    # The curve starts at idle and ends anywhere up to max_w (which may be a TDP above it).
    scale = (max_w - idle_w) * draw(st.floats(0.05, 1.0)) / sum(steps)
    watts = [idle_w]
    for step in steps:
        watts.append(min(max_w, watts[-1] + step * scale))
    return tuple(zip(loads, watts, strict=True))


@st.composite
def cpu_specs(draw: st.DrawFn) -> CpuPowerSpec:
    idle = draw(st.floats(5.0, 200.0))
    span = draw(st.floats(5.0, 600.0))
    max_w = idle + span
    nominal = draw(st.floats(1.0, 4.0))
    boost = nominal * draw(st.floats(1.0, 2.0))
    # Part of idle may be platform power (not under the package cap): the package range then
    # starts lower, and a curve's package draw (curve less platform) still fits under max_w.
    platform = idle * draw(st.just(0.0) | st.floats(0.0, 0.9))
    return CpuPowerSpec(
        sockets=draw(st.integers(1, 4)),
        idle_w=idle,
        max_w=max_w,
        min_cap_w=idle + span * draw(st.floats(0.01, 1.0)),
        curve=draw(st.just(()) | curves(idle, max_w)),
        nominal_ghz=nominal,
        boost_ghz=boost,
        min_ghz=draw(st.none() | st.floats(0.1, 1.0).map(lambda r: r * nominal)),
        all_core_ghz=draw(
            st.none() | st.floats(0.0, 1.0).map(lambda r: nominal + r * (boost - nominal))
        ),
        platform_w=platform,
    )


@st.composite
def gpu_specs(draw: st.DrawFn) -> GpuPowerSpec:
    idle = draw(st.floats(5.0, 150.0))
    span = draw(st.floats(20.0, 800.0))
    return GpuPowerSpec(
        count=draw(st.integers(1, 8)),
        idle_w=idle,
        max_w=idle + span,
        # Above the default floor (8 % of the dynamic range), as every accepted cap must be.
        min_cap_w=idle + span * draw(st.floats(0.09, 1.0)),
        cap_exponent=draw(st.floats(0.05, 0.95)),
        util_exponent=draw(st.floats(0.5, 2.0)),
        min_clock_ratio=draw(st.floats(0.05, 1.0)),
    )


node_specs = st.builds(NodePowerSpec, cpu=cpu_specs(), gpu=st.none() | gpu_specs())
gpu_node_specs = st.builds(NodePowerSpec, cpu=cpu_specs(), gpu=gpu_specs())
controls = st.builds(
    Controls,
    cpu_cap_w=caps,
    cpu_preset=st.sampled_from(CPU_PRESETS),
    gpu_cap_w=caps,
    gpu_preset=st.sampled_from(GPU_PRESETS),
    gpu_clock_ceiling_pct=st.none() | st.floats(1.0, 120.0),
)
loads = st.builds(Load, cpu_util=utils, gpu_util=utils)


def with_caps(c: Controls, cpu_cap_w: float | None, gpu_cap_w: float | None) -> Controls:
    return Controls(cpu_cap_w, c.cpu_preset, gpu_cap_w, c.gpu_preset, c.gpu_clock_ceiling_pct)


def uncontrolled_gpu(c: Controls) -> Controls:
    return Controls(c.cpu_cap_w, c.cpu_preset, None, None, None)


# --- monotonicity and bounds -----------------------------------------------------------------


@given(node_specs, controls, utils, utils)
def test_power_never_falls_as_utilisation_rises(
    spec: NodePowerSpec, ctl: Controls, a: float, b: float
) -> None:
    low, high = sorted((a, b))
    lo = steady_state(spec, Load(low, low), ctl)
    hi = steady_state(spec, Load(high, high), ctl)
    assert lo.cpu_w <= hi.cpu_w * (1 + TOL)
    assert lo.gpu_w_per_gpu <= hi.gpu_w_per_gpu * (1 + TOL)


@given(node_specs, loads, controls, caps, caps)
def test_a_lower_cap_never_raises_power_or_speed(
    spec: NodePowerSpec, load: Load, ctl: Controls, a: float | None, b: float | None
) -> None:
    # None is no cap, i.e. the highest one.
    low, high = sorted((a, b), key=lambda c: math.inf if c is None else c)
    tight = steady_state(spec, load, with_caps(ctl, low, low))
    loose = steady_state(spec, load, with_caps(ctl, high, high))
    assert tight.cpu_w <= loose.cpu_w * (1 + TOL)
    assert tight.cpu_speed <= loose.cpu_speed * (1 + TOL)
    assert tight.gpu_w_per_gpu <= loose.gpu_w_per_gpu * (1 + TOL)
    assert tight.gpu_speed <= loose.gpu_speed * (1 + TOL)


@given(node_specs, loads, controls)
def test_power_stays_between_idle_and_the_enforced_cap(
    spec: NodePowerSpec, load: Load, ctl: Controls
) -> None:
    s = steady_state(spec, load, ctl)
    assert 0.0 < s.cpu_speed <= 1.0
    assert 0.0 < s.gpu_speed <= 1.0
    assert s.cpu_w >= spec.cpu.idle_w * spec.cpu.sockets * (1 - TOL)
    # The cap holds the package; the platform share of the sockets' power is outside it.
    platform = spec.cpu.platform_w * spec.cpu.sockets
    assert s.cpu_w <= (effective_cpu_cap_w(spec.cpu, ctl) + platform) * (1 + TOL)
    if spec.gpu is not None:
        assert s.gpu_w_per_gpu >= spec.gpu.idle_w * (1 - TOL)
        assert s.gpu_w_per_gpu <= effective_gpu_cap_w(spec.gpu, ctl) * (1 + TOL)
        assert s.node_w == pytest.approx(s.cpu_w + spec.gpu.count * s.gpu_w_per_gpu)
    else:
        assert s.gpu_w_per_gpu == 0.0
        assert s.node_w == s.cpu_w


@given(cpu_specs(), st.floats(-1e6, 1e6))
def test_caps_are_clamped_to_the_hardware_range(spec: CpuPowerSpec, cap: float) -> None:
    enforced = effective_cpu_cap_w(spec, Controls(cpu_cap_w=cap))
    assert spec.min_cap_w * spec.sockets * (1 - TOL) <= enforced
    assert enforced <= spec.max_w * spec.sockets * (1 + TOL)


# --- a cap that saves power for free is a bug --------------------------------------------------


@given(node_specs, loads, controls)
def test_a_cap_that_cuts_power_also_slows_the_work(
    spec: NodePowerSpec, load: Load, ctl: Controls
) -> None:
    free = steady_state(spec, load, with_caps(ctl, None, None))
    capped = steady_state(spec, load, ctl)
    if capped.cpu_w < free.cpu_w * (1 - 1e-6):
        assert capped.cpu_cap_binding
        assert capped.cpu_speed < free.cpu_speed
    if capped.gpu_w_per_gpu < free.gpu_w_per_gpu * (1 - 1e-6):
        assert capped.gpu_cap_binding
        assert capped.gpu_speed < free.gpu_speed


def test_a_cap_slows_a_cpu_described_by_a_measured_curve() -> None:
    # Upstream clamped the curve's power to the cap and never lowered the clock (its D13).
    spec = NodePowerSpec(CpuPowerSpec.from_curve(2, EPYC_9654_CURVE, min_cap_w=198.0))
    full = Load(cpu_util=1.0)
    free = steady_state(spec, full, Controls())
    capped = steady_state(spec, full, Controls(cpu_cap_w=600.0))
    assert free.cpu_w == pytest.approx(817.0)
    assert capped.cpu_w == pytest.approx(600.0)
    assert capped.cpu_speed < 0.9


def test_a_measured_curve_with_matching_ends_is_interpolated_exactly() -> None:
    spec = CpuPowerSpec.from_curve(2, EPYC_9654_CURVE, min_cap_w=198.0)
    node = NodePowerSpec(spec)
    assert (spec.idle_w, spec.max_w) == (64.0, 408.5)
    for util, node_w in [(0.0, 128.0), (0.5, 410.0), (0.25, (300 + 340) / 2), (1.0, 817.0)]:
        assert steady_state(node, Load(util), Controls()).cpu_w == pytest.approx(node_w)


def test_max_w_above_a_measured_curve_only_widens_the_cap_range() -> None:
    # Measured wall power and TDP disagree: EPYC 9965's full-load point is 400 W per socket,
    # its TDP 500 W. The curve sets the draw, max_w the highest cap.
    curve = ((0.0, 78.5), (50.0, 230.5), (100.0, 400.0))
    spec = NodePowerSpec(CpuPowerSpec(2, 78.5, 500.0, 250.0, curve=curve))
    full = Load(cpu_util=1.0)
    assert steady_state(spec, full, Controls()).cpu_w == pytest.approx(800.0)
    at_max = steady_state(spec, full, Controls(cpu_cap_w=1000.0))
    assert (at_max.cpu_speed, at_max.cpu_cap_binding) == (1.0, False)
    capped = steady_state(spec, full, Controls(cpu_cap_w=700.0))
    assert capped.cpu_w == pytest.approx(700.0)
    assert capped.cpu_speed < 1.0


def test_a_gpu_cap_below_demand_sets_power_and_speed() -> None:
    gpu = GpuPowerSpec(
        count=4, idle_w=100.0, max_w=700.0, min_cap_w=200.0, knee_w=400.0, cap_exponent=0.3
    )
    spec = NodePowerSpec(CpuPowerSpec(1, 50.0, 250.0, 100.0), gpu)
    s = steady_state(spec, Load(gpu_util=1.0), Controls(gpu_cap_w=550.0))
    assert s.gpu_w_per_gpu == pytest.approx(550.0)
    # Above the knee: the share of the dynamic draw the cap leaves, to the exponent.
    assert s.gpu_speed == pytest.approx((450.0 / 600.0) ** 0.3)
    # Below it (the default floor: 8 % of the range, 148 W): linear towards zero at the floor.
    s = steady_state(spec, Load(gpu_util=1.0), Controls(gpu_cap_w=350.0))
    assert s.gpu_w_per_gpu == pytest.approx(350.0)
    knee_speed = 0.5**0.3
    assert s.gpu_speed == pytest.approx(knee_speed * (350.0 - 148.0) / (400.0 - 148.0))
    assert s.node_w == pytest.approx(50.0 + 4 * 350.0)


# --- no managed-idle bonus -----------------------------------------------------------------------


@given(node_specs, controls)
def test_an_idle_node_draws_idle_power_whatever_is_applied(
    spec: NodePowerSpec, ctl: Controls
) -> None:
    s = steady_state(spec, Load(), ctl)
    assert s.cpu_w == spec.cpu.idle_w * spec.cpu.sockets
    if spec.gpu is None:
        return
    # The per-GPU figure is the boards' sum over their count: equal to a board's idle draw to
    # the last bit or two (3 x w / 3 need not be w in floating point).
    if ctl.gpu_preset in HELD_CLOCK_PRESETS:
        assert s.gpu_w_per_gpu >= spec.gpu.idle_w * (1 - 1e-12)
    else:
        assert s.gpu_board_w == (spec.gpu.idle_w,) * spec.gpu.count  # each board exactly
        assert s.gpu_w_per_gpu == pytest.approx(spec.gpu.idle_w, rel=1e-12)
    assert s.node_w >= spec.idle_w * (1 - TOL)


def test_held_clock_presets_cost_power_at_idle() -> None:
    gpu = GpuPowerSpec(count=1, idle_w=60.0, max_w=400.0, min_cap_w=200.0)
    spec = NodePowerSpec(CpuPowerSpec(1, 50.0, 250.0, 100.0), gpu)
    auto = steady_state(spec, Load(), Controls(gpu_preset="auto")).gpu_w_per_gpu
    sustained = steady_state(spec, Load(), Controls(gpu_preset="sustained")).gpu_w_per_gpu
    peak = steady_state(spec, Load(), Controls(gpu_preset="peak")).gpu_w_per_gpu
    assert auto == 60.0
    assert auto < sustained < peak


# --- presets ----------------------------------------------------------------------------------


@given(cpu_specs(), st.floats(0.01, 1.0))
def test_cpu_presets_trade_speed_for_power(spec: CpuPowerSpec, util: float) -> None:
    node = NodePowerSpec(spec)
    by_preset = [steady_state(node, Load(util), Controls(cpu_preset=p)) for p in CPU_PRESETS[1:]]
    for faster, slower in itertools.pairwise(by_preset):
        assert slower.cpu_w <= faster.cpu_w * (1 + TOL)
        assert slower.cpu_speed <= faster.cpu_speed
    performance, _, efficiency = by_preset
    assert performance.cpu_speed == 1.0
    # A ceiling slows work only by how far it sits below the clock the load would get.
    assert efficiency.cpu_speed == pytest.approx(
        min(1.0, spec.nominal_ghz / spec.natural_ghz(util))
    )


@given(gpu_node_specs, st.floats(0.01, 1.0), st.floats(1.0, 100.0))
def test_efficient_gpu_preset_trades_speed_for_power(
    spec: NodePowerSpec, util: float, pct: float
) -> None:
    load = Load(gpu_util=util)
    auto = steady_state(spec, load, Controls(gpu_preset="auto"))
    eff = steady_state(spec, load, Controls(gpu_preset="efficient", gpu_clock_ceiling_pct=pct))
    low = steady_state(spec, load, Controls(gpu_preset="low"))
    assert auto.gpu_speed == 1.0
    assert low.gpu_w_per_gpu <= eff.gpu_w_per_gpu * (1 + TOL)
    assert eff.gpu_w_per_gpu <= auto.gpu_w_per_gpu * (1 + TOL)
    assert low.gpu_speed <= eff.gpu_speed <= auto.gpu_speed
    assert steady_state(spec, load, Controls(gpu_preset="peak")).gpu_speed == 1.0


def test_efficient_gpu_preset_defaults_to_an_80_percent_ceiling() -> None:
    gpu = GpuPowerSpec(count=1, idle_w=60.0, max_w=400.0, min_cap_w=200.0)
    spec = NodePowerSpec(CpuPowerSpec(1, 50.0, 250.0, 100.0), gpu)
    s = steady_state(spec, Load(gpu_util=1.0), Controls(gpu_preset="efficient"))
    assert s.gpu_speed == pytest.approx(0.8)
    assert s.gpu_w_per_gpu == pytest.approx(60.0 + 340.0 * 0.8**2.5)


# --- dynamics -----------------------------------------------------------------------------------


def settled(spec: NodePowerSpec, steady: Steady, t: float) -> NodePowerState:
    return NodePowerState(t, steady.cpu_w, steady.gpu_w_per_gpu, 0.0, 0.0, spec.gpu_count)


@given(node_specs, loads, controls, st.floats(0.0, 1e6), st.floats(0.01, 1e4))
def test_constant_power_integrates_to_power_times_time(
    spec: NodePowerSpec, load: Load, ctl: Controls, t0: float, dt: float
) -> None:
    target = steady_state(spec, load, ctl)
    after = advance(spec, settled(spec, target, t0), load, ctl, t0 + dt)
    elapsed = (t0 + dt) - t0
    assert after.node_w == pytest.approx(target.node_w, rel=1e-12)
    assert after.cpu_energy_j == pytest.approx(target.cpu_w * elapsed, rel=1e-9)
    assert after.gpu_energy_j == pytest.approx(
        target.gpu_w_per_gpu * spec.gpu_count * elapsed, rel=1e-9
    )
    assert after.energy_j == pytest.approx(target.node_w * elapsed, rel=1e-9)


@given(
    node_specs,
    loads,
    controls,
    st.floats(0.0, 1e5),
    st.floats(0.1, 100.0),
    st.integers(2, 50),
    st.floats(0.0, 10.0),
)
def test_one_long_step_equals_many_short_ones(
    spec: NodePowerSpec,
    load: Load,
    ctl: Controls,
    t0: float,
    span: float,
    steps: int,
    tau: float,
) -> None:
    start = initial_state(spec, t0)
    one = advance(spec, start, load, ctl, t0 + span, tau)
    many = start
    for i in range(1, steps):
        many = advance(spec, many, load, ctl, t0 + span * i / steps, tau)
    many = advance(spec, many, load, ctl, t0 + span, tau)
    assert many.t == one.t
    for a, b in [
        (many.cpu_w, one.cpu_w),
        (many.gpu_w_per_gpu, one.gpu_w_per_gpu),
        (many.cpu_energy_j, one.cpu_energy_j),
        (many.gpu_energy_j, one.gpu_energy_j),
    ]:
        assert a == pytest.approx(b, rel=1e-6, abs=1e-9)


@given(node_specs, loads, controls, st.floats(0.1, 10.0), st.floats(0.0, 1.0))
def test_power_settles_under_the_cap_after_a_long_step(
    spec: NodePowerSpec, load: Load, ctl: Controls, tau: float, start_share: float
) -> None:
    # Start anywhere between idle and full power, e.g. right after the cap was lowered.
    full = steady_state(spec, Load(1.0, 1.0), Controls())
    state = NodePowerState(
        0.0,
        spec.cpu.idle_w * spec.cpu.sockets + start_share * (full.cpu_w - spec.cpu.idle_w),
        full.gpu_w_per_gpu * start_share,
        0.0,
        0.0,
        spec.gpu_count,
    )
    after = advance(spec, state, load, ctl, 20.0 * tau, tau)
    platform = spec.cpu.platform_w * spec.cpu.sockets
    assert after.cpu_w <= (effective_cpu_cap_w(spec.cpu, ctl) + platform) * 1.01
    if spec.gpu is not None:
        assert after.gpu_w_per_gpu <= effective_gpu_cap_w(spec.gpu, ctl) * 1.01


@given(node_specs, loads, controls, st.floats(0.0, 1e5), st.floats(0.0, 1e4))
def test_a_step_that_does_not_move_time_forward_changes_nothing(
    spec: NodePowerSpec, load: Load, ctl: Controls, t: float, back: float
) -> None:
    state = advance(spec, initial_state(spec, 0.0), Load(1.0, 1.0), Controls(), t + 1.0)
    assert advance(spec, state, load, ctl, state.t - back) is state


@given(node_specs, loads, controls, st.floats(0.01, 1e4), st.floats(0.0, 10.0))
def test_same_inputs_give_the_same_bits(
    spec: NodePowerSpec, load: Load, ctl: Controls, dt: float, tau: float
) -> None:
    assert repr(steady_state(spec, load, ctl)) == repr(steady_state(spec, load, ctl))
    first = advance(spec, initial_state(spec, 0.0), load, ctl, dt, tau)
    second = advance(spec, initial_state(spec, 0.0), load, ctl, dt, tau)
    assert repr(first) == repr(second)


def test_power_approaches_the_target_exponentially() -> None:
    spec = NodePowerSpec(CpuPowerSpec(1, 100.0, 300.0, 150.0))
    after = advance(spec, initial_state(spec, 10.0), Load(1.0), Controls(), 12.0, tau_s=2.0)
    assert after.cpu_w == pytest.approx(300.0 - 200.0 * math.exp(-1.0))
    # Integral of 300 - 200 e^(-s/2) over [0, 2].
    assert after.cpu_energy_j == pytest.approx(600.0 - 400.0 * (1.0 - math.exp(-1.0)))


def test_advance_rejects_bad_time_arguments() -> None:
    spec = NodePowerSpec(CpuPowerSpec(1, 100.0, 300.0, 150.0))
    state = initial_state(spec, 0.0)
    with pytest.raises(ValueError, match="tau_s"):
        advance(spec, state, Load(), Controls(), 1.0, tau_s=-1.0)
    with pytest.raises(ValueError, match="time"):
        advance(spec, state, Load(), Controls(), math.nan)


# --- facility ----------------------------------------------------------------------------------


temperatures = st.floats(-30.0, 60.0)
powers = st.floats(0.0, 1e7)


@given(temperatures, temperatures, powers, powers, st.floats(1.0, 1e7))
def test_pue_is_bounded_and_rises_with_ambient_and_load(
    t_a: float, t_b: float, p_a: float, p_b: float, peak: float
) -> None:
    cool, warm = sorted((t_a, t_b))
    light, heavy = sorted((p_a, p_b))
    for t in (cool, warm):
        for p in (light, heavy):
            pue, cooling = facility(t, p, peak)
            assert PUE_MIN <= pue <= PUE_MAX
            assert cooling == pytest.approx(p * (pue - 1.0))
    assert facility(cool, light, peak)[0] <= facility(warm, light, peak)[0]
    assert facility(cool, light, peak)[0] <= facility(cool, heavy, peak)[0]


def test_pue_reference_points() -> None:
    assert facility(10.0, 0.0, 1000.0) == (PUE_MIN, 0.0)
    assert facility(18.0, 1000.0, 1000.0)[0] == pytest.approx(1.10)
    assert facility(30.0, 1000.0, 1000.0)[0] == pytest.approx(1.28)
    assert facility(200.0, 1000.0, 1000.0)[0] == PUE_MAX
    # Without a known peak the present load is the peak.
    assert facility(30.0, 500.0, 0.0) == facility(30.0, 500.0, 500.0)


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0.0, -5.0, math.nan, math.inf])
@pytest.mark.parametrize("name", ["idle_w", "max_w", "min_cap_w"])
def test_specs_reject_non_positive_watts(name: str, bad: float) -> None:
    cpu = {"sockets": 2, "idle_w": 50.0, "max_w": 200.0, "min_cap_w": 100.0, name: bad}
    with pytest.raises(ValueError, match=name):
        CpuPowerSpec(**cpu)  # type: ignore[arg-type]
    gpu = {"count": 1, "idle_w": 50.0, "max_w": 200.0, "min_cap_w": 100.0, name: bad}
    with pytest.raises(ValueError, match=name):
        GpuPowerSpec(**gpu)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sockets": 0}, "sockets"),
        ({"idle_w": 250.0}, "idle_w"),
        ({"min_cap_w": 40.0}, "min_cap_w"),
        ({"min_cap_w": 300.0}, "min_cap_w"),
        ({"nominal_ghz": 4.0}, "nominal_ghz"),
        ({"min_ghz": 2.5}, "min_ghz"),
        ({"curve": ((0.0, 60.0),)}, "two points"),
        ({"curve": ((0.0, 60.0), (50.0, 40.0), (100.0, 90.0))}, "decrease"),
        ({"curve": ((50.0, 60.0), (10.0, 80.0))}, "increasing"),
        ({"curve": ((0.0, 60.0), (120.0, 80.0))}, "0..100"),
        ({"curve": ((0.0, 60.0), (100.0, 60.0))}, "rise"),
        ({"curve": ((0.0, 60.0), (100.0, 150.0))}, "idle_w"),
        ({"curve": ((0.0, 50.0), (100.0, 250.0))}, "max_w"),
    ],
)
def test_cpu_spec_rejects_inconsistent_values(kwargs: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"sockets": 2, "idle_w": 50.0, "max_w": 200.0, "min_cap_w": 100.0}
    with pytest.raises(ValueError, match=message):
        CpuPowerSpec(**(base | kwargs))  # type: ignore[arg-type]


def test_controls_reject_unknown_presets_and_non_finite_caps() -> None:
    with pytest.raises(ValueError, match="cpu_preset"):
        Controls(cpu_preset="turbo")
    with pytest.raises(ValueError, match="gpu_preset"):
        Controls(gpu_preset="max")
    with pytest.raises(ValueError, match="cpu_cap_w"):
        Controls(cpu_cap_w=math.nan)
    with pytest.raises(ValueError, match="gpu_clock_ceiling_pct"):
        Controls(gpu_clock_ceiling_pct=0.0)


@pytest.mark.parametrize(
    ("given_util", "expected"), [(-0.5, 0.0), (math.nan, 0.0), (1.7, 1.0), (math.inf, 1.0)]
)
def test_out_of_range_utilisation_is_clamped(given_util: float, expected: float) -> None:
    load = Load(cpu_util=given_util, gpu_util=given_util)
    assert (load.cpu_util, load.gpu_util) == (expected, expected)
    gpu = GpuPowerSpec(count=2, idle_w=60.0, max_w=400.0, min_cap_w=200.0)
    spec = NodePowerSpec(CpuPowerSpec(2, 50.0, 200.0, 100.0), gpu)
    assert steady_state(spec, load, Controls()) == steady_state(
        spec, Load(expected, expected), Controls()
    )


_share = st.floats(min_value=0.0, max_value=1.0)
_speed = st.floats(min_value=0.05, max_value=1.0)


@given(cpu_share=_share, gpu_share=_share, cpu_speed=_speed, gpu_speed=_speed)
def test_work_never_runs_faster_than_uncapped_and_slows_with_its_bound_part(
    cpu_share: float, gpu_share: float, cpu_speed: float, gpu_speed: float
) -> None:
    if cpu_share + gpu_share > 1.0:
        gpu_share = 1.0 - cpu_share
    for on_gpu in (False, True):
        assert work_speed(1.0, 1.0, cpu_share, gpu_share, on_gpu=on_gpu) == pytest.approx(1.0)
        speed = work_speed(cpu_speed, gpu_speed, cpu_share, gpu_share, on_gpu=on_gpu)
        assert speed <= 1.0 + 1e-12
        assert speed >= min(cpu_speed, gpu_speed) - 1e-12
    # Work bound only by the CPU runs exactly at the CPU's speed; unbound work at full speed.
    assert work_speed(cpu_speed, gpu_speed, 1.0, 0.0) == pytest.approx(cpu_speed)
    assert work_speed(cpu_speed, gpu_speed, 0.0, 0.0) == pytest.approx(1.0)


@given(cpu_share=_share, compute=st.floats(0.1, 5.0), memory=st.floats(0.1, 5.0))
def test_faster_parts_shorten_only_the_work_they_do(
    cpu_share: float, compute: float, memory: float
) -> None:
    fast = Throughput(cpu=1.0, gpu_compute=compute, gpu_memory=memory)
    # All of a GPU job but its CPU share runs on the board, at the board's throughput for its kind.
    training = work_speed(1.0, 1.0, cpu_share, 0.5 * (1 - cpu_share), fast, on_gpu=True)
    assert 1.0 / training == pytest.approx(cpu_share + (1.0 - cpu_share) / compute)
    inference = work_speed(1.0, 1.0, 0.0, 0.4, fast, on_gpu=True, memory_bound=True)
    assert inference == pytest.approx(memory)
    # A CPU job is not sped up by the node's GPUs.
    assert work_speed(1.0, 1.0, cpu_share, 0.0, fast) == pytest.approx(1.0)


@settings(max_examples=150, deadline=None)
@given(gpu_specs())
def test_the_energy_optimal_cap_is_the_least_energy_per_work_in_the_boards_range(
    spec: GpuPowerSpec,
) -> None:
    best = energy_optimal_cap_w(spec)
    assert spec.min_cap_w <= best <= spec.max_w
    knee = spec.idle_w + spec.knee_share * (spec.max_w - spec.idle_w)
    # At or above the knee, unless the board's lowest cap is above it.
    assert best >= min(knee, spec.max_w) - 1.0 or best == spec.min_cap_w
    least = board_energy_per_work(spec, best)
    for i in range(21):
        cap = spec.min_cap_w + (spec.max_w - spec.min_cap_w) * i / 20
        assert least <= board_energy_per_work(spec, cap) * (1 + 1e-9)


def test_the_a40s_energy_optimal_cap_is_where_zeus_measured_its_minimum() -> None:
    # Zeus (NSDI '23), A40 training, medians (docs/calibration.md): 0.91 of the uncapped energy
    # at 150 W, 0.79 at 175 and at 200 W, 0.84 at 225 W: the minimum lies between 175 and 200 W.
    a40 = GpuPowerSpec(
        count=1,
        idle_w=30.0,
        max_w=300.0,
        min_cap_w=100.0,
        knee_w=190.0,
        floor_w=71.0,
        cap_exponent=0.27,
    )
    assert 175.0 <= energy_optimal_cap_w(a40) <= 200.0


def test_each_board_runs_under_its_own_cap_when_the_caps_are_per_board() -> None:
    spec = NodePowerSpec(
        cpu=CpuPowerSpec(sockets=2, idle_w=100.0, max_w=300.0, min_cap_w=150.0),
        gpu=GpuPowerSpec(count=4, idle_w=70.0, max_w=700.0, min_cap_w=200.0),
    )
    busy = Load(gpu_boards=(1.0, 1.0, 1.0))
    # A standard pod's board at 430 W, a performance pod's uncapped, a third board past the
    # list at the node's 300 W, the fourth idle.
    steady = steady_state(spec, busy, Controls(gpu_cap_w=300.0, gpu_board_caps_w=(430.0, None)))
    assert steady.gpu_board_w[:3] == pytest.approx((430.0, 700.0, 300.0))
    assert steady.gpu_board_speed[1] == pytest.approx(1.0)
    assert steady.gpu_board_speed[0] < 1.0
    assert steady.gpu_board_w[3] == pytest.approx(70.0)


@given(gpu_node_specs, loads, st.floats(1.0, 2_000.0))
def test_the_same_cap_on_every_board_is_the_node_cap(
    spec: NodePowerSpec, load: Load, cap: float
) -> None:
    count = spec.gpu_count
    node = steady_state(spec, load, Controls(gpu_cap_w=cap))
    boards = steady_state(spec, load, Controls(gpu_board_caps_w=(cap,) * count))
    assert boards.gpu_board_w == pytest.approx(node.gpu_board_w)
    assert boards.gpu_board_speed == pytest.approx(node.gpu_board_speed)
