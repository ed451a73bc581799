from __future__ import annotations

from joulie.kube.writes import _merge_is_noop, fingerprint, is_subset


def test_subset_comparison() -> None:
    assert is_subset({"a": {"b": 60}}, {"a": {"b": 60.0, "c": 1}, "d": 2})
    assert not is_subset({"a": {"b": 60}}, {"a": {"b": 50}})
    assert not is_subset({"a": [1, 2]}, {"a": [1, 2, 3]})
    assert not is_subset({"a": True}, {"a": 1})


def test_merge_patch_noop_detection() -> None:
    observed = {"metadata": {"labels": {"a": "1", "b": "2"}}}
    assert _merge_is_noop({"metadata": {"labels": {"a": "1"}}}, observed)
    assert not _merge_is_noop({"metadata": {"labels": {"a": "2"}}}, observed)
    assert not _merge_is_noop({"metadata": {"labels": {"c": None, "b": None}}}, observed)
    assert _merge_is_noop({"metadata": {"labels": {"c": None}}}, observed)


def test_fingerprint_ignores_key_order() -> None:
    assert fingerprint({"a": 1, "b": {"c": 2}}) == fingerprint({"b": {"c": 2}, "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})
