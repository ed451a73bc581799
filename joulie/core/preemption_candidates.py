"""Which of kube-scheduler's preemption candidates the extender lets stand (its ``preempt`` verb).

kube-scheduler's default preemption picks, per node, the pods it would evict to make room, and
runs its own Filter plugins on the result but not the extenders' filters. So it can evict pods
from an eco node for a performance pod that the extender will then refuse there: the evictions
buy nothing. And it sees pods one by one, so it can evict part of a PodGroup whose disruption
mode is all-or-nothing, leaving the rest of that gang running without its quorum.

The screen, in order:

1. For a performance pod, a candidate node the filter would refuse (its twin class is eco or
   draining) is dropped.
2. A candidate whose victims include some but not all of the scheduled pods of an
   all-or-nothing PodGroup breaks that group; such candidates are dropped while another
   candidate that breaks none is left. When every candidate breaks a group, they all stay:
   refusing them all would only make kube-scheduler wait, and its own rules allowed them.

The rest is returned unchanged (victims and PDB violation counts as kube-scheduler sent them),
in the order sent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    """One node kube-scheduler would preempt on, and the pods (by UID) it would evict there."""

    node: str
    victims: tuple[str, ...]
    pdb_violations: int = 0


@dataclass(frozen=True)
class GroupMembership:
    """What the screen knows of PodGroups: the group of each pod (by UID) that has one, and for
    each all-or-nothing group the UIDs of its scheduled pods, on every node."""

    group_of: Mapping[str, str]
    all_or_nothing_members: Mapping[str, frozenset[str]]

    def breaks_a_group(self, victims: Iterable[str]) -> bool:
        """Whether evicting ``victims`` takes some, but not all, of an all-or-nothing group."""
        evicted = frozenset(victims)
        for uid in evicted:
            group = self.group_of.get(uid)
            members = self.all_or_nothing_members.get(group) if group is not None else None
            if members is not None and not members <= evicted:
                return True
        return False


NO_GROUPS = GroupMembership({}, {})


def screen_candidates(
    candidates: Iterable[Candidate],
    *,
    performance_pod: bool,
    kept_off: Callable[[str], bool],
    groups: GroupMembership = NO_GROUPS,
) -> list[Candidate]:
    """The candidates the extender lets stand (see the module docstring for the rules).

    ``kept_off(node)`` says whether the extender's filter refuses a performance pod on the node.
    Example: a performance pod, candidates ``eco-1`` (victim ``a``), ``perf-1`` (victim ``b``,
    one of the two scheduled pods of all-or-nothing group ``g``) and ``perf-2`` (victim ``c``):
    ``eco-1`` goes by rule 1, ``perf-1`` by rule 2, and ``[perf-2]`` is the answer.
    """
    listed = list(candidates)
    if performance_pod:
        listed = [c for c in listed if not kept_off(c.node)]
    whole = [c for c in listed if not groups.breaks_a_group(c.victims)]
    return whole if whole else listed
