"""The Grafana dashboard in manifests/grafana queries only metrics the roles really export.

A query naming a metric nobody exports draws an empty panel, with no error anywhere; this test
turns that into a failure. The exported names come from the code: the metrics every role
registers when its modules load, plus the collectors that only exist while a role runs (the
simulator's, the runtime's, the work queues'), read back through prometheus_client itself.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, Info, Summary
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric

from joulie.hardware.catalog import Catalog
from joulie.kube.workqueue import WorkQueue
from joulie.process.roles import ROLES
from joulie.sim.kwok_hardware import Simulation
from joulie.sim.service import SimulationCollector

DASHBOARD = Path(__file__).resolve().parents[2] / "manifests" / "grafana" / "joulie-dashboard.json"

# --- PromQL: the metric names an expression selects ----------------------------------------------

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
# A number or duration (0.99, 3.6e6, 5m) is one token starting with a digit, so its letters are
# never read as a name; a name followed by "(" is a function call.
_TOKEN = re.compile(r"\d[\w.]*|([A-Za-z_:][\w:]*)(\s*\()?")

KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}
    | {"group_left", "group_right", "inf", "nan"}
)
FUNCTIONS = frozenset(
    # aggregation operators
    {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values"}
    | {"bottomk", "topk", "quantile", "limitk", "limit_ratio"}
    # functions
    | {"abs", "absent", "absent_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min"}
    | {"day_of_month", "day_of_week", "day_of_year", "days_in_month", "delta", "deriv", "exp"}
    | {"floor", "histogram_quantile", "histogram_count", "histogram_sum", "histogram_fraction"}
    | {"holt_winters", "hour", "idelta", "increase", "irate", "label_join", "label_replace"}
    | {"ln", "log2", "log10", "minute", "month", "predict_linear", "rate", "resets", "round"}
    | {"scalar", "sgn", "sort", "sort_desc", "sort_by_label", "sqrt", "time", "timestamp"}
    | {"vector", "year", "avg_over_time", "min_over_time", "max_over_time", "sum_over_time"}
    | {"count_over_time", "quantile_over_time", "stddev_over_time", "stdvar_over_time"}
    | {"last_over_time", "present_over_time"}
)


def metric_names(expr: str) -> set[str]:
    """Metric names selected by a PromQL expression (Grafana's $variables allowed).

    Raises ValueError for a call of something that is not a PromQL function, so a misspelt
    function is caught as well as a misspelt metric."""
    text = _STRING.sub(" ", expr)
    text = _VARIABLE.sub(" ", text)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _LABEL_LIST.sub(" ", text)
    names = set()
    for match in _TOKEN.finditer(text):
        name, call = match.groups()
        if name is None or name in KEYWORDS:
            continue
        if call:
            if name not in FUNCTIONS:
                raise ValueError(f"{name}() is not a PromQL function in {expr!r}")
            continue
        names.add(name)
    return names


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (
            'sum by (verb, le) (rate(a_bucket{outcome!~"ok|late", x="{y}"}[$__rate_interval]))',
            {"a_bucket"},
        ),
        ("histogram_quantile(0.99, sum(rate(b_bucket[5m])) by (le))", {"b_bucket"}),
        ("sum(increase(c_total[$__range])) / 3.6e6", {"c_total"}),
        ("x and on (instance) (y{lease=~'.*/m'} == 1) offset 5m", {"x", "y"}),
        ("time() - max(z) * on (i) group_left (node) w", {"z", "w"}),
        ("sum without (node) (v:recorded_rule)", {"v:recorded_rule"}),
    ],
)
def test_metric_names_reads_promql(expr: str, expected: set[str]) -> None:
    assert metric_names(expr) == expected


def test_metric_names_rejects_unknown_functions() -> None:
    with pytest.raises(ValueError, match="histogram_quantil"):
        metric_names("histogram_quantil(0.5, a_bucket)")


# --- what the code exports -----------------------------------------------------------------------

_SHADOWS: dict[str, type[MetricWrapperBase]] = {
    "counter": Counter,
    "gauge": Gauge,
    "histogram": Histogram,
    "summary": Summary,
    "info": Info,
}


def _sample_names(family: Metric) -> set[str]:
    """Every name a family is scraped under: its samples', and, since a labelled metric has no
    sample before its first label set, those of an unlabelled metric of the same name and type
    (prometheus_client adds _total, _bucket, _sum, _count, _created, _info as it exposes them)."""
    shadow_type = _SHADOWS.get(family.type)
    assert shadow_type is not None, f"{family.name}: no rule for metric type {family.type}"
    shadow = shadow_type(family.name, "shadow", registry=CollectorRegistry())
    names = {s.name for s in family.samples}
    names |= {s.name for metric in shadow.collect() for s in metric.samples}
    return names


@cache
def exported_names() -> frozenset[str]:
    # Loading a role's modules registers its metrics (and those of the Kubernetes plumbing and
    # the garbage-collection policy it uses) on the process-wide registry, as in a real process.
    for spec in ROLES.values():
        assert spec.implementation, spec.name
        importlib.import_module(spec.implementation.partition(":")[0])
    runtime = importlib.import_module("joulie.process.runtime")
    # The rest exists only while a role runs; it goes on a registry of its own, to leave the
    # process-wide one as the other tests expect it.
    running = CollectorRegistry()
    running.register(runtime._RoleCollector([], asyncio.Event()))
    running.register(SimulationCollector(Simulation(Catalog.load(), lambda _: ()), lambda: 0.0))
    WorkQueue("dashboard-test", registry=running)
    names: set[str] = set()
    for registry in (REGISTRY, running):
        for family in registry.collect():
            if family.name.startswith("joulie_"):
                names |= _sample_names(family)
    return frozenset(names)


def test_exported_names_cover_every_role_and_suffix() -> None:
    names = exported_names()
    for expected in (
        "joulie_policy_hp_count",  # manager
        "joulie_agent_control_result",  # agent
        "joulie_extender_requests_total",  # extender, a labelled counter with no series yet
        "joulie_extender_request_duration_seconds_bucket",  # ... and a labelled histogram
        "joulie_sim_node_energy_joules_total",  # simulator, collected at scrape time
        "joulie_workqueue_depth",
        "joulie_role_ready",
    ):
        assert expected in names
    assert "joulie_extender_requests" not in names, "a counter is only scraped with _total"


# --- the dashboard -------------------------------------------------------------------------------


def load_dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} target {target['refId']}", target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            # label_values(selector, label): the label is not a metric name.
            text = re.sub(r"^label_values\((.*),\s*\w+\s*\)$", r"\1", text.strip())
            yield f"variable {variable['name']!r}", text


def test_dashboard_queries_only_exported_metrics() -> None:
    exported = exported_names()
    unknown = []
    for where, expr in queries(load_dashboard()):
        names = metric_names(expr)
        assert names, f"{where} selects no metric: {expr}"
        unknown += [f"{where}: {name}" for name in sorted(names - exported)]
    assert not unknown, "metrics no role exports:\n" + "\n".join(unknown)


def test_dashboard_panels_have_unique_ids_and_queries() -> None:
    dashboard = load_dashboard()
    ids = [panel["id"] for panel in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids repeat; Grafana would mix their settings up"
    for panel in panels(dashboard):
        if panel["type"] == "row":  # a row only groups the panels below it
            continue
        assert panel.get("targets"), f"panel {panel['title']!r} has no query"
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]


def test_dashboard_queries_the_chosen_prometheus() -> None:
    dashboard = load_dashboard()
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "datasource"]
    assert (variable["type"], variable["query"]) == ("datasource", "prometheus")
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        for holder in (panel, *panel["targets"]):
            assert holder["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel[
                "title"
            ]


def test_dashboard_covers_what_operators_watch() -> None:
    """The requirement's subjects each have a panel that queries their metric."""
    used = set()
    for _, expr in queries(load_dashboard()):
        used |= metric_names(expr)
    for subject, metric in {
        "per-family performance share": "joulie_policy_family_performance_nodes",
        "performance target": "joulie_policy_hp_count",
        "performance demand": "joulie_policy_performance_pods",
        "node power": "joulie_sim_node_power_watts",
        "energy": "joulie_sim_node_energy_joules_total",
        "extender latency": "joulie_extender_request_duration_seconds_bucket",
        "extender outcomes": "joulie_extender_requests_total",
        "control results": "joulie_agent_control_result",
        "failed agent passes": "joulie_agent_passes_total",
        "failing node writes": "joulie_manager_failing_nodes",
    }.items():
        assert metric in used, subject
