"""The policy core: performance counts, the per-family performance split, rule swap, plan()."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joulie.api.enums import Profile
from joulie.api.inventory import load_inventory
from joulie.core.policies import (
    Plan,
    PlanNode,
    PolicyInputs,
    PolicyType,
    family_split,
    performance_set,
    plan,
    queue_hp_count,
    rule_swap_assignment,
    static_hp_count,
)
from joulie.hardware.family import hardware_family

EXP02_5K = Path(__file__).resolve().parent.parent / "data/inventories/02-cluster-nodes-5k.yaml"

LABELS = ["performance", "eco", None, "unknown"]
MODELS = [f"{kind}:{model}" for kind in ("cpu", "gpu") for model in "ABCDEFGHIJKLMNOP"]

seeds = st.integers(0, 2**32).map(random.Random)

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- inventories ----------------------------------------------------------------------------------


@st.composite
def inventories(draw: st.DrawFn, max_families: int = 12, max_size: int = 200) -> list[PlanNode]:
    """1-12 families of 1-200 nodes, names unrelated to families, random current labels."""
    sizes = draw(st.lists(st.integers(1, max_size), min_size=1, max_size=max_families))
    # One seeded generator for the bulk: a hypothesis draw per node would dominate the run time.
    rng = random.Random(draw(st.integers(0, 2**32)))
    families = rng.sample(MODELS, len(sizes))
    total = sum(sizes)
    names = [f"node-{i:06d}" for i in rng.sample(range(10 * total + 10), total)]
    nodes = []
    for family, size in zip(families, sizes, strict=True):
        for _ in range(size):
            nodes.append(PlanNode(names.pop(), family, rng.choice(LABELS)))
    rng.shuffle(nodes)
    return nodes


def family_sizes(nodes: Sequence[PlanNode]) -> dict[str, int]:
    return dict(Counter(node.family for node in nodes))


def seats(nodes: Sequence[PlanNode], chosen: frozenset[str]) -> dict[str, int]:
    return {family: perf for family, (_, perf) in family_split(nodes, chosen).items()}


def expected_size(hp: int, nodes: Sequence[PlanNode]) -> int:
    return min(max(hp, len(family_sizes(nodes))), len(nodes))


def sainte_lague_table(sizes: Mapping[str, int]) -> list[str]:
    """Reference apportionment, written as a table of averages: after the one seat every family
    holds, family f's k-th further seat is worth size_f / (2k + 1) (k = 1 .. size_f - 1, so no
    family outgrows its size). Further seats go down the table, the highest averages first and
    the smaller family key on equal averages. Returns the family of each further seat in order."""
    table = [
        (Fraction(size, 2 * k + 1), family)
        for family, size in sizes.items()
        for k in range(1, size)
    ]
    table.sort(key=lambda entry: (-entry[0], entry[1]))
    return [family for _, family in table]


def reference_seats(sizes: Mapping[str, int], order: list[str], hp: int) -> dict[str, int]:
    result = dict.fromkeys(sizes, 1)
    for family in order[: hp - len(sizes)]:
        result[family] += 1
    return result


def hp_values(rng: random.Random, nodes: Sequence[PlanNode], count: int = 6) -> list[int]:
    n, f = len(nodes), len(family_sizes(nodes))
    picks = {f, n, n - 1, max(f, n // 5)}
    picks.update(rng.randint(f, n) for _ in range(count))
    return sorted(p for p in picks if f <= p <= n)


# -- performance_set: properties ------------------------------------------------------------------


@FAST
@given(inventories(), st.integers(-5, 3000))
def test_size_is_clamped_and_every_family_keeps_a_node(nodes: list[PlanNode], hp: int) -> None:
    chosen = performance_set(nodes, hp)
    assert len(chosen) == expected_size(hp, nodes)
    assert chosen <= {node.name for node in nodes}
    sizes = family_sizes(nodes)
    for family, perf in seats(nodes, chosen).items():
        assert 1 <= perf <= sizes[family], family


@FAST
@given(inventories(), seeds)
def test_seats_are_the_sainte_lague_apportionment(
    nodes: list[PlanNode], rng: random.Random
) -> None:
    sizes = family_sizes(nodes)
    order = sainte_lague_table(sizes)
    for hp in hp_values(rng, nodes):
        assert seats(nodes, performance_set(nodes, hp)) == reference_seats(sizes, order, hp), hp


@FAST
@given(inventories(), seeds)
def test_one_more_slot_moves_exactly_one_node(nodes: list[PlanNode], rng: random.Random) -> None:
    for hp in hp_values(rng, nodes):
        if hp + 1 > len(nodes):
            continue
        smaller, larger = performance_set(nodes, hp), performance_set(nodes, hp + 1)
        assert smaller < larger
        assert len(larger - smaller) == 1


@FAST
@given(inventories(), st.integers(0, 3000), seeds)
def test_result_does_not_depend_on_input_order(
    nodes: list[PlanNode], hp: int, rng: random.Random
) -> None:
    shuffled = list(nodes)
    rng.shuffle(shuffled)
    assert performance_set(shuffled, hp) == performance_set(nodes, hp)
    assert performance_set(list(reversed(nodes)), hp) == performance_set(nodes, hp)


def relabelled(nodes: Sequence[PlanNode], chosen: frozenset[str]) -> list[PlanNode]:
    """The nodes as the next reconcile sees them, once the plan's labels are written."""
    return [PlanNode(n.name, n.family, "performance" if n.name in chosen else "eco") for n in nodes]


