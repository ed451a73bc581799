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

A list of thousands of names is most of a request's cost, and kube-scheduler sends the same list
again and again: every call when all nodes are listed (up to 100 nodes, or with
``percentageOfNodesToScore: 100``), and in prioritize the list the filter answered. So
:class:`NameLists` keeps the last few NodeNames arrays by their exact bytes, already checked; a
body that ends with one of them has only its pod decoded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from itertools import compress
from operator import add, not_
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from joulie.extender.go_json import (
    ABSENT,
    as_object,
    decode,
    dump,
    dump_fast,
    dump_text,
    go_field,
    quick_decode,
    type_name,
    within_policy,
)
from joulie.extender.go_json import (
    WireError as WireError,  # re-exported: callers catch wire.WireError
)

MIN_SCORE: Final = 0
MAX_SCORE: Final = 10
"""kube-scheduler's MinExtenderPriority and MaxExtenderPriority: it multiplies an extender score
by the extender's weight and by 10 (MaxNodeScore / MaxExtenderPriority) and does not clamp it."""


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
    """The candidate nodes, in the order sent (both forms; no name empty or given twice)."""
    nodes: tuple[WireNode, ...] = ()
    """The full Node items (Nodes form only; empty in the NodeNames form)."""
    names_json: bytes | None = None
    """``names`` as a JSON array, when the reading has it at hand (NodeNames form)."""
    plain: bool | None = None
    """Whether every name is written in JSON as itself (None: not known yet)."""

    @property
    def labels(self) -> dict[str, Mapping[str, str]] | None:
        """Node name to labels in the Nodes form; None when only names were sent."""
        if self.form is NodeForm.NAMES:
            return None
        return {node.name: node.labels for node in self.nodes}


@dataclass(frozen=True, slots=True)
class NameList:
    """A NodeNames array already read and checked: its names, its JSON and whether every name is
    written in JSON as itself."""

    names: tuple[str, ...]
    json: bytes
    plain: bool


MAX_NODES: Final = 100_000
"""Most nodes one call may list. kube-scheduler lists at most every node of the cluster, and the
largest clusters run today are of this order; a longer list can only be an attack on the
reading (a million names took 4 s of CPU)."""

MIN_REMEMBERED_BYTES: Final = 2048
"""Shorter NodeNames arrays are decoded every time: it costs little, and keeping them would push
the long lists out of :class:`NameLists`."""


MAX_REMEMBERED_BYTES: Final = 8 * 1024**2
"""JSON bytes of all the remembered arrays together. A name takes about four times its JSON in
memory once read (the str objects and the tuple), so this keeps the lists under about 40 MiB:
8 lists of a million names each had held 550 MiB. 8 MiB is about 400,000 names of 20
characters, 80 lists of a 5,000-node cluster."""


class NameLists:
    """The NodeNames arrays seen last, by their exact bytes: the ones requests sent and the ones
    filter answers wrote (kube-scheduler sends an answer's list back in prioritize).

    Equal bytes are equal names, so a hit needs no decoding and no checks. Entries are compared
    newest first, by length before content, so a miss costs a few length checks. At most
    ``size`` arrays of ``max_bytes`` together are kept, the oldest going first; an array longer
    than ``max_bytes`` alone is never kept."""

    def __init__(
        self,
        size: int = 8,
        min_bytes: int = MIN_REMEMBERED_BYTES,
        max_bytes: int = MAX_REMEMBERED_BYTES,
    ) -> None:
        self._size = size
        self._min_bytes = min_bytes
        self._max_bytes = max_bytes
        self._entries: list[NameList] = []
        # Large bodies are read on a thread while answers are written on the loop.
        self._lock = threading.Lock()

    def find(self, array: bytes) -> NameList | None:
        with self._lock:
            for i, entry in enumerate(self._entries):
                if entry.json == array:
                    if i:
                        self._entries.insert(0, self._entries.pop(i))
                    return entry
        return None

    @property
    def held_bytes(self) -> int:
        """JSON bytes of the arrays kept."""
        return sum(len(e.json) for e in self._entries)

    def remember(self, entry: NameList) -> None:
        size = len(entry.json)
        if size < self._min_bytes or size > self._max_bytes or self.find(entry.json) is not None:
            return
        with self._lock:
            self._entries.insert(0, entry)
            del self._entries[self._size :]
            while self.held_bytes > self._max_bytes:
                self._entries.pop()


