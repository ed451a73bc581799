"""The extender's view of PodGroups, for its ``preempt`` verb: which pods (by UID) belong to
which group, where they run, and whether a group may only be preempted whole.

Pods are kept slim (UID, node, group), so the cache costs a few hundred bytes a pod. PodGroups
are watched only where the API server serves them (scheduling.k8s.io/v1beta1); elsewhere no pod
has a group the extender can read, and the verb works with kube-scheduler's candidates alone.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from joulie.api.workload import DisruptionMode, PodGroupSpec, pod_group_of
from joulie.core.preemption_candidates import GroupMembership
from joulie.kube.client import ApiError, KubeClient
from joulie.kube.informer import Informer

PODGROUP_API = "/apis/scheduling.k8s.io/v1beta1"
PODGROUPS = f"{PODGROUP_API}/podgroups"


@dataclass(frozen=True, slots=True)
class PodRef:
    uid: str
    node: str
    group: str
    """``namespace/podGroupName`` of the group the pod names, or empty."""


@dataclass(frozen=True, slots=True)
class GroupView:
    key: str
    all_or_nothing: bool


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


NO_GROUP = PodRef("", "", "")
"""What every pod outside a PodGroup is kept as: one shared value, and not indexed, so the
cache of a cluster's pods costs little more than their keys."""


def pod_ref(raw: Mapping[str, Any]) -> PodRef:
    found = pod_group_of(raw)
    if found is None:
        return NO_GROUP
    meta, spec = _map(raw.get("metadata")), _map(raw.get("spec"))
    return PodRef(
        uid=str(meta.get("uid", "")),
        node=sys.intern(str(spec.get("nodeName") or "")),
        group=sys.intern("/".join(found)),
    )


def group_view(raw: Mapping[str, Any]) -> GroupView:
    """A PodGroup as the screen needs it; one whose spec cannot be read counts as taking pods
    one at a time (the API's default), so it never holds a preemption back."""
    meta = _map(raw.get("metadata"))
    key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    try:
        spec = PodGroupSpec.model_validate(raw.get("spec") or {})
    except ValidationError:
        return GroupView(key, all_or_nothing=False)
    return GroupView(key, all_or_nothing=spec.disruption is DisruptionMode.ALL)


async def podgroups_served(client: KubeClient) -> bool:
    """Whether the API server serves PodGroups (scheduling.k8s.io/v1beta1)."""
    try:
        listed = await client.request("GET", PODGROUP_API)
    except ApiError as exc:
        if exc.not_found:
            return False
        raise
    return any(r.get("name") == "podgroups" for r in _map(listed).get("resources") or ())


class GroupCache:
    """Informers on Pods (slim) and, where served, PodGroups."""

    def __init__(self, client: KubeClient, podgroups: bool) -> None:
        self.pods: Informer[PodRef] = Informer(
            client,
            "/api/v1/pods",
            pod_ref,
            indexers={
                "uid": lambda p: (p.uid,) if p.group else (),
                "group": lambda p: (p.group,) if p.group else (),
            },
        )
        self.groups: Informer[GroupView] | None = (
            Informer(client, PODGROUPS, group_view) if podgroups else None
        )
        self.informers: list[Informer[Any]] = [self.pods]
        if self.groups is not None:
            self.informers.append(self.groups)

    def membership(self, victims: Iterable[str]) -> GroupMembership:
        """What the screen needs of the groups the ``victims`` (UIDs) belong to."""
        group_of: dict[str, str] = {}
        members: dict[str, frozenset[str]] = {}
        for uid in victims:
            for pod in self.pods.by_index("uid", uid):
                if not pod.group:
                    continue
                group_of[uid] = pod.group
                if pod.group not in members and self._all_or_nothing(pod.group):
                    scheduled = self.pods.by_index("group", pod.group)
                    members[pod.group] = frozenset(p.uid for p in scheduled if p.node)
        return GroupMembership(group_of, members)

    def _all_or_nothing(self, key: str) -> bool:
        if self.groups is None:
            return False
        group = self.groups.get(key)
        return group is not None and group.all_or_nothing