@FAST
@given(inventories(), st.integers(0, 3000))
def test_constant_demand_moves_no_node(nodes: list[PlanNode], hp: int) -> None:
    first = performance_set(nodes, hp)
    assert performance_set(relabelled(nodes, first), hp) == first


@FAST
@given(inventories(), st.integers(0, 3000), st.integers(-20, 20))
def test_a_change_of_demand_keeps_the_nodes_already_in_performance(
    nodes: list[PlanNode], hp: int, delta: int
) -> None:
    """From a settled state, growing only adds nodes and shrinking only removes nodes, so the
    number of nodes that change profile is the change of the effective count."""
    before = performance_set(nodes, hp)
    after = performance_set(relabelled(nodes, before), hp + delta)
    assert before <= after or after <= before
    assert len(before ^ after) == abs(expected_size(hp + delta, nodes) - len(before))


@FAST
@given(inventories(), st.integers(0, 3000))
def test_nodes_labelled_performance_are_kept_first(nodes: list[PlanNode], hp: int) -> None:
    chosen = performance_set(nodes, hp)
    for family, perf in seats(nodes, chosen).items():
        members = [n for n in nodes if n.family == family]
        labelled = sorted(n.name for n in members if n.current_profile == "performance")
        others = sorted(n.name for n in members if n.current_profile != "performance")
        assert {n.name for n in members} & chosen == set((labelled + others)[:perf]), family


# -- performance_set: examples --------------------------------------------------------------------


def nodes_of(spec: Mapping[str, int], label: str | None = None) -> list[PlanNode]:
    return [
        PlanNode(f"{family.split(':')[1]}-{i:02d}", family, label)
        for family, size in spec.items()
        for i in range(size)
    ]


def test_no_nodes_no_performance_set() -> None:
    assert performance_set([], 10) == frozenset()
    assert family_split([], frozenset()) == {}


def test_equal_claims_go_to_the_smaller_family_key() -> None:
    nodes = nodes_of({"gpu:b": 3, "gpu:a": 3})
    assert seats(nodes, performance_set(nodes, 3)) == {"gpu:a": 2, "gpu:b": 1}
    assert seats(nodes, performance_set(nodes, 4)) == {"gpu:a": 2, "gpu:b": 2}


def test_further_slots_follow_the_divisors() -> None:
    # One slot each, then the larger of 7 / (2 * big + 1) and 3 / (2 * small + 1) takes the next.
    nodes = nodes_of({"cpu:big": 7, "cpu:small": 3})
    counts = [seats(nodes, performance_set(nodes, hp)) for hp in range(2, 11)]
    assert counts == [
        {"cpu:big": 1, "cpu:small": 1},
        {"cpu:big": 2, "cpu:small": 1},
        {"cpu:big": 3, "cpu:small": 1},
        {"cpu:big": 4, "cpu:small": 1},  # 7/7 ties 3/3, "cpu:big" < "cpu:small"
        {"cpu:big": 4, "cpu:small": 2},
        {"cpu:big": 5, "cpu:small": 2},  # 7/9 > 3/5
        {"cpu:big": 6, "cpu:small": 2},  # 7/11 > 3/5
        {"cpu:big": 6, "cpu:small": 3},  # 3/5 > 7/13
        {"cpu:big": 7, "cpu:small": 3},  # full
    ]


