"""The JSON policy every outside body meets: a size limit before decoding, orjson's reasons for
what is not JSON, and a depth limit (deeper documents broke json.dumps and logging far from the
request)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joulie.api.json_body import MAX_DEPTH, JsonBodyError, check_depth, loads


def nested_text(depth: int, leaf: str = "1") -> str:
    """``depth`` levels of alternating arrays and objects around ``leaf``, as JSON text."""
    opening = "".join('{"k":' if i % 2 else "[" for i in range(depth))
    closing = "".join("}" if i % 2 else "]" for i in reversed(range(depth)))
    return opening + leaf + closing


def depth_of(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    return 0


def test_the_deepest_accepted_document_and_one_level_more() -> None:
    assert depth_of(loads(nested_text(MAX_DEPTH), max_bytes=10_000)) == MAX_DEPTH
    with pytest.raises(JsonBodyError, match=f"nested deeper than {MAX_DEPTH} levels"):
        loads(nested_text(MAX_DEPTH + 1), max_bytes=10_000)


def test_what_orjson_cannot_write_is_measured_by_walking_it() -> None:
    # The standard library's decoder (the extender's fallback) gives integers past 64 bits,
    # which orjson does not write: the depth is then found by walking.
    big = str(2**70)
    check_depth(json.loads(nested_text(MAX_DEPTH, big)))
    with pytest.raises(JsonBodyError):
        check_depth(json.loads(nested_text(MAX_DEPTH + 1, big)))


def test_the_size_is_checked_before_decoding() -> None:
    with pytest.raises(JsonBodyError, match="10 bytes, more than the 9 accepted"):
        loads(b'"12345678"', max_bytes=9)
    assert loads(b'"12345678"', max_bytes=10) == "12345678"


@pytest.mark.parametrize("raw", [b"{", b"NaN", b'"\xff"', b"[1,]", b"1e999999"])
def test_what_is_not_json_is_refused_with_the_parsers_reason(raw: bytes) -> None:
    with pytest.raises(JsonBodyError, match="body is not JSON"):
        loads(raw, max_bytes=100, what="body")


def test_a_deep_document_is_refused_in_bounded_time() -> None:
    # orjson stops at 1,024 levels itself; a megabyte of brackets is refused at once.
    started = time.perf_counter()
    with pytest.raises(JsonBodyError):
        loads(b"[" * 500_000 + b"]" * 500_000, max_bytes=1_000_000)
    assert time.perf_counter() - started < 1.0


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(json_values, st.integers(0, MAX_DEPTH + 5))
def test_a_document_is_accepted_exactly_when_within_the_depth(value: Any, wrap: int) -> None:
    raw = "[" * wrap + json.dumps(value) + "]" * wrap  # as text: json.dumps would recurse
    try:
        loads(raw, max_bytes=10**7)
        accepted = True
    except JsonBodyError:
        accepted = False
    assert accepted is (wrap + depth_of(value) <= MAX_DEPTH)
