"""`joulie plan --live` against the real cluster, with the manager's credentials: it plans the
nodes as they are and lists the profile changes, writing nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hack.cluster.runner import LocalCluster
from joulie.api.inventory import load_inventory
from joulie.kube import metrics
from tests.support.builders import kwok_nodes

pytestmark = pytest.mark.kube

JOULIE = str(Path(sys.executable).parent / "joulie")
INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "02-cluster-nodes.yaml"
SELECTOR = "joulie.io/e2e=plan-live"


def test_live_plan_lists_changes_and_writes_nothing(cluster: LocalCluster) -> None:
    groups = load_inventory(INVENTORY).nodes
    nodes = kwok_nodes("plan", groups, 2, labels={"joulie.io/e2e": "plan-live"})
    # One node already in performance: the plan keeps it (nodes labelled performance first).
    nodes[1]["metadata"]["labels"]["joulie.io/power-profile"] = "performance"
    cluster.create_nodes(nodes)
    before = metrics.write_count()
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.role_kubeconfig("manager")),
        "NODE_SELECTOR": SELECTOR,
    }
    result = subprocess.run(
        [
            JOULIE,
            "plan",
            "--live",
            "--policy",
            "static_partition",
            "--hp-frac",
            "0.5",
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["node_count"] == len(nodes) == 16
    assert out["performance_count"] == 8
    assert len(out["families"]) == 8
    assert out["nodes"][nodes[1]["metadata"]["name"]] == "performance"
    changes = out["changes"]
    assert nodes[1]["metadata"]["name"] not in changes
    assert len(changes) == 15
    assert all(c["from"] is None for c in changes.values())
    with cluster.api() as api:
        node = api.get(f"/api/v1/nodes/{nodes[0]['metadata']['name']}").json()
    assert "joulie.io/power-profile" not in node["metadata"]["labels"]
    assert metrics.write_count() == before
