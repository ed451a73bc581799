"""The lifecycle's writes to a Node (taint, cordon, its annotations) and its live reads.

A Node's taints are one list that a merge patch replaces whole, and the node controller and
other removers edit it too. So every edit here reads the Node live, computes the new list from
what is there, and sends the patch with the resourceVersion it read: if anything changed in
between, the API server answers 409 and the edit is made again on a fresh read. Nothing another
writer put on the Node is lost, and nothing of ours is written twice.

The taint, the cordon and the annotations that say what is in flight go in one patch, so a
crash leaves either all of them or none.

Every write goes through the role's :class:`~joulie.kube.writes.Writer`, which refuses to send
once this process no longer leads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from joulie.api import keys
from joulie.kube.client import MERGE_PATCH, ApiError, KubeClient
from joulie.kube.projections import SlimPod, pod_projection
from joulie.kube.writes import Writer
from joulie.manager.cache import MIRROR_ANNOTATION, is_workload
from joulie.manager.lifecycle.facts import Phase, format_time

CONFLICT_RETRIES = 5

PHASE_KEYS = (
    keys.LIFECYCLE_PHASE_ANNOTATION,
    keys.LIFECYCLE_SINCE_ANNOTATION,
    keys.LIFECYCLE_CORDONED_ANNOTATION,
)
_project_pod = pod_projection(annotation_keys=[MIRROR_ANNOTATION])

Edit = Callable[[Mapping[str, Any]], dict[str, Any] | None]
"""From the live Node to the merge patch to send (None: nothing to change)."""


class NodeGone(Exception):
    """The Node no longer exists."""


class NodeEdits:
    def __init__(self, client: KubeClient, writer: Writer) -> None:
        self._client = client
        self._writer = writer

    async def _edit(self, name: str, edit: Edit) -> bool:
        """Apply ``edit`` to the live Node, retrying on conflicts; True when a patch was sent."""
        path = f"/api/v1/nodes/{name}"
        for _ in range(CONFLICT_RETRIES):
            try:
                live = await self._client.request("GET", path)
            except ApiError as exc:
                if exc.not_found:
                    raise NodeGone(name) from None
                raise
            patch = edit(live)
            if patch is None:
                return False
            patch.setdefault("metadata", {})["resourceVersion"] = live["metadata"][
                "resourceVersion"
            ]
            try:
                await self._writer.send(
                    "PATCH",
                    path,
                    params={"fieldManager": self._writer.field_manager},
                    body=patch,
                    content_type=MERGE_PATCH,
                )
            except ApiError as exc:
                if exc.conflict:
                    continue
                if exc.not_found:
                    raise NodeGone(name) from None
                raise
            return True
        raise ApiError(409, "Conflict", f"node {name} kept changing; edit given up for now")

    async def begin(self, name: str, phase: Phase, now: float) -> bool:
        """Enter ``phase``: our taint, the cordon (remembering whether we set it) and the phase
        annotations, in one patch. Entering shutting-down from draining keeps the cordon's
        owner."""

        def edit(live: Mapping[str, Any]) -> dict[str, Any] | None:
            annotations = live["metadata"].get("annotations") or {}
            spec = live.get("spec") or {}
            ours = annotations.get(keys.LIFECYCLE_CORDONED_ANNOTATION) == "true"
            cordoned_by_us = ours or not spec.get("unschedulable")
            taints = [t for t in spec.get("taints") or () if t.get("key") != keys.DRAINING_TAINT]
            taints.append(
                {"key": keys.DRAINING_TAINT, "value": phase.value, "effect": "NoSchedule"}
            )
            return {
                "metadata": {
                    "annotations": {
                        keys.LIFECYCLE_PHASE_ANNOTATION: phase.value,
                        keys.LIFECYCLE_SINCE_ANNOTATION: format_time(now),
                        keys.LIFECYCLE_CORDONED_ANNOTATION: "true" if cordoned_by_us else None,
                    }
                },
                "spec": {"unschedulable": True, "taints": taints},
            }

        return await self._edit(name, edit)

    async def mark(self, name: str, phase: Phase, now: float, *, restamp: bool = False) -> bool:
        """Change the phase only (taint and cordon stay as they are); ``restamp`` also starts
        the same phase again from ``now`` (a shutdown asked for again)."""

        def edit(live: Mapping[str, Any]) -> dict[str, Any] | None:
            annotations = live["metadata"].get("annotations") or {}
            if annotations.get(keys.LIFECYCLE_PHASE_ANNOTATION) == phase.value and not restamp:
                return None
            return {
                "metadata": {
                    "annotations": {
                        keys.LIFECYCLE_PHASE_ANNOTATION: phase.value,
                        keys.LIFECYCLE_SINCE_ANNOTATION: format_time(now),
                    }
                }
            }

        return await self._edit(name, edit)

    async def cool_down(self, name: str, now: float, retry_after: float, failures: int) -> bool:
        """A power-on that failed or did not register: the node is off again (taint and cordon
        stay), and is not powered on before ``retry_after``."""

        def edit(live: Mapping[str, Any]) -> dict[str, Any] | None:
            return {
                "metadata": {
                    "annotations": {
                        keys.LIFECYCLE_PHASE_ANNOTATION: Phase.OFF.value,
                        keys.LIFECYCLE_SINCE_ANNOTATION: format_time(now),
                        keys.LIFECYCLE_RETRY_AFTER_ANNOTATION: format_time(retry_after),
                        keys.LIFECYCLE_FAILURES_ANNOTATION: str(failures),
                    }
                }
            }

        return await self._edit(name, edit)

    async def roll_back(
        self, name: str, *, retry_after: float | None = None, failures: int | None = None
    ) -> bool:
        """Undo exactly what the lifecycle did: remove our taint, uncordon only if we cordoned,
        drop the phase annotations; optionally record a backoff after a failure."""

        def edit(live: Mapping[str, Any]) -> dict[str, Any] | None:
            annotations = live["metadata"].get("annotations") or {}
            spec = live.get("spec") or {}
            taints = list(spec.get("taints") or ())
            kept = [t for t in taints if t.get("key") != keys.DRAINING_TAINT]
            ours = annotations.get(keys.LIFECYCLE_CORDONED_ANNOTATION) == "true"
            patch_annotations: dict[str, str | None] = {
                key: None for key in PHASE_KEYS if key in annotations
            }
            if retry_after is not None:
                patch_annotations[keys.LIFECYCLE_RETRY_AFTER_ANNOTATION] = format_time(retry_after)
            if failures is not None:
                patch_annotations[keys.LIFECYCLE_FAILURES_ANNOTATION] = str(failures)
            patch: dict[str, Any] = {}
            spec_patch: dict[str, Any] = {}
            if len(kept) != len(taints):
                spec_patch["taints"] = kept
            if ours and spec.get("unschedulable"):
                spec_patch["unschedulable"] = False
            if spec_patch:
                patch["spec"] = spec_patch
            if patch_annotations:
                patch["metadata"] = {"annotations": patch_annotations}
            return patch or None

        return await self._edit(name, edit)

    async def annotate(
        self, name: str, annotations: Mapping[str, str | None], cached: Mapping[str, str]
    ) -> bool:
        """Set (or, with None, remove) plain annotations such as the idle spell's start; sent
        only when the cached annotations differ (a map merge needs no live read)."""
        answer = await self._writer.merge_patch(
            f"/api/v1/nodes/{name}",
            {"metadata": {"annotations": dict(annotations)}},
            observed={"metadata": {"annotations": dict(cached)}},
        )
        return answer is not None

    async def live_workload_pods(self, name: str) -> list[str]:
        """The workload pods bound to the node, from a live list (never a cache): the last check
        before a node is handed to an actuator."""
        answer = await self._client.request(
            "GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={name}"}
        )
        pods: list[SlimPod] = [_project_pod(raw) for raw in answer.get("items") or ()]
        return [pod.key for pod in pods if is_workload(pod)]
