"""The split of a node's measured energy between its pods (``core.energy_accounting``): what is
measured is all booked, to a pod or to overhead; requests share the idle draw; the modelled
marginal power shares the rest; and the saving is stated against the performance profile."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joulie.core.energy_accounting import NodeInterval, PodUse, attribute

HOUR = 3600.0


def test_an_idle_node_is_all_overhead() -> None:
    result = attribute(NodeInterval(energy_j=200.0 * HOUR, seconds=HOUR, idle_w=200.0), [])
    assert result.used_j == {}
    assert result.overhead_j == pytest.approx(200.0 * HOUR)


def test_twice_the_requests_at_the_same_use_get_twice_the_idle_share() -> None:
    node = NodeInterval(energy_j=100.0 * HOUR, seconds=HOUR, idle_w=100.0)
    small = PodUse("team-a/standard", cpu_share=0.1, memory_share=0.05)
    large = PodUse("team-b/standard", cpu_share=0.2, memory_share=0.1)
    result = attribute(node, [small, large])
    assert result.used_j["team-b/standard"] == pytest.approx(2 * result.used_j["team-a/standard"])
    # 0.075 + 0.15 of the node asked for: the other 77.5 % of the idle draw is overhead.
    assert result.overhead_j == pytest.approx(0.775 * 100.0 * HOUR)


def test_the_dynamic_draw_follows_the_modelled_marginal_power() -> None:
    # 300 W measured over an idle 100 W: 200 W to share. The model says 100 W and 50 W: the
    # measured 200 W goes two to one, all of it; the idle draw nobody asked for is overhead.
    node = NodeInterval(energy_j=300.0 * HOUR, seconds=HOUR, idle_w=100.0)
    pods = [
        PodUse("a", cpu_share=0.0, memory_share=0.0, marginal_w=100.0),
        PodUse("b", cpu_share=0.0, memory_share=0.0, marginal_w=50.0),
    ]
    result = attribute(node, pods)
    assert result.used_j == pytest.approx({"a": 400.0 / 3 * HOUR, "b": 200.0 / 3 * HOUR})
    assert result.overhead_j == pytest.approx(100.0 * HOUR)
    # The model explaining more than was measured: the same proportions of what was measured.
    less = attribute(NodeInterval(energy_j=175.0 * HOUR, seconds=HOUR, idle_w=100.0), pods)
    assert less.used_j == pytest.approx({"a": 50.0 * HOUR, "b": 25.0 * HOUR})
    assert less.overhead_j == pytest.approx(100.0 * HOUR)
    # No pod with a modelled power (a node without a profile): the dynamic draw is overhead.
    unmodelled = attribute(node, [PodUse("c", cpu_share=0.5, memory_share=0.5)])
    assert unmodelled.used_j == pytest.approx({"c": 50.0 * HOUR})
    assert unmodelled.overhead_j == pytest.approx(250.0 * HOUR)


def test_the_saving_scales_the_measured_part_by_the_modelled_factor() -> None:
    # The model says the same work uncapped would draw 1.25 times the energy: the pod saved a
    # quarter of what it was measured to use.
    node = NodeInterval(energy_j=350.0 * HOUR, seconds=HOUR, idle_w=200.0, has_gpus=True)
    pod = PodUse("ml/standard", 0.5, 0.5, 0.5, marginal_w=150.0, counterfactual=1.25)
    result = attribute(node, [pod])
    used = (200.0 * 0.5 + 150.0) * HOUR
    assert result.used_j["ml/standard"] == pytest.approx(used)
    assert result.saved_j["ml/standard"] == pytest.approx(0.25 * used)
    # A cap that costs energy (below the board's energy-optimal point) shows as negative.
    costly = attribute(node, [PodUse("x", 0.5, 0.5, 0.5, 150.0, counterfactual=0.8)])
    assert costly.saved_j["x"] < 0
    # No controls, nothing saved, whatever the model's watts.
    plain = attribute(node, [PodUse("y", 0.5, 0.5, 0.5, 999.0)])
    assert plain.saved_j == {"y": 0.0}


_pods = st.lists(
    st.builds(
        PodUse,
        account=st.sampled_from(["a/standard", "a/performance", "b/standard"]),
        cpu_share=st.floats(0.0, 1.0),
        memory_share=st.floats(0.0, 1.0),
        gpu_share=st.floats(0.0, 1.0),
        marginal_w=st.floats(0.0, 2_000.0),
    ),
    max_size=12,
)


@settings(max_examples=400, deadline=None)
@given(
    energy=st.floats(0.0, 1e8),
    seconds=st.floats(0.0, 7_200.0),
    idle_w=st.floats(0.0, 3_000.0),
    has_gpus=st.booleans(),
    pods=_pods,
)
def test_every_measured_joule_is_booked_once(
    energy: float, seconds: float, idle_w: float, has_gpus: bool, pods: list[PodUse]
) -> None:
    result = attribute(NodeInterval(energy, seconds, idle_w, has_gpus), pods)
    assert all(v >= 0.0 for v in result.used_j.values())
    assert result.overhead_j >= -1e-6 * max(1.0, energy)
    assert sum(result.used_j.values()) + result.overhead_j == pytest.approx(energy, abs=1e-6)
