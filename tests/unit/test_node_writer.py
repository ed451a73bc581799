"""The manager's writer forgets what it wrote about nodes that are gone, status paths included,
so its memory follows the cluster instead of growing with every node ever seen."""

from __future__ import annotations

from typing import cast

from joulie.kube.client import KubeClient
from joulie.kube.events import EventRecorder
from joulie.kube.writes import Writer
from joulie.manager.cache import NODETWINS
from joulie.manager.node_writer import NODES, NodeWriter


def test_memory_follows_the_nodes_that_exist() -> None:
    writer = Writer(cast(KubeClient, None), "joulie-manager")
    for name in ("a", "b"):
        for path in (f"{NODETWINS}/{name}", f"{NODETWINS}/{name}/status", f"{NODES}/{name}"):
            writer._remember(path, {"x": 1}, {"metadata": {"resourceVersion": "1"}})
    nodes = NodeWriter(writer, cast(EventRecorder, None))
    nodes.retain({"a", "b"})
    assert len(writer) == 6
    nodes.retain({"a"})
    assert sorted(writer.remembered()) == sorted(
        [f"{NODETWINS}/a", f"{NODETWINS}/a/status", f"{NODES}/a"]
    )
    writer.forget(f"{NODETWINS}/a")  # an object and its subresources go together
    assert writer.remembered() == [f"{NODES}/a"]
