"""The deployment manifests hang together and configure each role validly."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from joulie.api import keys
from joulie.api.enums import WorkloadClass
from joulie.manager.settings import ManagerSettings
from joulie.process.roles import load_settings, parse_roles

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "*"}


def kustomizations() -> list[Path]:
    return sorted(MANIFESTS.rglob("kustomization.yaml"))


def objects() -> list[dict[str, Any]]:
    found = []
    for path in sorted(MANIFESTS.rglob("*.yaml")):
        if path.name == "kustomization.yaml" or path.name.endswith(".example.yaml"):
            continue
        found += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [o for o in objects() if o["kind"] == kind]


def named(kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in by_kind(kind) if o["metadata"]["name"] == name]
    return found


def workloads() -> Iterator[dict[str, Any]]:
    for o in objects():
        if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet"):
            yield o


@pytest.mark.parametrize("kustomization", kustomizations(), ids=lambda p: str(p.parent.name))
def test_kustomization_resources_exist(kustomization: Path) -> None:
    spec = yaml.safe_load(kustomization.read_text())
    for resource in spec["resources"]:
        target = kustomization.parent / resource
        assert target.is_file() or (target / "kustomization.yaml").is_file(), resource


def test_every_object_is_identified_and_namespaced_where_needed() -> None:
    cluster_scoped = {
        "Namespace",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "PriorityClass",
    }
    # The kubelets' heartbeats live in kube-node-lease: the manager's node lifecycle reads them
    # there, through a Role and RoleBinding of that namespace. Events about Nodes are filed in
    # default, and the manager may write Events there alone.
    elsewhere = {
        ("Role", "joulie-manager-node-leases"): "kube-node-lease",
        ("RoleBinding", "joulie-manager-node-leases"): "kube-node-lease",
        ("Role", "joulie-manager-events"): "default",
        ("RoleBinding", "joulie-manager-events"): "default",
        # joulie-scheduler (opt-in) reads the API server's client CA there, as kube-scheduler does.
        ("RoleBinding", "joulie-scheduler-authentication-reader"): "kube-system",
    }
    for o in objects():
        assert o["apiVersion"], o
        assert o["metadata"]["name"], o
        if (o["kind"], o["metadata"]["name"]) in elsewhere:
            assert o["metadata"].get("namespace") == elsewhere[o["kind"], o["metadata"]["name"]]
        elif o["kind"] not in cluster_scoped:
            assert o["metadata"].get("namespace") == "joulie-system", o["metadata"]["name"]


def _env(container: dict[str, Any]) -> dict[str, str]:
    env = {}
    for item in container.get("env", []):
        # Values from the downward API are only known in the cluster: a pod's name (a
        # StatefulSet's ends in its ordinal) or any name will do here.
        field = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        stand_in = "pod-0" if field == "metadata.name" else "from-downward-api"
        env[item["name"]] = item.get("value", stand_in)
    return env


def joulie_workloads() -> Iterator[dict[str, Any]]:
    """The workloads running Joulie's image (joulie-scheduler runs the upstream kube-scheduler)."""
    for w in workloads():
        if w["spec"]["template"]["spec"]["containers"][0]["image"] == "joulie":
            yield w


@pytest.mark.parametrize("workload", list(joulie_workloads()), ids=lambda w: w["metadata"]["name"])
def test_workload_environment_is_a_valid_configuration(workload: dict[str, Any]) -> None:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    (arg,) = container["args"]
    assert arg.startswith("--role=")
    loaded = load_settings(parse_roles(arg.removeprefix("--role=")), _env(container))
    assert [str(p) for item in loaded for p in item.problems] == []
    assert [w for item in loaded for w in item.warnings] == []
    known = {item.settings.env_name(n) for item in loaded for n in type(item.settings).model_fields}
    # Every variable set is one the role reads (typos would be silently ignored otherwise);
    # the NVIDIA ones are read by the container runtime.
    outside = {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"}
    assert set(_env(container)) - known <= outside


@pytest.mark.parametrize("workload", list(workloads()), ids=lambda w: w["metadata"]["name"])
def test_workloads_run_under_their_own_bound_service_account(workload: dict[str, Any]) -> None:
    pod = workload["spec"]["template"]["spec"]
    account = pod["serviceAccountName"]
    assert account in {sa["metadata"]["name"] for sa in by_kind("ServiceAccount")}
    bound = {s["name"] for b in by_kind("ClusterRoleBinding") for s in b["subjects"]}
    assert account in bound
    container = pod["containers"][0]
    probes = (
        container["livenessProbe"]["httpGet"]["path"],
        container["readinessProbe"]["httpGet"]["path"],
    )
    assert probes == ("/healthz", "/readyz")


def rules(name: str) -> list[dict[str, Any]]:
    (role,) = [r for r in by_kind("ClusterRole") if r["metadata"]["name"] == name]
    return list(role["rules"])


def test_extender_writes_nothing() -> None:
    for rule in rules("joulie-extender"):
        assert not set(rule["verbs"]) & WRITE_VERBS, rule


def test_agent_cannot_change_nodes_or_desired_state() -> None:
    for rule in rules("joulie-agent"):
        if set(rule["verbs"]) & WRITE_VERBS:
            assert not {"nodes", "nodetwins", "pods"} & set(rule["resources"]), rule


def test_only_the_agent_daemonset_runs_as_root_and_without_privilege() -> None:
    for w in workloads():
        pod = w["spec"]["template"]["spec"]
        security = pod["containers"][0]["securityContext"]
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert not security.get("privileged", False)
        if w["kind"] == "DaemonSet":
            assert security["runAsUser"] == 0
            # The agent finds the host's /sys and /proc under HOST_ROOT, and keeps its baseline
            # on the node (a hostPath), so a restarted agent restores the real one.
            container = pod["containers"][0]
            env = {e["name"]: e.get("value") for e in container["env"]}
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            paths = {v["name"]: v.get("hostPath", {}).get("path") for v in pod["volumes"]}
            root = env["HOST_ROOT"]
            assert paths[mounts[f"{root}/sys"]] == "/sys"
            assert paths[mounts[f"{root}/proc"]] == "/proc"
            assert paths[mounts[env["STATE_DIR"]]] == env["STATE_DIR"]
        else:
            assert pod["securityContext"]["runAsNonRoot"] is True


def test_the_agent_daemonset_reads_the_kubelets_pod_resources_directory() -> None:
    (daemonset,) = [w for w in workloads() if w["kind"] == "DaemonSet"]
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    socket = {e["name"]: e.get("value") for e in container["env"]}["POD_RESOURCES_SOCKET"]
    directory = posixpath.dirname(socket)
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == directory]
    assert mount.get("readOnly") is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    # The directory, not the socket: the kubelet recreates its socket when it restarts, and a
    # mount of the file would keep the dead one.
    assert volume["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    # It watches its node's pods for their classes, and may change none.
    pods = [r for r in rules("joulie-agent") if "pods" in r["resources"]]
    assert [set(r["verbs"]) for r in pods] == [{"list", "watch"}]


def test_scheduler_config_example_points_at_the_extender_service() -> None:
    config = yaml.safe_load(
        (MANIFESTS / "extender" / "kube-scheduler-config.example.yaml").read_text()
    )
    (extender,) = config["extenders"]
    (service,) = [s for s in by_kind("Service") if s["metadata"]["name"] == "joulie-extender"]
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "http-extender")
    assert extender["urlPrefix"] == f"http://joulie-extender.joulie-system.svc:{port}"
    assert extender["nodeCacheCapable"] is True
    assert extender["ignorable"] is True


