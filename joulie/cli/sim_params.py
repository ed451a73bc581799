"""A simulator run's ``params`` judged by the controller manager's own settings: each knob that
mirrors an environment variable (``static_hp_frac`` is STATIC_HP_FRAC, ``reconcile_interval_s``
is RECONCILE_INTERVAL in seconds) takes exactly the values the manager would start with.

The bounds are read from the settings fields, never written again here. This lives in the CLI,
the one layer that may import both the manager and the simulator (no role imports another).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from typing import Annotated, Any

from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from joulie.core.policies import PARAMETERS, parameter_problems
from joulie.settings import accepts, describe_bounds, error_detail, is_duration

__all__ = ["SETTING_OF_PARAM", "param_problem"]

SETTING_OF_PARAM: Mapping[str, str] = {
    **{parameter.name: parameter.name for parameter in PARAMETERS},
    "reconcile_interval_s": "reconcile_interval",
    "cpu_eco_cap_pct_of_max": "cpu_eco_cap_pct_of_max",
    "gpu_eco_cap_pct_of_max": "gpu_eco_cap_pct_of_max",
    "gpu_clock_ceiling_pct_of_max": "gpu_eco_clock_ceiling_pct_of_max",
    "performance_cap_watts": "performance_cap_watts",
    "trend_window_s": "node_power_trend_window",
    "lifecycle_interval_s": "lifecycle_interval",
    "lifecycle_idle_grace_s": "lifecycle_idle_grace",
    "lifecycle_boot_grace_s": "lifecycle_boot_grace",
    "lifecycle_drain_settle_s": "lifecycle_drain_settle",
    "lifecycle_min_nodes": "lifecycle_min_nodes",
    "lifecycle_max_concurrent_drains": "lifecycle_max_concurrent_drains",
    "lifecycle_max_concurrent_boots": "lifecycle_max_concurrent_boots",
    "lifecycle_budget_pct": "lifecycle_budget_pct",
}
"""A run spec's param and the ManagerSettings field it stands for (``_s``: in seconds)."""

_STRICT = ConfigDict(allow_inf_nan=False)


@cache
def _field(name: str) -> FieldInfo:
    from joulie.manager.settings import ManagerSettings

    return ManagerSettings.model_fields[name]


@cache
def _adapter(name: str) -> TypeAdapter[Any]:
    info = _field(name)
    annotated: Any = Annotated[info.annotation, *info.metadata]
    return TypeAdapter(annotated, config=_STRICT)


def _accepted(field: str) -> str:
    from joulie.manager.settings import ManagerSettings

    info = _field(field)
    variable = ManagerSettings.env_name(field)
    if is_duration(info):
        bounds = describe_bounds(info)
        return f"seconds{' ' + bounds if bounds else ''}, as {variable}"
    return f"{accepts(info)}, as {variable}"


def param_problem(params: Mapping[str, Any], what: str = "--param ") -> str | None:
    """Why these params would not be taken by the manager (None when they would): the first
    value out of its variable's bounds, else a combination a policy refuses. A value that is not
    a number at all is left to the simulator, which names the type it wants."""
    for key, value in params.items():
        field = SETTING_OF_PARAM.get(key)
        if field is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        try:
            _adapter(field).validate_python(value)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            detail = error_detail({**err, "loc": ("value",)}, _field(field))
            return f"{what}{key}={value}: {detail} (accepted: {_accepted(field)})"
    policy = {p.name: params[p.name] for p in PARAMETERS if _number(params.get(p.name))}
    for problem in parameter_problems(policy):
        return f"--param {problem.parameter}: {problem.detail} (accepted: {problem.accepted})"
    return None


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def first_problem(all_params: Iterable[Mapping[str, Any]], what: str = "--param ") -> str | None:
    """The first problem among several runs' params (a sweep's grid); ``what`` says where they
    were written (``--param ``, ``sweep.yaml: params.``)."""
    seen: set[str] = set()
    for params in all_params:
        key = repr(sorted(params.items()))
        if key in seen:
            continue
        seen.add(key)
        problem = param_problem(params, what)
        if problem:
            return problem
    return None
