"""The generated CRDs against a real kube-apiserver: accepted examples, rejected invalid objects,
and the printer columns people see in kubectl."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from hack.cluster.runner import LocalCluster

pytestmark = pytest.mark.kube

EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "spec"


def example(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return loaded


def renamed(obj: dict[str, Any], name: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["name"] = name
    obj["spec"]["nodeName"] = name
    return obj


def create(api: httpx.Client, plural: str, obj: dict[str, Any]) -> httpx.Response:
    return api.post(f"/apis/joulie.io/v1alpha1/{plural}", json=obj)


def test_crds_are_established(cluster: LocalCluster) -> None:
    with cluster.api() as api:
        for name in ("nodetwins.joulie.io", "nodehardwares.joulie.io"):
            crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = {c["type"]: c["status"] for c in crd.json()["status"]["conditions"]}
            assert conditions["Established"] == "True"
            assert conditions["NamesAccepted"] == "True"


def test_spec_nodetwin_example_is_accepted_unchanged(cluster: LocalCluster) -> None:
    obj = renamed(example("nodetwin.yaml"), "ex-twin-1")
    with cluster.api() as api:
        response = create(api, "nodetwins", obj)
        assert response.status_code == 201, response.text
        stored = response.json()
    assert stored["spec"] == obj["spec"]


def test_spec_nodehardware_example_status_is_accepted_unchanged(cluster: LocalCluster) -> None:
    obj = renamed(example("nodehardware.yaml"), "ex-hw-1")
    with cluster.api() as api:
        assert create(api, "nodehardwares", obj).status_code == 201
        response = api.patch(
            "/apis/joulie.io/v1alpha1/nodehardwares/ex-hw-1/status",
            json={"status": obj["status"]},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert response.status_code == 200, response.text
    # Nothing was pruned: the schema knows every field the spec's example carries.
    assert response.json()["status"] == obj["status"]


@pytest.mark.parametrize(
    ("case", "mutate", "needle"),
    [
        ("turbo", lambda o: o["spec"].update(profile="turbo"), "spec.profile"),
        ("pct0", lambda o: o["spec"]["gpu"]["powerCap"].update(capPctOfMax=0), "capPctOfMax"),
        ("pct101", lambda o: o["spec"]["gpu"]["powerCap"].update(capPctOfMax=101), "capPctOfMax"),
        (
            "cpu0",
            lambda o: o["spec"]["cpu"].update(packagePowerCapPctOfMax=0),
            "packagePowerCapPctOfMax",
        ),
        ("nonode", lambda o: o["spec"].pop("nodeName"), "spec.nodeName"),
        ("misnamed", lambda o: o["spec"].update(nodeName="another-node"), "named after its node"),
        (
            "ceiling",
            lambda o: o["spec"]["gpu"].update(
                governor={"preset": "peak", "computeClockCeilingPctOfMax": 80}
            ),
            "only valid with preset efficient",
        ),
    ],
)
def test_invalid_nodetwins_are_rejected(
    cluster: LocalCluster, case: str, mutate: Any, needle: str
) -> None:
    obj = renamed(example("nodetwin.yaml"), f"bad-{case}")
    mutate(obj)
    with cluster.api() as api:
        response = create(api, "nodetwins", obj)
    assert response.status_code == 422, response.text
    assert needle in response.json()["message"]


def test_node_name_is_immutable(cluster: LocalCluster) -> None:
    with cluster.api() as api:
        twin = renamed(example("nodetwin.yaml"), "imm-1")
        assert create(api, "nodetwins", twin).status_code == 201
        response = api.patch(
            "/apis/joulie.io/v1alpha1/nodetwins/imm-1",
            json={"spec": {"nodeName": "other"}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
    assert response.status_code == 422
    assert "immutable" in response.json()["message"]


def test_kubectl_shows_the_printer_columns(cluster: LocalCluster) -> None:
    twin = renamed(example("nodetwin.yaml"), "cols-1")
    twin["spec"]["cpu"]["governor"] = {"preset": "efficiency"}
    twin["spec"]["gpu"]["governor"] = {"preset": "efficient", "computeClockCeilingPctOfMax": 80}
    hw = renamed(example("nodehardware.yaml"), "cols-1")
    with cluster.api() as api:
        assert create(api, "nodetwins", twin).status_code == 201
        status = {
            "schedulableClass": "draining",
            "conditions": [
                {
                    "type": "AgentReporting",
                    "status": "True",
                    "reason": "NodeHardwareCurrent",
                    "lastTransitionTime": "2026-11-29T10:00:00Z",
                }
            ],
        }
        response = api.patch(
            "/apis/joulie.io/v1alpha1/nodetwins/cols-1/status",
            json={"status": status},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert response.status_code == 200, response.text
        assert create(api, "nodehardwares", hw).status_code == 201
        response = api.patch(
            "/apis/joulie.io/v1alpha1/nodehardwares/cols-1/status",
            json={"status": hw["status"]},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert response.status_code == 200, response.text

    nt = cluster.kubectl("get", "nt", "cols-1").stdout.splitlines()
    assert nt[0].split() == [
        "NAME",
        "NODE",
        "PROFILE",
        "CLASS",
        "AGENT",
        "CPU-GOV",
        "GPU-GOV",
        "AGE",
    ]
    assert nt[1].split()[:7] == [
        "cols-1",
        "cols-1",
        "eco",
        "draining",
        "True",
        "efficiency",
        "efficient",
    ]
    nhw = cluster.kubectl("get", "nhw", "cols-1").stdout.splitlines()
    assert nhw[0].split() == ["NAME", "NODE", "CPU", "GPU", "GPUS", "QUALITY", "AGE"]
    assert nhw[1].split()[:6] == [
        "cols-1",
        "cols-1",
        "INTEL_XEON_PLATINUM_8260",
        "NVIDIA_H100_NVL",
        "8",
        "exact",
    ]
    # The long names work too.
    assert "cols-1" in cluster.kubectl("get", "nodetwins").stdout
    assert "cols-1" in cluster.kubectl("get", "nodehardwares").stdout
