"""The spec's example objects parse into the models, round-trip unchanged, and bad ones fail."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from joulie.api import (
    ControlResult,
    CpuGovernorPreset,
    DiscoveryQuality,
    NodeHardware,
    NodeTwin,
    Profile,
)
from joulie.api.nodetwin import GpuGovernorSpec


def load(data_dir: Path, name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((data_dir / "spec" / name).read_text())
    return loaded


def test_nodetwin_example_parses_with_typed_fields(data_dir: Path) -> None:
    twin = NodeTwin.model_validate(load(data_dir, "nodetwin.yaml"))
    assert twin.metadata.name == "kwok-gpu-nvidia-0"
    assert twin.spec.profile is Profile.ECO
    assert twin.spec.cpu is not None
    assert twin.spec.cpu.package_power_cap_watts == 5000
    assert twin.spec.gpu is not None
    assert twin.spec.gpu.power_cap is not None
    assert twin.spec.gpu.power_cap.cap_watts_per_gpu == 240
    assert twin.spec.gpu.power_cap.cap_pct_of_max == 60
    assert twin.spec.policy is not None
    assert twin.spec.policy.name == "static-partition-v1"


def test_nodehardware_example_parses_with_typed_fields(data_dir: Path) -> None:
    hw = NodeHardware.model_validate(load(data_dir, "nodehardware.yaml"))
    assert hw.status is not None
    assert hw.status.cpu is not None
    assert hw.status.gpu is not None
    assert hw.status.cpu.sockets == 2
    assert hw.status.cpu.total_cores == 96
    assert hw.status.cpu.governor is not None
    assert hw.status.cpu.governor.presets is not None
    presets = {p.preset: p.native for p in hw.status.cpu.governor.presets}
    assert presets[CpuGovernorPreset.EFFICIENCY] == "powersave epp=balance_power"
    assert hw.status.gpu.cap_range_per_gpu is not None
    assert hw.status.gpu.cap_range_per_gpu.max_watts == 400
    assert hw.status.gpu.governor is not None
    assert hw.status.gpu.governor.presets is not None
    assert hw.status.gpu.governor.presets[1].native == "-lgc 345,1425"
    assert hw.status.quality is not None
    assert hw.status.quality.overall is DiscoveryQuality.EXACT


@pytest.mark.parametrize(
    ("model", "name"), [(NodeTwin, "nodetwin.yaml"), (NodeHardware, "nodehardware.yaml")]
)
def test_examples_round_trip_to_identical_yaml(
    data_dir: Path, model: type[NodeTwin | NodeHardware], name: str
) -> None:
    original = load(data_dir, name)
    dumped = model.model_validate(original).to_wire()
    assert dumped == original
    # Same document text once both are rendered the same way (numbers keep their type).
    assert yaml.safe_dump(dumped, sort_keys=True) == yaml.safe_dump(original, sort_keys=True)


def test_unknown_fields_survive_a_round_trip(data_dir: Path) -> None:
    obj = load(data_dir, "nodetwin.yaml")
    obj["spec"]["cpu"]["futureKnob"] = {"level": 3}
    obj["status"] = {"schedulableClass": "eco", "newScore": 12.5}
    dumped = NodeTwin.model_validate(obj).to_wire()
    assert dumped["spec"]["cpu"]["futureKnob"] == {"level": 3}
    assert dumped["status"]["newScore"] == 12.5


def _mutated(data_dir: Path, path: list[str], value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(load(data_dir, "nodetwin.yaml"))
    target = obj
    for key in path[:-1]:
        target = target.setdefault(key, {})
    if value is None:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return obj


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        (["spec", "profile"], "turbo", "profile"),
        (["spec", "gpu", "powerCap", "capPctOfMax"], 0, "capPctOfMax"),
        (["spec", "gpu", "powerCap", "capPctOfMax"], 101, "capPctOfMax"),
        (["spec", "cpu", "packagePowerCapPctOfMax"], 0, "packagePowerCapPctOfMax"),
        (["spec", "cpu", "packagePowerCapWatts"], 0.5, "packagePowerCapWatts"),
        (["spec", "nodeName"], None, "nodeName"),
        (["spec", "nodeName"], "", "nodeName"),
        (["spec", "gpu", "governor"], {"preset": "turbo"}, "preset"),
    ],
)
def test_invalid_nodetwins_are_rejected_naming_the_field(
    data_dir: Path, path: list[str], value: Any, needle: str
) -> None:
    with pytest.raises(ValidationError) as excinfo:
        NodeTwin.model_validate(_mutated(data_dir, path, value))
    assert needle in str(excinfo.value)


def test_clock_ceiling_only_with_efficient() -> None:
    assert (
        GpuGovernorSpec.model_validate(
            {"preset": "efficient", "computeClockCeilingPctOfMax": 80}
        ).compute_clock_ceiling_pct_of_max
        == 80
    )
    with pytest.raises(ValidationError, match="only valid with preset efficient"):
        GpuGovernorSpec.model_validate({"preset": "peak", "computeClockCeilingPctOfMax": 80})


def test_control_results_are_the_spec_list() -> None:
    assert [r.value for r in ControlResult] == [
        "applied",
        "applied-unverified",
        "equivalent",
        "unsupported",
        "not-applied",
        "refused",
        "drift",
        "contended",
        "disabled",
        "restored",
        "error",
    ]


def test_timestamps_serialise_as_rfc3339_utc() -> None:
    twin = NodeTwin.model_validate(
        {
            "metadata": {"name": "n1"},
            "spec": {"nodeName": "n1", "profile": "performance"},
            "status": {
                "controlStatus": {
                    "cpu": {"result": "applied", "updatedAt": "2026-11-29T10:00:00+01:00"}
                },
                "conditions": [
                    {
                        "type": "AgentReporting",
                        "status": "True",
                        "reason": "NodeHardwareCurrent",
                        "lastTransitionTime": "2026-11-29T09:00:00Z",
                    }
                ],
            },
        }
    )
    wire = twin.to_wire()
    assert wire["status"]["controlStatus"]["cpu"]["updatedAt"] == "2026-11-29T09:00:00Z"
    assert wire["status"]["conditions"][0]["lastTransitionTime"] == "2026-11-29T09:00:00Z"
    assert wire["apiVersion"] == "joulie.io/v1alpha1"
    assert wire["kind"] == "NodeTwin"