# --- reading -----------------------------------------------------------------------------------

_NAMES_MEMBER: Final = b',"NodeNames":['


def _split(body: bytes) -> tuple[bytes, bytes] | None:
    """The body without its NodeNames member (as an object) and that member's array, when the
    body ends with it as Go writes it (``{"Pod":...,"Nodes":null,"NodeNames":[...]}``).

    Only a guess until both parts decode: then the cut was outside every string at the top level
    (an object cannot end with an open string or an open bracket), so the array is the
    NodeNames member, the last key of the body, which wins over any earlier one as in Go."""
    if not body.endswith(b"]}"):
        return None
    at = body.rfind(_NAMES_MEMBER)
    if at <= 0:
        return None
    return body[:at] + b"}", body[at + len(_NAMES_MEMBER) - 1 : -1]


NamesCheck = Callable[[tuple[Any, ...]], bool]
"""Whether every item of a NodeNames array is a non-empty str given once, as someone who looks
the names up anyway can tell (:meth:`joulie.core.score_table.ScoreTable.checked_rows`); False
when it cannot say so, and then the names are checked here."""

PodTest = Callable[[Mapping[str, Any]], bool]
"""Whether a request's pod (as sent; ``{}`` when it is not an object) is one whose names are
looked up anyway, so that a :data:`NamesCheck` is worth asking."""


def _check_for(
    top: Mapping[str, Any], distinct: NamesCheck | None, only_for: PodTest | None
) -> NamesCheck | None:
    if distinct is None or only_for is None:
        return distinct
    pod = go_field(top, "Pod")
    return distinct if only_for(pod if isinstance(pod, Mapping) else {}) else None


def _quick_names(
    body: bytes,
    lists: NameLists,
    distinct: NamesCheck | None = None,
    only_for: PodTest | None = None,
) -> tuple[Any, NameList] | None:
    """The body's top-level object and its NodeNames, read in two parts and the names from
    ``lists`` when it holds them; None when the body does not split (then it is read whole)."""
    parts = _split(body)
    if parts is None:
        return None
    head, array = parts
    top = quick_decode(head)
    if not isinstance(top, dict):
        return None
    within_policy(top, head)  # the names are strings: only the rest can nest
    listed = lists.find(array)
    if listed is None:
        distinct = _check_for(top, distinct, only_for)
        value = quick_decode(array)
        if not isinstance(value, list):
            return None
        try:
            names = _names(value, distinct)
        except WireError:
            return None  # read whole, so the reason is the one the whole body gives
        # Without a backslash no quote can be inside a name, so printable ASCII and quotes
        # alone mean every name is written as itself.
        listed = NameList(names, array, not array.translate(None, _PLAIN_ARRAY))
        lists.remember(listed)
    return top, listed


def parse_args(
    body: bytes,
    lists: NameLists | None = None,
    distinct: NamesCheck | None = None,
    only_for: PodTest | None = None,
) -> ExtenderArgs:
    """Read an ExtenderArgs body (filter and prioritize send the same); WireError if malformed.
    ``lists`` spares decoding and checking a NodeNames array read before; ``distinct`` checks a
    new one (else a set of the names does), for every pod or, with ``only_for``, for the pods it
    names."""
    quick = _quick_names(body, lists, distinct, only_for) if lists is not None else None
    if quick is not None:
        top, listed = quick
        return _args(top, listed)
    top = as_object(decode(body), "the body")
    return _args(top, None, _check_for(top, distinct, only_for))


