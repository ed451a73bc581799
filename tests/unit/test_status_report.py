"""`joulie status`'s report from NodeTwins as the manager and agent write them: the summary's
counts, freshness (the manager's Lease and the twin's own reading), control results, the table
and the JSON, and twins whose fields cannot be read."""

from __future__ import annotations

import json
from typing import Any

from joulie.api import keys
from joulie.cli.status.report import build, controls_text, table
from joulie.cli.status.views import twin_view
from joulie.kube.projections import node_projection, pod_projection
from tests.support import builders
from tests.support.builders import node, nodetwin


def twin(
    name: str,
    profile: str,
    klass: str,
    *,
    watts: float = 400.0,
    budget: float = 1000.0,
    headroom: float = 60.0,
    cooling: float = 20.0,
    source: str = "http",
    agent: str = "True",
    results: dict[str, str] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "schedulableClass": klass,
        "predictedPowerHeadroomScore": headroom,
        "predictedCoolingStressScore": cooling,
        "powerMeasurement": {
            "source": source,
            "measuredNodePowerW": watts,
            "nodeCappedPowerW": budget,
        },
        "conditions": [
            {"type": "AgentReporting", "status": agent, "reason": "NodeHardwareCurrent"}
        ],
    }
    if results:
        status["controlStatus"] = {k: {"result": v} for k, v in results.items()}
    caps = {
        "cpu": {"packagePowerCapPctOfMax": 60, "governor": {"preset": "efficiency"}},
        "gpu": {"powerCap": {"scope": "perGpu", "capWattsPerGpu": 350}},
    }
    return {**nodetwin(name, profile, spec=caps if profile == "eco" else None), "status": status}


def pod(name: str, klass: str | None, phase: str) -> Any:
    raw = builders.pod(
        name,
        namespace="ml",
        annotations={keys.WORKLOAD_CLASS_ANNOTATION: klass} if klass else {},
        node_name="n1" if phase == "Running" else "",
        phase=phase,
    )
    return pod_projection(annotation_keys=(keys.WORKLOAD_CLASS_ANNOTATION,))(raw)


TWINS = [
    twin("n1", "performance", "performance", watts=800, headroom=20, cooling=70,
         results={"cpu": "applied", "gpu": "applied"}),
    twin("n2", "eco", "eco", watts=300, headroom=70, cooling=10,
         results={"cpu": "applied", "gpu": "refused", "cpuGovernor": "applied"}),
    twin("n3", "eco", "draining", source="http-error", agent="False"),
]  # fmt: skip
PODS = [
    pod("a", "performance", "Running"),
    pod("b", "standard", "Running"),
    pod("c", None, "Running"),
    pod("d", "performance", "Pending"),
]


def report(lease: bool = True) -> Any:
    nodes = [node_projection()(node(n, labels={})) for n in ("n1", "n2", "n3", "n4")]
    return build(nodes, map(twin_view, TWINS), PODS, manager_lease_current=lease)


def test_the_summary_counts_what_an_operator_asks_first() -> None:
    s = report().summary
    assert (s.nodes, s.nodes_without_twin) == (3, 1)
    assert s.by_profile == {"eco": 2, "performance": 1}
    assert s.by_class == {"draining": 1, "eco": 1, "performance": 1}
    assert s.power_w == 1500.0
    assert s.budget_w == 3000.0
    assert (s.mean_headroom, s.min_headroom) == (50.0, 20.0)
    assert (s.mean_cooling, s.peak_cooling) == (100 / 3, 70.0)
    # An unannotated pod is standard, as the manager and the extender read it.
    assert s.running_pods == {"performance": 1, "standard": 2}
    assert s.pending_pods == {"performance": 1, "standard": 0}
    assert s.agents_not_reporting == 1
    assert s.control_results == {"applied": 4, "refused": 1}


def test_a_twin_is_stale_when_its_reading_failed_or_the_manager_is_gone() -> None:
    fresh = {r.node: r.fresh for r in report().rows}
    assert fresh == {"n1": True, "n2": True, "n3": False}
    assert report().summary.stale_twins == 1
    gone = report(lease=False)
    assert not any(r.fresh for r in gone.rows)
    assert gone.summary.stale_twins == 3
    assert "NOT current" in table(gone)


def test_the_table_shows_caps_presets_and_results_per_node() -> None:
    text = table(report())
    header, *rows = text.splitlines()[6:]
    assert header.split() == [
        "NODE", "PROFILE", "CLASS", "POWER-W", "BUDGET-W", "HEADROOM", "COOLING",
        "CPU-CAP", "GPU-CAP", "CPU-GOV", "GPU-GOV", "CONTROL", "AGENT",
    ]  # fmt: skip
    by_node = {row.split()[0]: row for row in rows}
    assert by_node["n2"].split()[:11] == [
        "n2", "eco", "eco", "300", "1000", "70", "10", "60%", "350W", "efficiency", "-",
    ]  # fmt: skip
    assert "cpu=applied gpu=refused cpuGovernor=applied" in by_node["n2"]
    assert "draining (stale)" in by_node["n3"]
    assert controls_text({"cpu": "applied", "gpu": "applied"}) == "applied"


def test_json_carries_the_same_report() -> None:
    data = json.loads(json.dumps(report().to_json()))
    assert data["summary"]["running_pods"]["standard"] == 2
    assert [n["node"] for n in data["nodes"]] == ["n1", "n2", "n3"]
    assert data["nodes"][1]["controls"]["gpu"] == "refused"


def test_unreadable_fields_are_left_empty_not_fatal() -> None:
    odd = twin_view(
        {
            "metadata": {"name": "odd"},
            "spec": ["not", "an", "object"],
            "status": {
                "predictedPowerHeadroomScore": "high",
                "predictedCoolingStressScore": float("nan"),
                "powerMeasurement": 7,
                "conditions": "none",
                "controlStatus": {"cpu": {"result": 3}},
            },
        }
    )
    row = build([], [odd], [], manager_lease_current=True).rows[0]
    assert (row.profile, row.headroom, row.cooling, row.power_w) == ("-", None, None, None)
    assert row.controls == {}
    assert row.fresh is False  # no reading at all
