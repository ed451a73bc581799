"""The informer's store logic on its own: indexes, change detection, relist replacement and
events it cannot read (fed directly, as no real server would send them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from joulie.api.gpu import pod_gpu_count
from joulie.kube.informer import Handlers, Informer
from joulie.kube.projections import (
    SlimPod,
    pod_projection,
    pods_by_annotation_and_phase,
    pods_by_node,
)
from tests.support import builders
from tests.support.builders import container


def pod(
    name: str, node: str = "", phase: str = "Pending", rv: str = "1", **annotations: str
) -> dict[str, Any]:
    return builders.pod(
        name,
        namespace="ns",
        rv=rv,
        annotations=annotations,
        uid=f"uid-{name}",
        node_name=node,
        containers=[container({"cpu": "500m", "nvidia.com/gpu": "2"})],
        phase=phase,
    )


def make() -> tuple[Informer[SlimPod], list[tuple[str, str]]]:
    informer: Informer[SlimPod] = Informer(
        None,  # type: ignore[arg-type]  # the store logic needs no client
        "/api/v1/pods",
        pod_projection(annotation_keys=["joulie.io/workload-class"], gpu_count=pod_gpu_count),
        indexers={
            "node": pods_by_node,
            "class-phase": pods_by_annotation_and_phase("joulie.io/workload-class", "standard"),
        },
    )
    seen: list[tuple[str, str]] = []
    informer.add_handlers(
        Handlers(
            on_add=lambda p: seen.append(("add", p.name)),
            on_update=lambda old, new: seen.append(("update", new.name)),
            on_delete=lambda p: seen.append(("delete", p.name)),
        )
    )
    return informer, seen


def event(kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def test_projection_keeps_what_joulie_reads() -> None:
    informer, _ = make()
    informer._apply(
        event(
            "ADDED",
            pod(
                "a",
                "n1",
                "Running",
                **{"joulie.io/workload-class": "performance", "other": "dropped"},
            ),
        )
    )
    slim = informer.get("ns/a")
    assert slim is not None
    assert (slim.node_name, slim.phase, slim.cpu_millis, slim.gpus) == ("n1", "Running", 500, 2)
    assert dict(slim.annotations) == {"joulie.io/workload-class": "performance"}


def test_indexes_follow_updates_and_deletes() -> None:
    informer, _ = make()
    informer._apply(
        event("ADDED", pod("a", "n1", "Running", **{"joulie.io/workload-class": "performance"}))
    )
    informer._apply(event("ADDED", pod("b", "n1")))
    assert {p.name for p in informer.by_index("node", "n1")} == {"a", "b"}
    assert [p.name for p in informer.by_index("class-phase", "performance/Running")] == ["a"]
    informer._apply(
        event(
            "MODIFIED",
            pod("a", "n2", "Succeeded", rv="2", **{"joulie.io/workload-class": "performance"}),
        )
    )
    assert [p.name for p in informer.by_index("node", "n1")] == ["b"]
    assert informer.by_index("class-phase", "performance/Running") == []
    informer._apply(event("DELETED", pod("b", "n1", rv="3")))
    assert informer.by_index("node", "n1") == []
    assert "n1" not in informer.index_values("node")


def test_updates_that_change_nothing_joulie_reads_fire_no_handler() -> None:
    informer, seen = make()
    informer._apply(event("ADDED", pod("a", "n1", "Running")))
    noisy = pod("a", "n1", "Running", rv="7")
    noisy["status"]["containerStatuses"] = [{"restartCount": 3}]
    informer._apply(event("MODIFIED", noisy))
    assert seen == [("add", "a")]
    assert informer.resource_version == "7"


def test_relist_replaces_the_store_and_reports_deletions() -> None:
    informer, seen = make()
    for name in ("a", "b", "c"):
        informer._apply(event("ADDED", pod(name)))
    seen.clear()
    informer._replace(
        {"ns/b": informer._projection(pod("b", "n9")), "ns/d": informer._projection(pod("d"))}
    )
    assert sorted(informer.keys()) == ["ns/b", "ns/d"]
    assert sorted(seen) == [("add", "d"), ("delete", "a"), ("delete", "c"), ("update", "b")]


def test_unreadable_events_never_stop_the_store() -> None:
    informer, _ = make()
    informer._apply(event("ADDED", pod("a")))
    informer._apply(event("ADDED", {"metadata": {}}))
    broken = pod("a", rv="5")
    broken["spec"]["containers"] = "not-a-list"
    informer._apply(event("MODIFIED", broken))
    # An object that turned unreadable is dropped rather than kept in its old form.
    assert informer.get("ns/a") is None
    informer._apply(event("BOOKMARK", {"metadata": {"resourceVersion": "42"}}))
    assert informer.resource_version == "42"
    informer._apply(event("ADDED", pod("a", rv="43")))
    assert informer.get("ns/a") is not None


def test_handlers_added_after_sync_get_the_current_store() -> None:
    informer, _ = make()
    informer._replace({"ns/a": informer._projection(pod("a"))})
    informer._synced.set()
    late: list[str] = []
    informer.add_handlers(Handlers(on_add=lambda p: late.append(p.name)))
    assert late == ["a"]