def test_a_full_family_takes_no_more_slots() -> None:
    nodes = nodes_of({"gpu:one": 1, "cpu:many": 9})
    assert seats(nodes, performance_set(nodes, 6)) == {"cpu:many": 5, "gpu:one": 1}


def test_within_a_family_labelled_nodes_then_names() -> None:
    nodes = [
        PlanNode("a", "cpu:x", "eco"),
        PlanNode("b", "cpu:x", None),
        PlanNode("c", "cpu:x", "performance"),
        PlanNode("d", "cpu:x", "performance"),
    ]
    assert performance_set(nodes, 1) == {"c"}
    assert performance_set(nodes, 2) == {"c", "d"}
    assert performance_set(nodes, 3) == {"a", "c", "d"}


def test_a_node_listed_twice_is_rejected() -> None:
    nodes = [PlanNode("a", "cpu:x", None), PlanNode("a", "cpu:y", None)]
    with pytest.raises(ValueError, match="listed twice"):
        performance_set(nodes, 1)


def test_family_split_counts_nodes_and_performance_nodes() -> None:
    nodes = nodes_of({"gpu:h100": 3, "cpu:epyc": 2})
    split = family_split(nodes, frozenset({"h100-00", "epyc-01", "elsewhere"}))
    assert split == {"cpu:epyc": (2, 1), "gpu:h100": (3, 1)}
    assert list(split) == ["cpu:epyc", "gpu:h100"]


def test_exp02_5k_inventory_keeps_a_fifth_of_every_family() -> None:
    inventory = load_inventory(EXP02_5K)
    nodes = [
        PlanNode(name, hardware_family(group.cpu, group.product, group.gpu_count), None)
        for name, group in inventory.nodes_by_name()
    ]
    chosen = performance_set(nodes, 1000)
    split = family_split(nodes, chosen)
    sizes = {family: total for family, (total, _) in split.items()}
    reference = reference_seats(sizes, sainte_lague_table(sizes), 1000)
    table = "\n".join(
        f"{family:<32} {total:>5} {perf:>5} (reference {reference[family]})"
        for family, (total, perf) in split.items()
    )
    assert len(split) == 8, table
    assert len(chosen) == 1000, table
    assert sum(perf for _, perf in split.values()) == 1000, table
    for family, (total, perf) in split.items():
        assert perf * 5 == total, f"{family} is not a fifth:\n{table}"
        assert perf == reference[family], f"{family} differs from Sainte-Laguë:\n{table}"


# -- counts ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "frac", "expected"),
    [
        (5000, 0.2, 1000),
        (5, 0.5, 3),  # a half rounds up (Python's round() would give 2)
        (9, 0.5, 5),  # ... and so does an odd one (round() gives 4 here, 2 above: parity)
        (90, 0.35, 32),  # 31.5 exactly, though 90 * 0.35 is 31.499999999999996 in floats
        (10, 0.34, 3),
        (10, 0.36, 4),
        (0, 0.5, 0),
        (10, 0.0, 0),
        (10, 1.0, 10),
        (10, 1.5, 10),  # clamped to [0, 1]
        (10, -0.1, 0),
    ],
)
def test_static_hp_count(n: int, frac: float, expected: int) -> None:
    assert static_hp_count(n, frac) == expected


def test_static_hp_count_rejects_nan_and_negative_counts() -> None:
    with pytest.raises(ValueError, match="NaN"):
        static_hp_count(10, math.nan)
    with pytest.raises(ValueError, match="negative"):
        static_hp_count(-1, 0.5)