def test_kwok_overlay_points_the_manager_at_the_simulator() -> None:
    spec = yaml.safe_load((MANIFESTS / "kwok" / "kustomization.yaml").read_text())
    (patch,) = [p for p in spec["patches"] if p["target"]["name"] == "joulie-manager"]
    added = [op["value"] for op in yaml.safe_load(patch["patch"])]
    (manager,) = [w for w in workloads() if w["metadata"]["name"] == "joulie-manager"]
    (container,) = manager["spec"]["template"]["spec"]["containers"]
    env = {**_env(container), **_env({"env": added})}
    loaded = load_settings(parse_roles("manager"), env)
    assert [str(p) for item in loaded for p in item.problems] == []
    (settings,) = [item.settings for item in loaded if isinstance(item.settings, ManagerSettings)]
    assert settings.node_power_source == "http"
    # The endpoint names the simulator Service's port.
    service = next(o for o in by_kind("Service") if o["metadata"]["name"] == "joulie-simulator")
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "http-sim")
    assert f"joulie-simulator.joulie-system.svc:{port}/" in env["NODE_POWER_HTTP_ENDPOINT"]


def performance_pod_policy(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The MutatingAdmissionPolicy ``name`` and its binding, checked to be bound to each other
    and to match the pods annotated performance."""
    policy = named("MutatingAdmissionPolicy", name)
    binding = named("MutatingAdmissionPolicyBinding", name)
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    conditions = " ".join(c["expression"] for c in policy["spec"]["matchConditions"])
    assert f"'{keys.WORKLOAD_CLASS_ANNOTATION}'" in conditions
    assert f"'{WorkloadClass.PERFORMANCE.value}'" in conditions
    return policy, binding


def test_performance_priority_policy_gives_the_shipped_class_to_performance_pods() -> None:
    (priority_class,) = by_kind("PriorityClass")
    assert priority_class["preemptionPolicy"] == "Never"
    assert priority_class["globalDefault"] is False
    policy, binding = performance_pod_policy("joulie-performance-priority")
    # The class is the policy's parameter: name, value and preemption policy come from it.
    assert binding["spec"]["paramRef"]["name"] == priority_class["metadata"]["name"]
    assert policy["spec"]["paramKind"] == {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
    }
    assert policy["spec"]["failurePolicy"] == "Ignore"


def test_performance_placement_policy_keeps_performance_pods_off_eco_by_node_affinity() -> None:
    policy = performance_pod_policy("joulie-performance-placement")[0]
    (mutation,) = policy["spec"]["mutations"]
    expression = mutation["jsonPatch"]["expression"]
    # The label the manager writes, and the profile it writes for eco and draining nodes alike.
    assert f"key: '{keys.POWER_PROFILE_LABEL}', operator: 'NotIn', values: ['eco']" in expression
    assert policy["spec"]["reinvocationPolicy"] == "Never"


def test_performance_filter_policy_marks_performance_pods_with_the_managed_resource() -> None:
    policy = performance_pod_policy("joulie-performance-filter")[0]
    (mutation,) = policy["spec"]["mutations"]
    expression = mutation["applyConfiguration"]["expression"]
    mark = f"{{'{keys.PERFORMANCE_POD_RESOURCE}': '1'}}"
    assert f"requests: {mark}" in expression
    assert f"limits: {mark}" in expression
    # The resource the policy gives is the one kube-scheduler's filter entry manages.
    config = yaml.safe_load(
        (MANIFESTS / "extender/kube-scheduler-config.performance-filter.example.yaml").read_text()
    )
    (filtering,) = [e for e in config["extenders"] if "filterVerb" in e]
    assert filtering["managedResources"] == [
        {"name": keys.PERFORMANCE_POD_RESOURCE, "ignoredByScheduler": True}
    ]
    assert policy["spec"]["reinvocationPolicy"] == "Never"
