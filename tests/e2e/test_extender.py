"""The extender in the real kube-scheduler's path, on KWOK nodes, with the manager and the simulator
(http power source) maintaining the twins: each role a process with its own credentials, and
kube-scheduler configured with the manifest's extender entry.

Performance pods never land on eco nodes; standard pods go to eco nodes when the performance
nodes draw the power, even where kube-scheduler's own scoring prefers the performance nodes;
with the extender down pods still schedule (ignorable) and the steering resumes when it comes
back; with the manager gone past its Lease every score is neutral.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from hack.cluster.runner import (
    PERFORMANCE_FILTER_CONFIG,
    PERFORMANCE_FILTER_POLICY,
    PRIORITIZE_ONLY_CONFIG,
    LocalCluster,
    free_port,
    manifest_extender,
    manifest_extenders,
)
from joulie.api import keys
from joulie.api.inventory import load_inventory
from joulie.api.quantity import parse_quantity
from joulie.core import preemption as core
from tests.support.builders import WORK_IMAGE, container, kwok_nodes, pod_manifest
from tests.support.cluster_pods import create_pods, placed, pod_namespace
from tests.support.processes import RoleProcess
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

INVENTORY = Path(__file__).resolve().parents[1] / "data/inventories/01-cluster-nodes.yaml"
E2E = "extender"
SELECTOR = f"joulie.io/e2e={E2E}"
TWINS = f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}"
PER_GROUP = 4


def manifests() -> list[dict[str, Any]]:
    groups = load_inventory(INVENTORY).nodes
    return kwok_nodes("ex", groups, PER_GROUP, labels={"joulie.io/e2e": E2E})


def pod(
    name: str,
    *,
    performance: bool,
    cpu: str = "10m",
    node: str | None = None,
    utilization: str | None = None,
) -> dict[str, Any]:
    annotations = {keys.WORKLOAD_CLASS_ANNOTATION: "performance" if performance else "standard"}
    if utilization is not None:
        annotations[keys.SIM_CPU_UTILIZATION_ANNOTATION] = utilization
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 0}
    if node is None:
        spec["nodeSelector"] = {"joulie.io/e2e": E2E}
    return pod_manifest(
        name,
        containers=[container({"cpu": cpu}, name="work", image=WORK_IMAGE)],
        node_name=node,
        annotations=annotations,
        spec=spec,
    )


@pytest.fixture(scope="module")
def nodes(cluster: LocalCluster) -> Iterator[list[str]]:
    made = manifests()
    cluster.create_ready_nodes(made)
    names = [n["metadata"]["name"] for n in made]
    yield names
    with cluster.api() as api:
        for name in names:
            api.delete(f"/api/v1/nodes/{name}")
            api.delete(f"{TWINS}/{name}")


@pytest.fixture
def namespace(cluster: LocalCluster, nodes: list[str]) -> Iterator[str]:
    with pod_namespace(cluster, "ex") as name:
        yield name


@pytest.fixture(scope="module")
def simulator(
    cluster: LocalCluster, nodes: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    port = free_port()
    sim = RoleProcess(
        cluster,
        "simulator",
        tmp_path_factory.mktemp("ex-sim") / "simulator.log",
        {
            "SIM_ADDR": f"127.0.0.1:{port}",
            "SIM_NODE_SELECTOR": SELECTOR,
            "SIM_POWER_SETTLE": "300ms",
        },
    )
    try:
        wait_until(sim.ready, 60, "the simulator to be ready")
        yield f"http://127.0.0.1:{port}"
    finally:
        sim.stop()


def start_manager(cluster: LocalCluster, tmp: Path, sim: str) -> RoleProcess:
    return RoleProcess(
        cluster,
        "manager",
        tmp / "manager.log",
        {
            "RECONCILE_INTERVAL": "2s",
            "NODE_SELECTOR": SELECTOR,
            "POD_NAMESPACE": "joulie-system",
            "POLICY_TYPE": "static_partition",
            "STATIC_HP_FRAC": "0.5",
            "NODE_POWER_SOURCE": "http",
            "NODE_POWER_HTTP_ENDPOINT": f"{sim}/telemetry/{{node}}",
        },
    )


@pytest.fixture(scope="module")
def manager(
    cluster: LocalCluster, simulator: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RoleProcess]:
    process = start_manager(cluster, tmp_path_factory.mktemp("ex-manager"), simulator)
    try:
        wait_until(process.ready, 60, "the manager to lead")
        yield process
    finally:
        process.stop()


class Extender:
    def __init__(self, cluster: LocalCluster, tmp: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = RoleProcess(
            cluster,
            "extender",
            tmp / "extender.log",
            {
                "EXTENDER_ADDR": f"127.0.0.1:{self.port}",
                "POD_NAMESPACE": "joulie-system",
                "EXTENDER_DEBUG": "true",  # the tests read /debug/score
            },
        )

    def score(self, node: str, **query: str) -> dict[str, Any]:
        answer = httpx.get(f"{self.url}/debug/score", params={"node": node, **query}, timeout=5)
        answer.raise_for_status()
        terms: dict[str, Any] = answer.json()["terms"]
        return terms


@pytest.fixture(scope="module")
def extender(
    cluster: LocalCluster, manager: RoleProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Extender]:
    ext = Extender(cluster, tmp_path_factory.mktemp("ex-extender"))
    try:
        wait_until(ext.process.ready, 60, "the extender's caches to sync")
        cluster.use_extender(ext.url)
        yield ext
    finally:
        cluster.use_extender(None)
        assert ext.process.stop() == 0, ext.process.log.read_text()[-4000:]


def twins(cluster: LocalCluster, names: list[str]) -> dict[str, dict[str, Any]]:
    with cluster.api() as api:
        listed = api.get(TWINS, params={"labelSelector": ""}).json()["items"]
    return {t["metadata"]["name"]: t for t in listed if t["metadata"]["name"] in names}


def classes(cluster: LocalCluster, names: list[str]) -> dict[str, str]:
    found = twins(cluster, names)
    return {n: ((t.get("status") or {}).get("schedulableClass") or "") for n, t in found.items()}


def planned(cluster: LocalCluster, nodes: list[str]) -> tuple[set[str], set[str]]:
    """(performance nodes, eco nodes) once every twin has a class and a power reading."""

    def ready() -> tuple[set[str], set[str]] | None:
        found = twins(cluster, nodes)
        if len(found) < len(nodes):
            return None
        statuses = [t.get("status") or {} for t in found.values()]
        if any(not (s.get("powerMeasurement") or {}).get("measuredNodePowerW") for s in statuses):
            return None
        by_class = {n: (t.get("status") or {}).get("schedulableClass") for n, t in found.items()}
        perf = {n for n, c in by_class.items() if c == "performance"}
        eco = {n for n, c in by_class.items() if c == "eco"}
        return (perf, eco) if len(perf) + len(eco) == len(nodes) else None

    found: tuple[set[str], set[str]] = wait_until(ready, 90, "every twin planned and measured")
    return found


def all_bound(
    cluster: LocalCluster, namespace: str, count: int, prefix: str = ""
) -> dict[str, str]:
    def bound() -> dict[str, str] | None:
        found = {k: v for k, v in placed(cluster, namespace).items() if k.startswith(prefix)}
        return found if len(found) == count and all(found.values()) else None

    where: dict[str, str] = wait_until(bound, 180, f"{count} pods bound")
    return where


def draw_power_on_performance_nodes(
    cluster: LocalCluster, namespace: str, extender: Extender, perf: set[str], eco: set[str]
) -> None:
    """The performance nodes draw power (busy performance pods, 30 % of their CPUs); the eco
    nodes hold more reserved CPU (70 %) that draws nothing, so kube-scheduler's own scoring
    (least allocated, balanced) prefers the performance nodes and only Joulie's does not.
    Returns once the extender scores the power in."""
    cores = {n["metadata"]["name"]: int(n["status"]["capacity"]["cpu"]) for n in manifests()}
    load = [
        pod(f"hot-{n}", performance=True, node=n, cpu=f"{cores[n] * 300}m") for n in sorted(perf)
    ] + [
        pod(f"idle-{n}", performance=False, node=n, cpu=f"{cores[n] * 700}m", utilization="0")
        for n in sorted(eco)
    ]
    create_pods(cluster, namespace, load)
    sample = sorted(perf)[0]
    wait_until(
        lambda: extender.score(sample, **{"class": "standard"})["priority"] <= 4,
        60,
        "the performance nodes' power in their twins",
    )


# --- the tests -----------------------------------------------------------------------------------


def test_performance_pods_never_land_on_eco_nodes(
    cluster: LocalCluster, nodes: list[str], extender: Extender, namespace: str
) -> None:
    perf, eco = planned(cluster, nodes)
    assert perf
    assert eco
    create_pods(cluster, namespace, [pod(f"perf-{i}", performance=True) for i in range(500)])
    where = all_bound(cluster, namespace, 500)
    assert set(where.values()) <= perf, set(where.values()) & eco
    # The filter said why, for every eco node, and kube-scheduler still placed all 500.
    body = {
        "Pod": pod("probe", performance=True),
        "Nodes": None,
        "NodeNames": sorted(eco),
    }
    answer = httpx.post(f"{extender.url}/filter", content=json.dumps(body), timeout=5).json()
    assert answer["NodeNames"] == []
    assert set(answer["FailedNodes"]) == eco


def test_standard_pods_go_where_the_power_is_not(
    cluster: LocalCluster, nodes: list[str], extender: Extender, namespace: str
) -> None:
    perf, eco = planned(cluster, nodes)
    draw_power_on_performance_nodes(cluster, namespace, extender, perf, eco)

    def eco_share(prefix: str) -> float:
        create_pods(
            cluster, namespace, [pod(f"{prefix}-{i}", performance=False) for i in range(40)]
        )
        where = all_bound(cluster, namespace, 40, prefix)
        return sum(node in eco for node in where.values()) / 40

    steered = eco_share("with")
    cluster.use_extender(None)
    try:
        unsteered = eco_share("without")
    finally:
        cluster.use_extender(extender.url)
    assert steered >= 0.75, (steered, unsteered)
    assert unsteered <= 0.5, (steered, unsteered)


def test_the_prioritize_only_configuration_steers_without_a_filter_call(
    cluster: LocalCluster, nodes: list[str], extender: Extender, namespace: str
) -> None:
    """The configuration shipped for policies that leave no node eco or draining differs from
    the default one by the filter alone, and kube-scheduler with it still takes Joulie's scores
    while never calling the filter."""
    shipped = manifest_extender(extender.url)
    lean = manifest_extender(extender.url, PRIORITIZE_ONLY_CONFIG)
    assert {k: v for k, v in shipped.items() if k != "filterVerb"} == lean
    perf, eco = planned(cluster, nodes)
    draw_power_on_performance_nodes(cluster, namespace, extender, perf, eco)
    filters = extender.process.metric("joulie_extender_requests_total", verb="filter", outcome="ok")
    prioritized = extender.process.metric(
        "joulie_extender_requests_total", verb="prioritize", outcome="ok"
    )
    cluster.use_extender(extender.url, config=PRIORITIZE_ONLY_CONFIG)
    try:
        create_pods(cluster, namespace, [pod(f"lean-{i}", performance=False) for i in range(40)])
        where = all_bound(cluster, namespace, 40, "lean")
        after_filters = extender.process.metric(
            "joulie_extender_requests_total", verb="filter", outcome="ok"
        )
        after_prioritized = extender.process.metric(
            "joulie_extender_requests_total", verb="prioritize", outcome="ok"
        )
    finally:
        cluster.use_extender(extender.url)
    assert after_filters == filters  # not one filter call
    assert after_prioritized >= prioritized + 40
    assert sum(node in eco for node in where.values()) / 40 >= 0.75


def test_the_performance_filter_configuration_filters_performance_pods_alone(
    cluster: LocalCluster, nodes: list[str], extender: Extender, namespace: str
) -> None:
    """With manifests/performance-filter in force, kube-scheduler configured as
    kube-scheduler-config.performance-filter.example.yaml calls the filter once per performance
    pod and never for a standard one, still keeps every performance pod off the eco nodes, and
    still takes Joulie's scores for all."""
    (shipped,) = manifest_extenders(extender.url)
    filtering, scoring = manifest_extenders(extender.url, PERFORMANCE_FILTER_CONFIG)
    # The example's entry split by verb; only the filter's is limited to marked pods.
    managed = filtering.pop("managedResources")
    assert managed == [{"name": keys.PERFORMANCE_POD_RESOURCE, "ignoredByScheduler": True}]
    scoring_only = {"prioritizeVerb", "preemptVerb", "weight"}
    assert {k: v for k, v in shipped.items() if k not in scoring_only} == filtering
    assert {k: v for k, v in shipped.items() if k != "filterVerb"} == scoring
    perf, eco = planned(cluster, nodes)

    def count(verb: str) -> float:
        return extender.process.metric("joulie_extender_requests_total", verb=verb, outcome="ok")

    probe = pod("probe", performance=True)
    with cluster.policy_in_force(PERFORMANCE_FILTER_POLICY, namespace, probe):
        cluster.use_extender(extender.url, config=PERFORMANCE_FILTER_CONFIG)
        try:
            filters, prioritized = count("filter"), count("prioritize")
            standard_pods = [pod(f"split-std-{i}", performance=False) for i in range(30)]
            create_pods(cluster, namespace, standard_pods)
            standard = all_bound(cluster, namespace, 30, "split-std")
            after_standard = count("filter")
            performance_pods = [pod(f"split-perf-{i}", performance=True) for i in range(30)]
            create_pods(cluster, namespace, performance_pods)
            performance = all_bound(cluster, namespace, 30, "split-perf")
            after_performance, after_prioritized = count("filter"), count("prioritize")
        finally:
            cluster.use_extender(extender.url)
    assert after_standard == filters  # not one filter call for 30 standard pods
    assert after_performance >= filters + 30  # one (or more, on a retry) per performance pod
    assert after_prioritized >= prioritized + 60  # every pod scored
    assert set(performance.values()) <= perf, set(performance.values()) & eco
    assert set(standard.values()) <= perf | eco


