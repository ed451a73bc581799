"""A DaemonSet agent's pods: those bound to its own node, watched with a field selector, their
workload class read as everywhere in Joulie, a pass woken when one comes, goes or changes class
or phase (and not for anything else); and the daemon asking the kubelet which GPU each holds
only for a spec with per-class GPU caps. Watch events are fed to the informer directly, as a
watch would bring them."""

from __future__ import annotations

from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from joulie.agent.cache import OwnNodeCache
from joulie.agent.daemon import DaemonAgent
from joulie.agent.host_node import HostNode
from joulie.agent.pod_devices import NO_CACHE
from joulie.agent.pod_resources import PodResourcesClient
from joulie.api import keys
from joulie.api.nodetwin import NodeTwinSpec
from joulie.kube.client import KubeClient
from joulie.kube.writes import Writer
from tests.support import builders
from tests.support.fake_kubelet import fake_kubelet, gpu_pod

GPU0 = "GPU-6a1f2c3d-0000-4000-8000-000000000000"


def own_cache(wakes: list[str]) -> OwnNodeCache:
    # Never started: the events below stand for what its watch would bring.
    return OwnNodeCache(cast(KubeClient, None), "joulie-agent", "n1", lambda: wakes.append("x"))


def pod(name: str, rv: int, workload_class: str | None = None, **more: Any) -> dict[str, Any]:
    annotations = dict(more.pop("annotations", {}))
    if workload_class is not None:
        annotations[keys.WORKLOAD_CLASS_ANNOTATION] = workload_class
    return builders.pod(
        name,
        namespace="work",
        node_name="n1",
        rv=rv,
        annotations=annotations or None,
        phase=more.pop("phase", "Running"),
    )


def feed(cache: OwnNodeCache, kind: str, obj: dict[str, Any]) -> None:
    cache.pods._apply({"type": kind, "object": obj})


def test_the_agent_watches_its_own_nodes_pods_and_wakes_only_for_what_caps_read() -> None:
    wakes: list[str] = []
    cache = own_cache(wakes)
    assert cache.pods._selectors == {"fieldSelector": "spec.nodeName=n1"}
    feed(cache, "ADDED", pod("train", 1, "performance"))
    feed(cache, "ADDED", pod("batch", 2))
    assert cache.pod_class(("work", "train")) == "performance"
    assert cache.pod_class(("work", "batch")) == "standard"  # no class: standard
    assert cache.pod_class(("work", "elsewhere")) is None
    assert len(wakes) == 2

    feed(cache, "MODIFIED", pod("batch", 3, annotations={"example.com/owner": "me"}))
    assert len(wakes) == 2  # nothing the caps read
    feed(cache, "MODIFIED", pod("batch", 4, "performance"))
    assert cache.pod_class(("work", "batch")) == "performance"
    feed(cache, "MODIFIED", pod("batch", 5, "performance", phase="Succeeded"))
    feed(cache, "DELETED", pod("batch", 6, "performance", phase="Succeeded"))
    assert len(wakes) == 5
    assert cache.pod_class(("work", "batch")) is None


def class_caps_spec(with_caps: bool) -> NodeTwinSpec:
    gpu: dict[str, Any] = {"powerCap": {"capWattsPerGpu": 400}}
    if with_caps:
        gpu["classCaps"] = {"standard": {"capWattsPerGpu": 350}}
    return NodeTwinSpec.model_validate(
        builders.nodetwin("n1", "performance", spec={"gpu": gpu})["spec"]
    )


@pytest.mark.asyncio
async def test_the_daemon_asks_the_kubelet_only_for_per_class_caps_and_logs_each_reason_once() -> (
    None
):
    wakes: list[str] = []
    cache = own_cache(wakes)
    with fake_kubelet() as kubelet:
        kubelet.pods = [gpu_pod("train", GPU0)]
        agent = DaemonAgent(
            "n1",
            cache,
            cast(HostNode, None),
            cast(Writer, None),
            control_interval_s=20,
            spec_read_timeout_s=300,
            heartbeat_s=300,
            pod_devices=PodResourcesClient(str(kubelet.socket)),
        )
        assert (await agent._pod_work(None)).gpu is None
        assert (await agent._pod_work(class_caps_spec(False))).gpu is None
        assert kubelet.calls == 0  # a node-wide cap needs no answer

        with capture_logs() as logs:
            for _ in range(3):
                unsynced = (await agent._pod_work(class_caps_spec(True))).gpu
                assert unsynced is not None
                assert unsynced.unknown == NO_CACHE
            cache.pods._synced.set()  # the first list is in
            feed(cache, "ADDED", pod("train", 1, "performance"))
            known = (await agent._pod_work(class_caps_spec(True))).gpu
        assert known is not None
        assert known.classes == {GPU0: "performance"}
        assert [e["event"] for e in logs] == [
            "work whose pods cannot be told takes the node-level intent",
            "the pods on every GPU board and exclusive core can be told again",
        ]
