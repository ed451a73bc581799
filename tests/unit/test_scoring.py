"""The scheduler extender's filter and score: every term, upstream's pinned examples, the
mapping onto kube-scheduler's 0..10, and the table that scores thousands of nodes at once."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from joulie.api.enums import SchedulableClass
from joulie.api.nodehardware import NodeHardwareStatus
from joulie.api.nodetwin import NodeTwinStatus
from joulie.core.pod_power import NodePowerProfile, PodDemand
from joulie.core.score_table import ScoreTable
from joulie.core.scoring import (
    ClusterTerms,
    NodeTerms,
    cluster_terms,
    extender_priority,
    filter_reason,
    node_terms,
    score,
    score_breakdown,
)

EXAMPLES: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[1] / "data/spec/extender-examples.yaml").read_text()
)

ECO = SchedulableClass.ECO
PERF = SchedulableClass.PERFORMANCE
DRAINING = SchedulableClass.DRAINING
STANDARD_POD = PodDemand(cpu_cores=1.0, memory_gib=1.0, gpus=0, performance=False)
PERF_POD = PodDemand(cpu_cores=1.0, memory_gib=1.0, gpus=0, performance=True)
NO_CLUSTER = ClusterTerms()
CPU_NODE = NodePowerProfile(cores=64, cpu_max_watts=500.0, has_gpu=False, gpu_max_watts=0.0)


def terms(
    headroom: float = 0.0,
    cooling: float = 0.0,
    *,
    cls: SchedulableClass | None = None,
    measured_w: float = 0.0,
    capped_w: float = 0.0,
    trend: float = 0.0,
    fresh: bool = True,
    power: NodePowerProfile | None = None,
) -> NodeTerms:
    return NodeTerms(
        schedulable_class=cls,
        fresh=fresh,
        measured_w=measured_w,
        capped_w=capped_w,
        headroom_score=headroom,
        cooling_stress=cooling,
        trend_w_per_min=trend,
        has_measurement=capped_w > 0 or trend != 0,
        power=power,
    )


# --- upstream's pinned examples -----------------------------------------------------------------


@pytest.mark.parametrize("case", EXAMPLES["scores"], ids=lambda c: c["name"])
def test_pinned_examples(case: dict[str, Any]) -> None:
    twin = case["twin"]
    node = terms(
        twin.get("headroom", 0.0),
        twin["cooling"],
        measured_w=twin.get("measured_w", 0.0),
        capped_w=twin.get("capped_w", 0.0),
    )
    value = score(PERF_POD, node, NO_CLUSTER)
    assert value == pytest.approx(case["score"])
    assert math.floor(value + 1e-9) == case["upstream"]  # upstream truncated to an integer
    assert extender_priority(value) == case["priority"]


@pytest.mark.parametrize("case", EXAMPLES["projected_headroom"])
def test_projected_headroom_matches_the_twin_document(case: dict[str, Any]) -> None:
    node = terms(capped_w=case["capped_w"], measured_w=case["measured_w"])
    parts = score_breakdown(STANDARD_POD, node, NO_CLUSTER)
    assert parts.headroom_source == "projected"
    assert round(parts.headroom, case["digits"]) == case["headroom"]


def test_upstream_power_measurement_example() -> None:
    case = EXAMPLES["power_measurement"]
    node = node_terms(NodeTwinStatus.model_validate(case["status"]), None, fresh=True)
    assert node.fresh
    assert node.has_measurement
    assert (node.measured_w, node.capped_w, node.trend_w_per_min) == (
        case["measured_w"],
        case["capped_w"],
        case["trend_w_per_min"],
    )
    # Without a headroom score the node's own headroom stands in (for the pressure term).
    assert node.headroom_score == pytest.approx((3400 - 500) / 3400 * 100)


# --- each term ----------------------------------------------------------------------------------


def test_marginal_power_lowers_the_score() -> None:
    without = terms(capped_w=1000, measured_w=300, cooling=20)
    with_hw = terms(capped_w=1000, measured_w=300, cooling=20, power=CPU_NODE)
    big_pod = PodDemand(cpu_cores=32.0, memory_gib=64.0, gpus=0, performance=False)
    assert score(big_pod, with_hw, NO_CLUSTER) < score(STANDARD_POD, with_hw, NO_CLUSTER)
    assert score(STANDARD_POD, with_hw, NO_CLUSTER) < score(STANDARD_POD, without, NO_CLUSTER)
    marginal = 500 * 0.7 * 32 / 64 * 1.3
    expected = (1000 - 300 - marginal) / 1000 * 100 * 0.7 + 80 * 0.15
    assert score(big_pod, with_hw, NO_CLUSTER) == pytest.approx(expected)


def test_dense_gpu_node_is_preferred_for_a_gpu_pod_over_a_nearly_full_one() -> None:
    gpu = NodePowerProfile(cores=96, cpu_max_watts=720.0, has_gpu=True, gpu_max_watts=700.0)
    pod = PodDemand(cpu_cores=8.0, memory_gib=32.0, gpus=2, performance=True)
    roomy = terms(capped_w=6320, measured_w=1500, power=gpu, cls=PERF)
    tight = terms(capped_w=6320, measured_w=4500, power=gpu, cls=PERF)
    assert score(pod, roomy, NO_CLUSTER) > score(pod, tight, NO_CLUSTER)


def test_headroom_is_capped_at_100_and_may_go_negative() -> None:
    idle = score_breakdown(STANDARD_POD, terms(capped_w=1000, measured_w=-50), NO_CLUSTER)
    assert idle.headroom == 100.0
    over = score_breakdown(STANDARD_POD, terms(capped_w=1000, measured_w=1500), NO_CLUSTER)
    assert over.headroom == pytest.approx(-50.0)
    assert over.score == pytest.approx(0.0)  # -35 + 15 clamps to 0


def test_twin_headroom_only_without_a_budget() -> None:
    parts = score_breakdown(STANDARD_POD, terms(42.0, capped_w=0.0), NO_CLUSTER)
    assert parts.headroom_source == "twin"
    assert parts.headroom == 42.0


def test_falling_trend_beats_rising_trend() -> None:
    falling = score(STANDARD_POD, terms(60, 20, trend=-60), NO_CLUSTER)
    flat = score(STANDARD_POD, terms(60, 20), NO_CLUSTER)
    rising = score(STANDARD_POD, terms(60, 20, trend=60), NO_CLUSTER)
    assert falling > flat > rising
    assert falling - flat == pytest.approx(10.0)  # 60 W/min / 6
    assert flat - rising == pytest.approx(10.0)


def test_trend_bonus_is_bounded_and_steeper_when_the_cluster_ramps() -> None:
    fast = ClusterTerms(trend_scale=2.0)
    assert score_breakdown(STANDARD_POD, terms(60, trend=-1000), NO_CLUSTER).trend_bonus == 25.0
    assert score_breakdown(STANDARD_POD, terms(60, trend=1000), NO_CLUSTER).trend_bonus == -25.0
    assert score_breakdown(STANDARD_POD, terms(60, trend=30), NO_CLUSTER).trend_bonus == -5.0
    assert score_breakdown(STANDARD_POD, terms(60, trend=30), fast).trend_bonus == -15.0


def test_stale_or_missing_twin_is_neutral() -> None:
    stale = terms(100, 0, fresh=False, cls=ECO)
    for node in (stale, None):
        assert score(STANDARD_POD, node, NO_CLUSTER) == 50.0
        assert extender_priority(score(PERF_POD, node, NO_CLUSTER)) == 5
    fresh_good = terms(100, 0, cls=ECO)
    assert score(STANDARD_POD, fresh_good, NO_CLUSTER) > score(STANDARD_POD, stale, NO_CLUSTER)


def test_eco_bonus_for_standard_pods_only() -> None:
    eco, plain = terms(60, 20, cls=ECO), terms(60, 20)
    assert score(STANDARD_POD, eco, NO_CLUSTER) - score(STANDARD_POD, plain, NO_CLUSTER) == (
        pytest.approx(10.0)
    )
    assert score(PERF_POD, eco, NO_CLUSTER) == score(PERF_POD, plain, NO_CLUSTER)


def test_pressure_relief_moves_standard_pods_off_busy_performance_nodes() -> None:
    busy = ClusterTerms(perf_pressure=70.0)
    perf_node = terms(80, 10, cls=PERF)
    eco_node = terms(50, 30, cls=ECO)
    relieved = score(STANDARD_POD, perf_node, busy)
    assert relieved == pytest.approx(80 * 0.7 + 90 * 0.15 - 0.3 * 70)
    assert score(STANDARD_POD, eco_node, busy) > relieved
    assert score(STANDARD_POD, perf_node, NO_CLUSTER) > score(STANDARD_POD, eco_node, NO_CLUSTER)
    # Performance pods and draining nodes get no adjustment.
    assert score(PERF_POD, perf_node, busy) == score(PERF_POD, perf_node, NO_CLUSTER)
    draining = terms(80, 10, cls=DRAINING)
    assert score(STANDARD_POD, draining, busy) == score(STANDARD_POD, terms(80, 10), busy)


def test_eco_node_with_headroom_beats_a_stressed_performance_node_for_standard_pods() -> None:
    assert score(STANDARD_POD, terms(90, 10, cls=ECO), NO_CLUSTER) > score(
        STANDARD_POD, terms(30, 70, cls=PERF), NO_CLUSTER
    )


def test_score_is_clamped() -> None:
    assert score(STANDARD_POD, terms(100, 0, cls=ECO, trend=-1000), NO_CLUSTER) == 100.0
    assert score(STANDARD_POD, terms(-300, 100, trend=1000), NO_CLUSTER) == 0.0


# --- cluster terms ------------------------------------------------------------------------------


def test_performance_pressure_is_the_mean_over_fresh_performance_nodes() -> None:
    nodes = [
        terms(20, cls=PERF),
        terms(40, cls=PERF),
        terms(0, cls=PERF, fresh=False),
        terms(0, cls=ECO),
        terms(0, cls=DRAINING),
    ]
    assert cluster_terms(nodes).perf_pressure == pytest.approx(70.0)
    assert cluster_terms([terms(0, cls=ECO)]).perf_pressure == 0.0
    assert cluster_terms([]) == ClusterTerms()


def test_trend_scale_follows_the_mean_not_the_sum() -> None:
    # Three nodes at +300 W/min: the sum (900) would pass 500; the mean does not.
    nodes = [terms(50, trend=300) for _ in range(3)]
    assert cluster_terms(nodes).trend_scale == 6.0
    assert cluster_terms(nodes).mean_trend_w_per_min == pytest.approx(300.0)
    ramping = [terms(50, trend=-600), terms(50, trend=-700)]
    assert cluster_terms(ramping).trend_scale == 2.0
    # Stale twins and twins without a measurement do not count; a flat measured twin does.
    assert cluster_terms([*ramping, terms(50, trend=0, capped_w=0)]).trend_scale == 2.0
    assert cluster_terms([*ramping, terms(50, trend=900, fresh=False)]).trend_scale == 2.0
    assert cluster_terms([*ramping, terms(50, trend=0, capped_w=1000)]).trend_scale == 6.0
    assert cluster_terms([terms(50, trend=900, fresh=False)]).trend_scale == 6.0


# --- node terms from the status objects ---------------------------------------------------------


def test_node_terms_from_status_objects() -> None:
    twin = NodeTwinStatus.model_validate(
        {
            "schedulableClass": "eco",
            "predictedPowerHeadroomScore": 40,
            "predictedCoolingStressScore": 30,
            "powerMeasurement": {
                "source": "http",
                "measuredNodePowerW": 800,
                "nodeCappedPowerW": 1392,
                "powerTrendWPerMin": 12.5,
            },
        }
    )
    hw = NodeHardwareStatus.model_validate(EXAMPLES["node_hardware"]["status"])
    node = node_terms(twin, hw, fresh=True)
    assert node.schedulable_class is ECO
    assert (node.measured_w, node.capped_w, node.headroom_score) == (800, 1392, 40)
    assert (node.cooling_stress, node.trend_w_per_min) == (30, 12.5)
    assert node.power is not None
    assert node.power.cpu_max_watts == 720
    assert not node_terms(twin, hw, fresh=False).fresh


def test_twin_without_figures_is_not_fresh() -> None:
    empty = node_terms(NodeTwinStatus(schedulable_class=PERF), None, fresh=True)
    assert not empty.fresh
    assert empty.schedulable_class is PERF  # the filter still sees the class
    assert score(STANDARD_POD, empty, NO_CLUSTER) == 50.0
    missing = node_terms(None, None, fresh=True)
    assert not missing.fresh
    assert missing.schedulable_class is None


# --- filter -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "label", "refused"),
    [
        (ECO, None, True),
        (DRAINING, None, True),
        (DRAINING, "performance", True),
        (PERF, None, False),
        (PERF, "eco", False),  # the twin class decides when there is one
        (None, "eco", True),  # label fallback
        (None, "performance", False),
        (None, None, False),  # unknown node
    ],
)
def test_filter_performance_pods(
    cls: SchedulableClass | None, label: str | None, refused: bool
) -> None:
    reason = filter_reason(True, cls, label)
    assert (reason is not None) is refused
    if refused:
        assert "performance" in reason  # type: ignore[operator]


@pytest.mark.parametrize("cls", [ECO, DRAINING, PERF, None])
def test_standard_pods_always_pass(cls: SchedulableClass | None) -> None:
    assert filter_reason(False, cls, "eco") is None


# --- priority -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "priority"),
    [
        (0.0, 0),
        (4.9, 0),
        (5.0, 1),
        (50.0, 5),
        (64.9, 6),
        (65.0, 7),
        (69.5, 7),
        (85.0, 9),
        (95.0, 10),
        (100.0, 10),
        (-20.0, 0),
        (250.0, 10),
        (math.nan, 5),
    ],
)
def test_extender_priority(value: float, priority: int) -> None:
    assert extender_priority(value) == priority


# --- property: more headroom never hurts --------------------------------------------------------

_class = st.sampled_from([None, ECO, PERF, DRAINING])
_power = st.none() | st.builds(
    NodePowerProfile,
    cores=st.integers(0, 256),
    cpu_max_watts=st.floats(150, 2000),
    has_gpu=st.booleans(),
    gpu_max_watts=st.floats(0, 1000),
)
_demand = st.builds(
    PodDemand,
    cpu_cores=st.floats(0.01, 256),
    memory_gib=st.floats(0, 2048),
    gpus=st.integers(0, 8),
    performance=st.booleans(),
)
_cluster = st.builds(
    ClusterTerms,
    perf_pressure=st.floats(0, 150),
    trend_scale=st.sampled_from([2.0, 6.0]),
    mean_trend_w_per_min=st.just(0.0),
)


@given(
    demand=_demand,
    cluster=_cluster,
    cls=_class,
    power=_power,
    capped=st.floats(0, 20_000),
    measured=st.tuples(st.floats(0, 20_000), st.floats(0, 20_000)).filter(lambda m: m[0] != m[1]),
    headroom=st.tuples(st.floats(-100, 100), st.floats(-100, 100)).filter(lambda h: h[0] != h[1]),
    cooling=st.tuples(st.floats(0, 100), st.floats(0, 100)),
    trend=st.floats(-2000, 2000),
)
def test_more_headroom_and_no_more_cooling_stress_never_scores_lower(
    demand: PodDemand,
    cluster: ClusterTerms,
    cls: SchedulableClass | None,
    power: NodePowerProfile | None,
    capped: float,
    measured: tuple[float, float],
    headroom: tuple[float, float],
    cooling: tuple[float, float],
    trend: float,
) -> None:
    # "More headroom": less drawn from the same budget, or (without a budget) a higher twin score.
    less_drawn, more_drawn = sorted(measured)
    low_headroom, high_headroom = sorted(headroom)
    cool, hot = sorted(cooling)

    def node(measured_w: float, headroom_score: float, cooling_stress: float) -> NodeTerms:
        return terms(
            headroom_score,
            cooling_stress,
            cls=cls,
            measured_w=measured_w,
            capped_w=capped,
            trend=trend,
            power=power,
        )

    roomy = node(less_drawn, high_headroom, cool)
    tight = node(more_drawn, low_headroom, hot)
    assert score(demand, roomy, cluster) >= score(demand, tight, cluster)
    assert extender_priority(score(demand, roomy, cluster)) >= extender_priority(
        score(demand, tight, cluster)
    )


# --- the table ----------------------------------------------------------------------------------

_terms = st.builds(
    NodeTerms,
    schedulable_class=_class,
    fresh=st.booleans(),
    measured_w=st.floats(-100, 20_000),
    capped_w=st.sampled_from([0.0]) | st.floats(0, 20_000),
    headroom_score=st.floats(-200, 100),
    cooling_stress=st.floats(0, 100),
    trend_w_per_min=st.sampled_from([0.0]) | st.floats(-3000, 3000),
    has_measurement=st.booleans(),
    power=_power,
)
_names = st.text("abcdef", min_size=1, max_size=3)


@settings(max_examples=200)
@given(
    nodes=st.dictionaries(_names, _terms, max_size=40),
    removed=st.lists(_names, max_size=10),
    added=st.dictionaries(_names, _terms, max_size=5),
    queried=st.lists(_names, max_size=30),
    demand=_demand,
)
def test_table_equals_the_scalar_score(
    nodes: dict[str, NodeTerms],
    removed: list[str],
    added: dict[str, NodeTerms],
    queried: list[str],
    demand: PodDemand,
) -> None:
    table = ScoreTable(capacity=2)  # small, so the table grows and moves rows
    for name, node in nodes.items():
        table.set(name, node)
    # One tuple asked about before and after nodes come and go: its remembered rows must not
    # outlive the layout they were looked up in.
    asked = (*nodes, *queried, *removed, *added)
    table.scores(demand, asked)
    table.priorities(demand, asked)  # and the priorities of this demand, kept per table state
    for name in removed:
        table.remove(name)
        nodes.pop(name, None)
    for name, node in added.items():
        table.set(name, node)
        nodes[name] = node
    assert len(table) == len(nodes)
    cluster = table.cluster()
    assert cluster == cluster_terms(nodes.values())
    # The same names as new str objects too, as each request decodes them.
    for names in (asked, [*asked], [_copy(name) for name in asked]):
        expected = [score(demand, nodes.get(name), cluster) for name in names]
        assert table.scores(demand, names).tolist() == expected
        assert table.priorities(demand, names) == [extender_priority(v) for v in expected]
        assert table.filter_reasons(names) == [
            filter_reason(True, nodes[n].schedulable_class if n in nodes else None, None)
            for n in names
        ]
        # What the eco label's fallback looks at: the nodes without a twin class.
        assert table.unclassified(names) == [
            i for i, n in enumerate(names) if n not in nodes or nodes[n].schedulable_class is None
        ]
    for name in asked[:5]:
        assert table.explain(demand, name)["score"] == score(demand, nodes.get(name), cluster)


def _copy(name: str) -> str:
    """An equal str that is another object (the names of a request are decoded afresh)."""
    copy = (name + ".")[:-1]
    assert copy == name
    assert copy is not name or len(name) <= 1  # CPython shares one-character strings
    return copy


def test_new_lists_get_the_right_score_for_the_right_host_as_nodes_come_and_go() -> None:
    table = ScoreTable(capacity=2)
    for i in range(40):
        table.set(f"node-{i}", terms(i * 2.5, cls=PERF if i % 3 else ECO))

    def asked(names: list[str]) -> dict[str, int]:
        fresh = [_copy(n) for n in names]
        return dict(zip(names, table.priority_array(STANDARD_POD, fresh).tolist(), strict=True))

    def one_by_one(names: list[str]) -> dict[str, int]:
        return {n: table.priorities(STANDARD_POD, [n])[0] for n in names}

    names = [f"node-{i}" for i in reversed(range(40))] + ["new-node"]
    before = asked(names)
    assert before == one_by_one(names)
    assert before["new-node"] == 5  # unknown: neutral
    # node-3 goes (the last row moves into its place), a node is renamed, one joins.
    table.remove("node-3")
    table.set("renamed-7", table.terms("node-7"))
    table.remove("node-7")
    table.set("new-node", terms(100, cls=ECO))
    after = asked([*names, "renamed-7"])
    assert after == one_by_one([*names, "renamed-7"])
    assert after["node-3"] == after["node-7"] == 5
    assert after["renamed-7"] == before["node-7"]
    assert after["new-node"] == 10
    assert after["node-39"] == before["node-39"]


def test_priorities_follow_every_change_of_the_terms() -> None:
    table = ScoreTable()
    nodes = {"a": terms(100, cls=ECO), "b": terms(50, cls=PERF, trend=0.0)}

    def expected(demand: PodDemand) -> list[int]:
        cluster = cluster_terms(nodes.values())
        return [extender_priority(score(demand, nodes.get(n), cluster)) for n in ("a", "b")]

    def check(demand: PodDemand = STANDARD_POD) -> list[int]:
        got = table.priorities(demand, ["a", "b"])
        assert got == expected(demand)
        return got

    for name, node in nodes.items():
        table.set(name, node)
    first = check()
    check(PERF_POD)
    nodes["a"] = terms(0, cls=ECO)
    table.set("a", nodes["a"])
    assert check()[0] != first[0]
    nodes["b"] = terms(50, cls=PERF, trend=400.0)  # rising fast: the trend bonus falls
    table.set_trend("b", 400.0)
    assert check()[1] != first[1]
    del nodes["b"]
    table.set("b", None)
    assert check()[1] == 5
    for i in range(20):  # more demands than are kept
        check(PodDemand(cpu_cores=float(i), memory_gib=1.0, gpus=0, performance=i % 2 == 0))
    check()


@pytest.mark.parametrize(
    ("names", "checked"),
    [
        (["a", "b", "zz", "yy"], True),
        ([], True),
        (["a"], True),
        (["zz"], True),
        (["a", "b", "a"], False),  # a name it holds, twice
        (["zz", "a", "zz"], False),  # a name it does not hold, twice
        (["a", ""], False),
        (["a", 1], False),
        (["a", None], False),
        (["a", ["b"]], False),  # unhashable
        (["a", 1.0, True], False),
    ],
)
def test_checked_rows_are_the_rows_of_distinct_non_empty_names(
    names: list[Any], checked: bool
) -> None:
    table = ScoreTable(capacity=2)
    for name in "abcd":
        table.set(name, terms(50, cls=PERF))
    asked = tuple(_copy(n) if isinstance(n, str) else n for n in names)
    rows = table.checked_rows(asked)
    assert (rows is not None) == checked
    if rows is not None:
        assert rows.tolist() == table.rows(list(asked)).tolist()
        assert table.rows(asked) is rows  # kept for the scores asked next
    # A table that holds an empty name cannot tell.
    table.set("", terms(50, cls=PERF))
    assert table.checked_rows(("a", "b")) is None


def test_names_with_any_characters_are_looked_up() -> None:
    table = ScoreTable()
    names = ["a\x00b", "a", "\x00", "b\x00\x00", "\u00e9t\u00e9"]
    for i, name in enumerate(names):
        table.set(name, terms(i * 25.0, cls=PERF))
    cluster = table.cluster()
    expected = [extender_priority(score(STANDARD_POD, table.terms(n), cluster)) for n in names]
    assert table.priorities(STANDARD_POD, [_copy(n) for n in names]) == expected


def test_table_updates_replace_and_forget() -> None:
    table = ScoreTable()
    table.set("a", terms(100, 0, cls=ECO))
    table.set("b", terms(0, 100, cls=PERF))
    assert table.priorities(STANDARD_POD, ["a", "b", "zzz"]) == [10, 0, 5]
    table.set("a", terms(100, 0, fresh=False))
    assert table.priorities(STANDARD_POD, ["a"]) == [5]
    table.set("b", None)
    assert "b" not in table
    assert table.terms("b") is None
    table.remove("b")  # forgetting twice is harmless
    assert table.priorities(STANDARD_POD, ["b"]) == [5]
    assert table.priorities(STANDARD_POD, []) == []


def test_table_cluster_follows_changes() -> None:
    table = ScoreTable()
    table.set("p1", terms(20, cls=PERF))
    assert table.cluster().perf_pressure == pytest.approx(80.0)
    table.set("p2", terms(60, cls=PERF))
    assert table.cluster().perf_pressure == pytest.approx(60.0)
    table.remove("p1")
    assert table.cluster().perf_pressure == pytest.approx(40.0)
    table.set("p2", terms(60, cls=ECO))
    assert table.cluster() == ClusterTerms()


def test_explain_shows_every_term() -> None:
    table = ScoreTable()
    table.set("p", terms(80, 10, cls=PERF, capped_w=1000, measured_w=300, trend=12, power=CPU_NODE))
    table.set("q", terms(50, cls=PERF))
    view = table.explain(STANDARD_POD, "p")
    parts = score_breakdown(STANDARD_POD, table.terms("p"), table.cluster())
    assert view["node"] == "p"
    assert view["schedulableClass"] == "performance"
    assert view["fresh"] is True
    assert view["neutralBecause"] is None
    assert view["podMarginalW"] == parts.marginal_w > 0
    assert view["headroomSource"] == "projected"
    assert view["trendBonus"] == pytest.approx(-2.0)
    assert view["trendScale"] == 6.0
    assert view["perfPressure"] == pytest.approx(35.0)
    assert view["pressureRelief"] == pytest.approx(-10.5)
    assert view["score"] == table.scores(STANDARD_POD, ["p"])[0]
    assert view["priority"] == table.priorities(STANDARD_POD, ["p"])[0]
    assert view["powerProfile"]["cores"] == 64
    unknown = table.explain(STANDARD_POD, "nope")
    assert unknown["known"] is False
    assert unknown["neutralBecause"] == "no twin"
    assert unknown["priority"] == 5
