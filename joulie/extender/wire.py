"""kube-scheduler's extender wire format (k8s.io/kube-scheduler/extender/v1), read and written.

The extender types carry no JSON tags, so their keys are the Go field names ("Pod", "NodeNames",
"FailedNodes", "Host", ...) and nil fields travel as ``null``. Go decodes keys without regard to
case, so a lowercase "nodenames" means the same as "NodeNames", and when two keys fold to the same
field the later one wins; the reading here does the same. The embedded Pod and Node objects are
ordinary Kubernetes JSON and are kept exactly as sent: the pod goes to the placement untouched and
filter echoes the surviving Node items unchanged.

kube-scheduler sends node names when the extender is configured ``nodeCacheCapable: true`` and
full Node objects otherwise; a filter answer has to come back in the form the request used, since
kube-scheduler reads only that field of the answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from itertools import chain
from operator import add
from typing import Any, Final

MIN_SCORE: Final = 0
MAX_SCORE: Final = 10
"""kube-scheduler's MinExtenderPriority and MaxExtenderPriority: it multiplies an extender score
by the extender's weight and by 10 (MaxNodeScore / MaxExtenderPriority) and does not clamp it."""


class WireError(ValueError):
    """A request body kube-scheduler could not have sent: the reason names where it went wrong."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NodeForm(Enum):
    """How the request listed its candidate nodes (and so how the filter answer must)."""

    NAMES = "NodeNames"
    NODES = "Nodes"


@dataclass(frozen=True)
class WireNode:
    """One item of a Nodes-form request: its name and labels, and the object as sent."""

    name: str
    labels: Mapping[str, str]
    raw: Mapping[str, Any]


@dataclass(frozen=True)
class ExtenderArgs:
    """One filter or prioritize request."""

    pod: Mapping[str, Any]
    """The v1.Pod as kube-scheduler sent it."""
    form: NodeForm
    names: tuple[str, ...]
    """The candidate nodes, in the order sent (both forms)."""
    nodes: tuple[WireNode, ...] = ()
    """The full Node items (Nodes form only; empty in the NodeNames form)."""
    name_set: AbstractSet[str] | None = field(default=None, compare=False, repr=False)
    """``names`` as a set when the reading built one already (never changed afterwards)."""

    @cached_property
    def known(self) -> AbstractSet[str]:
        """The candidate node names as a set."""
        return self.name_set if self.name_set is not None else frozenset(self.names)

    @property
    def labels(self) -> dict[str, Mapping[str, str]] | None:
        """Node name to labels in the Nodes form; None when only names were sent."""
        if self.form is NodeForm.NAMES:
            return None
        return {node.name: node.labels for node in self.nodes}


# --- reading -----------------------------------------------------------------------------------

_ABSENT: Final = object()


def _field(obj: Mapping[str, Any], name: str) -> Any:
    """The value of a Go field, matched as encoding/json does: any key equal to ``name`` without
    regard to case, the last such key winning. ``_ABSENT`` when there is none."""
    folded = name.casefold()
    found: Any = _ABSENT
    for key, value in obj.items():
        if key.casefold() == folded:
            found = value
    return found


def _no_constants(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _json(body: bytes) -> Any:
    try:
        # NaN and Infinity are Python extensions, not JSON: Go would refuse them too.
        return json.loads(body, parse_constant=_no_constants)
    except RecursionError:
        raise WireError("body is not usable JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, over-long integers
        raise WireError(f"body is not JSON: {exc}") from None


def _type_name(value: Any) -> str:
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


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise WireError(f"{where} is {_type_name(value)}, not an object")
    return value


def parse_args(body: bytes) -> ExtenderArgs:
    """Read an ExtenderArgs body (filter and prioritize send the same); WireError if malformed."""
    top = _object(_json(body), "the body")
    pod = _field(top, "Pod")
    if pod is _ABSENT or pod is None:
        raise WireError("no Pod in the body")
    pod = _object(pod, "Pod")
    names = _field(top, "NodeNames")
    items = _field(top, "Nodes")
    has_names = names is not _ABSENT and names is not None
    has_items = items is not _ABSENT and items is not None
    if has_names and has_items:
        raise WireError(
            "both NodeNames and Nodes are set; kube-scheduler sends one "
            "(NodeNames with nodeCacheCapable: true, Nodes otherwise)"
        )
    if has_names:
        listed, name_set = _names(names)
        return ExtenderArgs(pod, NodeForm.NAMES, listed, name_set=name_set)
    if has_items:
        nodes = _nodes(items)
        return ExtenderArgs(pod, NodeForm.NODES, tuple(n.name for n in nodes), nodes)
    raise WireError("neither NodeNames nor Nodes is set")


def parse_pod(body: bytes) -> Mapping[str, Any]:
    """A bare v1.Pod body (as ``kubectl get pod -o json`` prints it); WireError if malformed."""
    return _object(_json(body), "the body")


def _names(value: Any) -> tuple[tuple[str, ...], set[str]]:
    """The names, and the same as a set."""
    if not isinstance(value, list):
        raise WireError(f"NodeNames is {_type_name(value)}, not an array")
    # The common case checked in C (thousands of names per call); the loop below finds and
    # names the first problem otherwise.
    if set(map(type, value)) <= {str}:
        unique = set(value)
        if "" not in unique and len(unique) == len(value):
            return tuple(value), unique
    for i, name in enumerate(value):
        if not isinstance(name, str):
            raise WireError(f"NodeNames[{i}] is {_type_name(name)}, not a string")
        if not name:
            raise WireError(f"NodeNames[{i}] is empty")
    return tuple(value), _no_repeats(value, "NodeNames")


def _no_repeats(names: Sequence[str], where: str) -> set[str]:
    unique = set(names)
    if len(unique) != len(names):
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise WireError(f"{where} lists node {name!r} more than once")
            seen.add(name)
    return unique


def _nodes(value: Any) -> tuple[WireNode, ...]:
    node_list = _object(value, "Nodes")
    items = _field(node_list, "items")
    if items is _ABSENT or items is None:
        # Go marshals an empty Items slice as null; kube-scheduler never sends an empty list, but
        # an empty one is still a list.
        return ()
    if not isinstance(items, list):
        raise WireError(f"Nodes.items is {_type_name(items)}, not an array")
    nodes = tuple(_node(item, i) for i, item in enumerate(items))
    _no_repeats([n.name for n in nodes], "Nodes.items")
    return nodes


def _node(item: Any, i: int) -> WireNode:
    where = f"Nodes.items[{i}]"
    raw = _object(item, where)
    meta = _field(raw, "metadata")
    if meta is _ABSENT or meta is None:
        raise WireError(f"{where} has no metadata")
    meta = _object(meta, f"{where}.metadata")
    name = _field(meta, "name")
    if not isinstance(name, str) or not name:
        found = "missing" if name is _ABSENT else _type_name(name)
        if isinstance(name, str):
            found = "empty"
        raise WireError(f"{where}.metadata.name is {found}; a node name is a non-empty string")
    labels = _field(meta, "labels")
    if labels is _ABSENT or labels is None:
        labels = {}
    labels = _object(labels, f"{where}.metadata.labels")
    for key, value in labels.items():
        if not isinstance(value, str):
            raise WireError(
                f"{where}.metadata.labels[{key!r}] is {_type_name(value)}, not a string"
            )
    return WireNode(name, labels, raw)


# --- writing -----------------------------------------------------------------------------------
#
# An answer names up to thousands of nodes, and building a dict per node for json.dumps was most
# of a call's time at 5,000 nodes. Node names are DNS names, which JSON writes as themselves
# between quotes, so when every name (and reason) is such plain text the answer is joined from
# the strings directly; anything else goes through json.dumps as before. The bytes are the same
# either way.

_PLAIN: Final = bytes(c for c in range(0x20, 0x7F) if c not in b'"\\')
"""What json.dumps writes as itself: printable ASCII except the quote and the backslash."""


def _plain(values: Iterable[Any]) -> bool:
    """Every value is a str that JSON writes as itself between quotes."""
    try:
        text = "".join(values)
    except TypeError:
        return False
    return text.isascii() and not text.encode().translate(None, _PLAIN)


def _dump(value: Any) -> bytes:
    return _dump_text(value).encode()


def _dump_text(value: Any) -> str:
    # ensure_ascii (the default) also escapes lone surrogates, which a JSON request may carry
    # and UTF-8 cannot encode.
    return json.dumps(value, separators=(",", ":"))


def _names_text(names: Sequence[str]) -> str:
    if names and _plain(names):
        return '["' + '","'.join(names) + '"]'
    return _dump_text(list(names))


def _reasons_text(reasons: Mapping[str, str]) -> str:
    """A node -> reason object (FailedNodes); few distinct reasons, each encoded once."""
    if type(reasons) is not dict:
        reasons = dict(reasons)
    if reasons and _plain(reasons):
        try:
            distinct = set(reasons.values())
        except TypeError:
            distinct = set()
        if len(distinct) == 1 and type(reason := next(iter(distinct))) is str:
            # One reason for every node (the usual case): one join, names as separators' ends.
            after = '":' + json.dumps(reason)
            return '{"' + (after + ',"').join(reasons) + after + "}"
        if distinct and all(type(r) is str for r in distinct):
            ends = {r: '":' + json.dumps(r) for r in distinct}
            pairs = map(add, reasons, map(ends.__getitem__, reasons.values()))
            return '{"' + ',"'.join(pairs) + "}"
    return _dump_text(reasons)


def filter_response(
    args: ExtenderArgs,
    passing: Iterable[str],
    failed: Mapping[str, str],
    unresolvable: Mapping[str, str] | None = None,
    error: str = "",
) -> bytes:
    """An ExtenderFilterResult in the request's form. ``passing`` must be names from the request;
    they are answered in the request's order. ``failed`` nodes may be preempted into;
    ``unresolvable`` ones are left out of preemption as well."""
    keep = passing if isinstance(passing, set | frozenset) else set(passing)
    if not keep <= args.known:
        unknown = keep.difference(args.names)
        raise ValueError(f"passing nodes not in the request: {sorted(unknown)[:5]}")
    if args.form is NodeForm.NAMES:
        # As many kept as were asked about (all of them known) is every one of them.
        kept = (
            args.names if len(keep) == len(args.names) else [*filter(keep.__contains__, args.names)]
        )
        nodes, names = "null", _names_text(kept)
    else:
        nodes = _dump_text({"items": [node.raw for node in args.nodes if node.name in keep]})
        names = "null"
    return (
        f'{{"Nodes":{nodes},"NodeNames":{names},"FailedNodes":{_reasons_text(failed)},'
        f'"FailedAndUnresolvableNodes":{_reasons_text(unresolvable or {})},'
        f'"Error":{_dump_text(error)}}}'
    ).encode()


def pass_all_response(args: ExtenderArgs) -> bytes:
    """A filter answer that keeps every node: what the extender says when it cannot decide."""
    if args.form is NodeForm.NAMES:
        names = _names_text(args.names)
        return (
            f'{{"Nodes":null,"NodeNames":{names},"FailedNodes":{{}},'
            '"FailedAndUnresolvableNodes":{},"Error":""}'
        ).encode()
    return filter_response(args, args.known, {})


_NEXT_HOST: Final = ',{"Host":"'
_AFTER_NAME: Final = {score: f'","Score":{score}}}{_NEXT_HOST}' for score in range(MAX_SCORE + 1)}
"""What follows a node name in a HostPriorityList, by score: its score and the next entry's
start (cut off after the last name)."""
_SCORES: Final = frozenset(_AFTER_NAME)


def prioritize_response(names: Sequence[str], scores: Sequence[int]) -> bytes:
    """A HostPriorityList: a bare array of {"Host", "Score"}, integer scores 0..10."""
    if len(names) != len(scores):
        raise ValueError(f"{len(scores)} scores for {len(names)} nodes")
    # Checked in C for thousands of scores, exact ints only (the set alone would take True or
    # 5.0 for 1 or 5); the loop finds and names the first bad one.
    if not (set(map(type, scores)) <= {int} and set(scores) <= _SCORES):
        for name, score in zip(names, scores, strict=True):
            if isinstance(score, bool) or not isinstance(score, int):
                raise ValueError(f"score of {name!r} is {score!r}, not an integer")
            if not MIN_SCORE <= score <= MAX_SCORE:
                raise ValueError(f"score of {name!r} is {score}, outside {MIN_SCORE}..{MAX_SCORE}")
    if not (names and _plain(names)):
        return _dump([{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)])
    after = map(_AFTER_NAME.__getitem__, scores)
    body = "".join(chain.from_iterable(zip(names, after, strict=True)))
    return ('[{"Host":"' + body[: -len(_NEXT_HOST)] + "]").encode()
