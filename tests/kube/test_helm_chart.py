"""charts/joulie and manifests/ are one source of truth: `helm template` with the chart's default
values renders the objects of `kubectl kustomize manifests` (real nodes), and with
ci/kwok-values.yaml those of `kubectl kustomize manifests/kwok` (KWOK nodes, the agent pool and
the simulator): every object, every field of its spec, every RBAC rule and admission policy, the
CRDs included. An operator gets the same Joulie whichever way they install it.

What the comparison leaves out, and why (nothing else):
- the four labels Helm's conventions put on every object's own metadata (``helm.sh/chart``,
  ``app.kubernetes.io/managed-by``, ``instance``, ``version``): never on selectors or pod
  templates, so they change no behaviour;
- the order of a container's env entries, which the chart sorts by name (the manifests list them
  by topic; no Joulie value refers to another with ``$(NAME)``);
- the Namespace: Helm creates the release namespace (``--create-namespace``) and does not own it.
  ``namespace.create=true`` renders it, and it must then equal the manifests' Namespace;
- comments in a ConfigMap's YAML file (joulie-scheduler's configuration): such values are
  compared as the YAML they hold.

``scheduler.enabled=true`` adds manifests/scheduler, the second scheduler,
``performancePlacement.enabled=true`` manifests/placement and ``performanceFilter.enabled=true``
manifests/performance-filter (opt-in in both).

The binaries come from hack/build-binaries.sh (helm and kubectl); no cluster is needed.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.cluster.runner import PERFORMANCE_FILTER_CONFIG, PRIORITIZE_ONLY_CONFIG, bin_dir

pytestmark = pytest.mark.kube

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "joulie"
KWOK_VALUES = CHART / "ci" / "kwok-values.yaml"
NAMESPACE = "joulie-system"
HELM_LABELS = frozenset(
    {
        "helm.sh/chart",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
    }
)

Key = tuple[str, str, str, str]


@pytest.fixture(scope="module")
def binaries() -> Path:
    path = bin_dir()
    if not (path / "helm").exists() or not (path / "kubectl").exists():
        message = "helm or kubectl is missing: run hack/build-binaries.sh (or make test)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def helm_template(binaries: Path, *args: str) -> list[dict[str, Any]]:
    """What `helm template` renders, read back as the API server would read it: passed through
    kustomize, so that both sides are parsed by the same Go YAML library (PyYAML reads a folded
    scalar with more-indented lines, as in the admission policies' CEL, differently)."""
    done = run(
        [
            str(binaries / "helm"),
            "template",
            "joulie",
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--include-crds",
            *args,
        ]
    )
    assert done.returncode == 0, done.stderr
    with tempfile.TemporaryDirectory(prefix="joulie-chart-") as tmp:
        (Path(tmp) / "rendered.yaml").write_text(done.stdout)
        (Path(tmp) / "kustomization.yaml").write_text("resources: [rendered.yaml]\n")
        return kustomize(binaries, tmp)


def kustomize(binaries: Path, directory: str) -> list[dict[str, Any]]:
    done = run([str(binaries / "kubectl"), "kustomize", str(ROOT / directory)])
    assert done.returncode == 0, done.stderr
    return [o for o in yaml.safe_load_all(done.stdout) if o]


def key(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


def normalised(objects: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    """Objects by identity, with the documented differences (module docstring) taken out."""
    out: dict[Key, dict[str, Any]] = {}
    for original in objects:
        obj = copy.deepcopy(original)
        meta = obj["metadata"]
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in HELM_LABELS}
        if labels:
            meta["labels"] = labels
        else:
            meta.pop("labels", None)
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        for container in pod.get("containers", []) + pod.get("initContainers", []):
            if "env" in container:
                container["env"] = sorted(container["env"], key=lambda e: e["name"])
        if obj["kind"] == "ConfigMap":
            obj["data"] = {
                k: yaml.safe_load(v) if k.endswith((".yaml", ".yml")) else v
                for k, v in obj.get("data", {}).items()
            }
        assert key(obj) not in out, f"{key(obj)} rendered twice"
        out[key(obj)] = obj
    return out


def assert_same(chart: list[dict[str, Any]], manifests: list[dict[str, Any]]) -> None:
    ours, theirs = normalised(chart), normalised(manifests)
    assert sorted(ours) == sorted(theirs), (
        f"only in the chart: {sorted(set(ours) - set(theirs))}; "
        f"only in the manifests: {sorted(set(theirs) - set(ours))}"
    )
    for k in sorted(ours):
        assert ours[k] == theirs[k], f"{k} differs:\n{yaml.safe_dump(ours[k])}\nvs\n" + (
            yaml.safe_dump(theirs[k])
        )


def without_namespace(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] != "Namespace"]


def test_default_values_render_the_manifests_for_real_nodes(binaries: Path) -> None:
    chart = helm_template(binaries)
    manifests = kustomize(binaries, "manifests")
    assert not [o for o in chart if o["kind"] == "Namespace"]
    assert_same(chart, without_namespace(manifests))
    kinds = {o["kind"] for o in chart}
    assert {"DaemonSet", "PodDisruptionBudget", "CustomResourceDefinition"} <= kinds


def test_kwok_values_render_the_manifests_for_kwok_nodes(binaries: Path) -> None:
    chart = helm_template(binaries, "--values", str(KWOK_VALUES))
    manifests = kustomize(binaries, "manifests/kwok")
    assert_same(chart, without_namespace(manifests))
    kinds = {o["kind"] for o in chart}
    assert "StatefulSet" in kinds
    assert "DaemonSet" not in kinds


def test_scheduler_enabled_adds_the_second_scheduler_of_the_manifests(binaries: Path) -> None:
    chart = helm_template(binaries, "--set", "scheduler.enabled=true")
    manifests = kustomize(binaries, "manifests") + kustomize(binaries, "manifests/scheduler")
    assert_same(chart, without_namespace(manifests))
    assert "joulie-scheduler" in {o["metadata"]["name"] for o in chart}


def test_performance_placement_adds_the_policy_and_can_drop_the_filter_verb(
    binaries: Path,
) -> None:
    chart = helm_template(binaries, "--set", "performancePlacement.enabled=true")
    manifests = kustomize(binaries, "manifests") + kustomize(binaries, "manifests/placement")
    assert_same(chart, without_namespace(manifests))
    # The second scheduler without the filter verb is the prioritize-only example's entry.
    (config,) = [
        o
        for o in helm_template(
            binaries, "--set", "scheduler.enabled=true,scheduler.extender.filter=false"
        )
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "joulie-scheduler-config"
    ]
    (entry,) = yaml.safe_load(config["data"]["config.yaml"])["extenders"]
    example = yaml.safe_load((PRIORITIZE_ONLY_CONFIG).read_text())["extenders"][0]
    assert "filterVerb" not in entry
    assert {k: v for k, v in entry.items() if k != "urlPrefix"} == {
        k: v for k, v in example.items() if k != "urlPrefix"
    }


def test_performance_filter_adds_the_policy_and_can_filter_performance_pods_alone(
    binaries: Path,
) -> None:
    chart = helm_template(binaries, "--set", "performanceFilter.enabled=true")
    manifests = kustomize(binaries, "manifests") + kustomize(
        binaries, "manifests/performance-filter"
    )
    assert_same(chart, without_namespace(manifests))
    # The second scheduler with the filter for performance pods alone has the example's two
    # entries.
    (config,) = [
        o
        for o in helm_template(
            binaries, "--set", "scheduler.enabled=true,scheduler.extender.filter=performancePods"
        )
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "joulie-scheduler-config"
    ]
    entries = yaml.safe_load(config["data"]["config.yaml"])["extenders"]
    example = yaml.safe_load(PERFORMANCE_FILTER_CONFIG.read_text())["extenders"]
    assert [{k: v for k, v in e.items() if k != "urlPrefix"} for e in entries] == [
        {k: v for k, v in e.items() if k != "urlPrefix"} for e in example
    ]
    assert len({e["urlPrefix"] for e in entries}) == 1


def test_grafana_dashboard_enabled_adds_the_dashboard_of_the_manifests(binaries: Path) -> None:
    """charts/joulie/files/joulie-dashboard.json is a copy of manifests/grafana's."""
    chart = [
        o
        for o in helm_template(binaries, "--set", "grafanaDashboard.enabled=true")
        if o["kind"] == "ConfigMap"
    ]
    assert_same(chart, kustomize(binaries, "manifests/grafana"))


def test_namespace_create_renders_the_manifests_namespace(binaries: Path) -> None:
    chart = [
        o
        for o in helm_template(binaries, "--set", "namespace.create=true")
        if o["kind"] == "Namespace"
    ]
    manifests = [o for o in kustomize(binaries, "manifests") if o["kind"] == "Namespace"]
    assert_same(chart, manifests)


def test_critical_pods_have_priority_classes_and_two_replica_roles_a_budget(
    binaries: Path,
) -> None:
    """What the operator relies on in a node drain or under node pressure."""
    objects = {(o["kind"], o["metadata"]["name"]): o for o in helm_template(binaries)}
    classes = {
        name: objects[(kind, name)]["spec"]["template"]["spec"].get("priorityClassName")
        for kind, name in [
            ("Deployment", "joulie-manager"),
            ("Deployment", "joulie-extender"),
            ("DaemonSet", "joulie-agent"),
        ]
    }
    assert classes == {
        "joulie-manager": "system-cluster-critical",
        "joulie-extender": "system-cluster-critical",
        "joulie-agent": "system-node-critical",
    }
    for name in ("joulie-manager", "joulie-extender"):
        budget = objects[("PodDisruptionBudget", name)]["spec"]
        deployment = objects[("Deployment", name)]["spec"]
        assert deployment["replicas"] == 2
        assert budget["maxUnavailable"] == 1
        assert budget["selector"] == deployment["selector"]


def images(objects: list[dict[str, Any]]) -> set[str]:
    return {
        c["image"]
        for o in objects
        for c in o.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
    }


def test_image_tag_defaults_to_the_app_version_and_a_digest_wins(binaries: Path) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["version"] == chart["appVersion"] == project["version"]
    every_role = ["--values", str(KWOK_VALUES), "--set", "agent.enabled=true"]
    assert images(helm_template(binaries, *every_role)) == {f"joulie:{project['version']}"}
    digest = "sha256:" + "ab" * 32
    pinned = helm_template(
        binaries,
        *every_role,
        "--set",
        f"image.repository=registry.example/joulie,image.tag=9.9.9,image.digest={digest}",
    )
    assert images(pinned) == {f"registry.example/joulie@{digest}"}


def test_settings_become_env_and_a_misspelt_value_is_refused(binaries: Path) -> None:
    objects = helm_template(binaries, "--set", "manager.settings.RECONCILE_INTERVAL=30s")
    (manager,) = [
        o
        for o in objects
        if o["metadata"]["name"] == "joulie-manager" and o["kind"] == "Deployment"
    ]
    env = {
        e["name"]: e.get("value")
        for e in manager["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["RECONCILE_INTERVAL"] == "30s"
    done = run(
        [str(binaries / "helm"), "template", "joulie", str(CHART), "--set", "manager.replica=3"]
    )
    assert done.returncode != 0
    assert "replica" in done.stderr
    assert "additional properties" in done.stderr.lower()


def test_lint_is_clean_with_every_option_on(binaries: Path) -> None:
    every = ",".join(
        [
            "agentPool.enabled=true",
            "simulator.enabled=true",
            "manager.lifecycleRBAC.kwok=true",
            "manager.lifecycleRBAC.clusterApi=true",
            "monitoring.podMonitor.enabled=true",
            "monitoring.serviceMonitor.enabled=true",
            "monitoring.prometheusRule.enabled=true",
            "namespace.create=true",
            "scheduler.enabled=true",
            "scheduler.podDisruptionBudget.enabled=true",
            "grafanaDashboard.enabled=true",
            "performancePlacement.enabled=true",
            "performanceFilter.enabled=true",
        ]
    )
    for args in ([], ["--set", every]):
        done = run([str(binaries / "helm"), "lint", "--strict", str(CHART), *args])
        assert done.returncode == 0, done.stdout + done.stderr


def test_alert_rules_are_valid_promql_on_the_roles_metric_names(binaries: Path) -> None:
    """The PrometheusRule's alerts load in Prometheus (promtool, from the Prometheus that the
    simulator's tests use) and each one reads series that Joulie's roles export."""
    promtool = shutil.which("promtool")
    if promtool is None:
        message = "promtool is missing: run hack/install-prometheus.sh (or make test)"
        if os.environ.get("JOULIE_REQUIRE_PROMETHEUS"):
            pytest.fail(message)
        pytest.skip(message)
    (rule,) = [
        o
        for o in helm_template(binaries, "--set", "monitoring.prometheusRule.enabled=true")
        if o["kind"] == "PrometheusRule"
    ]
    exported = {
        name
        for source in ROOT.joinpath("joulie").rglob("*.py")
        for name in re.findall(r'"(joulie_[a-z_]+)"', source.read_text())
    }
    alerts = rule["spec"]["groups"][0]["rules"]
    assert {a["alert"] for a in alerts} >= {
        "JoulieFailingNodes",
        "JoulieTwinsStale",
        "JoulieAgentNotReporting",
        "JoulieExtenderErrors",
    }
    for alert in alerts:
        used = set(re.findall(r"\bjoulie_[a-z_]+", alert["expr"]))
        assert used <= exported, f"{alert['alert']} reads unknown series {used - exported}"
    with tempfile.TemporaryDirectory(prefix="joulie-rules-") as tmp:
        path = Path(tmp) / "rules.yaml"
        path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
        done = run([promtool, "check", "rules", str(path)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts)} rules found" in done.stdout