def test_scheduling_goes_on_without_the_extender_and_steering_resumes(
    cluster: LocalCluster, nodes: list[str], extender: Extender, namespace: str
) -> None:
    perf, _ = planned(cluster, nodes)
    extender.process.stop()
    try:
        create_pods(cluster, namespace, [pod(f"down-{i}", performance=True) for i in range(20)])
        all_bound(cluster, namespace, 20, "down-")  # ignorable: kube-scheduler goes on
    finally:
        extender.process.start()
    wait_until(extender.process.ready, 60, "the extender back")
    create_pods(cluster, namespace, [pod(f"back-{i}", performance=True) for i in range(30)])
    where = all_bound(cluster, namespace, 30, "back-")
    assert set(where.values()) <= perf


def test_scores_go_neutral_when_the_manager_is_gone(
    cluster: LocalCluster,
    nodes: list[str],
    simulator: str,
    manager: RoleProcess,
    extender: Extender,
    tmp_path: Path,
) -> None:
    _, eco = planned(cluster, nodes)
    node = sorted(eco)[0]
    assert extender.score(node, **{"class": "standard"})["priority"] != 5
    manager.stop()
    try:
        wait_until(
            lambda: extender.score(node, **{"class": "standard"})["priority"] == 5,
            40,
            "scores neutral once the manager's Lease has run out",
        )
        names = sorted(nodes)
        body = {"Pod": pod("probe", performance=False), "Nodes": None, "NodeNames": names}
        answer = httpx.post(f"{extender.url}/prioritize", content=json.dumps(body), timeout=5)
        assert answer.json() == []  # every node alike (neutral): nothing to add
    finally:
        manager.start()
        wait_until(manager.ready, 60, "the manager back")


