"""The controller manager's metrics: what the plan decided, how reconciles went, what fails."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from joulie.core.policies import Plan, PlanNode, family_split

FAMILY_NODES = Gauge("joulie_policy_family_nodes", "Eligible nodes per hardware family", ["family"])
FAMILY_PERFORMANCE = Gauge(
    "joulie_policy_family_performance_nodes",
    "Nodes per hardware family planned in performance (draining nodes count as not performance)",
    ["family"],
)
HP_COUNT = Gauge("joulie_policy_hp_count", "Performance node count the policy asked for")
PERFORMANCE_PODS = Gauge(
    "joulie_policy_performance_pods",
    "Running and pending performance pods cluster-wide (not terminating)",
)
RECONCILES = Counter(
    "joulie_manager_reconciles_total",
    "Full reconciles started by the leader (periodic and triggered)",
)
TRIGGERS = Counter(
    "joulie_manager_reconcile_triggers_total",
    "Cache changes that asked for a reconcile, by the kind of object that changed (a burst of "
    "them costs one reconcile)",
    ["source"],
)
RECONCILE_SECONDS = Histogram(
    "joulie_manager_reconcile_duration_seconds",
    "Time one reconcile took, writes included",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
LAST_RECONCILE = Gauge(
    "joulie_manager_last_reconcile_timestamp_seconds",
    "When the last reconcile finished (Unix time); the twins are only as current as this",
)
TRANSITIONS = Counter(
    "joulie_policy_transitions_total",
    "Schedulable-class changes of nodes, by result (deferred: a downgrade waits for pods)",
    ["result"],
)
NODE_ERRORS = Counter(
    "joulie_manager_node_errors_total",
    "Failed writes for one node (its NodeTwin, status or label), by reason",
    ["reason"],
)
FAILING_NODES = Gauge(
    "joulie_manager_failing_nodes",
    "Nodes whose last write failed and that are being retried on their own",
)


def record_plan(
    nodes: list[PlanNode], result: Plan, perf_pods: int, performing: frozenset[str]
) -> None:
    FAMILY_NODES.clear()
    FAMILY_PERFORMANCE.clear()
    for family, (total, performance) in family_split(nodes, performing).items():
        FAMILY_NODES.labels(family).set(total)
        FAMILY_PERFORMANCE.labels(family).set(performance)
    HP_COUNT.set(result.hp_count)
    PERFORMANCE_PODS.set(perf_pods)