@pytest.mark.parametrize(
    ("n", "pods", "frac", "hp_min", "hp_max", "per_node", "expected"),
    [
        (10, 0, 0.2, 0, 100, 10, 2),  # base only
        (10, 25, 0.2, 0, 100, 10, 3),  # need = ceil(25 / 10)
        (10, 30, 0.2, 0, 100, 10, 3),  # exact multiple
        (10, 31, 0.2, 0, 100, 10, 4),
        (10, 1, 0.0, 0, 100, 10, 1),  # a single pending pod asks for a node
        (5, 0, 0.5, 0, 100, 10, 3),  # base rounds a half up
        (10, 0, 0.0, 2, 100, 10, 2),  # raised to the minimum
        (10, 500, 0.2, 0, 7, 10, 7),  # capped at the maximum
        (10, 500, 0.2, 0, 0, 10, 0),  # a maximum of 0 is 0, not "unbounded"
        (10, 500, 0.2, 6, 4, 10, 6),  # maximum below minimum: the minimum wins
        (10, 0, 0.2, 6, 4, 10, 6),
        (10, 5000, 0.2, 0, 1_000_000, 10, 500),  # not capped at N here: performance_set does
    ],
)
def test_queue_hp_count(
    n: int, pods: int, frac: float, hp_min: int, hp_max: int, per_node: int, expected: int
) -> None:
    assert queue_hp_count(n, pods, frac, hp_min, hp_max, per_node) == expected


@pytest.mark.parametrize(
    ("pods", "hp_min", "hp_max", "per_node"),
    [(-1, 0, 10, 10), (0, -1, 10, 10), (0, 0, -1, 10), (0, 0, 10, 0)],
)
def test_queue_hp_count_rejects_impossible_inputs(
    pods: int, hp_min: int, hp_max: int, per_node: int
) -> None:
    with pytest.raises(ValueError, match=r"negative|at least 1"):
        queue_hp_count(10, pods, 0.2, hp_min, hp_max, per_node)


@given(
    st.integers(0, 500),
    st.integers(0, 2000),
    st.integers(0, 2000),
    st.floats(0, 1),
    st.integers(0, 50),
    st.integers(0, 600),
    st.integers(1, 20),
)
def test_queue_hp_count_is_monotonic_in_pressure_and_bounded(
    n: int, p1: int, p2: int, frac: float, hp_min: int, hp_max: int, per_node: int
) -> None:
    low, high = sorted((p1, p2))
    a = queue_hp_count(n, low, frac, hp_min, hp_max, per_node)
    b = queue_hp_count(n, high, frac, hp_min, hp_max, per_node)
    assert a <= b
    assert b <= max(hp_max, hp_min)
    assert a >= hp_min


# -- rule_swap_v1 ---------------------------------------------------------------------------------


def eco_nodes(profiles: Mapping[str, str]) -> list[str]:
    return sorted(name for name, profile in profiles.items() if profile == "eco")


def test_rule_swap_alternates_the_first_two_names() -> None:
    nodes = [PlanNode(name, "cpu:x", None) for name in ("d", "b", "c", "a")]
    phases = [eco_nodes(rule_swap_assignment(nodes, t, 60.0)) for t in (0, 59.9, 60, 119, 120)]
    assert phases == [["a"], ["a"], ["b"], ["b"], ["a"]]
    for t in range(0, 600, 7):
        profiles = rule_swap_assignment(nodes, 1_700_000_000 + t, 60.0)
        assert profiles["c"] == profiles["d"] == Profile.PERFORMANCE
        assert sorted(profiles) == ["a", "b", "c", "d"]


def test_rule_swap_single_node_and_no_nodes() -> None:
    node = [PlanNode("only", "cpu:x", None)]
    assert rule_swap_assignment(node, 10, 60) == {"only": Profile.ECO}
    assert rule_swap_assignment(node, 70, 60) == {"only": Profile.PERFORMANCE}
    assert rule_swap_assignment([], 70, 60) == {}


@given(inventories(max_families=3, max_size=20), st.integers(0, 4 * 10**9), st.integers(1, 3600))
def test_rule_swap_has_exactly_one_eco_node_among_two_or_more(
    nodes: list[PlanNode], now: int, interval: int
) -> None:
    names = sorted(node.name for node in nodes)
    profiles = rule_swap_assignment(nodes, now, interval)
    if len(names) >= 2:
        assert len(eco_nodes(profiles)) == 1
        assert eco_nodes(profiles)[0] in names[:2]
    # An interval later the other node (or, alone, no node) is eco.
    later = rule_swap_assignment(nodes, now + interval, interval)
    assert eco_nodes(later) != eco_nodes(profiles)


@pytest.mark.parametrize("interval", [0.0, -5.0, math.inf, math.nan])
def test_rule_swap_rejects_a_meaningless_interval(interval: float) -> None:
    with pytest.raises(ValueError, match="interval"):
        rule_swap_assignment([PlanNode("a", "cpu:x", None)], 0, interval)


# -- plan() ---------------------------------------------------------------------------------------