@pytest.fixture
def priorities(cluster: LocalCluster) -> Iterator[tuple[str, str]]:
    low, high = f"ex-low-{uuid.uuid4().hex[:6]}", f"ex-high-{uuid.uuid4().hex[:6]}"
    with cluster.api() as api:
        for name, value in ((low, 10), (high, 1000)):
            api.post(
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                json={"metadata": {"name": name}, "value": value},
            ).raise_for_status()
    yield low, high
    with cluster.api() as api:
        for name in (low, high):
            api.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")


def test_a_performance_pod_preempts_only_where_it_may_run(
    cluster: LocalCluster,
    nodes: list[str],
    extender: Extender,
    namespace: str,
    priorities: tuple[str, str],
) -> None:
    """kube-scheduler's own preemption would evict the one pod filling an eco node (fewest
    victims) for a performance pod the extender then keeps off that node; the preempt verb drops
    such candidates, so the victims are taken on a performance node."""
    low, high = priorities
    perf, eco = planned(cluster, nodes)
    millis = {
        n["metadata"]["name"]: int(n["status"]["capacity"]["cpu"]) * 1000 for n in manifests()
    }
    request = min(millis[n] for n in perf) * 6 // 10
    half = request // 2 + 1
    # One pod fills each eco node; performance nodes are filled with pods of half the request,
    # so a performance node needs at least two victims where an eco node needs one.
    fill = [pod(f"fill-{n}", performance=False, node=n, cpu=f"{millis[n]}m") for n in sorted(eco)]
    for n in sorted(perf):
        count, rest = divmod(millis[n], half)
        fill += [
            pod(f"half-{n}-{i}", performance=False, node=n, cpu=f"{half}m") for i in range(count)
        ]
        if rest:
            fill.append(pod(f"rest-{n}", performance=False, node=n, cpu=f"{rest}m"))
    for manifest in fill:
        manifest["spec"]["priorityClassName"] = low
    create_pods(cluster, namespace, fill)
    before = placed(cluster, namespace)
    preemptor = pod("urgent", performance=True, cpu=f"{request}m")
    preemptor["spec"]["priorityClassName"] = high
    create_pods(cluster, namespace, [preemptor])
    where = all_bound(cluster, namespace, 1, "urgent")
    assert where["urgent"] in perf
    gone = {name: node for name, node in before.items() if name not in placed(cluster, namespace)}
    assert gone, "nothing was preempted"
    assert set(gone.values()) <= perf, gone
    assert extender.process.metric("joulie_extender_requests_total", verb="preempt") >= 1


