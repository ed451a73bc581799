"""joulie-scheduler (manifests/scheduler), the second scheduler for clusters whose own
kube-scheduler cannot be configured: the real kube-scheduler binary, run with the
KubeSchedulerConfiguration of the shipped ConfigMap, the command line of the shipped Deployment
and the credentials of the shipped ServiceAccount and RBAC, beside the local cluster's own
kube-scheduler (default-scheduler, which knows nothing of Joulie). Only two things are changed for
the local cluster: the API server it talks to and the address of the extender (a process here,
the joulie-extender Service there).

Pods that ask for ``schedulerName: joulie-scheduler`` get Joulie's placement (a performance pod
kept off the eco node); the same pods without it are placed by default-scheduler on the eco node,
which its own scoring prefers. The second scheduler elects itself on a Lease of its own and
schedules while the cluster's kube-scheduler Lease is held by someone else.
"""

from __future__ import annotations

import datetime as dt
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from hack.cluster.roles import (
    RoleProcess,
    extender_settings,
    manager_settings,
    simulator_settings,
)
from hack.cluster.runner import NAMESPACE, LocalCluster, free_port
from joulie.api import keys
from tests.support.builders import WORK_IMAGE, container, kwok_node, node_group, pod_manifest
from tests.support.cluster_pods import create_pods, placed, pod_namespace
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "manifests" / "scheduler"
EXAMPLE = ROOT / "manifests" / "extender" / "kube-scheduler-config.example.yaml"
NAME = "joulie-scheduler"
E2E_LABEL = "joulie.io/e2e"
E2E = "second-scheduler"
SELECTOR = f"{E2E_LABEL}={E2E}"
NODE_CPUS = 64
PODS = 6
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
TWINS = f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}"
RBAC_KINDS = {"ServiceAccount", "ClusterRoleBinding", "Role", "RoleBinding"}
DECOY_HOLDER = "the-clusters-own-kube-scheduler"


# --- what manifests/scheduler ships -------------------------------------------------------------


@dataclass(frozen=True)
class Shipped:
    config: dict[str, Any]
    """The KubeSchedulerConfiguration in the ConfigMap."""
    command: list[str]
    """The Deployment's container command."""
    container: dict[str, Any]
    pod: dict[str, Any]
    configmap: dict[str, Any]
    rbac: list[dict[str, Any]]


def build(cluster: LocalCluster) -> Shipped:
    """``kubectl kustomize manifests/scheduler``: what an operator applies."""
    out = cluster.kubectl("kustomize", str(SHIPPED)).stdout
    objects = [o for o in yaml.safe_load_all(out) if o]
    (configmap,) = [o for o in objects if o["kind"] == "ConfigMap"]
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (data,) = configmap["data"].values()
    pod = deployment["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    return Shipped(
        config=yaml.safe_load(data),
        command=list(ctr["command"]) + list(ctr.get("args") or []),
        container=ctr,
        pod=pod,
        configmap=configmap,
        rbac=[o for o in objects if o["kind"] in RBAC_KINDS],
    )


@pytest.fixture(scope="module")
def shipped(cluster: LocalCluster) -> Shipped:
    return build(cluster)


# --- nodes and the Joulie roles -----------------------------------------------------------------


@pytest.fixture(scope="module")
def nodes(cluster: LocalCluster) -> Iterator[list[str]]:
    """Two KWOK nodes of one kind; the manager (STATIC_HP_FRAC 0.5) keeps one in performance."""
    group = node_group("ss", cpu_cores=NODE_CPUS, memory_gib=256)
    made = [kwok_node(f"ss-{i}", group, labels={E2E_LABEL: E2E}) for i in range(2)]
    names = [n["metadata"]["name"] for n in made]
    cluster.create_ready_nodes(made)
    yield names
    with cluster.api() as api:
        for name in names:
            api.delete(f"/api/v1/nodes/{name}")
            api.delete(f"{TWINS}/{name}")


@dataclass(frozen=True)
class Extender:
    process: RoleProcess
    url: str