def _args(
    top: Mapping[str, Any], listed: NameList | None, distinct: NamesCheck | None = None
) -> ExtenderArgs:
    pod = go_field(top, "Pod")
    if pod is ABSENT or pod is None:
        raise WireError("no Pod in the body")
    pod = as_object(pod, "Pod")
    names: Any = listed if listed is not None else go_field(top, "NodeNames")
    items = go_field(top, "Nodes")
    has_names = names is not ABSENT and names is not None
    has_items = items is not ABSENT and items is not None
    if has_names and has_items:
        raise WireError(
            "both NodeNames and Nodes are set; kube-scheduler sends one "
            "(NodeNames with nodeCacheCapable: true, Nodes otherwise)"
        )
    if listed is not None:
        return ExtenderArgs(pod, NodeForm.NAMES, listed.names, (), listed.json, listed.plain)
    if has_names:
        return ExtenderArgs(pod, NodeForm.NAMES, _names(names, distinct))
    if has_items:
        nodes = _nodes(items)
        return ExtenderArgs(pod, NodeForm.NODES, tuple(n.name for n in nodes), nodes)
    raise WireError("neither NodeNames nor Nodes is set")


def parse_pod(body: bytes) -> Mapping[str, Any]:
    """A bare v1.Pod body (as ``kubectl get pod -o json`` prints it); WireError if malformed."""
    return as_object(decode(body), "the body")


def _names(value: Any, distinct: NamesCheck | None = None) -> tuple[str, ...]:
    """The names of a NodeNames array, checked: strings, none empty, none twice (by
    ``distinct`` when it can tell)."""
    if not isinstance(value, list):
        raise WireError(f"NodeNames is {type_name(value)}, not an array")
    _not_too_many(len(value), "NodeNames")
    if distinct is not None:
        listed = tuple(value)
        if distinct(listed):
            return listed
    # The common case checked in C (thousands of names per call); the loop below finds and
    # names the first problem otherwise.
    if set(map(type, value)) <= {str}:
        unique = set(value)
        if "" not in unique and len(unique) == len(value):
            return tuple(value)
    for i, name in enumerate(value):
        if not isinstance(name, str):
            raise WireError(f"NodeNames[{i}] is {type_name(name)}, not a string")
        if not name:
            raise WireError(f"NodeNames[{i}] is empty")
    _no_repeats(value, "NodeNames")
    return tuple(value)


def _not_too_many(count: int, where: str) -> None:
    if count > MAX_NODES:
        raise WireError(f"{where} lists {count} nodes; at most {MAX_NODES} are read")


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
    node_list = as_object(value, "Nodes")
    items = go_field(node_list, "items")
    if items is ABSENT or items is None:
        # Go marshals an empty Items slice as null; kube-scheduler never sends an empty list, but
        # an empty one is still a list.
        return ()
    if not isinstance(items, list):
        raise WireError(f"Nodes.items is {type_name(items)}, not an array")
    _not_too_many(len(items), "Nodes.items")
    nodes = tuple(_node(item, i) for i, item in enumerate(items))
    _no_repeats([n.name for n in nodes], "Nodes.items")
    return nodes


def _node(item: Any, i: int) -> WireNode:
    where = f"Nodes.items[{i}]"
    raw = as_object(item, where)
    meta = go_field(raw, "metadata")
    if meta is ABSENT or meta is None:
        raise WireError(f"{where} has no metadata")
    meta = as_object(meta, f"{where}.metadata")
    name = go_field(meta, "name")
    if not isinstance(name, str) or not name:
        found = "missing" if name is ABSENT else type_name(name)
        if isinstance(name, str):
            found = "empty"
        raise WireError(f"{where}.metadata.name is {found}; a node name is a non-empty string")
    labels = go_field(meta, "labels")
    if labels is ABSENT or labels is None:
        labels = {}
    labels = as_object(labels, f"{where}.metadata.labels")
    for key, value in labels.items():
        if not isinstance(value, str):
            raise WireError(f"{where}.metadata.labels[{key!r}] is {type_name(value)}, not a string")
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
_PLAIN_ARRAY: Final = _PLAIN + b'"'


