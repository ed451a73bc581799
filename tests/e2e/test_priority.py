"""Performance first, without preemption, on the real kube-apiserver and kube-scheduler: the
PriorityClass and the MutatingAdmissionPolicy of manifests/priority, applied as shipped.

A pod annotated ``joulie.io/workload-class: performance`` that names no priority class is given
``joulie-performance`` at admission (its priority and preemptionPolicy with it, so the Priority
plugin's second pass admits it). Created after 20 standard pods that wait for room, it is the one
kube-scheduler places when room for one pod frees up, and while it waits it evicts nothing,
although everything in its way has a lower priority. A pod that names a class keeps it, other
pods are left alone, and without the class the policy stands aside instead of refusing pods.
"""

from __future__ import annotations

import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hack.cluster.runner import LocalCluster
from joulie.api import keys
from tests.support.builders import WORK_IMAGE, container, kwok_node, node_group, pod_manifest
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

PRIORITY = Path(__file__).resolve().parents[2] / "manifests" / "priority"
CLASS = "joulie-performance"
CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
E2E_LABEL = "joulie.io/e2e"
STANDARD_PODS = 20
NODES = 2
FILLERS_PER_NODE = 2
NODE_CPUS = 8
POD_CPUS = str(NODE_CPUS // FILLERS_PER_NODE)
"""Every pod asks for a filler's share of a node: freeing one filler makes room for one pod."""
MAX_BACKOFF_S = 10
"""kube-scheduler's podMaxBackoffSeconds (its default; the local cluster does not set it)."""


# --- the policy, as shipped -------------------------------------------------------------------


def class_body(cluster: LocalCluster) -> dict[str, Any] | None:
    with cluster.api() as api:
        got = api.get(f"{CLASSES}/{CLASS}")
    return got.json() if got.status_code == 200 else None


@pytest.fixture(scope="module")
def policy(cluster: LocalCluster) -> Iterator[dict[str, Any]]:
    """manifests/priority applied, and in force: a performance pod's dry run gets the class.
    Its PriorityClass as the API server keeps it."""
    assert cluster.scheduler_config().get("podMaxBackoffSeconds", MAX_BACKOFF_S) == MAX_BACKOFF_S
    cluster.kubectl("apply", "-k", str(PRIORITY))
    probe = pod_manifest("probe", annotations={keys.WORKLOAD_CLASS_ANNOTATION: "performance"})
    try:
        wait_until(
            lambda: cluster.admitted("default", probe)["spec"].get("priorityClassName") == CLASS,
            60,
            "the MutatingAdmissionPolicy to be in force",
        )
        found = class_body(cluster)
        assert found is not None
        yield found
    finally:
        cluster.kubectl("delete", "-k", str(PRIORITY), "--ignore-not-found", "--wait=false")


# --- nodes and pods of the test's own -----------------------------------------------------------


@pytest.fixture
def nodes(cluster: LocalCluster) -> Iterator[tuple[str, list[str]]]:
    """(label value, names): a few small KWOK nodes of the test's own. They carry a label and a
    taint of the test's, so only the test's pods (which select the label and tolerate the taint)
    can land on them, and no other test's pod takes the room the test frees."""
    case = f"priority-{uuid.uuid4().hex[:6]}"
    group = node_group("prio", cpu_cores=NODE_CPUS, memory_gib=64)
    made = [
        kwok_node(f"{case}-{i}", group, labels={E2E_LABEL: case}, managed=False)
        for i in range(NODES)
    ]
    for node in made:
        node["spec"]["taints"] = [{"key": E2E_LABEL, "value": case, "effect": "NoSchedule"}]
    names = [n["metadata"]["name"] for n in made]
    try:
        cluster.create_ready_nodes(made)
        yield case, names
    finally:
        with cluster.api() as api:
            for name in names:
                api.delete(f"/api/v1/nodes/{name}")


def work_pod(
    name: str, case: str, *, workload_class: str | None, node: str | None = None
) -> dict[str, Any]:
    annotations = {} if workload_class is None else {keys.WORKLOAD_CLASS_ANNOTATION: workload_class}
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "tolerations": [{"key": E2E_LABEL, "operator": "Equal", "value": case}],
    }
    if node is None:
        spec["nodeSelector"] = {E2E_LABEL: case}
    return pod_manifest(
        name,
        containers=[container({"cpu": POD_CPUS}, name="work", image=WORK_IMAGE)],
        node_name=node,
        annotations=annotations,
        spec=spec,
    )


