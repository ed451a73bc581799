"""Environment variables of the controller-manager role."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    model_validator,
)

from joulie.api.base import Percent
from joulie.api.enums import (
    RESERVED_POWER_SOURCES,
    CpuGovernorPreset,
    GovernorControl,
    GpuGovernorPreset,
    NodePowerSource,
)
from joulie.api.keys import DEFAULT_GPU_PRODUCT_LABEL_KEYS, MANAGED_LABEL, RESERVED_LABEL
from joulie.core.policies import PARAMETERS, Parameter, PolicyType, parameter_problems
from joulie.manager.lifecycle.settings import LifecycleSettings
from joulie.settings import (
    EMPTY_IS_INVALID,
    EMPTY_IS_VALUE,
    JSON,
    WARN_ON_INVALID,
    Accepts,
    CommaList,
    Duration,
    LabelSelectorText,
    Problem,
    Url,
    one_of,
)

Fraction01 = Annotated[float, Field(ge=0, le=1)]


class GpuModelCaps(BaseModel):
    """Power-limit range of one GPU model, used when neither NodeHardware nor the catalog has it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    min_cap_watts: Annotated[float, Field(ge=1, alias="minCapWatts")] = 1.0
    max_cap_watts: Annotated[float, Field(ge=1, alias="maxCapWatts")]

    @model_validator(mode="after")
    def _ordered(self) -> GpuModelCaps:
        if self.min_cap_watts > self.max_cap_watts:
            raise ValueError("minCapWatts is above maxCapWatts")
        return self


def _not_sustained(value: str) -> str:
    if value == GpuGovernorPreset.SUSTAINED:
        raise ValueError(
            "sustained is selected per GPU model only, through GPU_GOVERNOR_MODEL_PRESETS_JSON"
        )
    return value


_GPU_PRESETS = tuple(p.value for p in GpuGovernorPreset)
_CPU_PRESETS = tuple(p.value for p in CpuGovernorPreset)

GpuPresetOrNone = Annotated[str, one_of((*_GPU_PRESETS, ""), "GPU governor preset")]
"""A GPU preset name, or "" for none."""
CpuPresetOrNone = Annotated[str, one_of((*_CPU_PRESETS, ""), "CPU governor preset")]
"""A CPU preset name, or "" for none."""


class GpuGovernorModelPreset(BaseModel):
    """GPU governor presets for one GPU model (an entry of GPU_GOVERNOR_MODEL_PRESETS_JSON)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    performance: GpuPresetOrNone | None = None
    """Preset while the node runs (or drains) at performance; "" writes none."""
    eco: GpuPresetOrNone | None = None
    """Preset while the node runs at eco; "" writes none."""
    compute_clock_ceiling_pct_of_max: Percent | None = Field(
        default=None, alias="computeClockCeilingPctOfMax"
    )
    """Clock ceiling for the efficient preset, in percent of the maximum clock."""


_PRESETS_VARIABLE = "GPU_GOVERNOR_MODEL_PRESETS_JSON"
_ENTRY_FIELDS = {
    key: name
    for name, info in GpuGovernorModelPreset.model_fields.items()
    for key in {name, info.alias or name}
}
"""The keys a model entry accepts (wire aliases and field names) and the field each sets."""
_ENTRY_KEYS = ", ".join(
    info.alias or name for name, info in GpuGovernorModelPreset.model_fields.items()
)
_ENTRY_ACCEPTS = {
    "performance": ", ".join(_GPU_PRESETS) + ', or "" for none',
    "eco": ", ".join(_GPU_PRESETS) + ', or "" for none',
    "compute_clock_ceiling_pct_of_max": "a number > 0 and <= 100",
}


def model_preset_entry(
    model: str, entry: object
) -> tuple[GpuGovernorModelPreset | None, list[str]]:
    """One entry of GPU_GOVERNOR_MODEL_PRESETS_JSON: the usable fields, and a warning for each
    field that cannot be used (naming the model, the field, the value and what is accepted).
    None when nothing in the entry is usable."""
    if not isinstance(entry, dict):
        return None, [
            f"{_PRESETS_VARIABLE} entry {model!r} ignored: {json.dumps(entry)} is not a JSON "
            f"object (accepted: an object with the fields {_ENTRY_KEYS})"
        ]
    kept: dict[str, Any] = {}
    warnings: list[str] = []
    for key, value in entry.items():
        found = json.dumps(value)
        name = _ENTRY_FIELDS.get(key)
        if name is None:
            warnings.append(
                f"{_PRESETS_VARIABLE} entry {model!r} field {key} = {found} ignored: not a field "
                f"of a model entry (accepted fields: {_ENTRY_KEYS})"
            )
            continue
        try:
            GpuGovernorModelPreset.model_validate({key: value})
        except ValidationError as exc:
            reason = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
            warnings.append(
                f"{_PRESETS_VARIABLE} entry {model!r} field {key} = {found} ignored: {reason} "
                f"(accepted: {_ENTRY_ACCEPTS[name]})"
            )
            continue
        kept[key] = value
    if not kept:
        return None, warnings
    return GpuGovernorModelPreset.model_validate(kept), warnings


class _NodesAndPolicy(LifecycleSettings):
    """The manager's variables up to the choice of policy (the policies' own follow)."""

    # -- which nodes --------------------------------------------------------------------------
    node_selector: LabelSelectorText = f"{MANAGED_LABEL}=true"
    """Label selector of the nodes Joulie manages."""
    reserved_label_key: str = RESERVED_LABEL
    """Nodes carrying this label with value "true" are left out of the plan."""

    # -- policy -------------------------------------------------------------------------------
    reconcile_interval: Annotated[Duration, Field(ge=1)] = 60.0
    """Time between full reconciles (events trigger extra ones); also the rule_swap_v1 phase.
    At least a second: the manager reads the whole cluster each time."""
    policy_type: PolicyType = PolicyType.STATIC_PARTITION
    """The policy that decides how many nodes stay in performance (joulie.core.policies lists
    them; rule_swap_v1 is for debugging). Each policy's own variables follow."""


