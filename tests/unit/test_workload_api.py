"""Workload API models: both served versions parse, disruption modes mean the same in either
shape, objects round-trip unchanged, invalid ones fail, and a pod's PodGroup is found."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from joulie.api.workload import (
    CompositePodGroup,
    DisruptionMode,
    PodGroup,
    PodGroupRef,
    Workload,
    disruption_mode_of,
    pod_group_of,
)


def documents(data_dir: Path, name: str) -> dict[str, dict[str, Any]]:
    """The YAML file's objects, by kind (each file holds at most one of each kind)."""
    text = (data_dir / "preemption" / name).read_text()
    return {doc["kind"]: doc for doc in yaml.safe_load_all(text)}


def test_v1alpha2_podgroup_parses_with_string_disruption_mode(data_dir: Path) -> None:
    raw = documents(data_dir, "v1alpha2.yaml")["PodGroup"]
    group = PodGroup.model_validate(raw)
    assert group.api_version == "scheduling.k8s.io/v1alpha2"
    assert group.spec.disruption is DisruptionMode.ALL
    assert group.spec.min_count == 4
    assert group.spec.effective_priority == 1000000
    assert group.spec.pod_group_template_ref is not None
    assert group.spec.pod_group_template_ref.workload is not None
    assert group.spec.pod_group_template_ref.workload.pod_group_template_name == "workers"
    assert group.status is not None
    assert group.status.conditions is not None
    assert group.status.conditions[0].reason == "Unschedulable"
    assert group.to_wire() == raw


def test_v1beta1_podgroup_parses_with_union_disruption_mode(data_dir: Path) -> None:
    raw = documents(data_dir, "v1beta1.yaml")["PodGroup"]
    group = PodGroup.model_validate(raw)
    assert group.spec.disruption is DisruptionMode.ALL
    assert group.spec.workload_ref is not None
    assert group.spec.workload_ref.template_name == "workers"
    assert group.spec.preemption_policy == "PreemptLowerPriority"
    assert group.to_wire() == raw


@pytest.mark.parametrize("version", ["v1alpha2.yaml", "v1beta1.yaml"])
def test_workload_templates_parse_in_both_versions(data_dir: Path, version: str) -> None:
    raw = documents(data_dir, version)["Workload"]
    workload = Workload.model_validate(raw)
    assert workload.spec.pod_group_templates is not None
    (template,) = workload.spec.pod_group_templates
    assert template.name == "workers"
    assert template.scheduling_policy.gang is not None
    assert template.scheduling_policy.gang.min_count == 4
    assert disruption_mode_of(template.disruption_mode) is DisruptionMode.ALL
    assert workload.to_wire() == raw


def test_composite_pod_group_and_its_child_parse(data_dir: Path) -> None:
    docs = yaml.safe_load_all((data_dir / "preemption" / "v1alpha3.yaml").read_text())
    composite_raw, child_raw = list(docs)
    composite = CompositePodGroup.model_validate(composite_raw)
    assert composite.spec.disruption is DisruptionMode.ALL
    assert composite.spec.scheduling_policy.gang is not None
    assert composite.spec.scheduling_policy.gang.min_group_count == 2
    assert composite.spec.preemption_policy == "Never"
    assert composite.to_wire() == composite_raw
    child = PodGroup.model_validate(child_raw)
    assert child.spec.parent_composite_pod_group_name == "pipeline"


@pytest.mark.parametrize(
    ("wire", "meaning"),
    [
        (None, DisruptionMode.SINGLE),
        ("Pod", DisruptionMode.SINGLE),
        ("PodGroup", DisruptionMode.ALL),
        ({"single": {}}, DisruptionMode.SINGLE),
        ({"all": {}}, DisruptionMode.ALL),
        ({}, DisruptionMode.SINGLE),
    ],
)
def test_disruption_mode_means_the_same_in_both_shapes(
    wire: object, meaning: DisruptionMode
) -> None:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": 2}}}
    if wire is not None:
        spec["disruptionMode"] = wire
    group = PodGroup.model_validate({"metadata": {"name": "g"}, "spec": spec})
    assert group.spec.disruption is meaning


def test_unset_priority_counts_as_zero_and_basic_policy_as_one() -> None:
    group = PodGroup.model_validate(
        {"metadata": {"name": "g"}, "spec": {"schedulingPolicy": {"basic": {}}}}
    )
    assert group.spec.effective_priority == 0
    assert group.spec.min_count == 1


def _podgroup_spec(data_dir: Path) -> dict[str, Any]:
    spec: dict[str, Any] = documents(data_dir, "v1beta1.yaml")["PodGroup"]["spec"]
    return spec


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("disruptionMode", {"single": {}, "all": {}}),
        ("disruptionMode", "Everything"),
        ("schedulingPolicy", {"basic": {}, "gang": {"minCount": 2}}),
        ("schedulingPolicy", {}),
        ("schedulingPolicy", {"gang": {"minCount": 0}}),
        ("priority", 1000000001),
        ("preemptionPolicy", "Sometimes"),
    ],
)
def test_invalid_podgroup_is_refused(data_dir: Path, field: str, value: object) -> None:
    spec = copy.deepcopy(_podgroup_spec(data_dir))
    spec[field] = value
    with pytest.raises(ValidationError):
        PodGroup.model_validate({"metadata": {"name": "g"}, "spec": spec})


def test_composite_needs_its_workload_reference(data_dir: Path) -> None:
    docs = list(yaml.safe_load_all((data_dir / "preemption" / "v1alpha3.yaml").read_text()))
    raw = copy.deepcopy(docs[0])
    del raw["spec"]["workloadRef"]
    with pytest.raises(ValidationError):
        CompositePodGroup.model_validate(raw)


def test_unknown_fields_survive_a_round_trip(data_dir: Path) -> None:
    raw = copy.deepcopy(documents(data_dir, "v1beta1.yaml")["PodGroup"])
    raw["spec"]["futureField"] = {"x": 1}
    assert PodGroup.model_validate(raw).to_wire() == raw


@pytest.mark.parametrize("version", ["v1alpha2.yaml", "v1beta1.yaml"])
def test_member_pod_names_its_group(data_dir: Path, version: str) -> None:
    docs = documents(data_dir, version)
    ref = pod_group_of(docs["Pod"])
    assert ref == PodGroupRef("ns-1", "job-1")
    group = PodGroup.model_validate(docs["PodGroup"])
    assert (group.metadata.namespace, group.metadata.name) == ref


@pytest.mark.parametrize(
    "pod",
    [
        {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": []}},
        {"metadata": {"name": "p"}, "spec": {"schedulingGroup": {}}},
        {"metadata": {"name": "p"}, "spec": {"schedulingGroup": {"podGroupName": ""}}},
        {"metadata": {"name": "p"}, "spec": {"schedulingGroup": "job-1"}},
        {"metadata": {"name": "p"}},
        # 1.35's link names a group inline in a v1alpha1 Workload, not a PodGroup object.
        {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"workloadRef": {"name": "training", "podGroup": "workers"}},
        },
    ],
)
def test_pod_without_a_podgroup_is_standalone(pod: dict[str, Any]) -> None:
    assert pod_group_of(pod) is None


def test_pod_without_namespace_is_in_default() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"schedulingGroup": {"podGroupName": "g"}}}
    assert pod_group_of(pod) == PodGroupRef("default", "g")
