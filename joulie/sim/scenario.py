"""From a run spec (plain values) to a scenario the engine runs: the inventory, the workload, and
the manager's settings of the baseline.

The policy and intent settings start from the controller manager's defaults (the same values
its environment variables default to; a unit test holds them equal) and take the spec's
``params`` on top, so a simulated B or C is the manager an operator would deploy as is.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from joulie.api.enums import GovernorControl
from joulie.api.inventory import Inventory, InventoryError, load_inventory, parse_inventory
from joulie.core.intents import IntentConfig
from joulie.core.lifecycle import LifecycleConfig
from joulie.core.lifecycle_limits import Limits
from joulie.core.policies import PARAMETERS, PolicyInputs, PolicyType, values_of
from joulie.hardware.catalog import Catalog
from joulie.sim.engine import Scenario, simulate
from joulie.sim.fleet import group_throughputs
from joulie.sim.generator import GeneratorOptions, generate
from joulie.sim.lifecycle import LifecycleSettings
from joulie.sim.results import RunResult
from joulie.sim.run_spec import RunSpec
from joulie.sim.trace import Workload, read_trace

__all__ = [
    "DEFAULT_POLICY",
    "EMBEDDED_INVENTORIES",
    "PARAMS",
    "load_named_inventory",
    "run",
    "scenario_of",
]

DEFAULT_POLICY = PolicyInputs(
    policy=PolicyType.STATIC_PARTITION.value, params=values_of({}), reconcile_interval_s=60.0
)
"""The controller manager's policy defaults (every policy's declared defaults and
RECONCILE_INTERVAL)."""

EMBEDDED_INVENTORIES = {
    "default": "default.yaml",
    "exp01": "01-cluster-nodes.yaml",
    "exp01-5k": "01-cluster-nodes-5k.yaml",
    "exp02": "02-cluster-nodes.yaml",
    "exp02-5k": "02-cluster-nodes-5k.yaml",
    "exp03": "03-cluster-nodes.yaml",
    "exp03-5k": "03-cluster-nodes-5k.yaml",
}


def _flag(value: object) -> bool:
    """A yes/no param: a bool, or the words true / false (any case), 1 / 0."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in ("true", "1", "yes"):
        return True
    if word in ("false", "0", "no"):
        return False
    raise ValueError(f"{value!r} is not true or false")


_BASELINE_POLICIES = {
    "B": PolicyType.STATIC_PARTITION,
    "C": PolicyType.QUEUE_AWARE_V1,
    "D": PolicyType.CLASS_CAPS,
}
"""The manager's policy in each baseline with Joulie (A has none)."""
PERFORMANCE_FIRST = frozenset({"D"})
"""Baselines run with manifests/priority installed (performance work first, preempting
nothing) unless ``params.performance_first`` says otherwise."""

_POLICY_PARAMS: dict[str, type] = {
    **{parameter.name: parameter.type for parameter in PARAMETERS},
    "reconcile_interval_s": float,
}
_INTENT_PARAMS = {
    "cpu_eco_cap_pct_of_max": float,
    "gpu_eco_cap_pct_of_max": float,
    "gpu_clock_ceiling_pct_of_max": float,
    "performance_cap_watts": float,
}
_ENGINE_PARAMS: dict[str, Callable[[Any], Any]] = {
    "ambient_c": float,
    "sample_s": float,
    "trend_window_s": float,
    "performance_first": _flag,
}
_LIFECYCLE_CONFIG_PARAMS = {
    "lifecycle_idle_grace_s": ("idle_grace_s", float),
    "lifecycle_boot_grace_s": ("boot_grace_s", float),
    "lifecycle_drain_settle_s": ("drain_settle_s", float),
}
_LIFECYCLE_LIMIT_PARAMS = {
    "lifecycle_min_nodes": ("min_nodes", int),
    "lifecycle_max_concurrent_drains": ("max_concurrent_drains", int),
    "lifecycle_max_concurrent_boots": ("max_concurrent_boots", int),
    "lifecycle_budget_pct": ("budget_pct", float),
}
_LIFECYCLE_PARAMS = {
    **{k: kind for k, (_, kind) in _LIFECYCLE_CONFIG_PARAMS.items()},
    **{k: kind for k, (_, kind) in _LIFECYCLE_LIMIT_PARAMS.items()},
    "lifecycle_boot_delay_s": float,
    "lifecycle_interval_s": float,
}
"""The node lifecycle's knobs (with ``lifecycle``): the LIFECYCLE_* settings' defaults unless
given; the boot delay and the pass interval are the simulator's own (``joulie.sim.lifecycle``).
There is no knob for concurrent shutdowns: a shutdown is instant here, and a healthy node never
calls for one outright."""
PARAMS: Mapping[str, Callable[[Any], Any]] = {
    **_POLICY_PARAMS,
    **_INTENT_PARAMS,
    **_ENGINE_PARAMS,
    **_LIFECYCLE_PARAMS,
}
"""Every key a run spec's ``params`` may set, and its type."""

RUN_LIMIT_FACTOR = 10.0
"""Without ``limit_hours`` a run stops at this many times its arrival hours."""


@cache
def load_named_inventory(name: str) -> Inventory:
    """An embedded inventory by name, else the inventory file at the path ``name``."""
    file = EMBEDDED_INVENTORIES.get(name)
    if file is None:
        if not Path(name).exists():
            raise InventoryError(
                f"{name}: no such inventory file, nor an embedded inventory (embedded: "
                f"{', '.join(EMBEDDED_INVENTORIES)})"
            )
        return load_inventory(Path(name))
    text = resources.files("joulie.sim").joinpath("data", "inventories", file).read_text()
    import yaml

    return parse_inventory(yaml.safe_load(text), source=f"embedded inventory {name}")


