"""The CRDs come from the models, are structural, and say what the spec says."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from joulie.api.crd import ALL_CRDS, NODE_HARDWARE_CRD, NODE_TWIN_CRD, crd_file_name, crd_manifest
from joulie.cli import render_yaml
from tests.structural import schema_errors, structural_problems


def schema_of(info: Any) -> dict[str, Any]:
    schema: dict[str, Any] = crd_manifest(info)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize("info", ALL_CRDS, ids=lambda i: i.kind)
def test_committed_crd_matches_generated(repo_root: Path, info: Any) -> None:
    committed = (repo_root / "manifests" / "crds" / crd_file_name(info)).read_text()
    assert committed == render_yaml(crd_manifest(info)), "run `make crds` and commit the result"


@pytest.mark.parametrize("info", ALL_CRDS, ids=lambda i: i.kind)
def test_schema_is_structural(info: Any) -> None:
    assert structural_problems(schema_of(info)) == []


@pytest.mark.parametrize("info", ALL_CRDS, ids=lambda i: i.kind)
def test_crd_shape(info: Any) -> None:
    crd = crd_manifest(info)
    spec = crd["spec"]
    assert spec["group"] == "joulie.io"
    assert spec["scope"] == "Cluster"
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1"
    assert version["served"]
    assert version["storage"]
    assert version["subresources"] == {"status": {}}
    assert spec["names"]["plural"] == info.plural


def columns(info: Any) -> dict[str, str]:
    version = crd_manifest(info)["spec"]["versions"][0]
    return {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}


def test_nodetwin_names_and_columns() -> None:
    assert crd_manifest(NODE_TWIN_CRD)["spec"]["names"]["shortNames"] == ["nt"]
    cols = columns(NODE_TWIN_CRD)
    assert cols["Node"] == ".spec.nodeName"
    assert cols["Profile"] == ".spec.profile"
    assert cols["Class"] == ".status.schedulableClass"
    assert cols["Agent"] == '.status.conditions[?(@.type=="AgentReporting")].status'
    assert cols["CPU-Gov"] == ".spec.cpu.governor.preset"
    assert cols["GPU-Gov"] == ".spec.gpu.governor.preset"


def test_nodehardware_names_and_columns() -> None:
    assert crd_manifest(NODE_HARDWARE_CRD)["spec"]["names"]["shortNames"] == ["nhw"]
    cols = columns(NODE_HARDWARE_CRD)
    assert cols == {
        "Node": ".spec.nodeName",
        "CPU": ".status.cpu.model",
        "GPU": ".status.gpu.model",
        "GPUs": ".status.gpu.count",
        "Quality": ".status.quality.overall",
        "Age": ".metadata.creationTimestamp",
    }


def test_spec_enums_and_ranges_are_in_the_schema() -> None:
    spec = schema_of(NODE_TWIN_CRD)["properties"]["spec"]
    assert spec["required"] == ["nodeName", "profile"]
    assert spec["properties"]["profile"]["enum"] == ["performance", "eco"]
    pct = spec["properties"]["gpu"]["properties"]["powerCap"]["properties"]["capPctOfMax"]
    assert (pct["minimum"], pct["exclusiveMinimum"], pct["maximum"]) == (0, True, 100)
    watts = spec["properties"]["cpu"]["properties"]["packagePowerCapWatts"]
    assert watts["minimum"] == 1
    # Control results stay open: the spec says the CRD does not enumerate them.
    status = schema_of(NODE_TWIN_CRD)["properties"]["status"]
    result = status["properties"]["controlStatus"]["properties"]["cpu"]["properties"]["result"]
    assert "enum" not in result


@pytest.mark.parametrize(
    ("info", "example"),
    [(NODE_TWIN_CRD, "nodetwin.yaml"), (NODE_HARDWARE_CRD, "nodehardware.yaml")],
    ids=["NodeTwin", "NodeHardware"],
)
def test_spec_examples_satisfy_the_schema(data_dir: Path, info: Any, example: str) -> None:
    obj = yaml.safe_load((data_dir / "spec" / example).read_text())
    assert schema_errors(schema_of(info), obj) == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (["spec", "profile"], "turbo"),
        (["spec", "gpu", "powerCap", "capPctOfMax"], 0),
        (["spec", "gpu", "powerCap", "capPctOfMax"], 101),
        (["spec", "cpu", "packagePowerCapWatts"], 0),
    ],
)
def test_schema_rejects_invalid_nodetwins(data_dir: Path, path: list[str], value: Any) -> None:
    obj = copy.deepcopy(yaml.safe_load((data_dir / "spec" / "nodetwin.yaml").read_text()))
    target = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    errors = schema_errors(schema_of(NODE_TWIN_CRD), obj)
    assert errors
    assert path[-1] in errors[0]


def test_schema_rejects_missing_node_name(data_dir: Path) -> None:
    obj = yaml.safe_load((data_dir / "spec" / "nodetwin.yaml").read_text())
    del obj["spec"]["nodeName"]
    assert schema_errors(schema_of(NODE_TWIN_CRD), obj) == [".spec.nodeName: required"]


def test_objects_must_be_named_after_their_node() -> None:
    for info in ALL_CRDS:
        rules = [v["rule"] for v in schema_of(info)["x-kubernetes-validations"]]
        assert "self.metadata.name == self.spec.nodeName" in rules
