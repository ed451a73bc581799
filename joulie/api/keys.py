"""Names Joulie shares with the cluster: API group, object kinds, label and annotation keys.

Every component reads these from here so that a key is spelled in exactly one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

GROUP: Final = "joulie.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

NODE_TWIN_KIND: Final = "NodeTwin"
NODE_TWIN_PLURAL: Final = "nodetwins"
NODE_HARDWARE_KIND: Final = "NodeHardware"
NODE_HARDWARE_PLURAL: Final = "nodehardwares"

# Pod annotation carrying the user's placement intent (performance | standard).
WORKLOAD_CLASS_ANNOTATION: Final = "joulie.io/workload-class"

# The PriorityClass manifests/priority gives performance pods that name no class (its value and
# preemptionPolicy Never): performance work first in the queue, preempting nothing. The
# simulator's queue applies the same rule.
PERFORMANCE_PRIORITY_CLASS: Final = "joulie-performance"
PERFORMANCE_PRIORITY: Final = 1000

# The extended resource manifests/performance-filter gives performance pods (one unit, nothing
# provides or counts it), so that kube-scheduler calls the extender's filter for them alone
# (managedResources in kube-scheduler-config.performance-filter.example.yaml).
PERFORMANCE_POD_RESOURCE: Final = "joulie.io/performance-pod"

# Node label written by the controller manager: the supply side of the contract.
POWER_PROFILE_LABEL: Final = "joulie.io/power-profile"
# Node label an operator sets to "true" to keep a node out of Joulie's plan.
RESERVED_LABEL: Final = "joulie.io/reserved"
# The controller manager's leader-election Lease (in its namespace): whoever trusts its twins
# (the extender) checks that it is renewed.
MANAGER_LEASE: Final = "joulie-manager"
# Node label that opts a node into Joulie (the default NODE_SELECTOR).
MANAGED_LABEL: Final = "joulie.io/managed"
# Node annotation by which the KWOK controller picks the nodes it fakes, and its value.
KWOK_NODE_ANNOTATION: Final = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE: Final = "fake"
# Label of a NodeTwin (written by the manager) and of a NodeHardware (written by its agent): "true"
# for a node KWOK fakes, "false" for a real one. Admission lets the pool-mode agent write only
# objects labelled "true" (manifests/rbac/agent-pool-confinement.yaml).
SIMULATED_LABEL: Final = "joulie.io/simulated"
# Facility topology labels.
RACK_LABEL: Final = "joulie.io/rack"
COOLING_ZONE_LABEL: Final = "joulie.io/cooling-zone"

# Hardware labels used when no NodeHardware has been published yet (simulator/KWOK nodes).
HW_CPU_MODEL_LABEL: Final = "joulie.io/hw.cpu-model"
HW_CPU_SOCKETS_LABEL: Final = "joulie.io/hw.cpu-sockets"
HW_CPU_CORES_LABEL: Final = "joulie.io/hw.cpu-cores"
HW_GPU_MODEL_LABEL: Final = "joulie.io/hw.gpu-model"
HW_GPU_COUNT_LABEL: Final = "joulie.io/hw.gpu-count"
GPU_PRODUCT_LABEL: Final = "joulie.io/gpu.product"
# Label values cannot hold raw model strings ("Intel(R) Xeon(R) ..."); these annotations keep them
# exactly, so recognition against the catalog does not depend on how a label was sanitised.
HW_CPU_MODEL_ANNOTATION: Final = "joulie.io/hw.cpu-model-name"
HW_GPU_MODEL_ANNOTATION: Final = "joulie.io/hw.gpu-model-name"

# Node Feature Discovery labels Joulie understands as hardware hints.
NFD_CPU_MODEL_LABEL: Final = "feature.node.kubernetes.io/cpu-model.name"
NFD_CPU_VENDOR_LABEL: Final = "feature.node.kubernetes.io/cpu-model.vendor_id"
NFD_CPU_SOCKETS_LABEL: Final = "feature.node.kubernetes.io/cpu-sockets"

# Default search order for a node's GPU product label (GPU_PRODUCT_LABEL_KEYS).
DEFAULT_GPU_PRODUCT_LABEL_KEYS: Final = (
    GPU_PRODUCT_LABEL,
    "nvidia.com/gpu.product",
    "amd.com/gpu.product",
    "amd.com/gpu.family",
)

# Pod annotations the simulator reads: the share (0-1) of the pod's requested CPUs / GPUs that
# its work keeps busy. Without them a running pod keeps all it requested busy.
SIM_CPU_UTILIZATION_ANNOTATION: Final = "joulie.io/sim-cpu-utilization"
SIM_GPU_UTILIZATION_ANNOTATION: Final = "joulie.io/sim-gpu-utilization"

# NodeTwin condition written by the controller manager.
AGENT_REPORTING_CONDITION: Final = "AgentReporting"

# Node lifecycle (manager). Everything a drain or shutdown in flight needs is on the Node, so a
# restarted manager resumes it or rolls it back.
LIFECYCLE_CONDITION: Final = "NodeLifecycle"
"""NodeTwin condition: the node's state tuple, the matrix's action and what became of it."""
LIFECYCLE_EXCLUDE_ANNOTATION: Final = "joulie.io/lifecycle-exclude"
"""Node annotation: "true" keeps the node out of any drain or shutdown."""
LAUNCHED_AT_ANNOTATION: Final = "joulie.io/launched-at"
"""Node annotation a provisioner may set (RFC 3339 or epoch seconds): when the machine was
launched, the start of its boot grace and billing periods (else the Node's creation time)."""
IDLE_SINCE_ANNOTATION: Final = "joulie.io/idle-since"
"""Node annotation: when the node was first seen idle in its current idle spell."""
LIFECYCLE_PHASE_ANNOTATION: Final = "joulie.io/lifecycle-phase"
"""Node annotation: "draining" or "shutting-down" while one is in flight."""
LIFECYCLE_SINCE_ANNOTATION: Final = "joulie.io/lifecycle-since"
"""Node annotation: when the phase in flight began."""
LIFECYCLE_CORDONED_ANNOTATION: Final = "joulie.io/lifecycle-cordoned"
"""Node annotation: "true" when the lifecycle cordoned the node (so only then it uncordons)."""
LIFECYCLE_RETRY_AFTER_ANNOTATION: Final = "joulie.io/lifecycle-retry-after"
"""Node annotation: after a failed or refused shutdown, nothing is tried before this time."""
LIFECYCLE_FAILURES_ANNOTATION: Final = "joulie.io/lifecycle-failures"
"""Node annotation: failed shutdown attempts in a row (the backoff doubles with each)."""
DRAINING_TAINT: Final = "joulie.io/draining"
"""NoSchedule taint on a node being drained or shut down."""


def kwok_node(annotations: Mapping[str, str]) -> bool:
    """Whether a node with these annotations is one KWOK fakes (KWOK picks its nodes by them)."""
    return annotations.get(KWOK_NODE_ANNOTATION) == KWOK_NODE_VALUE
