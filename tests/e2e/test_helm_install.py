"""`helm install` of charts/joulie on a cluster: every role comes up ready, the agent pool and the
simulator included, on KWOK nodes (the image need not exist: KWOK runs no containers). The
priority classes are accepted for Joulie's own namespace, the disruption budgets let one replica
go at a time, `helm upgrade` rolls a changed setting out, and `helm uninstall` takes everything
back except the CRDs (Helm never deletes those, so the NodeTwins survive).

The chart owns cluster-wide objects (ClusterRoles, admission policies, the joulie-performance
PriorityClass) that the session's shared cluster already holds from manifests/ for the other
tests, and its DaemonSet would put an agent on every managed node other tests create: so this
module starts a control plane of its own, with the same harness (hack.cluster.LocalCluster). The
harness applies Joulie's namespace, CRDs and RBAC as it starts; the test deletes the CRDs and the
RBAC first, so the chart installs them itself, as on a fresh cluster (the namespace stays, as
`--create-namespace` or an operator would make it, labelled for the privileged Pod Security level).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack.cluster.runner import NAMESPACE, LocalCluster, binaries_built
from joulie.api import keys
from tests.support.builders import kwok_node, node_group
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "joulie"
NODES = ["helm-0", "helm-1"]
# Every role of the chart at once: the KWOK flavour (pool, simulator, the manager reading node
# power from it) plus the DaemonSet and the second scheduler. The pool and the simulator keep off
# KWOK nodes by default (they serve them); here every node is a KWOK node, so that rule is lifted.
INSTALL_VALUES = [
    "--values",
    str(CHART / "ci" / "kwok-values.yaml"),
    "--set",
    "agent.enabled=true,scheduler.enabled=true,agentPool.affinity=null,simulator.affinity=null",
]
WORKLOADS = {
    ("deployments", "joulie-manager"): 2,
    ("deployments", "joulie-extender"): 2,
    ("deployments", "joulie-simulator"): 1,
    ("deployments", "joulie-scheduler"): 2,
    ("statefulsets", "joulie-agent-pool"): 2,
    ("daemonsets", "joulie-agent"): len(NODES),
}


@pytest.fixture(scope="module")
def chart_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    if not binaries_built():
        message = "control-plane binaries are missing: run hack/build-binaries.sh (or make test)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    local = LocalCluster(
        work_dir=tmp_path_factory.mktemp("helm-cluster"),
        log=lambda line: print(f"[helm-cluster] {line}", file=sys.stderr),
    )
    local.up()
    try:
        local.kubectl("delete", "-k", str(ROOT / "manifests" / "rbac"), "--wait=true")
        local.kubectl("delete", "-k", str(ROOT / "manifests" / "crds"), "--wait=true")
        group = node_group("helm", cpu_cores=32, memory_gib=128)
        local.create_ready_nodes([kwok_node(name, group) for name in NODES])
        yield local
    finally:
        local.down()


def helm(cluster: LocalCluster, *args: str, timeout: float = 400) -> str:
    assert cluster.binaries is not None
    done = subprocess.run(
        [str(cluster.binaries / "helm"), f"--kubeconfig={cluster.admin_kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def get(cluster: LocalCluster, path: str) -> dict[str, Any]:
    with cluster.api() as api:
        response = api.get(path)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result


def ready(workload: dict[str, Any]) -> int:
    status = workload.get("status", {})
    if workload["kind"] == "DaemonSet":
        return int(status.get("numberReady", 0))
    return int(status.get("readyReplicas", 0))


@pytest.fixture(scope="module")
def installed(chart_cluster: LocalCluster) -> LocalCluster:
    """`helm install --wait`: Helm 4 waits (kstatus) until every workload is ready."""
    helm(
        chart_cluster,
        "install",
        "joulie",
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--wait",
        "--timeout=5m",
        *INSTALL_VALUES,
    )
    return chart_cluster


def test_every_role_is_ready_on_kwok_nodes(installed: LocalCluster) -> None:
    for (plural, name), replicas in WORKLOADS.items():
        workload = get(installed, f"/apis/apps/v1/namespaces/{NAMESPACE}/{plural}/{name}")
        assert ready(workload) == replicas, f"{name}: {workload.get('status')}"
    pods = get(installed, f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    by_role: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        by_role.setdefault(pod["metadata"]["labels"]["app.kubernetes.io/component"], []).append(pod)
    assert {role: len(p) for role, p in by_role.items()} == {
        "manager": 2,
        "extender": 2,
        "simulator": 1,
        "agent-pool": 2,
        "agent": len(NODES),
        "scheduler": 2,
    }
    for pod in pods:
        node = get(installed, f"/api/v1/nodes/{pod['spec']['nodeName']}")
        assert node["metadata"]["annotations"].get(keys.KWOK_NODE_ANNOTATION) == "fake"
        assert pod["status"]["phase"] == "Running"
    # The pool splits the KWOK nodes between its replicas by their ordinal.
    pool_env = {
        e["name"]: e.get("value") for e in by_role["agent-pool"][0]["spec"]["containers"][0]["env"]
    }
    assert pool_env["POOL_SHARDS"] == "2"
    assert pool_env["TELEMETRY_CPU_HTTP_ENDPOINT"] == (
        f"http://joulie-simulator.{NAMESPACE}.svc:8080/telemetry/{{node}}"
    )


def test_critical_roles_get_their_priority_and_one_replica_may_go_at_a_time(
    installed: LocalCluster,
) -> None:
    pods = get(installed, f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    priority = {
        (p["metadata"]["labels"]["app.kubernetes.io/component"], p["spec"].get("priorityClassName"))
        for p in pods
    }
    assert ("manager", "system-cluster-critical") in priority
    assert ("extender", "system-cluster-critical") in priority
    assert ("agent", "system-node-critical") in priority
    # The Priority admission plugin resolved the classes for a namespace other than kube-system.
    assert {p["spec"]["priority"] for p in pods if p["spec"].get("priorityClassName")} == {
        2000000000,
        2000001000,
    }

    def budgets_settled() -> bool:
        for name in ("joulie-manager", "joulie-extender"):
            pdb = get(
                installed, f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/{name}"
            )
            status = pdb.get("status", {})
            if (status.get("currentHealthy"), status.get("disruptionsAllowed")) != (2, 1):
                return False
        return True

    wait_until(budgets_settled, 60, "each budget to allow one disruption of two healthy pods")


def test_upgrade_rolls_a_changed_setting_out_to_the_manager(installed: LocalCluster) -> None:
    helm(
        installed,
        "upgrade",
        "joulie",
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--reuse-values",
        "--set",
        "manager.settings.RECONCILE_INTERVAL=45s",
        "--wait",
        "--timeout=5m",
    )

    def managers_with_new_interval() -> bool:
        pods = get(
            installed,
            f"/api/v1/namespaces/{NAMESPACE}/pods"
            "?labelSelector=app.kubernetes.io/component=manager",
        )["items"]
        current = [
            p
            for p in pods
            if "deletionTimestamp" not in p["metadata"]
            and {"name": "RECONCILE_INTERVAL", "value": "45s"} in p["spec"]["containers"][0]["env"]
            and p["status"]["phase"] == "Running"
        ]
        return len(current) == 2 and len(pods) == 2

    wait_until(managers_with_new_interval, 120, "two manager pods with RECONCILE_INTERVAL=45s")


def test_uninstall_removes_the_roles_and_keeps_the_crds(installed: LocalCluster) -> None:
    helm(installed, "uninstall", "joulie", "--namespace", NAMESPACE, "--wait", "--timeout=3m")

    def roles_gone() -> bool:
        for plural, name in WORKLOADS:
            with installed.api() as api:
                if (
                    api.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/{plural}/{name}").status_code
                    != 404
                ):
                    return False
        return True

    wait_until(roles_gone, 120, "the workloads to be deleted")
    with installed.api() as api:
        assert (
            api.get("/apis/rbac.authorization.k8s.io/v1/clusterroles/joulie-manager").status_code
            == 404
        )
        crd = api.get(
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{keys.NODE_TWIN_PLURAL}.joulie.io"
        )
    assert crd.status_code == 200
