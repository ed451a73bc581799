"""One resolution of a NodeTwin.spec's caps for every reader (spec: "CRD and Policy Model",
resolution order: absolute watts when present, else the percentage of maximum)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from joulie.api.enums import Profile
from joulie.api.nodetwin import CpuSpec, GpuPowerCap, GpuSpec, NodeTwinSpec
from joulie.core.caps import EffectiveCap, board_caps, effective_cap, spec_caps
from joulie.core.intents import IntentConfig, gpu_cap_watts, node_intent

# AMD Radeon PRO W7900 power-limit range, from the hardware catalog (min 200 W, max 295 W).
W7900 = (200.0, 295.0)


def test_watts_win_over_the_percentage_for_a_w7900_at_eco() -> None:
    # At eco the manager writes 60 % and the watts it resolves to: 60 % of 295 W is 177 W, below
    # the board's 200 W floor, so the spec says 200 W, and 200 W is what the agent enforces.
    assert gpu_cap_watts(60, W7900) == 200
    cap = effective_cap(200, 60, max_watts=W7900[1], min_watts=W7900[0])
    assert cap is not None
    assert cap.watts == 200
    assert cap.pct_of_max == pytest.approx(200 / 295 * 100)
    assert round(cap.pct_of_max or 0, 1) == 67.8


def test_the_percentage_applies_only_without_watts() -> None:
    cap = effective_cap(None, 60, max_watts=400)
    assert cap == EffectiveCap(watts=240, pct_of_max=60)
    # Clamped to the device's range as the agent clamps it.
    clamped = effective_cap(None, 60, max_watts=295, min_watts=200)
    assert clamped is not None
    assert clamped.watts == 200
    assert clamped.pct_of_max == pytest.approx(200 / 295 * 100)


def test_an_absolute_cap_above_the_maximum_reads_as_the_maximum() -> None:
    # A GPU node's CPU gets PERFORMANCE_CAP_WATTS (5000 W): uncapped in practice.
    assert effective_cap(5000, None, max_watts=360) == EffectiveCap(watts=360, pct_of_max=100)


def test_unknown_maximum() -> None:
    # Watts without a maximum stay watts; the percentage, when stated, still describes the cap.
    assert effective_cap(200, 60, max_watts=None) == EffectiveCap(watts=200, pct_of_max=60)
    assert effective_cap(200, None, max_watts=None) == EffectiveCap(watts=200, pct_of_max=None)
    assert effective_cap(None, 60, max_watts=None) == EffectiveCap(watts=None, pct_of_max=60)


def test_no_usable_field_means_uncapped() -> None:
    assert effective_cap(None, None, max_watts=400) is None
    assert effective_cap(0, -5, max_watts=400) is None
    assert effective_cap(math.nan, math.inf, max_watts=400) is None


def test_spec_caps_reads_both_device_classes() -> None:
    spec = NodeTwinSpec(
        node_name="n",
        profile=Profile.ECO,
        cpu=CpuSpec(package_power_cap_watts=180, package_power_cap_pct_of_max=60),
        gpu=GpuSpec(power_cap=GpuPowerCap(cap_pct_of_max=60, cap_watts_per_gpu=200)),
    )
    caps = spec_caps(
        spec, cpu_max_watts_per_package=360, gpu_max_watts_per_gpu=295, gpu_min_watts_per_gpu=200
    )
    # CPU watts are per package: 180 W of a 360 W package is 50 %, whatever the socket count.
    assert caps.cpu == EffectiveCap(watts=180, pct_of_max=50)
    assert caps.gpu is not None
    assert caps.gpu.watts == 200
    bare = spec_caps(
        NodeTwinSpec(node_name="n", profile=Profile.PERFORMANCE),
        cpu_max_watts_per_package=360,
        gpu_max_watts_per_gpu=None,
    )
    assert (bare.cpu, bare.gpu) == (None, None)


def test_the_manager_intent_for_a_w7900_node_resolves_to_what_the_agent_enforces() -> None:
    intent = node_intent(
        Profile.ECO,
        active_perf_pods=0,
        gpu_count=4,
        hardware=None,
        labels={},
        catalog_gpu_range=W7900,
        running_pod_max_gpus=0,
        policy_name=None,
        config=IntentConfig(),
    )
    caps = spec_caps(intent.spec, cpu_max_watts_per_package=None, gpu_max_watts_per_gpu=295)
    assert caps.gpu is not None
    assert caps.gpu.watts == 200


# --- invariants -----------------------------------------------------------------------------

odd = st.sampled_from([math.nan, math.inf, -math.inf, 0.0])
watts = st.one_of(st.none(), odd, st.floats(min_value=-10, max_value=10_000))
pcts = st.one_of(st.none(), odd, st.floats(min_value=-10, max_value=150))
maxima = st.one_of(st.none(), st.floats(min_value=1, max_value=2_000))
minima = st.one_of(st.none(), st.floats(min_value=0, max_value=2_000))


@given(watts, pcts, maxima, minima)
def test_cap_invariants(
    w: float | None, pct: float | None, high: float | None, low: float | None
) -> None:
    cap = effective_cap(w, pct, max_watts=high, min_watts=low)
    usable_w = w is not None and math.isfinite(w) and w > 0
    usable_pct = pct is not None and math.isfinite(pct) and pct > 0
    if not usable_w and not usable_pct:
        assert cap is None
        return
    assert cap is not None
    if cap.pct_of_max is not None:
        assert 0 < cap.pct_of_max <= 100
    if cap.watts is not None:
        assert cap.watts > 0
        if high is not None:
            assert cap.watts <= high  # never above the maximum
            assert cap.pct_of_max == pytest.approx(cap.watts / high * 100)
        if low is not None and (high is None or low <= high):
            assert cap.watts >= low  # clamped into the range as the agent clamps
    if usable_w:
        # Watts win: the percentage does not move the cap.
        alone = effective_cap(w, None, max_watts=high, min_watts=low)
        assert alone is not None
        assert cap.watts == alone.watts
    if high is not None:
        assert cap.watts is not None
        assert cap.pct_of_max is not None


@given(
    st.floats(min_value=1, max_value=10_000),
    st.floats(min_value=1, max_value=100),
    st.floats(min_value=1, max_value=2_000),
)
def test_watts_win_whatever_the_percentage(w: float, pct: float, high: float) -> None:
    assert effective_cap(w, pct, max_watts=high) == effective_cap(w, None, max_watts=high)


# --- per board, by the class of the pod on it (class_caps) --------------------------------------

H100_SXM = (200.0, 700.0)


def class_spec(performance_pct: float = 100.0, standard_w: float | None = 430.0) -> NodeTwinSpec:
    standard = GpuPowerCap(cap_watts_per_gpu=standard_w) if standard_w is not None else None
    return NodeTwinSpec.model_validate(
        {
            "nodeName": "n",
            "profile": "performance",
            "gpu": {
                "powerCap": {"capPctOfMax": 100},
                "classCaps": {
                    "performance": {"capPctOfMax": performance_pct},
                    **(
                        {"standard": standard.to_wire(), "idle": standard.to_wire()}
                        if standard
                        else {}
                    ),
                },
            },
        }
    )


def watts_of(caps: list[EffectiveCap | None]) -> list[float | None]:
    return [c.watts if c is not None else None for c in caps]


def test_each_board_follows_the_class_of_its_pod_and_an_idle_board_the_idle_intent() -> None:
    spec = class_spec()
    boards = ["performance", "standard", None, "batch-ish", None, None, None, "performance"]
    caps = board_caps(spec, boards, gpu_max_watts_per_gpu=H100_SXM[1], gpu_min_watts_per_gpu=200)
    # Performance boards uncapped (100 % of 700 W); standard boards (and a class Joulie does not
    # know, which counts as standard) and idle ones at 430 W.
    assert watts_of(caps) == [700.0, 430.0, 430.0, 430.0, 430.0, 430.0, 430.0, 700.0]
    # The performance pod leaves its first board: that board is idle now, at the idle intent.
    after = board_caps(
        spec, [None, *boards[1:]], gpu_max_watts_per_gpu=H100_SXM[1], gpu_min_watts_per_gpu=200
    )
    assert watts_of(after)[0] == 430.0


def test_a_class_the_spec_leaves_out_and_a_spec_without_class_caps_take_the_node_cap() -> None:
    no_standard = class_spec(standard_w=None)
    caps = board_caps(no_standard, ["standard", None], gpu_max_watts_per_gpu=700.0)
    assert watts_of(caps) == [700.0, 700.0]
    plain = NodeTwinSpec.model_validate(
        {"nodeName": "n", "profile": "eco", "gpu": {"powerCap": {"capWattsPerGpu": 350}}}
    )
    assert watts_of(board_caps(plain, ["performance", None], gpu_max_watts_per_gpu=700.0)) == [
        350.0,
        350.0,
    ]


@given(
    performance_pct=st.floats(1.0, 100.0),
    standard_w=st.floats(1.0, 2_000.0),
    boards=st.lists(st.sampled_from(["performance", "standard", None]), max_size=16),
)
def test_a_performance_board_is_never_capped_below_the_performance_intent(
    performance_pct: float, standard_w: float, boards: list[str | None]
) -> None:
    spec = class_spec(performance_pct, standard_w)
    caps = board_caps(spec, boards, gpu_max_watts_per_gpu=H100_SXM[1], gpu_min_watts_per_gpu=200)
    floor = max(H100_SXM[0], performance_pct / 100 * H100_SXM[1])
    for workload_class, cap in zip(boards, caps, strict=True):
        if workload_class == "performance":
            assert cap is not None
            assert cap.watts is not None
            assert cap.watts >= floor - 1e-9
