"""Environment variables of the node-agent role."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from joulie.agent.sharding import ordinal
from joulie.api.enums import TelemetryBackend
from joulie.api.keys import MANAGED_LABEL
from joulie.settings import (
    AbsolutePath,
    Accepts,
    Duration,
    EnvSettings,
    LabelSelectorText,
    NodeNameText,
    Problem,
)


class AgentMode(StrEnum):
    DAEMONSET = "daemonset"
    POOL = "pool"


_ENDPOINT = Accepts("an http(s) URL containing {node}")


class AgentSettings(EnvSettings):
    role = "agent"

    agent_mode: AgentMode = AgentMode.DAEMONSET
    """daemonset: one agent per node controlling its own hardware; pool: one agent process
    serving many (KWOK) nodes through the HTTP backends."""
    node_name: NodeNameText = ""
    """daemonset mode: the node this agent runs on (from the downward API, spec.nodeName)."""
    pool_node_selector: LabelSelectorText = f"{MANAGED_LABEL}=true"
    """pool mode: label selector of the nodes the pool serves."""
    pool_shards: Annotated[int, Field(ge=1)] = 1
    """pool mode: number of agent replicas the nodes are spread over."""
    pod_name: str = ""
    """pool mode: this replica's pod name; its ordinal suffix is the shard number."""
    governor_writes: bool = False
    """Apply the governor presets of NodeTwin.spec (off by default, like GOVERNOR_CONTROL)."""

    telemetry_cpu_source: TelemetryBackend = TelemetryBackend.HOST
    """CPU power telemetry backend: host (RAPL via sysfs) or http (simulator)."""
    telemetry_cpu_control: TelemetryBackend = TelemetryBackend.HOST
    """CPU control backend: host (powercap and cpufreq via sysfs) or http (simulator)."""
    telemetry_gpu_source: TelemetryBackend = TelemetryBackend.HOST
    """GPU telemetry backend: host (NVML or the vendor's interface) or http (simulator)."""
    telemetry_gpu_control: TelemetryBackend = TelemetryBackend.HOST
    """GPU control backend: host (NVML or the vendor's interface) or http (simulator)."""
    telemetry_cpu_http_endpoint: Annotated[str, _ENDPOINT] = ""
    """URL read for CPU telemetry when TELEMETRY_CPU_SOURCE=http; {node} is the node name."""
    telemetry_cpu_control_http_endpoint: Annotated[str, _ENDPOINT] = ""
    """URL posted to for CPU control when TELEMETRY_CPU_CONTROL=http."""
    telemetry_gpu_http_endpoint: Annotated[str, _ENDPOINT] = ""
    """URL read for GPU telemetry when TELEMETRY_GPU_SOURCE=http."""
    telemetry_gpu_control_http_endpoint: Annotated[str, _ENDPOINT] = ""
    """URL posted to for GPU control when TELEMETRY_GPU_CONTROL=http."""
    telemetry_http_timeout: Annotated[Duration, Field(le=60)] = 2.0
    """Timeout of every HTTP telemetry or control request."""
    control_interval: Annotated[Duration, Field(ge=1, le=3600)] = 20.0
    """How often every node served is read and its NodeTwin spec asserted again (changes to the
    spec are applied at once)."""
    heartbeat_interval: Annotated[Duration, Field(ge=10, le=600)] = 300.0
    """How often NodeHardware is rewritten when nothing changed, so the manager sees the agent
    alive (it reports an agent stale after 15 minutes)."""

    host_root: AbsolutePath = "/"
    """daemonset mode: where the host's /sys and /proc are found (the DaemonSet mounts them;
    tests point it at a fake tree)."""
    state_dir: AbsolutePath = "/var/lib/joulie"
    """daemonset mode: the directory on the node (a hostPath) that keeps the hardware baseline
    across agent restarts within one boot."""
    discovery_interval: Annotated[Duration, Field(ge=10, le=86400)] = 600.0
    """daemonset mode: how often the hardware is discovered again (also after a control error,
    such as a GPU that stopped answering)."""
    spec_read_timeout: Annotated[Duration, Field(ge=5, le=3600)] = 300.0
    """daemonset mode: when the node's NodeTwin cannot be read from the API server for this
    long, the agent restores the node's own settings rather than enforce a spec that may have
    been withdrawn meanwhile."""
    pod_resources_socket: AbsolutePath = "/var/lib/kubelet/pod-resources/kubelet.sock"
    """daemonset mode: the kubelet's PodResources socket, which says which GPU each pod holds
    (the DaemonSet mounts its directory). Read only for a NodeTwin with per-class GPU caps;
    while it cannot be read, every board takes the node-level cap."""
    simulate_only: bool = False
    """Dry run: discover, compute and report what would be written, write nothing to hardware."""

    def check(self) -> list[Problem]:
        problems: list[Problem] = []
        if (
            self.agent_mode is AgentMode.POOL
            and self.pool_shards > 1
            and ordinal(self.pod_name) is None
        ):
            problems.append(
                self.problem(
                    "pod_name",
                    f"must end in the StatefulSet ordinal with POOL_SHARDS={self.pool_shards}",
                    "the pod's name, e.g. from fieldRef metadata.name (joulie-agent-pool-0)",
                )
            )
        if self.agent_mode is AgentMode.DAEMONSET and not self.node_name:
            problems.append(
                self.problem(
                    "node_name",
                    "is required with AGENT_MODE=daemonset",
                    "the node's name, e.g. from fieldRef spec.nodeName",
                )
            )
        backends = [
            "telemetry_cpu_source",
            "telemetry_cpu_control",
            "telemetry_gpu_source",
            "telemetry_gpu_control",
        ]
        wrong = TelemetryBackend.HTTP if self.agent_mode is AgentMode.DAEMONSET else None
        for backend in backends:
            value = getattr(self, backend)
            if self.agent_mode is AgentMode.POOL and value is TelemetryBackend.HOST:
                problems.append(
                    self.problem(
                        backend,
                        "AGENT_MODE=pool drives simulated nodes through the HTTP backend",
                        "http, with the endpoint variables set",
                    )
                )
            elif value is wrong:
                problems.append(
                    self.problem(
                        backend,
                        "AGENT_MODE=daemonset drives its own node's hardware; simulated "
                        "(KWOK) nodes are served by AGENT_MODE=pool",
                        "host",
                    )
                )
        for backend, endpoint in (
            ("telemetry_cpu_source", "telemetry_cpu_http_endpoint"),
            ("telemetry_cpu_control", "telemetry_cpu_control_http_endpoint"),
            ("telemetry_gpu_source", "telemetry_gpu_http_endpoint"),
            ("telemetry_gpu_control", "telemetry_gpu_control_http_endpoint"),
        ):
            if getattr(self, backend) is not TelemetryBackend.HTTP:
                continue
            required_by = f"{self.env_name(backend)}=http"
            problems.extend(self.url_problems(endpoint, required_by, template=True))
        return problems
