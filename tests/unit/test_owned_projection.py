"""What a writer's cache keeps of each object: the same values, with the keys and short strings
that thousands of objects repeat held once (44 -> 24 MiB for 5,000 twins, tracemalloc)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from joulie.kube.ownership import owned_projection


def twin(name: str, measured: float) -> dict[str, Any]:
    body = {
        "metadata": {"name": name, "resourceVersion": "7"},
        "spec": {"nodeName": name, "profile": "eco", "gpu": {"powerCap": {"scope": "perGpu"}}},
        "status": {
            "schedulableClass": "eco",
            "powerMeasurement": {"source": "http", "measuredNodePowerW": measured},
            "conditions": [{"type": "AgentReporting", "status": "True"}],
        },
    }
    # One document per object, as each watch event is decoded on its own.
    decoded: dict[str, Any] = json.loads(json.dumps(body))
    return decoded


def test_repeated_keys_and_values_are_held_once_and_the_values_kept() -> None:
    project = owned_projection("joulie-manager")
    a, b = project(twin("n1", 612.5)), project(twin("n2", 100.0))
    assert a.stored_status == twin("n1", 612.5)["status"]
    assert a.main.fields["spec"] == twin("n1", 612.5)["spec"]
    key_a = next(k for k in a.stored_status if k == "powerMeasurement")
    key_b = next(k for k in b.stored_status if k == "powerMeasurement")
    assert key_a is key_b
    assert a.stored_status["schedulableClass"] is b.stored_status["schedulableClass"]
    assert a.stored_status["powerMeasurement"]["measuredNodePowerW"] == 612.5


def test_blocks_alike_between_objects_are_one_read_only_value() -> None:
    project = owned_projection("joulie-manager")
    a, b = project(twin("n1", 612.5)), project(twin("n2", 100.0))
    # The same spec block and condition on two nodes: one value, which no holder can change
    # under the others.
    assert a.main.fields["spec"]["gpu"] is b.main.fields["spec"]["gpu"]
    assert a.stored_status["conditions"][0] is b.stored_status["conditions"][0]
    with pytest.raises(TypeError):
        a.main.fields["spec"]["gpu"]["powerCap"] = {}
    # Each node's own figures stay its own.
    assert a.stored_status["powerMeasurement"] is not b.stored_status["powerMeasurement"]
    assert b.stored_status["powerMeasurement"]["measuredNodePowerW"] == 100.0
    # And a plain dict still compares equal to what is kept, as writers compare them.
    assert dict(a.stored_status) == twin("n1", 612.5)["status"]