def create(cluster: LocalCluster, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
    with cluster.api() as api:
        answer = api.post(f"/api/v1/namespaces/{namespace}/pods", json=pod)
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    return body


def pods(cluster: LocalCluster, namespace: str) -> dict[str, dict[str, Any]]:
    with cluster.api() as api:
        listed = api.get(f"/api/v1/namespaces/{namespace}/pods")
    listed.raise_for_status()
    return {p["metadata"]["name"]: p for p in listed.json()["items"]}


def unschedulable(pod: dict[str, Any]) -> str | None:
    """The scheduler's message when it last found no room for ``pod``, else None."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if (
            condition["type"] == "PodScheduled"
            and condition["status"] == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return str(condition.get("message", ""))
    return None


# --- kube-scheduler's own counters --------------------------------------------------------------


def scheduler_metric(cluster: LocalCluster, name: str) -> float:
    """The sum over all labels of one of kube-scheduler's metrics (its secure port, read with
    the admin certificate; it serves a self-signed certificate of its own)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(str(cluster.pki.admin_cert), str(cluster.pki.admin_key))
    port = cluster.ports["scheduler"]
    text = httpx.get(f"https://127.0.0.1:{port}/metrics", verify=context, timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    )


def wait_scheduler_quiet(cluster: LocalCluster, quiet_s: float, timeout: float) -> float:
    """Wait until kube-scheduler has made no scheduling attempt for ``quiet_s``; returns how
    long that took. Past its longest backoff, every pod it gave up on is out of backoff, so the
    next cluster event moves them all to the active queue, where priority alone orders them
    (a pod still backing off waits in the backoff queue behind every active one)."""
    started = time.monotonic()
    last = scheduler_metric(cluster, "scheduler_schedule_attempts_total")
    changed = started
    while True:
        time.sleep(0.5)
        now = scheduler_metric(cluster, "scheduler_schedule_attempts_total")
        if now != last:
            last, changed = now, time.monotonic()
        elif time.monotonic() - changed >= quiet_s:
            return time.monotonic() - started
        assert time.monotonic() - started < timeout, "kube-scheduler never went quiet"


# --- the tests ----------------------------------------------------------------------------------


def test_the_class_waits_rather_than_preempts(policy: dict[str, Any]) -> None:
    assert policy["preemptionPolicy"] == "Never"
    assert policy.get("globalDefault", False) is False
    assert 0 < policy["value"] < 1_000_000_000


