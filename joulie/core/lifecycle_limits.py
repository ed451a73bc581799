"""Which of the lifecycle's wanted actions may start now: the safety rules that stand between the
matrix and the actuators.

The matrix says what a node on its own calls for; these rules look at the fleet. Nodes that are
not ours to touch (opted out, being removed by another controller, in backoff after a failure)
never become candidates; of the candidates, a circuit breaker halts everything while too many
nodes are NotReady (a broken network or control plane looks like a dead fleet, and powering
nodes off would make it one), and every drain and shutdown respects a minimum node count and a
disruption budget, drains and shutdowns each their own concurrency limit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from joulie.api import keys
from joulie.api.lifecycle import Action, StateTuple

__all__ = [
    "BOOTS_AT_LEAST",
    "BOOTS_PCT_OF_FLEET",
    "DRAINS_PCT_OF_FLEET",
    "Candidate",
    "FleetCounts",
    "Limits",
    "Verdict",
    "admit",
    "backoff_s",
    "circuit_open",
    "fleet_boots",
    "fleet_drains",
    "left_alone",
]

OPT_OUT_ANNOTATIONS = {
    keys.LIFECYCLE_EXCLUDE_ANNOTATION: "true",
    "cluster-autoscaler.kubernetes.io/scale-down-disabled": "true",
    "karpenter.sh/do-not-disrupt": "true",
}
"""Node annotations (and the value) by which an operator keeps a node out of any removal."""
OTHER_REMOVERS_TAINTS = ("ToBeDeletedByClusterAutoscaler", "karpenter.sh/disrupted")
"""Taints another controller sets on a node it is removing."""
OTHER_OWNER_LABELS = ("karpenter.sh/nodepool",)
"""Labels of nodes whose lifecycle another controller owns."""
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")


DRAINS_PCT_OF_FLEET = 1.0
"""With no drain limit set, this share of the managed nodes (rounded up, at least 1) drains at
once. One at a time (cluster-autoscaler's --max-drain-parallelism default) powers down at most
one node a pass, 120 an hour at the live 30 s interval: on 5,000 simulated nodes (exp02-5k, A+L,
24 h) that saved 9.9 % of facility energy against 25.7 % with 50 at a time. Karpenter's default
disruption budget is 10 % of a NodePool's nodes; the budget here (LIFECYCLE_BUDGET_PCT, 10 %)
still bounds drains and shutdowns together."""


def fleet_drains(managed: int) -> int:
    """Drains at once that follow the fleet: :data:`DRAINS_PCT_OF_FLEET` of ``managed``
    (rounded up), at least 1."""
    return max(1, math.ceil(round(managed * DRAINS_PCT_OF_FLEET / 100.0, 9)))


BOOTS_PCT_OF_FLEET = 10.0
BOOTS_AT_LEAST = 5
"""With no boot limit set, :data:`BOOTS_PCT_OF_FLEET` of the nodes the lifecycle knows
(serving, draining, off and booting; rounded up), and never fewer than this, may be powering on
at once: a small cluster's burst is not served one boot at a time (the shutdown limit's default
is 5 too). Powering hundreds of servers on
together is what staggered power-on exists to avoid (inrush on shared circuits, a PXE and image
server under a thundering herd); cluster-autoscaler has no such limit (1,000 nodes per
scale-up), so this is our choice, measured in the simulator (docs/lifecycle.md)."""


def fleet_boots(nodes: int) -> int:
    """Boots at once that follow the fleet: :data:`BOOTS_PCT_OF_FLEET` of ``nodes`` (rounded
    up), at least :data:`BOOTS_AT_LEAST`."""
    return max(BOOTS_AT_LEAST, math.ceil(round(nodes * BOOTS_PCT_OF_FLEET / 100.0, 9)))


@dataclass(frozen=True)
class Limits:
    max_concurrent_drains: int | None = None
    """Nodes draining at once; None: :func:`fleet_drains` of the managed nodes."""
    max_concurrent_shutdowns: int = 5
    budget_pct: float = 10.0
    """Nodes draining or shutting down at once, in percent of the managed nodes (rounded up)."""
    min_nodes: int = 0
    """Drains and shutdowns never take the managed nodes not draining or shutting down below
    this."""
    unready_halt_pct: float = 45.0
    """Above this share of NotReady managed nodes, nothing is drained or shut down ..."""
    unready_ok_count: int = 3
    """... unless no more than this many are NotReady while most nodes are Ready (a small
    cluster's one broken node). Cluster autoscaler tolerates this count whatever the share; on
    a fleet so small that the count is most of it, that would leave no breaker at all (3 of 3
    NotReady shut down together), so the tolerance holds only while a majority is Ready."""

    max_concurrent_boots: int | None = None
    """Nodes powering on at once; None: :func:`fleet_boots` of the nodes known."""

    def boots_at_once(self, nodes: int) -> int:
        """The boot limit for ``nodes`` known to the lifecycle: the one set, else
        :func:`fleet_boots`."""
        if self.max_concurrent_boots is not None:
            return self.max_concurrent_boots
        return fleet_boots(nodes)

    def drains_at_once(self, managed: int) -> int:
        """The drain limit for ``managed`` nodes: the one set, else :func:`fleet_drains`."""
        if self.max_concurrent_drains is not None:
            return self.max_concurrent_drains
        return fleet_drains(managed)


@dataclass(frozen=True)
class FleetCounts:
    managed: int
    unready: int
    draining: int
    shutting_down: int


@dataclass(frozen=True)
class Candidate:
    name: str
    action: Action
    tuple: StateTuple
    reason: str
    idle_since: float | None = None
    """For drains: the longest idle are taken first."""


@dataclass(frozen=True)
class Verdict:
    candidate: Candidate
    admitted: bool
    reason: str
    """Why it was held back ("" when admitted)."""


def left_alone(
    annotations: Mapping[str, str],
    labels: Mapping[str, str],
    taints: Iterable[str],
    deleting: bool,
    retry_after: float | None,
    now: float,
) -> str | None:
    """Why a node is not ours to drain or shut down now, or None when it is."""
    for key, value in OPT_OUT_ANNOTATIONS.items():
        if annotations.get(key) == value:
            return f"opted out ({key}={value})"
    if deleting:
        return "already being deleted"
    for taint in taints:
        if taint in OTHER_REMOVERS_TAINTS:
            return f"being removed by another controller (taint {taint})"
    for label in (*OTHER_OWNER_LABELS, *CONTROL_PLANE_LABELS):
        if label in labels:
            return f"not ours to remove (label {label})"
    if retry_after is not None and now < retry_after:
        return f"backing off after a failure, {retry_after - now:.0f} s left"
    return None


def circuit_open(fleet: FleetCounts, limits: Limits) -> str | None:
    """Why every drain and shutdown is halted now, or None."""
    if fleet.managed == 0:
        return None
    if fleet.unready <= limits.unready_ok_count and 2 * fleet.unready <= fleet.managed:
        return None
    share = 100.0 * fleet.unready / fleet.managed
    if share > limits.unready_halt_pct:
        return (
            f"circuit breaker: {fleet.unready} of {fleet.managed} nodes NotReady "
            f"({share:.0f} % > {limits.unready_halt_pct:g} %)"
        )
    return None


def _order(candidate: Candidate) -> tuple[int, float, str]:
    # Broken nodes first (they serve nothing), then the drains of the longest idle.
    broken = 0 if candidate.action is Action.START_SHUTDOWN else 1
    since = candidate.idle_since if candidate.idle_since is not None else math.inf
    return broken, since, candidate.name


def _held_back(
    action: Action, managed: int, draining: int, shutting: int, budget: int, limits: Limits
) -> str | None:
    """Why a drain or shutdown may not start with ``draining`` and ``shutting`` in flight, or
    None. Both take a node out of service, so both answer to the floor and the budget; a
    broken node counts as serving for the floor (it is a node left on, and a late heartbeat
    does not prove it useless)."""
    if action not in (Action.START_DRAIN, Action.START_SHUTDOWN):
        return None
    serving = managed - draining - shutting
    if serving - 1 < limits.min_nodes:
        return f"{serving} nodes serving, minimum {limits.min_nodes}"
    if draining + shutting >= budget:
        return (
            f"disruption budget spent: {draining + shutting} of {budget} "
            f"({limits.budget_pct:g} % of {managed})"
        )
    if action is Action.START_SHUTDOWN and shutting >= limits.max_concurrent_shutdowns:
        return f"{shutting} shutdowns in flight (limit {limits.max_concurrent_shutdowns})"
    drains = limits.drains_at_once(managed)
    if action is Action.START_DRAIN and draining >= drains:
        return f"{draining} drains in flight (limit {drains})"
    return None


def admit(candidates: Sequence[Candidate], fleet: FleetCounts, limits: Limits) -> list[Verdict]:
    """Each candidate's verdict, in the order they would be acted on."""
    halted = circuit_open(fleet, limits)
    # Rounded to 9 places first: 250 nodes at 64.4 % is 161.00000000000003 in floats, not 162.
    budget = math.ceil(round(fleet.managed * limits.budget_pct / 100.0, 9))
    draining, shutting = fleet.draining, fleet.shutting_down
    verdicts: list[Verdict] = []
    for candidate in sorted(candidates, key=_order):
        reason = halted or _held_back(
            candidate.action, fleet.managed, draining, shutting, budget, limits
        )
        if reason is None and candidate.action is Action.START_SHUTDOWN:
            shutting += 1
        elif reason is None and candidate.action is Action.START_DRAIN:
            draining += 1
        verdicts.append(Verdict(candidate, reason is None, reason or ""))
    return verdicts


def backoff_s(failures: int, base_s: float, cap_s: float, asked_s: float | None = None) -> float:
    """How long a node waits after ``failures`` failed or refused shutdowns in a row: ``base_s``
    doubling with each, at most ``cap_s``, and at least what the far end asked for (itself at
    most ``cap_s``)."""
    wait: float = min(cap_s, base_s * 2.0 ** max(0, failures - 1))
    if asked_s is not None:
        wait = max(wait, min(cap_s, asked_s))
    return wait