def test_a_performance_gang_is_placed_by_workload_aware_preemption_off_eco_nodes(
    cluster: LocalCluster,
    nodes: list[str],
    extender: Extender,
    namespace: str,
    priorities: tuple[str, str],
) -> None:
    """kube-scheduler's own workload-aware preemption places a gang of four performance pods
    on performance nodes full of lower-priority work; nothing is evicted on an eco node (which
    has room, but the extender keeps performance pods off it)."""
    low, high = priorities
    perf, eco = planned(cluster, nodes)
    capacity = {m["metadata"]["name"]: m["status"]["capacity"]["cpu"] for m in manifests()}
    millis = {name: int(cpu) * 1000 for name, cpu in capacity.items()}
    member = min(millis[n] for n in perf) * 4 // 10
    fill = [
        pod(f"busy-{n}-{i}", performance=False, node=n, cpu=f"{millis[n] // 4}m")
        for n in sorted(perf)
        for i in range(4)
    ] + [pod(f"light-{n}", performance=False, node=n, cpu="100m") for n in sorted(eco)]
    for manifest in fill:
        manifest["spec"]["priorityClassName"] = low
    create_pods(cluster, namespace, fill)
    before = placed(cluster, namespace)
    snapshot = running_pods(cluster, namespace, set(before))
    submit_gang(cluster, namespace, high, member)
    where = all_bound(cluster, namespace, 4, "train-")
    assert set(where.values()) <= perf, where
    gone = {name: node for name, node in before.items() if name not in placed(cluster, namespace)}
    assert gone, "nothing was preempted"
    assert set(gone.values()) <= perf, gone

    # (c) The same snapshot through core.preemption, with Joulie's placement rule (performance
    # pods only on performance nodes) and first fit for capacity. kube-scheduler breaks ties
    # between equally scored nodes at random, so on this snapshot its own victims differ from
    # run to run; the exact comparison is the next test's, on a snapshot with one answer.
    predicted = predict_victims(millis, perf, snapshot, member, namespace)
    chosen = sorted(v.removeprefix(f"{namespace}/") for v in predicted.victim_pods)
    print("victims:", json.dumps({"kube-scheduler": sorted(gone), "core.preemption": chosen}))
    assert predicted.outcome == "preempt", predicted.reason
    assert chosen
    assert {snapshot[v][0] for v in chosen} <= perf


