"""What the controller manager asks of one node: NodeTwin.spec (caps, governor presets) and the
schedulable class, after the downgrade guard; plus the AgentReporting condition.

Everything here is pure. The manager shell gathers the inputs from its informer caches (the
planned profile from the policy, the node's labels and NodeHardware, counts over the node's pods)
and calls :func:`node_twin_spec` once per node.

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
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final, Literal, NamedTuple, TypeVar

from joulie.api.enums import (
    ConditionStatus,
    CpuGovernorPreset,
    GovernorControl,
    GpuCapScope,
    GpuGovernorPreset,
    Profile,
    SchedulableClass,
    WorkloadClass,
)
from joulie.api.keys import DEFAULT_GPU_PRODUCT_LABEL_KEYS
from joulie.api.nodehardware import NodeHardwareStatus, PresetSupport
from joulie.api.nodetwin import (
    CpuGovernorSpec,
    CpuSpec,
    GpuGovernorSpec,
    GpuPowerCap,
    GpuSpec,
    NodeTwinSpec,
    PolicySpec,
)

__all__ = [
    "AGENT_STALE_AFTER",
    "NODE_HARDWARE_CURRENT",
    "NODE_HARDWARE_STALE",
    "NO_NODE_HARDWARE",
    "NO_PRESET",
    "TRANSITION_APPLIED",
    "TRANSITION_DEFERRED",
    "AgentReporting",
    "CapRange",
    "GpuModelGovernor",
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
    "node_twin_spec",
    "transition_event",
]

NO_PRESET: Final = ""
"""A configured preset of "" writes no preset (the agent keeps or restores the node's own)."""

TRANSITION_DEFERRED: Final = "deferred"
TRANSITION_APPLIED: Final = "applied"

NODE_HARDWARE_CURRENT: Final = "NodeHardwareCurrent"
NO_NODE_HARDWARE: Final = "NoNodeHardware"
NODE_HARDWARE_STALE: Final = "NodeHardwareStale"
AGENT_STALE_AFTER: Final = timedelta(minutes=15)
"""A NodeHardware last written longer ago than this no longer counts as a reporting agent."""

_RUNNING: Final = "Running"
_MIN_WATTS: Final = 1.0  # the API's floor for any watts field

_V = TypeVar("_V")

CapRange = tuple[float, float]
"""A per-GPU power-limit range ``(min_watts, max_watts)``."""

CpuPresetChoice = CpuGovernorPreset | Literal[""]
GpuPresetChoice = GpuGovernorPreset | Literal[""]


# --- configuration ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuModelGovernor:
    """One entry of GPU_GOVERNOR_MODEL_PRESETS_JSON (``GpuGovernorModelPreset`` in settings).

    For each preset field ``None`` means the entry does not set it (the configured default
    applies) and ``""`` means the model gets no GPU preset at that profile.
    """

    performance: GpuPresetChoice | None = None
    eco: GpuPresetChoice | None = None
    compute_clock_ceiling_pct_of_max: float | None = None

    def __post_init__(self) -> None:
        for name in ("performance", "eco"):
            _check_choice(getattr(self, name), GpuGovernorPreset, name, allow_none=True)
        _check_pct(self.compute_clock_ceiling_pct_of_max, "compute_clock_ceiling_pct_of_max")


@dataclass(frozen=True)
class IntentConfig:
    """The controller-manager settings the intents depend on; defaults equal the settings'.

    Built from ``ManagerSettings`` field by field (same names unless noted):

    * ``performance_cap_watts`` <- PERFORMANCE_CAP_WATTS
    * ``cpu_performance_cap_pct_of_max`` / ``cpu_eco_cap_pct_of_max``,
      ``gpu_performance_cap_pct_of_max`` / ``gpu_eco_cap_pct_of_max``,
      ``cpu_eco_cap_on_uncappable_gpu_nodes`` <- the variables of the same names
    * ``gpu_model_caps`` <- ``gpu_model_caps_json``: ``{key: (min_cap_watts, max_cap_watts)}``
    * ``gpu_product_label_keys`` <- ``gpu_product_label_keys`` (as a tuple)
    * ``governor_control`` <- GOVERNOR_CONTROL
    * ``{cpu,gpu}_{performance,eco}_governor_preset`` <- the variables of the same names, as the
      enum member, or ``""`` for an empty variable (no preset)
    * ``gpu_clock_ceiling_pct_of_max`` <- ``gpu_eco_clock_ceiling_pct_of_max``
    * ``gpu_model_governors`` <- ``gpu_governor_model_presets()`` (the usable fields of each
      entry), each as a :class:`GpuModelGovernor`
    * ``gpu_governor_sustained_only_multi_gpu`` <- the variable of the same name
    """

    performance_cap_watts: float = 5000.0
    cpu_performance_cap_pct_of_max: float = 100.0
    cpu_eco_cap_pct_of_max: float = 60.0
    gpu_performance_cap_pct_of_max: float = 100.0
    gpu_eco_cap_pct_of_max: float = 60.0
    cpu_eco_cap_on_uncappable_gpu_nodes: bool = False
    gpu_model_caps: Mapping[str, CapRange] = field(default_factory=dict)
    gpu_product_label_keys: tuple[str, ...] = DEFAULT_GPU_PRODUCT_LABEL_KEYS
    governor_control: GovernorControl = GovernorControl.OFF
    cpu_performance_governor_preset: CpuPresetChoice = CpuGovernorPreset.PERFORMANCE
    cpu_eco_governor_preset: CpuPresetChoice = CpuGovernorPreset.EFFICIENCY
    gpu_performance_governor_preset: GpuPresetChoice = GpuGovernorPreset.AUTO
    gpu_eco_governor_preset: GpuPresetChoice = GpuGovernorPreset.EFFICIENT
    gpu_clock_ceiling_pct_of_max: float = 80.0
    gpu_model_governors: Mapping[str, GpuModelGovernor] = field(default_factory=dict)
    gpu_governor_sustained_only_multi_gpu: bool = False

    def __post_init__(self) -> None:
        if not self.performance_cap_watts >= _MIN_WATTS:
            raise ValueError(
                f"performance_cap_watts must be >= 1, got {self.performance_cap_watts}"
            )
        for name in (
            "cpu_performance_cap_pct_of_max",
            "cpu_eco_cap_pct_of_max",
            "gpu_performance_cap_pct_of_max",
            "gpu_eco_cap_pct_of_max",
            "gpu_clock_ceiling_pct_of_max",
        ):
            _check_pct(getattr(self, name), name)
        for key, (low, high) in self.gpu_model_caps.items():
            if not _MIN_WATTS <= low <= high:
                raise ValueError(
                    f"gpu_model_caps[{key!r}]: need 1 <= min <= max, got {low}..{high}"
                )
        _check_choice(self.governor_control, GovernorControl, "governor_control", allow_none=False)
        for name in ("cpu_performance_governor_preset", "cpu_eco_governor_preset"):
            _check_choice(getattr(self, name), CpuGovernorPreset, name, allow_none=False)
        for name in ("gpu_performance_governor_preset", "gpu_eco_governor_preset"):
            _check_choice(getattr(self, name), GpuGovernorPreset, name, allow_none=False)
            # The spec: no default selects sustained; only a model entry opts a model in.
            if getattr(self, name) == GpuGovernorPreset.SUSTAINED:
                raise ValueError(f"{name}: sustained is selected per GPU model only")


def _check_pct(value: float | None, name: str) -> None:
    if value is not None and not 0 < value <= 100:
        raise ValueError(f"{name} must be in (0, 100], got {value}")


def _check_choice(
    value: object,
    enum: type[CpuGovernorPreset | GpuGovernorPreset | GovernorControl],
    name: str,
    *,
    allow_none: bool,
) -> None:
    if value is None and allow_none:
        return
    if enum is not GovernorControl and value == NO_PRESET:
        return
    if value not in {member.value for member in enum}:
        raise ValueError(f"{name}: {value!r} is not one of {[m.value for m in enum]}")


# --- pods ---------------------------------------------------------------------------------------


def is_running_pod(phase: str | None, deleting: bool) -> bool:
    """A pod that runs and is not being deleted: pending, finished and terminating pods are not."""
    return phase == _RUNNING and not deleting


def is_active_performance_pod(
    phase: str | None, deleting: bool, workload_class: str | None
) -> bool:
    """Whether a pod holds its node at performance caps (the downgrade guard's count).

    ``workload_class`` is the value of the pod's ``joulie.io/workload-class`` annotation (None
    without one).
    """
    return is_running_pod(phase, deleting) and workload_class == WorkloadClass.PERFORMANCE


MULTI_GPU_POD_MIN_GPUS = 2
"""A pod with at least this many GPU units counts as a multi-GPU workload (the sustained rule)."""


def uses_multi_gpu(gpus: int) -> bool:
    """Whether a pod using ``gpus`` GPU units is a multi-GPU workload: the one place the rule
    lives, read by the intents and by the manager's triggers alike."""
    return gpus >= MULTI_GPU_POD_MIN_GPUS


def max_running_pod_gpus(pods: Iterable[tuple[str | None, bool, int]]) -> int:
    """The most GPU units any running, non-terminating pod on the node uses (0 without one).

    Each item is ``(phase, deleting, gpus)`` with ``gpus`` from :func:`joulie.api.gpu.pod_gpu_count`
    (every GPU resource kind: whole, MIG, partition, shared; requests else limits).
    """
    return max(
        (gpus for phase, deleting, gpus in pods if is_running_pod(phase, deleting)), default=0
    )


# --- downgrade guard ----------------------------------------------------------------------------


@dataclass(frozen=True)
class GuardDecision:
    profile: Profile
    """NodeTwin.spec.profile: always the planned profile."""
    schedulable_class: SchedulableClass
    """NodeTwin.status.schedulableClass."""
    control_profile: Profile
    """The profile whose caps and governor presets are written (performance while draining)."""

    @property
    def deferred(self) -> bool:
        """Whether the move to eco waits for performance pods to finish."""
        return self.schedulable_class is SchedulableClass.DRAINING


def downgrade_guard(planned: Profile, active_perf_pods: int) -> GuardDecision:
    """Apply the downgrade guard to one node's planned profile.

    ``active_perf_pods`` counts the node's pods for which :func:`is_active_performance_pod` holds.
    An eco node that runs one drains: its profile stays eco, but it keeps the performance caps and
    presets until those pods are gone, whether it is leaving performance or was in eco already.
    """
    planned = Profile(planned)  # a stray string fails here rather than reading as eco
    if active_perf_pods < 0:
        raise ValueError(f"active_perf_pods must be >= 0, got {active_perf_pods}")
    if planned == Profile.PERFORMANCE:
        return GuardDecision(Profile.PERFORMANCE, SchedulableClass.PERFORMANCE, Profile.PERFORMANCE)
    if active_perf_pods > 0:
        return GuardDecision(Profile.ECO, SchedulableClass.DRAINING, Profile.PERFORMANCE)
    return GuardDecision(Profile.ECO, SchedulableClass.ECO, Profile.ECO)


def transition_event(
    previous: SchedulableClass | None, current: SchedulableClass
) -> Literal["deferred", "applied"] | None:
    """The transition to record (metric and Event) when a node's class changes.

    ``previous`` is the class last written to NodeTwin.status (None for a node seen for the first
    time). Returns None when nothing changed, so a node that keeps draining is recorded once, not
    at every reconcile. Entering ``draining`` is ``deferred`` (also for a new node or an eco node
    that runs a performance pod); any other change is ``applied``, including ``draining -> eco``
    when the deferred move completes; a new node that is not draining records nothing.
    """
    if previous == current:
        return None
    if current == SchedulableClass.DRAINING:
        return TRANSITION_DEFERRED
    if previous is None:
        return None
    return TRANSITION_APPLIED


# --- caps ---------------------------------------------------------------------------------------


_FOLD = re.compile(r"[^0-9a-z]+")


def _fold(name: str) -> str:
    return _FOLD.sub(" ", name.casefold()).strip()


def lookup_model(candidates: Iterable[str | None], entries: Mapping[str, _V]) -> _V | None:
    """The entry for the first candidate name that matches a key: exactly, else ignoring case and
    separators (``NVIDIA-H100-NVL`` == ``nvidia h100 nvl`` == ``NVIDIA_H100_NVL``).

    Exact matches of any candidate win over folded ones; among keys folding alike, the smallest
    key wins, so the result never depends on the order of a JSON object.
    """
    names = [name for name in candidates if name]
    if not names or not entries:
        return None
    for name in names:
        if name in entries:
            return entries[name]
    folded: dict[str, str] = {}
    for key in sorted(entries):
        folded.setdefault(_fold(key), key)
    for name in names:
        match = folded.get(_fold(name))
        if match is not None:
            return entries[match]
    return None


def gpu_product_label(labels: Mapping[str, str], keys: Iterable[str]) -> str | None:
    """The value of the first of ``keys`` the node carries with a non-empty value."""
    for key in keys:
        value = labels.get(key)
        if value:
            return value
    return None


def _usable(low: float | None, high: float | None) -> CapRange | None:
    if high is None or high < _MIN_WATTS:
        return None
    low = _MIN_WATTS if low is None else max(low, _MIN_WATTS)
    return (low, high) if low <= high else None


def gpu_cap_range(
    hardware: NodeHardwareStatus | None,
    catalog_gpu_range: CapRange | None,
    product_label: str | None,
    model_caps: Mapping[str, CapRange],
) -> CapRange | None:
    """The per-GPU power-limit range to resolve watts against, from the first source that has one:
    NodeHardware ``status.gpu.capRangePerGpu``, the catalog entry of the recognised GPU model
    (``(min_w, max_w)``), GPU_MODEL_CAPS_JSON by product label. A range without a usable maximum
    or with its minimum above its maximum is skipped."""
    gpu = hardware.gpu if hardware is not None else None
    if gpu is not None and gpu.cap_range_per_gpu is not None:
        found = _usable(gpu.cap_range_per_gpu.min_watts, gpu.cap_range_per_gpu.max_watts)
        if found is not None:
            return found
    if catalog_gpu_range is not None:
        found = _usable(*catalog_gpu_range)
        if found is not None:
            return found
    entry = lookup_model([product_label], model_caps)
    return _usable(*entry) if entry is not None else None


def gpu_cap_watts(pct_of_max: float, cap_range: CapRange) -> float:
    """``pct_of_max`` of the range's maximum, clamped to the range, in whole watts (half up) that
    stay inside the range; a range narrower than a whole watt keeps the exact clamped value."""
    low, high = max(cap_range[0], _MIN_WATTS), cap_range[1]
    exact = min(max(pct_of_max / 100.0 * high, low), high)
    whole = float(math.floor(exact + 0.5))
    if whole < low:
        whole = float(math.ceil(low))
    if whole > high:
        whole = float(math.floor(high))
    return whole if low <= whole <= high else exact


def _cpu_pct(profile: Profile, config: IntentConfig) -> float:
    if profile == Profile.PERFORMANCE:
        return config.cpu_performance_cap_pct_of_max
    return config.cpu_eco_cap_pct_of_max


def _gpu_pct(profile: Profile, config: IntentConfig) -> float:
    if profile == Profile.PERFORMANCE:
        return config.gpu_performance_cap_pct_of_max
    return config.gpu_eco_cap_pct_of_max


def cpu_power_cap(
    profile: Profile, gpu_node: bool, hardware: NodeHardwareStatus | None, config: IntentConfig
) -> CpuSpec:
    """The CPU cap of a node running at ``profile`` (the guard's control profile).

    A CPU-only node gets the percentage of its profile. A GPU node's CPU gets PERFORMANCE_CAP_WATTS
    whatever the profile, except with CPU_ECO_CAP_ON_UNCAPPABLE_GPU_NODES when its NodeHardware
    says the GPUs have no power control: then it is capped like a CPU-only node.
    """
    if gpu_node and not (config.cpu_eco_cap_on_uncappable_gpu_nodes and _gpus_uncappable(hardware)):
        return CpuSpec(package_power_cap_watts=config.performance_cap_watts)
    return CpuSpec(package_power_cap_pct_of_max=_cpu_pct(profile, config))


def _gpus_uncappable(hardware: NodeHardwareStatus | None) -> bool:
    return (
        hardware is not None
        and hardware.gpu is not None
        and hardware.gpu.control_available is False
    )


def gpu_power_cap(
    profile: Profile,
    hardware: NodeHardwareStatus | None,
    product_label: str | None,
    catalog_gpu_range: CapRange | None,
    config: IntentConfig,
) -> GpuPowerCap:
    """The per-GPU cap of a GPU node running at ``profile``: the percentage always, and the watts
    it resolves to when a power-limit range is known (:func:`gpu_cap_range`)."""
    pct = _gpu_pct(profile, config)
    cap_range = gpu_cap_range(hardware, catalog_gpu_range, product_label, config.gpu_model_caps)
    return GpuPowerCap(
        scope=GpuCapScope.PER_GPU,
        cap_pct_of_max=pct,
        cap_watts_per_gpu=gpu_cap_watts(pct, cap_range) if cap_range is not None else None,
    )


# --- governors ----------------------------------------------------------------------------------


def _listed(presets: list[PresetSupport] | None) -> frozenset[str]:
    return frozenset(p.preset for p in presets or ())


def cpu_governor(
    profile: Profile, hardware: NodeHardwareStatus | None, config: IntentConfig
) -> CpuGovernorSpec | None:
    """The CPU preset of a node running at ``profile``, or None.

    Written only with GOVERNOR_CONTROL cpu or all, and only when the node's agent lists the preset
    in ``status.cpu.governor.presets``; no other preset stands in for one it does not list.
    """
    if config.governor_control not in (GovernorControl.CPU, GovernorControl.ALL):
        return None
    wanted = (
        config.cpu_performance_governor_preset
        if profile == Profile.PERFORMANCE
        else config.cpu_eco_governor_preset
    )
    if wanted == NO_PRESET:
        return None
    cpu = hardware.cpu if hardware is not None else None
    if cpu is None or cpu.governor is None or wanted not in _listed(cpu.governor.presets):
        return None
    return CpuGovernorSpec(preset=CpuGovernorPreset(wanted))


def _gpu_model_names(
    hardware: NodeHardwareStatus | None, product_label: str | None
) -> list[str | None]:
    gpu = hardware.gpu if hardware is not None else None
    if gpu is None:
        return [product_label]
    return [product_label, gpu.model, gpu.raw_model]


def gpu_governor(
    profile: Profile,
    hardware: NodeHardwareStatus | None,
    product_label: str | None,
    running_pod_max_gpus: int,
    config: IntentConfig,
) -> GpuGovernorSpec | None:
    """The GPU preset of a GPU node running at ``profile``, or None.

    The preset is the model entry's (GPU_GOVERNOR_MODEL_PRESETS_JSON, matched against the product
    label and the model the agent reports) where it sets one, else the configured default; ``""``
    writes none. ``efficient`` carries the clock ceiling (the entry's, else the configured one).
    ``sustained`` under GPU_GOVERNOR_SUSTAINED_ONLY_MULTI_GPU needs a running pod with 2 or more
    GPUs. The preset is written only with GOVERNOR_CONTROL gpu or all and when the agent lists it,
    or when the node's gpu.governor block is a discovery gap (a baseline, no mechanism, no
    presets): dropping the preset then would make the agent restore and re-apply it.
    """
    if config.governor_control not in (GovernorControl.GPU, GovernorControl.ALL):
        return None
    entry = lookup_model(_gpu_model_names(hardware, product_label), config.gpu_model_governors)
    if profile == Profile.PERFORMANCE:
        chosen = entry.performance if entry is not None else None
        wanted = config.gpu_performance_governor_preset if chosen is None else chosen
    else:
        chosen = entry.eco if entry is not None else None
        wanted = config.gpu_eco_governor_preset if chosen is None else chosen
    if wanted == NO_PRESET:
        return None
    if (
        wanted == GpuGovernorPreset.SUSTAINED
        and config.gpu_governor_sustained_only_multi_gpu
        and not uses_multi_gpu(running_pod_max_gpus)
    ):
        return None
    gpu = hardware.gpu if hardware is not None else None
    governor = gpu.governor if gpu is not None else None
    if governor is None:
        return None
    listed = _listed(governor.presets)
    discovery_gap = bool(governor.baseline) and not governor.mechanism and not listed
    if not discovery_gap and wanted not in listed:
        return None
    preset = GpuGovernorPreset(wanted)
    ceiling = None
    if preset is GpuGovernorPreset.EFFICIENT:
        ceiling = (
            entry.compute_clock_ceiling_pct_of_max
            if entry is not None and entry.compute_clock_ceiling_pct_of_max is not None
            else config.gpu_clock_ceiling_pct_of_max
        )
    return GpuGovernorSpec(preset=preset, compute_clock_ceiling_pct_of_max=ceiling)


# --- one node -----------------------------------------------------------------------------------


class NodeIntent(NamedTuple):
    spec: NodeTwinSpec
    """The NodeTwin.spec to write."""
    schedulable_class: SchedulableClass
    """The NodeTwin.status.schedulableClass to write."""

    @property
    def deferred(self) -> bool:
        """Whether the node's move to eco is deferred (it drains)."""
        return self.schedulable_class is SchedulableClass.DRAINING


def node_twin_spec(
    node_name: str,
    planned_profile: Profile,
    *,
    active_perf_pods: int,
    gpu_count: int,
    hardware: NodeHardwareStatus | None,
    labels: Mapping[str, str],
    catalog_gpu_range: CapRange | None,
    running_pod_max_gpus: int,
    policy_name: str | None,
    config: IntentConfig,
) -> NodeIntent:
    """NodeTwin.spec and the schedulable class of one node, after the downgrade guard.

    ``gpu_count`` is the node's GPU count from the manager's hardware view (NodeHardware, else
    labels or allocatable GPUs); a node with GPUs gets the GPU rules. ``hardware`` is the node's
    NodeHardware status (None without one), ``labels`` its labels, ``catalog_gpu_range`` the
    ``(min_w, max_w)`` of its recognised GPU model in the catalog, ``running_pod_max_gpus`` the
    value of :func:`max_running_pod_gpus` over its pods.
    """
    guard = downgrade_guard(planned_profile, active_perf_pods)
    profile = guard.control_profile
    gpu_node = gpu_count > 0
    product_label = gpu_product_label(labels, config.gpu_product_label_keys) if gpu_node else None

    cpu = cpu_power_cap(profile, gpu_node, hardware, config)
    cpu_gov = cpu_governor(profile, hardware, config)
    if cpu_gov is not None:
        cpu = cpu.model_copy(update={"governor": cpu_gov})

    gpu = None
    if gpu_node:
        gpu = GpuSpec(
            power_cap=gpu_power_cap(profile, hardware, product_label, catalog_gpu_range, config),
            governor=gpu_governor(profile, hardware, product_label, running_pod_max_gpus, config),
        )

    spec = NodeTwinSpec(
        node_name=node_name,
        profile=guard.profile,
        cpu=cpu,
        gpu=gpu,
        policy=PolicySpec(name=policy_name) if policy_name else None,
    )
    return NodeIntent(spec, guard.schedulable_class)


# --- AgentReporting condition -------------------------------------------------------------------


class AgentReporting(NamedTuple):
    status: ConditionStatus
    reason: str
    message: str


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def agent_reporting(
    hardware_present: bool,
    status_usable: bool,
    last_agent_write: datetime | None,
    now: datetime,
) -> AgentReporting:
    """The AgentReporting condition of a node's NodeTwin.

    ``hardware_present``: the node's NodeHardware exists; ``status_usable``: it has a status that
    validates; ``last_agent_write``: the newest ``time`` of its ``metadata.managedFields`` entries
    for the ``status`` subresource (None when there is none).

    True (NodeHardwareCurrent) while a usable NodeHardware status was written at most 15 minutes
    ago; False with NoNodeHardware when there is no NodeHardware or no usable status in it (the
    message says which), and with NodeHardwareStale when the last status write is older. False
    means the caps in the spec are not being enforced.
    """
    if not hardware_present:
        return AgentReporting(
            ConditionStatus.FALSE,
            NO_NODE_HARDWARE,
            "No agent has published NodeHardware for this node; its caps are not enforced.",
        )
    if not status_usable:
        return AgentReporting(
            ConditionStatus.FALSE,
            NO_NODE_HARDWARE,
            "The node's NodeHardware has no usable status (missing or invalid); "
            "its caps are not enforced.",
        )
    if last_agent_write is not None:
        age = _utc(now) - _utc(last_agent_write)
        if age > AGENT_STALE_AFTER:
            # The message names the time of the last write, not its age: an age would change
            # the condition, and so cost a write, every reconcile for as long as the agent is away.
            last = _utc(last_agent_write).strftime("%Y-%m-%dT%H:%M:%SZ")
            return AgentReporting(
                ConditionStatus.FALSE,
                NODE_HARDWARE_STALE,
                f"The agent last wrote NodeHardware status at {last}, over 15 minutes ago; "
                "its caps may not be enforced.",
            )
    return AgentReporting(
        ConditionStatus.TRUE, NODE_HARDWARE_CURRENT, "The node's agent publishes NodeHardware."
    )
