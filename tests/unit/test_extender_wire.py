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

from joulie.extender.wire import (
    ExtenderArgs,
    NodeForm,
    WireError,
    filter_response,
    parse_args,
    parse_pod,
    pass_all_response,
    prioritize_response,
)

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
    # Passing nodes come back in the request's order, whatever order the placement used.
    out = json.loads(filter_response(args, ["gpu-h-07", "cpu-a-01"], {"gpu-h-08": "node is eco"}))
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
        filter_response(
            args,
            ["cpu-a-01", "gpu-h-07"],
            {"gpu-h-08": "node is eco"},
            unresolvable={"gpu-h-08": "node is eco"},
        )
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
    assert prioritize_response(["myhost"], [1]) == b'[{"Host":"myhost","Score":1}]'
    out = json.loads(prioritize_response(["a", "b", "c"], [0, 10, 7]))
    assert out == [
        {"Host": "a", "Score": 0},
        {"Host": "b", "Score": 10},
        {"Host": "c", "Score": 7},
    ]
    assert all(type(entry["Score"]) is int for entry in out)


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


def test_filter_refuses_a_passing_node_that_was_not_asked_about() -> None:
    args = parse_args(body("args-node-names.json"))
    with pytest.raises(ValueError, match="not in the request"):
        filter_response(args, ["cpu-a-01", "elsewhere"], {})


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
    out = json.loads(filter_response(args, ["n"], {"m": "no"}, unresolvable=None))
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
    chosen = [n for n in names if data.draw(st.booleans())]
    passing = data.draw(st.permutations(chosen))
    failed = {n: "no" for n in names if n not in passing}
    out = json.loads(filter_response(args, passing, failed))
    assert out["NodeNames"] == [n for n in names if n in passing]
    assert set(out["FailedNodes"]) | set(out["NodeNames"]) == set(names)


# Node names as Kubernetes allows them (written as themselves in JSON), and any text at all (which
# takes json.dumps's way); the answers must be the same bytes json.dumps would write either way.
dns_names = st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,30}[a-z0-9])?", fullmatch=True)
any_names = st.one_of(dns_names, st.text(min_size=1, max_size=12))
reasons = st.one_of(
    st.sampled_from(["joulie: performance pods are kept off eco nodes", 'say "no" \\ here']),
    st.text(max_size=12),
)


def go(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@given(st.one_of(st.lists(dns_names, unique=True), st.lists(any_names, unique=True)), st.data())
def test_answers_are_byte_for_byte_what_json_dumps_writes(
    names: list[str], data: st.DataObject
) -> None:
    scores = data.draw(st.lists(st.integers(0, 10), min_size=len(names), max_size=len(names)))
    expected = go([{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)])
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

    assert filter_response(args, passing[::-1], failed) == answer(passing, failed)
    assert pass_all_response(args) == answer(names, {})


def test_thousands_of_nodes_answer_as_json_dumps_would() -> None:
    names = [f"kwok-gpu-h100-{i}" for i in range(5000)]
    args = parse_args(go({"Pod": {}, "Nodes": None, "NodeNames": names}))
    scores = [i % 11 for i in range(5000)]
    assert prioritize_response(args.names, scores) == go(
        [{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)]
    )
    failed = dict.fromkeys(names[1000:], "joulie: performance pods are kept off eco nodes")
    assert filter_response(args, set(names[:1000]), failed) == go(
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
    assert prioritize_response(odd, [3] * 11) == go([{"Host": n, "Score": 3} for n in odd])