def test_performance_pod_created_last_binds_first_and_preempts_nothing(
    cluster: LocalCluster,
    policy: dict[str, Any],
    nodes: tuple[str, list[str]],
    namespace: str,
) -> None:
    case, names = nodes
    # Fill every node, straight onto it: nothing the test's pods ask for fits anywhere.
    placed = {
        f"filler-{n}-{i}": node for n, node in enumerate(names) for i in range(FILLERS_PER_NODE)
    }
    fillers = list(placed)
    for name, node in placed.items():
        body = create(cluster, namespace, work_pod(name, case, workload_class=None, node=node))
        assert body["spec"]["priority"] == 0
    standard = [f"standard-{i:02d}" for i in range(STANDARD_PODS)]
    for name in standard:
        body = create(cluster, namespace, work_pod(name, case, workload_class="standard"))
        # The policy leaves a standard pod alone.
        assert "priorityClassName" not in body["spec"]
        assert body["spec"]["priority"] == 0
    wait_until(
        lambda: all(unschedulable(pods(cluster, namespace)[n]) is not None for n in standard),
        60,
        "every standard pod to be found unschedulable",
    )
    victims_before = scheduler_metric(cluster, "scheduler_preemption_victims_count")

    created = create(
        cluster, namespace, work_pod("performance", case, workload_class="performance")
    )
    # Admission gave it the class, and the class's priority and preemption policy with it.
    assert created["spec"]["priorityClassName"] == CLASS
    assert created["spec"]["priority"] == policy["value"]
    assert created["spec"]["preemptionPolicy"] == "Never"
    every = pods(cluster, namespace)
    assert all(
        every[n]["metadata"]["creationTimestamp"] <= created["metadata"]["creationTimestamp"]
        for n in standard
    )
    message = wait_until(
        lambda: unschedulable(pods(cluster, namespace)["performance"]),
        60,
        "the performance pod to be found unschedulable",
    )
    # It could make room by evicting a filler (all of priority 0), but may not.
    assert "preemptionPolicy=Never" in message, message
    quiet = wait_scheduler_quiet(cluster, MAX_BACKOFF_S + 1.5, 120)

    # Waiting, it preempted nothing: every filler is still bound and not being deleted, and it
    # was nominated to no node.
    every = pods(cluster, namespace)
    for name in fillers:
        assert every[name]["spec"]["nodeName"], name
        assert "deletionTimestamp" not in every[name]["metadata"], name
    assert not (every["performance"].get("status") or {}).get("nominatedNodeName")
    assert not any(every[n]["spec"].get("nodeName") for n in [*standard, "performance"])

    # Room for one pod: the performance pod, created last, is the one placed.
    freed = fillers[0]
    t0 = time.monotonic()
    with cluster.api() as api:
        api.delete(
            f"/api/v1/namespaces/{namespace}/pods/{freed}", params={"gracePeriodSeconds": "0"}
        ).raise_for_status()

    def bound() -> list[str]:
        found = pods(cluster, namespace)
        return [n for n in [*standard, "performance"] if found[n]["spec"].get("nodeName")]

    first = wait_until(bound, 30, "a waiting pod to be placed in the freed room", interval=0.05)
    took = time.monotonic() - t0
    print(
        f"\n{STANDARD_PODS} standard pods pending, performance pod created after them; "
        f"scheduler quiet after {quiet:.1f}s; filler deleted -> {first} bound in {took:.2f}s"
    )
    assert first == ["performance"], first

    every = pods(cluster, namespace)
    assert every["performance"]["spec"]["nodeName"] == placed[freed]
    assert not (every["performance"].get("status") or {}).get("nominatedNodeName")
    # Nothing else moved: the other fillers stay where they were, the standard pods wait, and
    # kube-scheduler chose no preemption victim for anyone.
    assert set(every) == {*fillers[1:], *standard, "performance"}
    for name in fillers[1:]:
        assert every[name]["spec"]["nodeName"] == placed[name], name
        assert "deletionTimestamp" not in every[name]["metadata"], name
    assert not any(every[n]["spec"].get("nodeName") for n in standard)
    assert scheduler_metric(cluster, "scheduler_preemption_victims_count") == victims_before
    with cluster.api() as api:
        events = api.get(f"/api/v1/namespaces/{namespace}/events").json()["items"]
    assert not [e for e in events if e.get("reason") == "Preempted"], events


def test_a_pod_that_names_a_class_keeps_it(
    cluster: LocalCluster, policy: dict[str, Any], namespace: str
) -> None:
    own = f"t-own-{uuid.uuid4().hex[:6]}"
    with cluster.api() as api:
        api.post(
            CLASSES,
            json={
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": own},
                "value": 7,
                "preemptionPolicy": "PreemptLowerPriority",
            },
        ).raise_for_status()
    try:
        pod = work_pod("named", "none", workload_class="performance")
        pod["spec"]["priorityClassName"] = own
        spec = wait_until(
            lambda: cluster.admitted(namespace, pod)["spec"],
            30,
            "the new class to be known to admission",
        )
        assert (spec["priorityClassName"], spec["priority"]) == (own, 7)
        assert spec["preemptionPolicy"] == "PreemptLowerPriority"
        # A pod without the annotation, and one of another class, are left alone too.
        for workload_class in (None, "standard", "Performance"):
            spec = cluster.admitted(
                namespace, work_pod("other", "none", workload_class=workload_class)
            )["spec"]
            assert "priorityClassName" not in spec, workload_class
            assert spec["priority"] == 0, workload_class
    finally:
        with cluster.api() as api:
            api.delete(f"{CLASSES}/{own}")


def test_without_the_class_the_policy_stands_aside(
    cluster: LocalCluster, policy: dict[str, Any], namespace: str
) -> None:
    """The binding's parameterNotFoundAction is Allow: a performance pod is admitted at the
    default priority while the class is missing, instead of being refused."""
    with cluster.api() as api:
        api.delete(f"{CLASSES}/{CLASS}").raise_for_status()
    try:
        pod = work_pod("performance", "none", workload_class="performance")
        spec = wait_until(
            lambda: (
                (s := cluster.admitted(namespace, pod)["spec"]).get("priorityClassName") is None
                and s
            ),
            30,
            "admission to see the class gone",
        )
        assert spec["priority"] == 0
    finally:
        cluster.kubectl("apply", "-k", str(PRIORITY))
        probe = work_pod("probe", "none", workload_class="performance")
        wait_until(
            lambda: cluster.admitted(namespace, probe)["spec"].get("priorityClassName") == CLASS,
            60,
            "the policy to be in force again",
        )
