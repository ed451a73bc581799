"""Which NodeHardware the manager believes: facts labelled as written for a simulated node (what
the pool-mode agent publishes) count only for a node KWOK fakes. For a real node they are
ignored, with one warning, and the node is planned as if no agent had reported.

Watch events go through the real informers; only the API server is absent.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from joulie.api import keys
from joulie.kube.client import KubeClient
from joulie.manager.cache import ClusterCache, simulated_node
from tests.support import builders
from tests.support.builders import nodehardware


@pytest.fixture
def cache() -> tuple[ClusterCache, list[int]]:
    fired = [0]

    def count() -> None:
        fired[0] += 1

    return ClusterCache(cast(KubeClient, None), "joulie-manager", count), fired


def node(name: str, *, kwok: bool, rv: int = 1) -> dict[str, Any]:
    annotations = {keys.KWOK_NODE_ANNOTATION: keys.KWOK_NODE_VALUE} if kwok else {}
    return builders.node(name, rv=rv, annotations=annotations)


def hardware(name: str, simulated: str | None, rv: int = 1) -> dict[str, Any]:
    labels = {keys.SIMULATED_LABEL: simulated} if simulated is not None else {}
    return nodehardware(name, rv=rv, labels=labels, status={"cpu": {"sockets": 2}})


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def warnings(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["log_level"] == "warning" and "labelled simulated" in e["event"]]


def test_simulated_facts_count_for_a_kwok_node(cache: tuple[ClusterCache, list[int]]) -> None:
    c, _ = cache
    c.nodes._apply(event("ADDED", node("sim", kwok=True)))
    c.hardware._apply(event("ADDED", hardware("sim", "true")))
    sim = c.nodes.get("sim")
    assert sim is not None
    assert simulated_node(sim)
    facts = c.hardware_of("sim")
    assert facts is not None
    assert facts.simulated
    assert facts.status is not None


def test_simulated_facts_for_a_real_node_are_ignored_with_one_warning(
    cache: tuple[ClusterCache, list[int]],
) -> None:
    c, _ = cache
    c.nodes._apply(event("ADDED", node("real", kwok=False)))
    c.hardware._apply(event("ADDED", hardware("real", "true")))
    with capture_logs() as logs:
        for _ in range(3):  # one look-up per reconcile
            assert c.hardware_of("real") is None
    (warning,) = warnings(logs)
    assert warning["node"] == "real"
    assert warning["nodehardware"] == "real"

    # The node's own agent takes its NodeHardware back (labelled real): believed again.
    c.hardware._apply(event("MODIFIED", hardware("real", "false", rv=2)))
    facts = c.hardware_of("real")
    assert facts is not None
    assert facts.status is not None
    # A second takeover is reported again.
    c.hardware._apply(event("MODIFIED", hardware("real", "true", rv=3)))
    with capture_logs() as logs:
        assert c.hardware_of("real") is None
    assert len(warnings(logs)) == 1


def test_unlabelled_facts_are_believed_for_any_node(cache: tuple[ClusterCache, list[int]]) -> None:
    c, _ = cache
    c.nodes._apply(event("ADDED", node("real", kwok=False)))
    c.hardware._apply(event("ADDED", hardware("real", None)))
    assert c.hardware_of("real") is not None
    c.hardware._apply(event("ADDED", hardware("other", "false")))
    assert c.hardware_of("other") is not None  # its node is not even known yet


def test_the_label_and_the_kwok_annotation_are_changes(
    cache: tuple[ClusterCache, list[int]],
) -> None:
    """Either can change whether the facts count, so either starts a reconcile."""
    c, fired = cache
    c.nodes._apply(event("ADDED", node("n", kwok=False)))
    c.hardware._apply(event("ADDED", hardware("n", "false")))
    assert fired[0] == 2
    c.hardware._apply(event("MODIFIED", hardware("n", "true", rv=2)))
    assert fired[0] == 3
    c.nodes._apply(event("MODIFIED", node("n", kwok=True, rv=2)))
    assert fired[0] == 4
    assert c.hardware_of("n") is not None