def _policy_field(parameter: Parameter) -> tuple[Any, Any]:
    bounds = Field(ge=parameter.minimum, le=parameter.maximum, description=parameter.doc)
    return Annotated[parameter.type, bounds], parameter.default


# Every registered policy's parameters are variables of the manager (STATIC_HP_FRAC, ...),
# declared by the policy itself (joulie.core.policies), so a new policy adds none here.
if TYPE_CHECKING:
    _PolicyParameters = _NodesAndPolicy
else:
    _PolicyParameters = create_model(
        "_PolicyParameters",
        __base__=_NodesAndPolicy,
        **{parameter.name: _policy_field(parameter) for parameter in PARAMETERS},
    )


class ManagerSettings(_PolicyParameters):
    role = "manager"

    # -- caps ---------------------------------------------------------------------------------
    performance_cap_watts: Annotated[float, Field(ge=1)] = 5000.0
    """Absolute CPU package cap written for the CPU of every GPU node (effectively uncapped)."""
    cpu_performance_cap_pct_of_max: Percent = 100.0
    """CPU cap of CPU-only nodes in performance, in percent of maximum package power."""
    cpu_eco_cap_pct_of_max: Percent = 60.0
    """CPU cap of CPU-only nodes in eco, in percent of maximum package power."""
    gpu_performance_cap_pct_of_max: Percent = 100.0
    """Per-GPU cap in performance, in percent of the device's maximum power limit."""
    gpu_eco_cap_pct_of_max: Percent = 60.0
    """Per-GPU cap in eco, in percent of the device's maximum power limit."""
    cpu_eco_cap_on_uncappable_gpu_nodes: bool = False
    """Give the CPU of a GPU node whose GPUs have no power control the CPU caps of its profile."""
    gpu_model_caps_json: Annotated[
        dict[str, GpuModelCaps],
        JSON,
        Accepts('a JSON object {"<product>": {"minCapWatts": 200, "maxCapWatts": 400}}'),
    ] = Field(default_factory=dict)
    """Per-GPU power-limit ranges by GPU product label, the last fallback for absolute caps."""
    gpu_product_label_keys: CommaList = Field(
        default_factory=lambda: list(DEFAULT_GPU_PRODUCT_LABEL_KEYS)
    )
    """Node labels searched, in order, for a node's GPU product."""

    # -- governors ----------------------------------------------------------------------------
    governor_control: Annotated[GovernorControl, WARN_ON_INVALID, EMPTY_IS_INVALID] = (
        GovernorControl.OFF
    )
    """Which governor presets are written: off, cpu, gpu or all."""
    cpu_performance_governor_preset: Annotated[
        CpuPresetOrNone,
        WARN_ON_INVALID,
        EMPTY_IS_VALUE,
        Accepts("performance, balanced, efficiency, or empty for none"),
    ] = CpuGovernorPreset.PERFORMANCE.value
    """CPU preset of performance and draining nodes."""
    cpu_eco_governor_preset: Annotated[
        CpuPresetOrNone,
        WARN_ON_INVALID,
        EMPTY_IS_VALUE,
        Accepts("performance, balanced, efficiency, or empty for none"),
    ] = CpuGovernorPreset.EFFICIENCY.value
    """CPU preset of eco nodes (provisional default)."""
    gpu_performance_governor_preset: Annotated[
        GpuPresetOrNone,
        AfterValidator(_not_sustained),
        WARN_ON_INVALID,
        EMPTY_IS_VALUE,
        Accepts("auto, efficient, low, peak, or empty for none"),
    ] = GpuGovernorPreset.AUTO.value
    """GPU preset of performance and draining nodes."""
    gpu_eco_governor_preset: Annotated[
        GpuPresetOrNone,
        AfterValidator(_not_sustained),
        WARN_ON_INVALID,
        EMPTY_IS_VALUE,
        Accepts("auto, efficient, low, peak, or empty for none"),
    ] = GpuGovernorPreset.EFFICIENT.value
    """GPU preset of eco nodes (provisional default)."""
    gpu_eco_clock_ceiling_pct_of_max: Annotated[Percent, WARN_ON_INVALID, EMPTY_IS_INVALID] = 80.0
    """Graphics clock ceiling of the efficient preset, in percent of the maximum clock
    (provisional default)."""
    gpu_governor_model_presets_json: Annotated[
        dict[str, Any],
        JSON,
        WARN_ON_INVALID,
        Accepts(
            'a JSON object {"<model>": {"performance": "<preset>", "eco": "<preset>", '
            '"computeClockCeilingPctOfMax": 80}}'
        ),
    ] = Field(default_factory=dict)
    """GPU presets and clock ceiling per GPU model, matched against the product label and the
    model the agent reports; the only way to select sustained. A field that cannot be used is
    ignored with a warning, and the entry's other fields stay."""
    gpu_governor_sustained_only_multi_gpu: bool = False
    """Write the sustained preset only while a running pod on the node uses 2 or more GPUs."""

    # -- power sources ------------------------------------------------------------------------
    node_power_source: Annotated[
        NodePowerSource,
        Accepts("static, http or prometheus (kepler and utilization are reserved and refused)"),
    ] = NodePowerSource.STATIC
    """Where measured node power comes from: static (0 W everywhere), http or prometheus.
    kepler and utilization are reserved."""
    node_power_http_endpoint: Annotated[str, Accepts("an http(s) URL containing {node}")] = ""
    """NODE_POWER_SOURCE=http: telemetry URL, {node} replaced by the node name."""
    node_power_prometheus_address: Annotated[str, Accepts("an http(s) URL")] = ""
    """NODE_POWER_SOURCE=prometheus: base URL of the Prometheus server."""
    node_power_prometheus_query: str = ""
    """NODE_POWER_SOURCE=prometheus: one PromQL query returning watts, one series per node."""
    node_power_prometheus_node_label: Annotated[str, Field(min_length=1)] = "node"
    """NODE_POWER_SOURCE=prometheus: the series label that holds the node name."""
    node_power_timeout: Duration = 5.0
    """Time limit of one request to the power source (and to Prometheus for facility metrics)."""
    node_power_http_concurrency: Annotated[int, Field(ge=1, le=1024)] = 32
    """NODE_POWER_SOURCE=http: telemetry requests in flight at once."""
    node_power_trend_window: Duration = 300.0
    """Readings within this span of the newest give a node's power trend (W/min)."""

    # -- energy accounting --------------------------------------------------------------------
    energy_accounts_max: Annotated[int, Field(ge=1, le=2000)] = 500
    """Energy accounts (namespace and workload class) kept as metric series (used, saved and
    lost) and in the joulie-energy-accounts ConfigMap (at most 2,000: three fields of them fit
    the ConfigMap's 1 MiB); past it, the energy of a namespace not yet accounted is booked to
    namespace "other"."""
    energy_podgroups_max: Annotated[int, Field(ge=0, le=500)] = 200
    """PodGroups whose energy is kept (used, saved, lost per namespace and PodGroup, as metric
    series and in the joulie-energy-accounts ConfigMap): the ones booked most recently; past it
    the group booked longest ago is dropped with its series. 0 keeps none."""

    # -- facility -----------------------------------------------------------------------------
    enable_facility_metrics: bool = False
    """Poll facility metrics (ambient temperature, IT power) from Prometheus for the twin."""
    facility_prometheus_address: Url = "http://prometheus-operated.monitoring:9090"
    """Prometheus base URL for facility metrics."""
    facility_poll_interval: Duration = 30.0
    """Time between facility metric polls."""
    facility_ambient_temp_metric: str = "datacenter_ambient_temperature_celsius"
    """PromQL for the ambient temperature in degrees Celsius."""
    facility_it_power_metric: str = "datacenter_total_it_power_watts"
    """PromQL for the total IT power in watts."""
    facility_rack_power_metric: str = "datacenter_rack_power_watts"
    """PromQL for the power of each rack in watts, one series per rack; empty disables rack power
    (PSU stress then uses the IT power)."""
    facility_rack_label: Annotated[str, Field(min_length=1)] = "rack"
    """The series label of FACILITY_RACK_POWER_METRIC that names the rack, matched against the
    nodes' joulie.io/rack label."""

    def policy_params(self) -> dict[str, int | float]:
        """Every registered policy's parameter, by name, as set."""
        values: dict[str, int | float] = {p.name: getattr(self, p.name) for p in PARAMETERS}
        return values

    def check(self) -> list[Problem]:
        problems = self.lifecycle_problems()
        problems.extend(
            self.problem(p.parameter, p.detail, p.accepted)
            for p in parameter_problems(self.policy_params())
        )
        if self.node_power_source in RESERVED_POWER_SOURCES:
            problems.append(
                self.problem(
                    "node_power_source",
                    "is a reserved source that nothing produces yet",
                    "static, http or prometheus",
                )
            )
        if self.node_power_source is NodePowerSource.HTTP:
            problems.extend(
                self.url_problems(
                    "node_power_http_endpoint", "NODE_POWER_SOURCE=http", template=True
                )
            )
        if self.node_power_source is NodePowerSource.PROMETHEUS:
            problems.extend(
                self.url_problems(
                    "node_power_prometheus_address", "NODE_POWER_SOURCE=prometheus", template=False
                )
            )
            if not self.node_power_prometheus_query:
                problems.append(
                    self.problem(
                        "node_power_prometheus_query",
                        "is required with NODE_POWER_SOURCE=prometheus",
                        "a PromQL query returning one series per node",
                    )
                )
        if not self.gpu_product_label_keys:
            problems.append(
                self.problem(
                    "gpu_product_label_keys",
                    "names no label key",
                    "a comma-separated list of label keys",
                )
            )
        return problems

    def advise(self) -> list[str]:
        return [warning for _, warning in self._model_presets()[1]]

    def _model_presets(
        self,
    ) -> tuple[dict[str, GpuGovernorModelPreset], list[tuple[str, str]]]:
        valid: dict[str, GpuGovernorModelPreset] = {}
        warnings: list[tuple[str, str]] = []
        for model, entry in self.gpu_governor_model_presets_json.items():
            preset, problems = model_preset_entry(model, entry)
            if preset is not None:
                valid[model] = preset
            warnings.extend((model, problem) for problem in problems)
        return valid, warnings

    def gpu_governor_model_presets(self) -> dict[str, GpuGovernorModelPreset]:
        """The usable fields of each GPU_GOVERNOR_MODEL_PRESETS_JSON entry, by model (every field
        that cannot be used was warned of; an entry with none left is absent)."""
        return self._model_presets()[0]