@pytest.fixture
def ladder(cluster: LocalCluster) -> Iterator[dict[str, int]]:
    """Four low PriorityClasses with distinct values, so the importance of victims is decided
    by priority alone (start times are to the second and would tie)."""
    tag = uuid.uuid4().hex[:6]
    classes = {f"ex-rung{v}-{tag}": v for v in (10, 11, 12, 13)}
    with cluster.api() as api:
        for name, value in classes.items():
            api.post(
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                json={"metadata": {"name": name}, "value": value},
            ).raise_for_status()
    yield classes
    with cluster.api() as api:
        for name in classes:
            api.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")


def test_core_preemption_predicts_kube_schedulers_victims(
    cluster: LocalCluster,
    nodes: list[str],
    extender: Extender,
    namespace: str,
    priorities: tuple[str, str],
    ladder: dict[str, int],
) -> None:
    """On a snapshot with one right answer: the gang fits only on the largest performance node,
    which holds four pods of priorities 10-13; every other performance node is full of work of
    the gang's own priority (not a candidate), the eco nodes are empty but closed to it. Both
    kube-scheduler's workload-aware preemption and core.preemption take the three least
    important pods and spare the fourth."""
    _, high = priorities
    perf, _ = planned(cluster, nodes)
    capacity = {m["metadata"]["name"]: m["status"]["capacity"]["cpu"] for m in manifests()}
    millis = {name: int(cpu) * 1000 for name, cpu in capacity.items()}
    target = max(sorted(perf), key=lambda n: millis[n])
    quarter = millis[target] // 4
    member = millis[target] * 15 // 100  # four of them: 60 % of the node
    fill = []
    for rung, (klass, _) in enumerate(sorted(ladder.items(), key=lambda kv: kv[1])):
        fill.append(pod(f"rung-{rung}", performance=False, node=target, cpu=f"{quarter}m"))
        fill[-1]["spec"]["priorityClassName"] = klass
    for n in sorted(perf - {target}):
        fill.append(pod(f"block-{n}", performance=False, node=n, cpu=f"{millis[n]}m"))
        fill[-1]["spec"]["priorityClassName"] = high
    create_pods(cluster, namespace, fill)
    before = placed(cluster, namespace)
    snapshot = running_pods(cluster, namespace, set(before))
    submit_gang(cluster, namespace, high, member)
    where = all_bound(cluster, namespace, 4, "train-")
    assert set(where.values()) == {target}, where
    gone = sorted(name for name in before if name not in placed(cluster, namespace))

    rank = {f"rung-{i}": v for i, v in enumerate(sorted(ladder.values()))}
    predicted = predict_victims(
        millis, perf, snapshot, member, namespace, priority=lambda name: rank.get(name, 1000)
    )
    chosen = sorted(v.removeprefix(f"{namespace}/") for v in predicted.victim_pods)
    assert gone == ["rung-0", "rung-1", "rung-2"], gone
    assert chosen == gone, {"kube-scheduler": gone, "core.preemption": chosen}
    assert set(predicted.placement.values()) == {target}