def _params(spec: RunSpec) -> dict[str, Any]:
    unknown = sorted(set(spec.params) - set(PARAMS))
    if unknown:
        raise ValueError(
            f"unknown params {', '.join(unknown)}; accepted: {', '.join(sorted(PARAMS))}"
        )
    values: dict[str, Any] = {}
    for key, raw in spec.params.items():
        try:
            values[key] = PARAMS[key](raw)
        except (TypeError, ValueError):
            kind = "bool" if PARAMS[key] is _flag else PARAMS[key].__name__
            raise ValueError(f"params.{key}: {raw!r} is not a {kind}") from None
        if isinstance(values[key], float) and not math.isfinite(values[key]):
            raise ValueError(f"params.{key}: {raw!r} is not a finite number")
        low, high = _ENGINE_RANGES.get(key, (None, None))
        if (low is not None and values[key] < low) or (high is not None and values[key] > high):
            raise ValueError(f"params.{key}: {raw!r} is outside {low:g}..{high:g}")
    return values


_ENGINE_RANGES: Mapping[str, tuple[float, float]] = {
    "sample_s": (1.0, 86400.0),
    "ambient_c": (-50.0, 60.0),
    "lifecycle_interval_s": (1.0, 86400.0),
    "lifecycle_boot_delay_s": (0.0, 86400.0),
}
"""The simulator's own knobs (no environment variable to take bounds from): the engine steps
every ``sample_s`` and lifecycle pass, so a tiny value would run for hours; a day is the
longest step that still samples a day's run."""


def _lifecycle(spec: RunSpec, params: Mapping[str, Any]) -> LifecycleSettings | None:
    given = sorted(k for k in params if k in _LIFECYCLE_PARAMS)
    if not spec.lifecycle:
        if given:
            raise ValueError(f"params {', '.join(given)} need the lifecycle on (--lifecycle)")
        return None
    config = LifecycleConfig(
        **{field: params[k] for k, (field, _) in _LIFECYCLE_CONFIG_PARAMS.items() if k in params}
    )
    limits = Limits(
        **{field: params[k] for k, (field, _) in _LIFECYCLE_LIMIT_PARAMS.items() if k in params}
    )
    extra = {
        field: params[k]
        for k, field in (
            ("lifecycle_boot_delay_s", "boot_delay_s"),
            ("lifecycle_interval_s", "interval_s"),
        )
        if k in params
    }
    return LifecycleSettings(config=config, limits=limits, **extra)


def scenario_of(spec: RunSpec, catalog: Catalog | None = None) -> Scenario:
    """The scenario ``spec`` describes (inventory read, workload generated or loaded)."""
    params = _params(spec)
    lifecycle = _lifecycle(spec, params)
    inventory = load_named_inventory(spec.inventory)
    if spec.trace is not None:
        workloads = read_trace(Path(spec.trace))
    else:
        options = GeneratorOptions.from_mapping(spec.generator)
        catalog = catalog or Catalog.load()
        speeds = group_throughputs(inventory, catalog)
        workloads = generate(inventory, options, spec.seed, spec.hours, speeds)
    policy: PolicyInputs | None = None
    config = IntentConfig()
    if spec.baseline != "A":
        kind = _BASELINE_POLICIES[spec.baseline]
        given = {k: v for k, v in params.items() if k in _POLICY_PARAMS}
        policy = PolicyInputs(
            policy=kind.value,
            params=values_of(given),
            reconcile_interval_s=given.get(
                "reconcile_interval_s", DEFAULT_POLICY.reconcile_interval_s
            ),
        )
        config = dataclasses.replace(
            config,
            governor_control=GovernorControl.ALL if spec.governors else GovernorControl.OFF,
            **{k: v for k, v in params.items() if k in _INTENT_PARAMS},
        )
    engine = {k: v for k, v in params.items() if k in _ENGINE_PARAMS}
    engine.setdefault("performance_first", spec.baseline in PERFORMANCE_FIRST)
    limit_h = spec.limit_hours if spec.limit_hours is not None else spec.hours * RUN_LIMIT_FACTOR
    window = None
    if spec.warmup_hours is not None:
        window = (spec.warmup_hours * 3600.0, _arrivals_end_s(spec, workloads))
    return Scenario(
        name=spec.scenario,
        baseline=spec.baseline
        + ("+gov" if spec.governors and spec.baseline != "A" else "")
        + ("+L" if spec.lifecycle else ""),
        seed=spec.seed,
        inventory=inventory,
        workloads=workloads,
        catalog=catalog or Catalog.load(),
        policy=policy,
        config=config,
        limit_s=limit_h * 3600.0,
        lifecycle=lifecycle,
        window=window,
        **engine,
    )


def _arrivals_end_s(spec: RunSpec, workloads: Sequence[Workload]) -> float:
    """Where a measurement window ends: the end of the generated arrivals, or a trace's last
    submission."""
    if spec.trace is None:
        return spec.hours * 3600.0
    end = max((w.submit_s for w in workloads), default=0.0)
    if spec.warmup_hours is not None and spec.warmup_hours * 3600.0 >= end:
        raise ValueError(
            f"warmup_hours {spec.warmup_hours:g}: the trace's last submission is at "
            f"{end / 3600.0:g} h, so nothing would be measured"
        )
    return end


def run(spec: RunSpec, progress: Callable[[float], None] | None = None) -> RunResult:
    """Run one spec to its result."""
    return simulate(scenario_of(spec), progress)