@pytest.fixture(scope="module")
def extender(
    cluster: LocalCluster, nodes: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Extender]:
    """The simulator (the nodes' power), the manager (their classes) and the extender, each a
    process with its own account."""
    tmp = tmp_path_factory.mktemp("ss-roles")
    sim_port, ext_port = free_port(), free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    started: list[RoleProcess] = []
    try:
        started.append(
            RoleProcess(
                cluster,
                "simulator",
                tmp / "simulator.log",
                simulator_settings(f"127.0.0.1:{sim_port}", SELECTOR),
            )
        )
        wait_until(started[-1].ready, 60, "the simulator to be ready")
        started.append(
            RoleProcess(
                cluster, "manager", tmp / "manager.log", manager_settings(SELECTOR, sim_url)
            )
        )
        wait_until(started[-1].ready, 60, "the manager to lead")
        started.append(
            RoleProcess(
                cluster,
                "extender",
                tmp / "extender.log",
                extender_settings(f"127.0.0.1:{ext_port}", namespace=NAMESPACE),
            )
        )
        wait_until(started[-1].ready, 60, "the extender's caches to sync")
        yield Extender(started[-1], f"http://127.0.0.1:{ext_port}")
    finally:
        for role in reversed(started):
            role.stop()


def planned(cluster: LocalCluster, nodes: list[str]) -> tuple[str, str]:
    """(the performance node, the eco node) once the manager has classed both."""

    def classes() -> tuple[str, str] | None:
        with cluster.api() as api:
            found = {
                t["metadata"]["name"]: (t.get("status") or {}).get("schedulableClass")
                for t in api.get(TWINS).json()["items"]
                if t["metadata"]["name"] in nodes
            }
        perf = [n for n, c in found.items() if c == "performance"]
        eco = [n for n, c in found.items() if c == "eco"]
        return (perf[0], eco[0]) if len(perf) == len(eco) == 1 else None

    result: tuple[str, str] = wait_until(classes, 90, "one performance and one eco twin")
    return result


# --- the second scheduler -----------------------------------------------------------------------


def lease_path(namespace: str, name: str) -> str:
    return f"{LEASES.format(namespace=namespace)}/{name}"


def get_lease(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any] | None:
    with cluster.api() as api:
        got = api.get(lease_path(namespace, name))
    return got.json() if got.status_code == 200 else None


@dataclass
class SecondScheduler:
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    work_dir: Path
    decoy: dict[str, Any]
    """kube-system/kube-scheduler as it stood when the second scheduler started."""

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"https://127.0.0.1:{self.port}{path}", verify=False, timeout=5)

    def healthy(self) -> bool:
        assert self.process.poll() is None, self.log.read_text()[-4000:]
        return self.get("/healthz").status_code == 200


def account_kubeconfig(cluster: LocalCluster, path: Path) -> Path:
    """A kubeconfig with a token of ServiceAccount joulie-scheduler (as its pods would hold)."""
    with cluster.api() as api:
        answer = api.post(
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{NAME}/token",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
    answer.raise_for_status()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {
                    "server": cluster.server,
                    "certificate-authority": str(cluster.pki.ca_cert),
                },
            }
        ],
        "users": [{"name": NAME, "user": {"token": answer.json()["status"]["token"]}}],
        "contexts": [{"name": NAME, "context": {"cluster": "local", "user": NAME}}],
        "current-context": NAME,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def hold_kube_scheduler_lease(cluster: LocalCluster) -> tuple[dict[str, Any], bool]:
    """kube-system/kube-scheduler held for an hour by another scheduler, as a self-managed
    cluster's own kube-scheduler holds it (the local one runs without leader election). A second
    scheduler that took this Lease would wait the hour out and schedule nothing. Returns the
    Lease and whether this function created it."""
    found = get_lease(cluster, "kube-system", "kube-scheduler")
    if found is not None:
        return found, False
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    with cluster.api() as api:
        made = api.post(
            LEASES.format(namespace="kube-system"),
            json={
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "kube-scheduler"},
                "spec": {
                    "holderIdentity": DECOY_HOLDER,
                    "leaseDurationSeconds": 3600,
                    "acquireTime": now,
                    "renewTime": now,
                },
            },
        )
    made.raise_for_status()
    body: dict[str, Any] = made.json()
    return body, True


