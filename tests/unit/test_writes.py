"""Owned-field comparison (what decides whether an apply is sent) and merge-patch no-ops."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from joulie.api import keys
from joulie.kube.ownership import (
    Observed,
    applied_paths,
    managed_paths,
    observe,
    owns_exactly,
    values_match,
)
from joulie.kube.writes import _merge_is_noop, fingerprint
from tests.support.builders import joulie_object

MAP_LISTS = {"conditions": ("type",)}


def body(status: dict[str, Any]) -> dict[str, Any]:
    return {**joulie_object(keys.NODE_TWIN_KIND, "n1"), "status": status}


def stored(
    status: dict[str, Any], fields_v1: dict[str, Any], manager: str = "joulie-manager"
) -> dict[str, Any]:
    """An object as the API server answers it, with one managedFields entry of ours (the
    fieldsV1 spelling, '.' markers included, as the server writes it) and one of another
    manager's."""
    return {
        "metadata": {
            "name": "n1",
            "resourceVersion": "42",
            "managedFields": [
                {
                    "manager": manager,
                    "operation": "Apply",
                    "subresource": "status",
                    "fieldsV1": fields_v1,
                },
                {
                    "manager": "joulie-agent",
                    "operation": "Apply",
                    "subresource": "status",
                    "fieldsV1": {"f:status": {"f:controlStatus": {"f:cpu": {}}}},
                },
            ],
        },
        "status": status,
    }


OURS = {"schedulableClass": "eco", "conditions": [{"type": "AgentReporting", "status": "True"}]}
OUR_FIELDS: dict[str, Any] = {
    "f:status": {
        "f:schedulableClass": {},
        "f:conditions": {
            'k:{"type":"AgentReporting"}': {".": {}, "f:type": {}, "f:status": {}},
        },
    }
}


def test_numbers_bools_and_whole_lists() -> None:
    assert values_match({"a": {"b": 60}}, {"a": {"b": 60.0, "c": 1}, "d": 2}, {})
    assert not values_match({"a": {"b": 60}}, {"a": {"b": 50}}, {})
    assert not values_match({"a": [1, 2]}, {"a": [1, 2, 3]}, {})
    assert not values_match({"a": True}, {"a": 1}, {})


def test_map_list_entries_are_found_by_key() -> None:
    theirs = {"type": "Foreign", "status": "False"}
    observed = {"conditions": [theirs, {"type": "AgentReporting", "status": "True"}]}
    ours = {"conditions": [{"type": "AgentReporting", "status": "True"}]}
    assert values_match(ours, observed, MAP_LISTS)
    assert not values_match(ours, observed, {})  # as a plain list it would differ
    changed = {"conditions": [{"type": "AgentReporting", "status": "False"}]}
    assert not values_match(changed, observed, MAP_LISTS)


def test_owned_paths_read_like_the_applied_body() -> None:
    owned = managed_paths(
        stored(OURS, OUR_FIELDS)["metadata"]["managedFields"], "joulie-manager", "status"
    )
    assert owned == applied_paths(body(OURS), MAP_LISTS)
    assert managed_paths([], "joulie-manager", "status") is None
    assert (
        managed_paths(stored(OURS, OUR_FIELDS)["metadata"]["managedFields"], "joulie-manager", "")
        is None
    )  # applied on the status subresource only


def test_foreign_fields_and_conditions_cost_no_write() -> None:
    status = {
        **OURS,
        "controlStatus": {"cpu": "applied"},
        "conditions": [*OURS["conditions"], {"type": "Foreign", "status": "True"}],
    }
    observed = observe(stored(status, OUR_FIELDS), "joulie-manager", "status", keep=("status",))
    assert owns_exactly(body(OURS), observed, MAP_LISTS)


def test_a_field_that_leaves_the_body_is_a_change() -> None:
    fields = {"f:status": {**OUR_FIELDS["f:status"], "f:powerMeasurement": {"f:nodeW": {}}}}
    status = {**OURS, "powerMeasurement": {"nodeW": 300}}
    observed = observe(stored(status, fields), "joulie-manager", "status", keep=("status",))
    # Every desired value is there, but the apply would remove powerMeasurement: send it.
    assert not owns_exactly(body(OURS), observed, MAP_LISTS)


def test_never_applied_or_missing_objects_are_written() -> None:
    assert not owns_exactly(body(OURS), None, MAP_LISTS)
    unowned = Observed({"status": OURS}, None, 1)
    assert not owns_exactly(body(OURS), unowned, MAP_LISTS)


@given(st.dictionaries(st.sampled_from("abcd"), st.integers() | st.text(max_size=3), min_size=1))
def test_any_flat_body_matches_its_own_paths_and_values(spec: dict[str, Any]) -> None:
    applied = {"apiVersion": "v1", "kind": "X", "metadata": {"name": "x"}, "spec": spec}
    fields_v1: dict[str, Any] = {"f:spec": {f"f:{k}": {} for k in spec}}
    raw = {
        "metadata": {
            "managedFields": [{"manager": "m", "operation": "Apply", "fieldsV1": fields_v1}]
        },
        "spec": spec,
    }
    assert owns_exactly(applied, observe(raw, "m"), {})


def test_labels_the_manager_owns_are_compared_by_value() -> None:
    """A label this manager applies is a change when its value changes, also though no path
    changes; a label another writer added beside it is not."""

    def applied(value: str) -> dict[str, Any]:
        labels = {keys.SIMULATED_LABEL: value}
        return {
            **joulie_object(keys.NODE_TWIN_KIND, "n1", labels=labels),
            "spec": {"profile": "eco"},
        }

    fields_v1 = {
        "f:metadata": {"f:labels": {".": {}, "f:joulie.io/simulated": {}}},
        "f:spec": {"f:profile": {}},
    }
    raw = {
        "metadata": {
            "name": "n1",
            "labels": {"joulie.io/simulated": "true", "team": "a"},
            "managedFields": [
                {"manager": "m", "operation": "Apply", "fieldsV1": fields_v1},
                {
                    "manager": "kubectl",
                    "operation": "Update",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}},
                },
            ],
        },
        "spec": {"profile": "eco"},
    }
    observed = observe(raw, "m")
    assert observed.fields["metadata"] == {"labels": {"joulie.io/simulated": "true"}}
    assert owns_exactly(applied("true"), observed, {})
    assert not owns_exactly(applied("false"), observed, {})
    # Equal label sets are one shared value, as owned paths are.
    assert observe(raw, "m").fields["metadata"] is observed.fields["metadata"]


def test_merge_patch_noop_detection() -> None:
    observed = {"metadata": {"labels": {"a": "1", "b": "2"}}}
    assert _merge_is_noop({"metadata": {"labels": {"a": "1"}}}, observed)
    assert not _merge_is_noop({"metadata": {"labels": {"a": "2"}}}, observed)
    assert not _merge_is_noop({"metadata": {"labels": {"c": None, "b": None}}}, observed)
    assert _merge_is_noop({"metadata": {"labels": {"c": None}}}, observed)


def test_fingerprint_ignores_key_order() -> None:
    assert fingerprint({"a": 1, "b": {"c": 2}}) == fingerprint({"b": {"c": 2}, "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})
