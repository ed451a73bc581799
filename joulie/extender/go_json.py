"""JSON as kube-scheduler's Go side reads and writes it, for the extender's wire formats.

Go's encoding/json matches keys without regard to case (the later of two keys that fold alike
wins) and refuses NaN and Infinity; the reading here does the same. Bodies are decoded by orjson
first, which is several times faster on the thousands of names and victims a call carries.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import orjson

from joulie.api.json_body import JsonBodyError, check_depth, containers_in


class WireError(ValueError):
    """A request body kube-scheduler could not have sent: the reason names where it went wrong."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


ABSENT: Final = object()


def go_field(obj: Mapping[str, Any], name: str) -> Any:
    """The value of a Go field, matched as encoding/json does: any key equal to ``name`` without
    regard to case, the last such key winning. ``ABSENT`` when there is none."""
    folded = name.casefold()
    found: Any = ABSENT
    for key, value in obj.items():
        if key.casefold() == folded:
            found = value
    return found


def _no_constants(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def quick_decode(body: bytes) -> Any:
    """The decoded body, or ``ABSENT`` when orjson refuses it (see :func:`decode`)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return ABSENT


def decode(body: bytes) -> Any:
    """The decoded body; WireError saying why it is not JSON as Go would read it, or why it is
    outside the JSON policy (:mod:`joulie.api.json_body`)."""
    decoded = quick_decode(body)
    if decoded is ABSENT:
        decoded = _decode_slowly(body)
    within_policy(decoded, body)
    return decoded


_WRITTEN_BYTES: Final = 256 * 1024
"""Up to this many bytes of text, the depth is checked by orjson writing the decoded value (one
C call, a transient copy of about the text's size) rather than by a walk in Python: a pod is a
few KB and a hundred objects, which the walk took 0.1-0.2 ms for on every call."""


def within_policy(decoded: Any, text: bytes, what: str = "body") -> None:
    """WireError when decoded JSON (of ``text``) nests deeper than the policy allows."""
    try:
        check_depth(decoded, what, None if len(text) <= _WRITTEN_BYTES else containers_in(text))
    except JsonBodyError as exc:
        raise WireError(exc.reason) from None


def _decode_slowly(body: bytes) -> Any:
    # orjson refuses what Go refuses (NaN, bad UTF-8, nesting past 1,024) but also a few things
    # Go reads, such as a lone surrogate escape; the standard library reads those, and its
    # messages say where the rest go wrong.
    try:
        # NaN and Infinity are Python extensions, not JSON: Go would refuse them too.
        return json.loads(body, parse_constant=_no_constants)
    except RecursionError:
        raise WireError("body is not usable JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, over-long integers
        raise WireError(f"body is not JSON: {exc}") from None


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def as_object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise WireError(f"{where} is {type_name(value)}, not an object")
    return value


def dump(value: Any) -> bytes:
    return dump_text(value).encode()


def dump_fast(value: Any) -> bytes:
    """The same values as :func:`dump`, several times faster for the megabytes of Node objects
    a Nodes-form answer echoes and the thousands of victims a preemption answer names
    (non-ASCII text is written as UTF-8)."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError: a lone surrogate, which UTF-8 cannot encode
        return dump(value)


def dump_text(value: Any) -> str:
    # ensure_ascii (the default) also escapes lone surrogates, which a JSON request may carry
    # and UTF-8 cannot encode.
    return json.dumps(value, separators=(",", ":"))