@pytest.fixture(scope="module")
def second_scheduler(
    cluster: LocalCluster,
    shipped: Shipped,
    extender: Extender,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SecondScheduler]:
    tmp = tmp_path_factory.mktemp("ss-scheduler")
    rbac = yaml.safe_dump_all(shipped.rbac)
    cluster.kubectl("apply", "-f", "-", stdin=rbac)
    decoy, made_decoy = hold_kube_scheduler_lease(cluster)
    process: subprocess.Popen[bytes] | None = None
    try:
        kubeconfig = account_kubeconfig(cluster, tmp / "kubeconfig")
        # The shipped configuration, with the local API server and extender.
        config = dict(shipped.config)
        assert "kubeconfig" not in (config.get("clientConnection") or {})  # in-cluster there
        config["clientConnection"] = {
            **(config.get("clientConnection") or {}),
            "kubeconfig": str(kubeconfig),
        }
        (entry,) = config["extenders"]
        config["extenders"] = [{**entry, "urlPrefix": extender.url}]
        config_path = tmp / "config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        # The shipped command line, with the local binary and configuration file.
        binary, *flags = shipped.command
        assert binary.endswith("/kube-scheduler")
        argv = [str(Path(cluster.binaries or "") / "kube-scheduler")]
        for flag in flags:
            argv.append(f"--config={config_path}" if flag.startswith("--config=") else flag)
        port = free_port()
        argv += [
            # In a pod these come from the in-cluster config: the same account.
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
        ]
        work_dir = tmp / "cwd"
        work_dir.mkdir()
        log = tmp / "kube-scheduler.log"
        with log.open("ab") as out:
            process = subprocess.Popen(
                argv, cwd=work_dir, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        running = SecondScheduler(process, port, log, work_dir, decoy)
        wait_until(running.healthy, 60, "joulie-scheduler to be healthy")
        yield running
    finally:
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        cluster.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=rbac)
        with cluster.api() as api:
            api.delete(lease_path(NAMESPACE, NAME))
            if made_decoy:
                api.delete(lease_path("kube-system", "kube-scheduler"))


# --- pods ---------------------------------------------------------------------------------------


@pytest.fixture
def namespace(cluster: LocalCluster, nodes: list[str]) -> Iterator[str]:
    with pod_namespace(cluster, "ss") as name:
        yield name


def work_pod(
    name: str,
    *,
    performance: bool,
    scheduler: str | None = None,
    cpu: str = "100m",
    node: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 0}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if node is None:
        spec["nodeSelector"] = {E2E_LABEL: E2E}
    return pod_manifest(
        name,
        containers=[container({"cpu": cpu}, name="work", image=WORK_IMAGE)],
        node_name=node,
        annotations={keys.WORKLOAD_CLASS_ANNOTATION: "performance" if performance else "standard"},
        spec=spec,
    )


def all_bound(cluster: LocalCluster, namespace: str, names: set[str]) -> dict[str, str]:
    def bound() -> dict[str, str] | None:
        found = {k: v for k, v in placed(cluster, namespace).items() if k in names}
        return found if len(found) == len(names) and all(found.values()) else None

    where: dict[str, str] = wait_until(bound, 120, f"{len(names)} pods bound")
    return where


def scheduled_by(cluster: LocalCluster, namespace: str, pod: str) -> str:
    """Who reported the pod's Scheduled event (what `kubectl describe pod` shows under From)."""

    def reporter() -> str | None:
        with cluster.api() as api:
            events = api.get(
                f"/api/v1/namespaces/{namespace}/events",
                params={"fieldSelector": f"involvedObject.name={pod},reason=Scheduled"},
            ).json()["items"]
        for event in events:
            found = event.get("reportingComponent") or (event.get("source") or {}).get("component")
            if found:
                return str(found)
        return None

    found: str = wait_until(reporter, 30, f"the Scheduled event of {pod}")
    return found


def extender_filter_calls(extender: Extender) -> float:
    return extender.process.metric("joulie_extender_requests_total", verb="filter")


# --- the tests ----------------------------------------------------------------------------------


