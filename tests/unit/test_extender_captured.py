"""The extender reads what kube-scheduler 1.37 really sends (bodies captured from the local
cluster's kube-scheduler, both node forms) and answers each in the form it came in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from joulie.extender import wire

CAPTURED = Path(__file__).resolve().parents[1] / "data/extender/captured"
NODES = {"cap-kwok-h100-nvl-0", "cap-kwok-h100-sxm-0", "cap-kwok-l40s-0"}


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize("form", ["names", "nodes"])
def test_captured_bodies_parse(verb: str, form: str) -> None:
    args = wire.parse_args((CAPTURED / f"{verb}-{form}.json").read_bytes())
    assert set(args.names) == NODES
    assert args.pod["metadata"]["annotations"]["joulie.io/workload-class"] == "performance"
    assert (args.labels is None) == (form == "names")
    if args.labels is not None:
        for labels in args.labels.values():
            assert labels["joulie.io/managed"] == "true"


def test_a_filter_answer_comes_back_in_the_form_asked() -> None:
    for form in ("names", "nodes"):
        args = wire.parse_args((CAPTURED / f"filter-{form}.json").read_bytes())
        kept = [n for n in args.names if "l40s" not in n]
        reasons = ["eco" if "l40s" in n else None for n in args.names]
        answer = json.loads(wire.filter_response(args, reasons))
        assert answer["FailedNodes"] == {"cap-kwok-l40s-0": "eco"}
        if form == "names":
            assert answer["NodeNames"] == kept
            assert answer["Nodes"] is None
        else:
            assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == kept
            assert answer["NodeNames"] is None
