"""The node lifecycle's metrics: every node's tuple and action, what each decision led to, and
the brakes (circuit breaker, stale caches)."""

from __future__ import annotations

from collections import Counter as Tally

from prometheus_client import Counter, Gauge, Histogram

from joulie.api.lifecycle import Action, StateTuple

PASSES = Counter("joulie_lifecycle_passes_total", "Lifecycle passes started by the leader")
SKIPPED_PASSES = Counter(
    "joulie_lifecycle_skipped_passes_total",
    "Passes that acted on nothing because a cache the decisions read was stale",
)
PASS_SECONDS = Histogram(
    "joulie_lifecycle_pass_duration_seconds",
    "Time one lifecycle pass took, writes and actuator calls included",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
NODE_TUPLES = Gauge(
    "joulie_lifecycle_nodes",
    "Managed nodes per state tuple and the matrix's action for it, as of the last pass",
    ["state", "window", "boot", "idle", "action"],
)
OUTCOMES = Counter(
    "joulie_lifecycle_outcomes_total",
    "What became of the matrix's actions: started, held (by a limit or opt-out), cancelled, "
    "refused (a workload pod found live), accepted, shut_down, failed, rolled_back, dry_run; "
    "and of power-ons: booting, booted, boot_failed",
    ["action", "outcome"],
)
NODE_ERRORS = Counter(
    "joulie_lifecycle_node_errors_total",
    "Lifecycle steps of one node that failed (a refused patch, a timeout); retried next pass",
)
IN_FLIGHT = Gauge(
    "joulie_lifecycle_in_flight_nodes", "Nodes the lifecycle has in each phase", ["phase"]
)
CIRCUIT_OPEN = Gauge(
    "joulie_lifecycle_circuit_breaker_open",
    "1 while too many managed nodes are NotReady for any drain or shutdown",
)
ACTUATOR_SECONDS = Histogram(
    "joulie_lifecycle_actuator_duration_seconds",
    "Time one actuator call took, retries included",
    ["actuator", "outcome"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)

BOOTS = Counter(
    "joulie_lifecycle_boots_total",
    "Nodes powered on for pending pods: requested (the actuator took it), failed (it refused "
    "or could not be reached), registered (Ready again), timed_out (not Ready within the boot "
    "grace)",
    ["actuator", "outcome"],
)
UNSERVED_PODS = Gauge(
    "joulie_lifecycle_unschedulable_pods",
    "Unschedulable pods as of the last pass, by what the boot decision made of them: "
    "fits_serving (left to the scheduler), waits_for_boot (a node booting or draining, or one "
    "powered on now, takes it), held (a group at its maximum, cooling down, or the boot limit), "
    "unfittable (no node group could ever take it)",
    ["fate"],
)
_FATES = ("fits_serving", "waits_for_boot", "held", "unfittable")

_shown: set[tuple[str, ...]] = set()


def record_unserved(counts: dict[str, int]) -> None:
    for fate in _FATES:
        UNSERVED_PODS.labels(fate).set(counts.get(fate, 0))


def record_tuples(tuples: Tally[tuple[StateTuple, Action]]) -> None:
    """Set the per-tuple node counts; tuples no node holds any more go back to 0."""
    now = {(*key.as_list(), action.value): count for (key, action), count in tuples.items()}
    for labels in _shown - now.keys():
        NODE_TUPLES.labels(*labels).set(0)
    for labels, count in now.items():
        NODE_TUPLES.labels(*labels).set(count)
    _shown.clear()
    _shown.update(now)


def outcome(action: Action, what: str) -> None:
    OUTCOMES.labels(action.value, what).inc()
