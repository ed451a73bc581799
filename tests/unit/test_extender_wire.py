"""kube-scheduler's extender wire format, on bodies as kube-scheduler 1.37 sends them
(tests/data/extender): both node forms read and answered in the same form, Go's case-insensitive
keys and its nulls, the answer shapes key by key, and one clear reason for every malformed body."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from joulie.api.json_body import MAX_DEPTH
from joulie.core.preemption_candidates import Candidate
from joulie.extender.wire import (
    MIN_REMEMBERED_BYTES,
    ExtenderArgs,
    NameLists,
    NodeForm,
    WireError,
    filter_response,
    parse_args,
    parse_pod,
    pass_all_response,
    prioritize_response,
)
from joulie.extender.wire_preempt import parse_preemption_args, preemption_response
from tests.support.host_priorities import above_lowest, as_scheduler_adds

DATA = Path(__file__).resolve().parent.parent / "data" / "extender"
FILTER_RESULT_KEYS = ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]


def body(name: str) -> bytes:
    return (DATA / name).read_bytes()


def doc(name: str) -> Any:
    return json.loads(body(name))


def test_the_node_names_form_as_sent_with_node_cache_capable() -> None:
    args = parse_args(body("args-node-names.json"))
    assert args.form is NodeForm.NAMES
    assert args.names == ("cpu-a-01", "gpu-h-07", "gpu-h-08")
    assert args.nodes == ()
    assert args.labels is None
    # The pod is handed on exactly as sent, managedFields and null condition times included.
    assert args.pod == doc("pod.json")
    assert args.pod["status"]["conditions"][0]["lastProbeTime"] is None


def test_the_nodes_form_keeps_each_node_as_sent() -> None:
    sent = doc("args-nodes.json")
    args = parse_args(body("args-nodes.json"))
    assert args.form is NodeForm.NODES
    assert args.names == ("cpu-a-01", "gpu-h-07", "gpu-h-08")
    assert [n.raw for n in args.nodes] == sent["Nodes"]["items"]
    assert args.labels is not None
    assert args.labels["gpu-h-08"]["joulie.io/power-profile"] == "eco"
    assert args.labels["gpu-h-07"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert args.pod == doc("pod.json")


def test_filter_answers_names_for_names() -> None:
    args = parse_args(body("args-node-names.json"))
    out = json.loads(filter_response(args, [None, None, "node is eco"]))
    assert list(out) == FILTER_RESULT_KEYS
    assert out["Nodes"] is None
    assert out["NodeNames"] == ["cpu-a-01", "gpu-h-07"]
    assert out["FailedNodes"] == {"gpu-h-08": "node is eco"}
    assert out["FailedAndUnresolvableNodes"] == {}
    assert out["Error"] == ""


def test_filter_answers_nodes_for_nodes_echoing_survivors_unchanged() -> None:
    sent = doc("args-nodes.json")["Nodes"]["items"]
    args = parse_args(body("args-nodes.json"))
    out = json.loads(
        filter_response(args, [None, None, "node is eco"], unresolvable={"gpu-h-08": "node is eco"})
    )
    assert list(out) == FILTER_RESULT_KEYS
    assert out["NodeNames"] is None
    assert out["Nodes"] == {"items": sent[:2]}
    assert out["FailedNodes"] == {"gpu-h-08": "node is eco"}
    assert out["FailedAndUnresolvableNodes"] == {"gpu-h-08": "node is eco"}
    assert out["Error"] == ""


@pytest.mark.parametrize("name", ["args-node-names.json", "args-nodes.json"])
def test_both_forms_round_trip(name: str) -> None:
    """What kube-scheduler reads back from a pass-everything answer is what it sent."""
    sent = doc(name)
    args = parse_args(body(name))
    answer = json.loads(pass_all_response(args))
    assert answer["NodeNames"] == sent["NodeNames"]
    if sent["Nodes"] is None:
        assert answer["Nodes"] is None
    else:
        assert answer["Nodes"]["items"] == sent["Nodes"]["items"]
    # And the answer's node form reads again as a request would.
    again = parse_args(json.dumps({"Pod": sent["Pod"], **answer}).encode())
    assert again == args


def test_prioritize_answers_a_bare_host_priority_list() -> None:
    assert prioritize_response(["a", "myhost"], [0, 1]) == b'[{"Host":"myhost","Score":1}]'
    out = json.loads(prioritize_response(["a", "b", "c", "d"], [2, 10, 7, 2]))
    assert out == [{"Host": "b", "Score": 8}, {"Host": "c", "Score": 5}]
    assert all(type(entry["Score"]) is int for entry in out)
    # Nodes all scored alike (the neutral answer among them) leave the ranking to the others.
    assert prioritize_response(["a", "b"], [5, 5]) == b"[]"
    assert prioritize_response(["myhost"], [1]) == b"[]"
    assert prioritize_response([], []) == b"[]"


@given(st.lists(st.integers(0, 10), max_size=40))
def test_the_answer_ranks_every_node_as_its_scores_do(scores: list[int]) -> None:
    names = [f"node-{i}" for i in range(len(scores))]
    added = as_scheduler_adds(names, prioritize_response(names, scores))
    # The same amount less for every node, and never below 0.
    assert len({score - add for score, add in zip(scores, added, strict=True)}) <= 1
    assert all(0 <= v <= 10 for v in added)
    if scores:
        assert min(added) == 0


@pytest.mark.parametrize(
    ("scores", "reason"),
    [([11], "outside 0..10"), ([-1], "outside 0..10"), ([True], "not an integer"),
     ([5.0], "not an integer"), ([1, 2], "2 scores for 1 nodes")],
)  # fmt: skip
def test_prioritize_refuses_scores_kube_scheduler_would_misread(
    scores: list[Any], reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        prioritize_response(["a"], scores)


@pytest.mark.parametrize(
    ("reasons", "error"),
    [([None, None], "2 filter reasons for 3 nodes"), ([None, None, ""], "a filter reason is ''"),
     ([None, 3, None], "a filter reason is 3"), ([None, ["no"], None], "is <class 'list'>")],
)  # fmt: skip
def test_filter_refuses_reasons_that_do_not_match_the_request(
    reasons: list[Any], error: str
) -> None:
    args = parse_args(body("args-node-names.json"))
    with pytest.raises((ValueError, TypeError), match=error):
        filter_response(args, reasons)


def lower_keys(value: Any, depth: int) -> Any:
    if depth == 0 or not isinstance(value, dict):
        return value
    return {k.lower(): lower_keys(v, depth - 1) for k, v in value.items()}


def test_lowercase_and_mixed_case_keys_are_read() -> None:
    names = doc("args-node-names.json")
    assert parse_args(json.dumps(lower_keys(names, 1)).encode()) == parse_args(
        body("args-node-names.json")
    )
    nodes = doc("args-nodes.json")
    mixed = {"pOD": nodes["Pod"], "NODES": {"Items": nodes["Nodes"]["items"]}, "nodeNames": None}
    assert parse_args(json.dumps(mixed).encode()).names == ("cpu-a-01", "gpu-h-07", "gpu-h-08")


def test_the_later_of_two_keys_for_one_field_wins_as_in_go() -> None:
    args = parse_args(b'{"Pod":{},"NodeNames":["a"],"nodenames":["b"]}')
    assert args.names == ("b",)


def test_nulls_where_go_sends_them() -> None:
    assert parse_args(b'{"Pod":{},"Nodes":null,"NodeNames":[]}').names == ()
    empty = parse_args(b'{"Pod":{},"Nodes":{"metadata":{},"items":null},"NodeNames":null}')
    assert (empty.form, empty.names) == (NodeForm.NODES, ())
    args = parse_args(
        b'{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"n","labels":null}},'
        b'{"metadata":{"name":"m"}}]},"NodeNames":null}'
    )
    assert args.labels == {"n": {}, "m": {}}
    out = json.loads(filter_response(args, [None, "no"], unresolvable=None))
    assert out["FailedAndUnresolvableNodes"] == {}


def test_names_kube_scheduler_never_sends_still_get_a_valid_answer() -> None:
    # A JSON escape may spell a lone surrogate, which UTF-8 cannot encode: the answer escapes it.
    args = parse_args(b'{"Pod":{},"NodeNames":["\\ud800","caf\\u00e9"]}')
    assert json.loads(pass_all_response(args))["NodeNames"] == ["\ud800", "café"]


MALFORMED = [
    (b"", "body is not JSON"),
    (b"not json", "body is not JSON"),
    (b'{"Pod": {}, "NodeNames": ["a"]', "body is not JSON"),
    (b'{"Pod": {"x": NaN}, "NodeNames": []}', "body is not JSON"),
    (b'{"Pod": {"x": "\xff"}, "NodeNames": []}', "body is not JSON"),
    (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
    (b"[]", "the body is an array, not an object"),
    (b"{}", "no Pod in the body"),
    (b'{"Pod": null, "NodeNames": []}', "no Pod in the body"),
    (b'{"Pod": [], "NodeNames": []}', "Pod is an array, not an object"),
    (b'{"Pod": {}}', "neither NodeNames nor Nodes is set"),
    (b'{"Pod": {}, "Nodes": null, "NodeNames": null}', "neither NodeNames nor Nodes is set"),
    (b'{"Pod": {}, "Nodes": {"items": []}, "NodeNames": []}', "both NodeNames and Nodes"),
    (b'{"Pod": {}, "NodeNames": "a"}', "NodeNames is a string, not an array"),
    (b'{"Pod": {}, "NodeNames": ["a", 1]}', "NodeNames[1] is a number, not a string"),
    (b'{"Pod": {}, "NodeNames": [""]}', "NodeNames[0] is empty"),
    (b'{"Pod": {}, "NodeNames": ["a", "b", "a"]}', "NodeNames lists node 'a' more than once"),
    (b'{"Pod": {}, "Nodes": []}', "Nodes is an array, not an object"),
    (b'{"Pod": {}, "Nodes": {"items": {}}}', "Nodes.items is an object, not an array"),
    (b'{"Pod": {}, "Nodes": {"items": [true]}}', "Nodes.items[0] is a boolean, not an object"),
    (b'{"Pod": {}, "Nodes": {"items": [{}]}}', "Nodes.items[0] has no metadata"),
    (b'{"Pod": {}, "Nodes": {"items": [{"metadata": 3}]}}', "metadata is a number, not an"),
    (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}}', "metadata.name is missing"),
    (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {"name": ""}}]}}', "metadata.name is empty"),
    (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {"name": 7}}]}}', "name is a number"),
    (
        b'{"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "n", "labels": []}}]}}',
        "Nodes.items[0].metadata.labels is an array, not an object",
    ),
    (
        b'{"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "n", "labels": {"a": 1}}}]}}',
        "Nodes.items[0].metadata.labels['a'] is a number, not a string",
    ),
    (
        b'{"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "n"}}, '
        b'{"metadata": {"name": "n"}}]}}',
        "Nodes.items lists node 'n' more than once",
    ),
]


@pytest.mark.parametrize(("raw", "reason"), MALFORMED)
def test_a_malformed_body_is_one_wire_error_with_its_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(WireError) as caught:
        parse_args(raw)
    assert reason in caught.value.reason


def test_a_debug_pod_body_must_be_an_object() -> None:
    assert parse_pod(body("pod.json"))["metadata"]["name"] == "resnet-train-x7k2p"
    with pytest.raises(WireError, match="the body is a string"):
        parse_pod(b'"pod"')


node_names = st.lists(st.text(min_size=1, max_size=20), max_size=30, unique=True)


@given(node_names, st.data())
def test_filter_keeps_exactly_the_passing_names_in_request_order(
    names: list[str], data: st.DataObject
) -> None:
    args = parse_args(json.dumps({"Pod": {}, "Nodes": None, "NodeNames": names}).encode())
    assert args == ExtenderArgs({}, NodeForm.NAMES, tuple(names))
    verdicts = [data.draw(st.sampled_from([None, "no", "eco"])) for _ in names]
    out = json.loads(filter_response(args, verdicts))
    assert out["NodeNames"] == [n for n, v in zip(names, verdicts, strict=True) if v is None]
    assert out["FailedNodes"] == {n: v for n, v in zip(names, verdicts, strict=True) if v}


# Node names as Kubernetes allows them (written as themselves in JSON), and any text at all (which
# takes json.dumps's way); the answers must be the same bytes json.dumps would write either way.
dns_names = st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,30}[a-z0-9])?", fullmatch=True)
any_names = st.one_of(dns_names, st.text(min_size=1, max_size=12))
reasons = st.one_of(
    st.sampled_from(["joulie: performance pods are kept off eco nodes", 'say "no" \\ here']),
    st.text(min_size=1, max_size=12),
)


def go(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@given(st.one_of(st.lists(dns_names, unique=True), st.lists(any_names, unique=True)), st.data())
def test_answers_are_byte_for_byte_what_json_dumps_writes(
    names: list[str], data: st.DataObject
) -> None:
    scores = data.draw(st.lists(st.integers(0, 10), min_size=len(names), max_size=len(names)))
    expected = go(above_lowest(names, scores))
    assert prioritize_response(names, scores) == expected
    args = parse_args(go({"Pod": {}, "Nodes": None, "NodeNames": names}))
    passing = [n for n in names if data.draw(st.booleans())]
    failed = {n: data.draw(reasons) for n in names if n not in passing}

    def answer(kept: list[str], refused: dict[str, str]) -> bytes:
        return go(
            {
                "Nodes": None,
                "NodeNames": kept,
                "FailedNodes": refused,
                "FailedAndUnresolvableNodes": {},
                "Error": "",
            }
        )

    verdicts = [failed.get(n) for n in names]
    assert filter_response(args, verdicts) == answer(passing, failed)
    assert pass_all_response(args) == answer(names, {})
    # Read with remembered lists (so the reading knows whether the names are plain), the same.
    known = parse_args(go({"Pod": {}, "Nodes": None, "NodeNames": names}), NameLists(min_bytes=0))
    assert filter_response(known, verdicts) == answer(passing, failed)
    assert pass_all_response(known) == answer(names, {})
    assert prioritize_response(known.names, scores, known.plain) == expected


def test_thousands_of_nodes_answer_as_json_dumps_would() -> None:
    names = [f"kwok-gpu-h100-{i}" for i in range(5000)]
    args = parse_args(go({"Pod": {}, "Nodes": None, "NodeNames": names}))
    scores = [i % 11 for i in range(5000)]
    assert prioritize_response(args.names, scores) == go(above_lowest(names, scores))
    failed = dict.fromkeys(names[1000:], "joulie: performance pods are kept off eco nodes")
    assert filter_response(args, [None] * 1000 + [*failed.values()]) == go(
        {
            "Nodes": None,
            "NodeNames": names[:1000],
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": {},
            "Error": "",
        }
    )
    # One name JSON must escape: the whole answer takes json.dumps's way, and still agrees.
    odd = [*names[:10], 'quote"d']
    assert prioritize_response(odd, [2] + [3] * 10) == go(
        [{"Host": n, "Score": 1} for n in odd[1:]]
    )


# --- lists read before -------------------------------------------------------------------------


def names_args(pod: Any, names: list[str]) -> bytes:
    return go({"Pod": pod, "Nodes": None, "NodeNames": names})


def test_a_long_list_read_before_is_taken_as_it_was() -> None:
    lists = NameLists()
    names = [f"kwok-gpu-h100-{i}" for i in range(500)]
    assert len(go(names)) >= MIN_REMEMBERED_BYTES
    first = parse_args(names_args({"metadata": {"name": "a"}}, names), lists)
    again = parse_args(names_args({"metadata": {"name": "b"}}, names), lists)
    assert again.names is first.names  # not decoded or checked again
    assert again.pod == {"metadata": {"name": "b"}}
    assert again.plain is True
    fresh = parse_args(names_args({"metadata": {"name": "b"}}, names))
    assert (again.names, again.pod) == (fresh.names, fresh.pod)
    assert pass_all_response(again) == pass_all_response(fresh)
    assert prioritize_response(again.names, [3] * 500, again.plain) == prioritize_response(
        fresh.names, [3] * 500
    )


def test_the_names_a_filter_kept_are_known_when_prioritize_sends_them() -> None:
    lists = NameLists()
    names = [f"kwok-gpu-h100-{i}" for i in range(1000)]
    args = parse_args(names_args({}, names), lists)
    verdicts = ["eco" if i % 5 else None for i in range(1000)]
    answer = json.loads(filter_response(args, verdicts, lists=lists))
    kept = answer["NodeNames"]
    assert kept == names[::5]
    assert lists.find(go(kept)) is not None
    back = parse_args(names_args({}, kept), lists)
    assert back.names == tuple(kept)
    assert back.names is parse_args(names_args({"x": 1}, kept), lists).names


def test_a_short_list_is_read_every_time() -> None:
    lists = NameLists()
    body = names_args({}, ["a", "b"])
    assert parse_args(body, lists).names is not parse_args(body, lists).names
    assert lists.find(b'["a","b"]') is None


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=6))
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(["NodeNames", "nodenames", "Nodes", "a"]), inner, max_size=3
        ),
    ),
    max_leaves=8,
)
members = st.fixed_dictionaries(
    {},
    optional={
        "Pod": st.one_of(
            st.dictionaries(st.sampled_from(["NodeNames", "a"]), json_value), json_value
        ),
        "Nodes": st.one_of(st.none(), st.just({"items": []}), json_value),
        "nodenames": st.one_of(st.none(), st.lists(dns_names, max_size=3), json_value),
        "NodeNames": st.one_of(
            st.lists(dns_names, max_size=40),
            st.lists(any_names, max_size=5),
            st.lists(json_leaf, max_size=4),
            json_value,
        ),
    },
)


def outcome(body: bytes, lists: NameLists | None) -> Any:
    try:
        args = parse_args(body, lists)
    except WireError as exc:
        return exc.reason
    return (args.pod, args.form, args.names, args.nodes)


@given(members, st.permutations(range(4)), st.booleans())
def test_a_body_reads_the_same_with_lists_read_before(
    parts: dict[str, Any], order: list[int], text_keys: bool
) -> None:
    """Whatever the body holds (a Pod with its own NodeNames key, NodeNames twice, the member
    last or not, names that are not names), reading it with remembered lists (first a miss, then
    a hit) gives exactly what reading it whole gives."""
    keys = sorted(parts, key=lambda k: order[["Pod", "Nodes", "nodenames", "NodeNames"].index(k)])
    raw = go({k: parts[k] for k in keys})
    if text_keys:
        raw = raw.replace(b'","', b'", "')  # spacing Go does not write: not a remembered list
    lists = NameLists(min_bytes=0)
    expected = outcome(raw, None)
    assert outcome(raw, lists) == expected
    assert outcome(raw, lists) == expected


# --- preemption --------------------------------------------------------------------------------


def test_preemption_args_in_both_forms_and_the_result_kube_scheduler_reads() -> None:
    meta = go(
        {
            "Pod": {"metadata": {"name": "p"}},
            "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {
                "n1": {"Pods": [{"UID": "u1"}, {"UID": "u2"}], "NumPDBViolations": 1},
                "n2": {"Pods": [{"UID": "u3"}], "NumPDBViolations": 0},
            },
        }
    )
    pod, candidates = parse_preemption_args(meta)
    assert pod == {"metadata": {"name": "p"}}
    assert candidates == (Candidate("n1", ("u1", "u2"), 1), Candidate("n2", ("u3",), 0))
    full = go(
        {
            "Pod": {},
            "NodeNameToVictims": {
                "n1": {"Pods": [{"metadata": {"name": "v", "uid": "u1"}}], "NumPDBViolations": 0}
            },
            "NodeNameToMetaVictims": None,
        }
    )
    assert parse_preemption_args(full)[1] == (Candidate("n1", ("u1",), 0),)
    # Go reads keys in any case; kube-scheduler reads only NodeNameToMetaVictims back.
    lower = b'{"pod":{},"nodenametometavictims":{"foo":{"pods":[{"uid":"myuid"}]}}}'
    assert parse_preemption_args(lower)[1] == (Candidate("foo", ("myuid",), 0),)
    assert preemption_response([Candidate("foo", ("myuid",), 1)]) == (
        b'{"NodeNameToMetaVictims":{"foo":{"Pods":[{"UID":"myuid"}],"NumPDBViolations":1}}}'
    )
    assert preemption_response([]) == b'{"NodeNameToMetaVictims":{}}'


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"NodeNameToMetaVictims":{}}', "no Pod in the body"),
        (b'{"Pod":{},"NodeNameToMetaVictims":[]}', "NodeNameToMetaVictims is an array"),
        (b'{"Pod":{},"NodeNameToMetaVictims":{"n":{"Pods":[{}]}}}', "has no UID"),
        (b'{"Pod":{},"NodeNameToMetaVictims":{"n":{"Pods":{}}}}', "Pods is an object"),
        (b'{"Pod":{},"NodeNameToMetaVictims":{"n":{"NumPDBViolations":-1}}}', "not a count"),
        (b'{"Pod":{},"NodeNameToMetaVictims":{},"NodeNameToVictims":{}}', "both"),
        (b'{"Pod":{},"NodeNameToVictims":{"n":{"Pods":[{"metadata":{}}]}}}', "has no UID"),
    ],
)
def test_a_malformed_preemption_body_is_one_wire_error(raw: bytes, reason: str) -> None:
    with pytest.raises(WireError) as caught:
        parse_preemption_args(raw)
    assert reason in caught.value.reason


def test_the_lists_kept_are_bounded_in_bytes_not_only_in_count() -> None:
    # Eight lists of a million names each were all kept: RSS 263 -> 814 MiB, held.
    lists = NameLists(max_bytes=100_000)
    bodies = [[f"n{k}-{i:06}" for i in range(2_000)] for k in range(8)]  # ~24 KB of JSON each
    for names in bodies:
        parse_args(names_args({}, names), lists)
        assert lists.held_bytes <= 100_000
    assert lists.find(go(bodies[-1])) is not None  # the newest stay
    assert lists.find(go(bodies[0])) is None
    huge = [f"n-{i:07}" for i in range(20_000)]  # ~240 KB: never kept
    assert parse_args(names_args({}, huge), lists).names == tuple(huge)
    assert lists.find(go(huge)) is None
    assert lists.find(go(bodies[-1])) is not None


@pytest.mark.parametrize("padding", [0, 300 * 1024], ids=["small pod", "pod past 256 KiB"])
@pytest.mark.parametrize("remembered", [False, True])
def test_a_pod_as_deep_as_the_policy_allows_is_read_and_one_level_more_is_refused(
    padding: int, remembered: bool
) -> None:
    # The depth of a small text is checked by orjson writing it, of a large one by a walk when
    # it holds few objects: both draw the line at the same level, whichever way the body is
    # read (the NodeNames form decodes the pod apart from the names).
    names = json.dumps([f"node-{i:04d}" for i in range(200)])

    def names_body(levels: int) -> bytes:
        # The body is level 1 and the pod level 2: the arrays in it are the rest.
        pod = {"metadata": {"name": "p", "annotations": {"pad": "x" * padding}}}
        pod_json = json.dumps(pod)[:-1] + ',"x":' + "[" * levels + "]" * levels + "}"
        return f'{{"Pod":{pod_json},"Nodes":null,"NodeNames":{names}}}'.encode()

    lists = NameLists() if remembered else None
    deepest = names_body(MAX_DEPTH - 2)
    if lists is not None:
        parse_args(deepest, lists)  # the names are remembered: only the pod is decoded
    assert len(parse_args(deepest, lists).names) == 200
    with pytest.raises(WireError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_args(names_body(MAX_DEPTH - 1), lists)


@pytest.mark.parametrize("remembered", [True, False], ids=["split", "read whole"])
def test_the_names_check_is_asked_only_for_the_pods_named(remembered: bool) -> None:
    """A filter looks names up only for a performance pod: the names check that lookup gives
    is asked for such a pod alone, however the body is read (a standard pod's names go into a
    set, which needs no lookup)."""
    names = [f"node-{i:04d}" for i in range(300)]
    asked: list[tuple[Any, ...]] = []

    def distinct(nodes: tuple[Any, ...]) -> bool:
        asked.append(nodes)
        return True

    def performance(pod: Any) -> bool:
        return bool(pod.get("metadata", {}).get("name") == "perf")

    for pod, expected in (({"metadata": {"name": "perf"}}, 1), ({}, 0), ([], 0)):
        asked.clear()
        body = go({"Pod": pod, "Nodes": None, "NodeNames": names})
        lists = NameLists() if remembered else None
        try:
            args = parse_args(body, lists, distinct, performance)
        except WireError:
            assert pod == []  # not an object: refused, and asked of nobody
            assert asked == []
            continue
        assert args.names == tuple(names)
        assert len(asked) == expected
