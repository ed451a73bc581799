"""The agent's metrics. Pool mode: how many nodes it serves, how each node's sync went, how long a
pass over all of them takes (the figure to hold against CONTROL_INTERVAL). DaemonSet mode: how
its passes went, the last result per component, and how often it restored the node's own
settings, and why."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import Counter, Gauge, Histogram

from joulie.agent.host_power import PowerReading
from joulie.agent.outcomes import ComponentOutcome
from joulie.api.enums import ControlResult

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

PASSES = Counter(
    "joulie_agent_passes_total",
    "DaemonSet-mode passes over the node's hardware, by result",
    ["result"],
)
RESTORES = Counter(
    "joulie_agent_restores_total",
    "Times the node's own settings were restored, by reason (unplanned, stale-spec, stop)",
    ["reason"],
)
CONTROL_RESULT = Gauge(
    "joulie_agent_control_result",
    "1 for the last control result of each component (cpu, cpuGovernor, gpu, gpuGovernor)",
    ["component", "result"],
)


def observe_outcomes(outcomes: Mapping[str, ComponentOutcome]) -> None:
    for component, outcome in outcomes.items():
        if outcome.result is None:
            continue
        for result in ControlResult:
            CONTROL_RESULT.labels(component, result.value).set(result is outcome.result)


CPU_PACKAGE_WATTS = Gauge(
    "joulie_agent_cpu_package_power_watts",
    "Mean power of each CPU package since the previous pass, from its RAPL energy counter",
    ["package"],
)
GPU_WATTS = Gauge(
    "joulie_agent_gpu_power_watts", "Power of each GPU, as its driver reads it", ["gpu"]
)
NODE_WATTS = Gauge(
    "joulie_agent_node_power_watts",
    "CPU packages plus GPUs of this node (absent while the CPU's power cannot be read)",
    ["node"],
)


def observe_power(reading: PowerReading, node: str) -> None:
    figures = ((CPU_PACKAGE_WATTS, reading.cpu_package_watts), (GPU_WATTS, reading.gpu_watts))
    for gauge, values in figures:
        gauge.clear()
        for label, watts in values.items():
            gauge.labels(label).set(watts)
    NODE_WATTS.clear()
    if reading.node_watts is not None:
        NODE_WATTS.labels(node).set(reading.node_watts)