def test_the_shipped_scheduler_asks_the_extender_as_the_example_configuration_does(
    cluster: LocalCluster, shipped: Shipped
) -> None:
    """The two set-ups (the extender in the cluster's own kube-scheduler, or joulie-scheduler)
    make the same calls with the same weight, the Deployment runs the ConfigMap's file, and the
    API server takes every object as written (no unknown or misspelt field)."""
    checked = cluster.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-k", str(SHIPPED)
    ).stdout
    assert "deployment.apps/joulie-scheduler created (server dry run)" in checked, checked
    example = yaml.safe_load(EXAMPLE.read_text())
    assert shipped.config["extenders"] == example["extenders"]
    assert [p["schedulerName"] for p in shipped.config["profiles"]] == [NAME]
    election = shipped.config["leaderElection"]
    assert election["leaderElect"] is True
    assert (election["resourceNamespace"], election["resourceName"]) == (NAMESPACE, NAME)
    (config_flag,) = [f for f in shipped.command if f.startswith("--config=")]
    path = Path(config_flag.removeprefix("--config="))
    mounts = {m["name"]: m["mountPath"] for m in shipped.container["volumeMounts"]}
    volumes = {v["name"]: v for v in shipped.pod["volumes"]}
    (volume,) = [v for v in volumes.values() if "configMap" in v]
    assert volume["configMap"]["name"] == shipped.configmap["metadata"]["name"]
    assert str(path.parent) == mounts[volume["name"]]
    assert path.name in shipped.configmap["data"]
    versions = dict(
        line.split("=", 1)
        for line in (ROOT / "hack" / "versions.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    image = f"registry.k8s.io/kube-scheduler:{versions['KUBERNETES_VERSION']}"
    assert shipped.container["image"] == image


def test_only_pods_that_ask_for_joulie_scheduler_get_joulies_placement(
    cluster: LocalCluster,
    nodes: list[str],
    extender: Extender,
    second_scheduler: SecondScheduler,
    namespace: str,
) -> None:
    """The performance node is 80 % full and the eco node empty: default-scheduler's own
    scoring sends every performance pod to the eco node; joulie-scheduler, asking the extender,
    keeps the performance pods that name it off the eco node."""
    perf, eco = planned(cluster, nodes)
    create_pods(
        cluster,
        namespace,
        [work_pod("busy", performance=False, node=perf, cpu=f"{NODE_CPUS * 800}m")],
    )
    before = extender_filter_calls(extender)
    joulie = {f"joulie-{i}" for i in range(PODS)}
    plain = {f"plain-{i}" for i in range(PODS)}
    create_pods(
        cluster,
        namespace,
        [work_pod(n, performance=True, scheduler=NAME) for n in sorted(joulie)]
        + [work_pod(n, performance=True) for n in sorted(plain)],
    )
    where = all_bound(cluster, namespace, joulie | plain)
    assert {where[n] for n in joulie} == {perf}, where
    assert {where[n] for n in plain} == {eco}, where
    assert scheduled_by(cluster, namespace, "joulie-0") == NAME
    assert scheduled_by(cluster, namespace, "plain-0") == "default-scheduler"
    # Only joulie-scheduler asked the extender (the local kube-scheduler runs without it).
    assert extender_filter_calls(extender) - before >= PODS


def test_joulie_scheduler_holds_a_lease_of_its_own(
    cluster: LocalCluster, second_scheduler: SecondScheduler, namespace: str
) -> None:
    """kube-system/kube-scheduler is held by another scheduler for an hour, and joulie-scheduler
    still schedules: it leads on joulie-system/joulie-scheduler, renews that one and leaves the
    other untouched."""
    me = f"{socket.gethostname()}_"
    own: dict[str, Any] = wait_until(
        lambda: (
            (lease := get_lease(cluster, NAMESPACE, NAME))
            and str(lease["spec"].get("holderIdentity", "")).startswith(me)
            and lease
        ),
        30,
        f"joulie-scheduler to lead on {NAMESPACE}/{NAME}",
    )
    create_pods(cluster, namespace, [work_pod("opted-in", performance=False, scheduler=NAME)])
    all_bound(cluster, namespace, {"opted-in"})
    renewed = own["spec"]["renewTime"]
    wait_until(
        lambda: (
            (get_lease(cluster, NAMESPACE, NAME) or {}).get("spec", {}).get("renewTime")
            not in (None, renewed)
        ),
        30,
        "joulie-scheduler to renew its Lease",
    )
    theirs = get_lease(cluster, "kube-system", "kube-scheduler")
    assert theirs is not None
    decoy = second_scheduler.decoy
    assert theirs["spec"]["holderIdentity"] == decoy["spec"]["holderIdentity"]
    assert theirs["metadata"]["resourceVersion"] == decoy["metadata"]["resourceVersion"]


def test_the_deployments_probes_answer_and_its_account_is_enough(
    second_scheduler: SecondScheduler, shipped: Shipped
) -> None:
    """The liveness and readiness probes' paths answer on the secure port, with no credentials
    (as the kubelet calls them); the account is refused nothing; nothing is written to disk
    (the root file system is read-only in the pod)."""
    for probe in ("livenessProbe", "readinessProbe"):
        check = shipped.container[probe]["httpGet"]
        assert check["scheme"] == "HTTPS"
        assert second_scheduler.get(check["path"]).status_code == 200, probe
    (port,) = shipped.container["ports"]
    assert port["containerPort"] == 10259  # kube-scheduler's secure port when none is given
    log = second_scheduler.log.read_text(errors="replace")
    assert "forbidden" not in log.lower(), [
        line for line in log.splitlines() if "forbidden" in line.lower()
    ][:5]
    assert list(second_scheduler.work_dir.iterdir()) == []