def inputs(policy: str, **overrides: float) -> PolicyInputs:
    values: dict[str, float] = {
        "static_hp_frac": 0.5,
        "queue_hp_base_frac": 0.0,
        "queue_hp_min": 0,
        "queue_hp_max": 1_000_000,
        "queue_perf_per_hp_node": 5,
    }
    values.update(overrides)
    interval = values.pop("reconcile_interval_s", 60.0)
    return PolicyInputs(policy=policy, params=values, reconcile_interval_s=interval)


CLUSTER = nodes_of({"gpu:h100": 12, "gpu:l40s": 6, "cpu:epyc": 2})


def performance_names(result: Plan) -> frozenset[str]:
    return frozenset(n for n, p in result.profiles.items() if p == Profile.PERFORMANCE)


def test_plan_static_partition() -> None:
    result = plan(CLUSTER, inputs(PolicyType.STATIC_PARTITION), perf_pods=999, now=0)
    assert result.policy_name == "static-partition-v1"
    assert (result.hp_count, result.performance_count) == (10, 10)
    assert list(result.profiles) == sorted(n.name for n in CLUSTER)
    assert set(result.profiles.values()) == {Profile.PERFORMANCE, Profile.ECO}
    assert performance_names(result) == performance_set(CLUSTER, 10)
    assert family_split(CLUSTER, performance_names(result)) == {
        "cpu:epyc": (2, 1),
        "gpu:h100": (12, 6),
        "gpu:l40s": (6, 3),
    }


def test_plan_static_partition_raises_the_count_to_the_families() -> None:
    result = plan(CLUSTER, inputs("static_partition", static_hp_frac=0.0), 0, 0)
    assert (result.hp_count, result.performance_count) == (0, 3)


def test_plan_queue_aware_counts_running_and_pending_performance_pods() -> None:
    running, pending = 3, 8
    idle = plan(CLUSTER, inputs("queue_aware_v1"), perf_pods=0, now=0)
    running_only = plan(CLUSTER, inputs("queue_aware_v1"), perf_pods=running, now=0)
    queued = plan(CLUSTER, inputs("queue_aware_v1"), perf_pods=running + pending, now=0)
    assert idle.policy_name == queued.policy_name == "queue-aware-v1"
    assert (idle.hp_count, idle.performance_count) == (0, 3)  # family floor
    assert (running_only.hp_count, running_only.performance_count) == (1, 3)
    assert (queued.hp_count, queued.performance_count) == (3, 3)  # ceil(11 / 5)
    more = plan(CLUSTER, inputs("queue_aware_v1"), perf_pods=40, now=0)
    assert (more.hp_count, more.performance_count) == (8, 8)
    assert performance_names(queued) <= performance_names(more)


def test_plan_queue_aware_bounds() -> None:
    capped = plan(CLUSTER, inputs("queue_aware_v1", queue_hp_max=5), perf_pods=400, now=0)
    assert (capped.hp_count, capped.performance_count) == (5, 5)
    beyond = plan(CLUSTER, inputs("queue_aware_v1"), perf_pods=400, now=0)
    assert (beyond.hp_count, beyond.performance_count) == (80, 20)  # capped at N by the split
    floor = plan(CLUSTER, inputs("queue_aware_v1", queue_hp_min=7), perf_pods=0, now=0)
    assert (floor.hp_count, floor.performance_count) == (7, 7)


def test_plan_rule_swap() -> None:
    first = plan(CLUSTER, inputs("rule_swap_v1", reconcile_interval_s=30), 0, now=10)
    second = plan(CLUSTER, inputs("rule_swap_v1", reconcile_interval_s=30), 0, now=40)
    assert first.policy_name == "rule-swap-v1"
    assert (first.hp_count, first.performance_count) == (19, 19)
    assert eco_nodes(first.profiles) == ["epyc-00"]
    assert eco_nodes(second.profiles) == ["epyc-01"]


def test_plan_rejects_an_unknown_policy() -> None:
    with pytest.raises(ValueError, match="unknown policy 'greedy'"):
        plan(CLUSTER, inputs("greedy"), 0, 0)


def test_plan_of_no_nodes() -> None:
    for policy in PolicyType:
        result = plan([], inputs(policy), perf_pods=10, now=0)
        assert (dict(result.profiles), result.performance_count) == ({}, 0)