def running_pods(
    cluster: LocalCluster, namespace: str, names: set[str]
) -> dict[str, tuple[str, int, float]]:
    """Pod name -> (node, CPU millicores, start time) for the named pods once all run."""

    def started() -> dict[str, tuple[str, int, float]] | None:
        with cluster.api() as api:
            items = api.get(f"/api/v1/namespaces/{namespace}/pods").json()["items"]
        found = {}
        for item in items:
            name, status = item["metadata"]["name"], item.get("status") or {}
            if name not in names or not status.get("startTime"):
                continue
            # The API server writes quantities in canonical form: 96000m comes back as 96.
            cpu = parse_quantity(item["spec"]["containers"][0]["resources"]["requests"]["cpu"])
            at = datetime.fromisoformat(status["startTime"].replace("Z", "+00:00"))
            found[name] = (item["spec"]["nodeName"], int(cpu * 1000), at.timestamp())
        return found if len(found) == len(names) else None

    snapshot: dict[str, tuple[str, int, float]] = wait_until(started, 60, "the pods running")
    return snapshot


def submit_gang(cluster: LocalCluster, namespace: str, priority_class: str, member: int) -> None:
    """A PodGroup ``train`` (gang of four) and its four performance pods of ``member`` mCPU."""
    with cluster.api() as api:
        api.post(
            f"/apis/scheduling.k8s.io/v1beta1/namespaces/{namespace}/podgroups",
            json={
                "apiVersion": "scheduling.k8s.io/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": "train"},
                "spec": {
                    "schedulingPolicy": {"gang": {"minCount": 4}},
                    "priorityClassName": priority_class,
                },
            },
        ).raise_for_status()
    gang = [pod(f"train-{i}", performance=True, cpu=f"{member}m") for i in range(4)]
    for manifest in gang:
        manifest["spec"]["priorityClassName"] = priority_class
        manifest["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    create_pods(cluster, namespace, gang)


def predict_victims(
    millis: dict[str, int],
    perf: set[str],
    snapshot: dict[str, tuple[str, int, float]],
    member: int,
    namespace: str,
    priority: Callable[[str], int] = lambda _: 10,
) -> core.PreemptionResult:
    """core.preemption on the snapshot for the gang of :func:`submit_gang` (priority 1000),
    with Joulie's placement rule: performance pods on performance nodes only, first fit there."""
    nodes = [core.Node(n, {"cpu": float(m)}) for n, m in sorted(millis.items())]
    pods = [
        core.Pod(
            name,
            namespace,
            node=node,
            priority=priority(name),
            start_time=start,
            requests={"cpu": float(cpu)},
        )
        for name, (node, cpu, start) in sorted(snapshot.items())
    ]
    gang = tuple(
        core.Pod(f"train-{i}", namespace, priority=1000, requests={"cpu": float(member)})
        for i in range(4)
    )

    preemptor = core.Preemptor("train", gang, priority=1000, min_count=4)
    return core.preempt(
        nodes,
        pods,
        preemptor,
        reprieval=core.Reprieval.FIXED_PLACEMENT,  # 1.37 reprieves over the chosen placement
        may_use=lambda node: node.name in perf,
    )
