"""The agent's metrics: how many nodes it serves, how each node's sync went, how long a pass over
all of them takes (the figure to hold against CONTROL_INTERVAL)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

SERVED_NODES = Gauge("joulie_agent_served_nodes", "Nodes this agent (its shard) serves")
NODE_SYNCS = Counter(
    "joulie_agent_node_syncs_total",
    "Syncs of one node (telemetry read, NodeHardware, control), by result",
    ["result"],
)
PASS_SECONDS = Histogram(
    "joulie_agent_pass_duration_seconds",
    "Time from queueing every served node to the last of them being synced",
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120),
)