def _plain(values: Iterable[Any]) -> bool:
    """Every value is a str that JSON writes as itself between quotes."""
    try:
        text = "".join(values)
    except TypeError:
        return False
    return text.isascii() and not text.encode().translate(None, _PLAIN)


def _names_text(names: Sequence[str], plain: bool | None = None) -> str:
    if names and (_plain(names) if plain is None else plain):
        return '["' + '","'.join(names) + '"]'
    return dump_text(list(names))


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
    return dump_text(reasons)


def filter_response(
    args: ExtenderArgs,
    reasons: Sequence[str | None],
    *,
    unresolvable: Mapping[str, str] | None = None,
    error: str = "",
    lists: NameLists | None = None,
) -> bytes:
    """An ExtenderFilterResult in the request's form. ``reasons`` holds one entry per requested
    node, in the request's order: None keeps the node, a string is why it is filtered out (such
    nodes may be preempted into); ``unresolvable`` nodes are left out of preemption as well.
    ``lists`` learns the kept names, which kube-scheduler sends back in prioritize."""
    if len(reasons) != len(args.names):
        raise ValueError(f"{len(reasons)} filter reasons for {len(args.names)} nodes")
    try:
        distinct: set[object] = set(reasons)  # a few distinct reasons for thousands of nodes
    except TypeError:  # an unhashable one, which is neither None nor a string
        distinct = {type(r) for r in reasons if r is not None and type(r) is not str}
    for reason in distinct:
        if not (reason is None or (type(reason) is str and reason)):
            raise TypeError(f"a filter reason is {reason!r}: expected None or a non-empty string")
    given = distinct - {None}
    # Every reason is now None or a non-empty string, so ``not_`` (a C call per node) keeps
    # exactly the nodes without one.
    if args.plain and len(given) == 1:
        # Plain names and one reason for all refused nodes (the usual performance-pod answer):
        # the object is joined straight from the refused names, no dict on the way.
        after = '":' + json.dumps(next(iter(given)))
        failed_text = '{"' + (after + ',"').join(compress(args.names, reasons)) + after + "}"
    elif args.plain and given:
        # Plain names and a few reasons (eco and draining nodes): each name joined to its
        # reason's text, still no dict (the names are distinct, so none would be replaced).
        ends = {reason: '":' + json.dumps(reason) for reason in given}
        pairs = map(
            add, compress(args.names, reasons), map(ends.__getitem__, filter(None, reasons))
        )
        failed_text = '{"' + ',"'.join(pairs) + "}"
    else:
        failed = dict(zip(compress(args.names, reasons), filter(None, reasons), strict=True))
        failed_text = _reasons_text(failed)
    if args.form is NodeForm.NAMES:
        if not given:
            kept_json = args.names_json or _names_text(args.names).encode()
        else:
            kept = tuple(compress(args.names, map(not_, reasons)))
            kept_json = _names_text(kept, args.plain).encode()
            if lists is not None and args.plain:
                lists.remember(NameList(kept, kept_json, True))
        nodes, names = b"null", kept_json
    else:
        kept_nodes = compress(args.nodes, map(not_, reasons))
        nodes, names = dump_fast({"items": [node.raw for node in kept_nodes]}), b"null"
    return b"".join(
        (
            b'{"Nodes":',
            nodes,
            b',"NodeNames":',
            names,
            b',"FailedNodes":',
            failed_text.encode(),
            b',"FailedAndUnresolvableNodes":',
            _reasons_text(unresolvable or {}).encode(),
            b',"Error":',
            dump(error),
            b"}",
        )
    )


def pass_all_response(args: ExtenderArgs) -> bytes:
    """A filter answer that keeps every node: what the extender says when it cannot decide."""
    return filter_response(args, [None] * len(args.names))


Scores = Sequence[int] | npt.NDArray[np.integer[Any]]
"""Prioritize scores: a sequence of ints, or an integer array (what the score table computes)."""

