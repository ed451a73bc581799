"""What the controller manager asks of one node: NodeTwin.spec (caps, governor presets) and the
schedulable class, after the downgrade guard; plus the AgentReporting condition.

Everything here is pure. The manager shell gathers the inputs from its informer caches (the
planned profile from the policy, the node's labels and NodeHardware, counts over the node's pods)
and calls :func:`node_intent` once per node (alike nodes share its result).

Decisions taken where the spec leaves room (each one is pinned by a unit test):

* A pod counts for the guard and for the multi-GPU rule only in phase ``Running`` and without a
  deletion timestamp. ``Unknown`` is not counted: Kubernetes no longer sets it, and an unreachable
  node's pods are handled by the node lifecycle, not by keeping caps up.
* The performance class of a pod is the ``joulie.io/workload-class`` annotation being exactly
  ``performance`` (the spec's classification); node selectors and affinities only steer placement.
* ``capWattsPerGpu`` is ``pct / 100 * max`` clamped to the range and rounded to a whole watt, half
  up, staying inside the range: device power limits are set in whole watts (``nvidia-smi -pl``,
  amd-smi), and a whole number keeps the spec stable from one reconcile to the next. A range from
  NodeHardware without ``minWatts`` has only the API's 1 W floor below it.
* A GPU model key (GPU_MODEL_CAPS_JSON, GPU_GOVERNOR_MODEL_PRESETS_JSON) matches exactly first,
  then ignoring case and separators, so ``NVIDIA-H100-NVL`` (a label-safe product label) also
  matches the ``NVIDIA H100 NVL`` the agent reports. Candidates are tried in the order the spec
  names them: product label, agent's catalog model, agent's raw model.
* A product label key the node carries with an empty value counts as not carried.
* The CPU-cap exception for GPU nodes needs ``status.gpu.controlAvailable`` to be exactly false;
  an unknown (absent) value keeps the GPU-node rule, as a missing NodeHardware does.
* AgentReporting: a NodeHardware without a status, or with one that does not validate, counts as
  no NodeHardware: nothing in it can be enforced against. Its write time is the newest ``time``
  of the object's ``metadata.managedFields`` entries for the ``status`` subresource (the API
  server records one per writer; the spec defines no timestamp field of its own). A usable status
  without such an entry is reported as current: presence is all the evidence there is. Naive
  datetimes are UTC.

One module per job: :mod:`.config` (the settings as plain values), :mod:`.pods` (which pods
count), :mod:`.guard` (the downgrade guard and its events), :mod:`.caps`, :mod:`.governors`,
:mod:`.node` (one node's intent from all of them) and :mod:`.agent_reporting`. Their public names
are importable from this package.
"""

from __future__ import annotations

from joulie.core.intents.agent_reporting import (
    AGENT_STALE_AFTER,
    NO_NODE_HARDWARE,
    NODE_HARDWARE_CURRENT,
    NODE_HARDWARE_STALE,
    AgentReporting,
    agent_reporting,
)
from joulie.core.intents.caps import (
    cpu_power_cap,
    gpu_cap_range,
    gpu_cap_watts,
    gpu_power_cap,
    gpu_product_label,
    lookup_model,
)
from joulie.core.intents.config import (
    NO_PRESET,
    CapRange,
    CpuPresetChoice,
    GpuModelGovernor,
    GpuPresetChoice,
    IntentConfig,
)
from joulie.core.intents.governors import cpu_governor, gpu_governor
from joulie.core.intents.guard import (
    TRANSITION_APPLIED,
    TRANSITION_DEFERRED,
    GuardDecision,
    downgrade_guard,
    transition_event,
)
from joulie.core.intents.node import UNNAMED, NodeIntent, named, node_intent, spec_wire
from joulie.core.intents.pods import (
    MULTI_GPU_POD_MIN_GPUS,
    is_active_performance_pod,
    is_running_pod,
    max_running_pod_gpus,
    uses_multi_gpu,
)

__all__ = [
    "AGENT_STALE_AFTER",
    "MULTI_GPU_POD_MIN_GPUS",
    "NODE_HARDWARE_CURRENT",
    "NODE_HARDWARE_STALE",
    "NO_NODE_HARDWARE",
    "NO_PRESET",
    "TRANSITION_APPLIED",
    "TRANSITION_DEFERRED",
    "UNNAMED",
    "AgentReporting",
    "CapRange",
    "CpuPresetChoice",
    "GpuModelGovernor",
    "GpuPresetChoice",
    "GuardDecision",
    "IntentConfig",
    "NodeIntent",
    "agent_reporting",
    "cpu_governor",
    "cpu_power_cap",
    "downgrade_guard",
    "gpu_cap_range",
    "gpu_cap_watts",
    "gpu_governor",
    "gpu_power_cap",
    "gpu_product_label",
    "is_active_performance_pod",
    "is_running_pod",
    "lookup_model",
    "max_running_pod_gpus",
    "named",
    "node_intent",
    "spec_wire",
    "transition_event",
    "uses_multi_gpu",
]
