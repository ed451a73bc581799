"""The extender's screen of kube-scheduler's preemption candidates: no eviction on a node a
performance pod may not use, no gang broken in part while a whole alternative exists, and
everything else exactly as kube-scheduler sent it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from joulie.core.preemption_candidates import (
    NO_GROUPS,
    Candidate,
    GroupMembership,
    screen_candidates,
)

ECO = {"eco-1", "drain-1"}


def kept_off(node: str) -> bool:
    return node in ECO


def test_the_docstring_example() -> None:
    groups = GroupMembership({"b": "ml/g", "b2": "ml/g"}, {"ml/g": frozenset({"b", "b2"})})
    candidates = [
        Candidate("eco-1", ("a",)),
        Candidate("perf-1", ("b",)),
        Candidate("perf-2", ("c",)),
    ]
    kept = screen_candidates(candidates, performance_pod=True, kept_off=kept_off, groups=groups)
    assert kept == [Candidate("perf-2", ("c",))]


def test_a_performance_pod_evicts_nothing_where_it_may_not_run() -> None:
    candidates = [
        Candidate("eco-1", ("a",), 1),
        Candidate("drain-1", ("b",)),
        Candidate("p", ("c",)),
    ]
    assert screen_candidates(candidates, performance_pod=True, kept_off=kept_off) == [
        Candidate("p", ("c",))
    ]
    # Nowhere left: no candidate at all (kube-scheduler then evicts nothing).
    assert screen_candidates(candidates[:2], performance_pod=True, kept_off=kept_off) == []


def test_a_standard_pod_may_preempt_anywhere() -> None:
    candidates = [Candidate("eco-1", ("a",)), Candidate("p", ("c",), 2)]
    assert screen_candidates(candidates, performance_pod=False, kept_off=kept_off) == candidates


def test_a_gang_is_taken_whole_or_not_at_all_while_there_is_a_choice() -> None:
    # Gang g runs on two nodes; evicting it from one breaks it, from both does not.
    groups = GroupMembership(
        {"g1": "ml/g", "g2": "ml/g", "s1": "ml/single"},
        {"ml/g": frozenset({"g1", "g2"})},  # ml/single is one-pod-at-a-time: not listed
    )
    part = Candidate("n1", ("g1", "x"))
    whole = Candidate("n2", ("g1", "g2"))
    single = Candidate("n3", ("s1",))
    assert groups.breaks_a_group(part.victims)
    assert not groups.breaks_a_group(whole.victims)
    assert not groups.breaks_a_group(single.victims)
    screened = screen_candidates(
        [part, whole, single], performance_pod=False, kept_off=kept_off, groups=groups
    )
    assert screened == [whole, single]
    # When every candidate breaks a gang, kube-scheduler's choice stands.
    assert screen_candidates([part], performance_pod=False, kept_off=kept_off, groups=groups) == [
        part
    ]


def test_without_group_knowledge_only_the_node_class_counts() -> None:
    candidates = [Candidate("n1", ("g1",)), Candidate("eco-1", ("a",))]
    assert screen_candidates(
        candidates, performance_pod=True, kept_off=kept_off, groups=NO_GROUPS
    ) == [candidates[0]]


nodes = st.sampled_from(["eco-1", "drain-1", "p1", "p2", "p3"])
uids = st.sampled_from(["a", "b", "c", "g1", "g2", "g3"])
candidate = st.builds(
    Candidate, nodes, st.lists(uids, min_size=1, max_size=3).map(tuple), st.integers(0, 2)
)


@given(
    st.lists(candidate, max_size=6, unique_by=lambda c: c.node),
    st.booleans(),
    st.sets(st.sampled_from(["g1", "g2", "g3"]), min_size=1),
)
def test_the_screen_only_drops_and_never_alters(
    candidates: list[Candidate], performance: bool, gang: set[str]
) -> None:
    groups = GroupMembership(dict.fromkeys(gang, "ml/g"), {"ml/g": frozenset(gang)})
    kept = screen_candidates(
        candidates, performance_pod=performance, kept_off=kept_off, groups=groups
    )
    # A subsequence of what was sent, each candidate unchanged.
    it = iter(candidates)
    assert all(any(k == c for c in it) for k in kept)
    if performance:
        assert not any(kept_off(k.node) for k in kept)
    allowed = [c for c in candidates if not (performance and kept_off(c.node))]
    whole = [c for c in allowed if not groups.breaks_a_group(c.victims)]
    # A gang is broken only when there was no whole alternative.
    assert kept == (whole or allowed)