_AFTER_NAME: Final = np.array(
    [f'","Score":{score}}},{{"Host":"' for score in range(MAX_SCORE + 1)], dtype=object
)
"""What follows a node name in a HostPriorityList, by score: its score and the next entry's
start; after the last name, ``_AFTER_LAST`` instead."""
_AFTER_LAST: Final = [f'","Score":{score}}}]' for score in range(MAX_SCORE + 1)]
_SCORES: Final = frozenset(range(MIN_SCORE, MAX_SCORE + 1))


def _score_array(names: Sequence[str], scores: Scores) -> npt.NDArray[np.intp]:
    """The scores as an array, each checked to be an integer in 0..10 (ValueError naming the
    first one that is not)."""
    if len(names) != len(scores):
        raise ValueError(f"{len(scores)} scores for {len(names)} nodes")
    if isinstance(scores, np.ndarray):
        if scores.dtype.kind not in "iu":
            raise ValueError(f"scores of dtype {scores.dtype}, not integers")
        values = scores.astype(np.intp, copy=False)
        out_of_range = (values < MIN_SCORE) | (values > MAX_SCORE)
        if out_of_range.any():
            i = int(np.argmax(out_of_range))
            raise ValueError(
                f"score of {names[i]!r} is {values[i]}, outside {MIN_SCORE}..{MAX_SCORE}"
            )
        return values
    # Checked in C for thousands of scores, exact ints only (the set alone would take True or
    # 5.0 for 1 or 5); the loop finds and names the first bad one.
    if not (set(map(type, scores)) <= {int} and set(scores) <= _SCORES):
        for name, score in zip(names, scores, strict=True):
            if isinstance(score, bool) or not isinstance(score, int):
                raise ValueError(f"score of {name!r} is {score!r}, not an integer")
            if not MIN_SCORE <= score <= MAX_SCORE:
                raise ValueError(f"score of {name!r} is {score}, outside {MIN_SCORE}..{MAX_SCORE}")
    return np.fromiter(scores, dtype=np.intp, count=len(scores))


def prioritize_response(names: Sequence[str], scores: Scores, plain: bool | None = None) -> bytes:
    """A HostPriorityList: a bare array of {"Host", "Score"}, integer scores 0..10, that ranks
    the nodes as ``scores`` do, naming only the nodes scored above the lowest score, each by how
    much. ``plain`` says whether every name is written in JSON as itself (None: find out).

    kube-scheduler adds each listed score, times the extender's weight, to the node's total and
    adds nothing for a node the answer leaves out (prioritizeNodes, kube-scheduler 1.37), so
    taking the same amount off every node changes no ranking. The lowest score is that amount:
    the answer stays in 0..10 and leaves the nodes at the lowest score out (every node when all
    score alike, as in the neutral answer or on the default static power source: ``[]``; 800 of
    5,000 in bench.extender's standard-pod case). kube-scheduler then
    decodes, allocates and adds up only the others, in the serial part of its scheduling cycle.
    One thing differs for a left-out node: kube-scheduler draws a random tie-breaker only for
    nodes an extender listed, so nodes tied in total and left out are taken in its own order, as
    they are without an extender."""
    values = _score_array(names, scores)
    if len(values):
        lowest = values.min()
        above = values > lowest
        if not above.all():
            names = list(compress(names, above.tolist()))
            values = values[above]
        values = values - lowest
    if plain is None:
        plain = _plain(names)
    if not (names and plain):
        return dump([{"Host": n, "Score": s} for n, s in zip(names, values.tolist(), strict=True)])
    # One list of name, what-follows, name, ...: a single join and a single encode (slicing or
    # concatenating the joined text would copy it again each time).
    pieces: list[str] = [""] * (2 * len(names))
    pieces[0::2] = names
    pieces[1::2] = _AFTER_NAME[values].tolist()
    pieces[0] = '[{"Host":"' + pieces[0]
    pieces[-1] = _AFTER_LAST[values[-1]]
    return "".join(pieces).encode()
