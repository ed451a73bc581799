"""Powering off a node that Cluster API manages: remove its Machine, and do not let it come back.

Deleting a Machine alone makes its MachineSet create a replacement, so the Machine is marked
with ``cluster.x-k8s.io/delete-machine`` (which makes it the first one removed when its set
shrinks) and then the set is shrunk by one: the MachineDeployment that owns the MachineSet, or
the MachineSet itself when nothing owns it. Cluster API then drains the node, runs its hooks,
deletes the infrastructure machine and the Node: the result is ACCEPTED, not DONE.

Restarts: a Machine that already carries the mark is not counted down again, so a manager that
restarts mid-shutdown never removes two machines for one node. The price is one narrow window:
a process that dies between marking and shrinking leaves the Machine marked but the set whole;
the node then outlives the controller's shutdown timeout, which makes it visible. Whatever else
fails after the mark (the scale refused, the owner gone) takes the mark off again, so the next
attempt starts clean; only when the scale request's fate is unknown (it timed out, or its caller
was cancelled while the request ran on) does the mark stay, because the set may have shrunk.

The Machine's controlling owner must be a MachineSet: control-plane Machines (owned by a
KubeadmControlPlane) and Machines without an owner are refused, never scaled.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
import structlog

from joulie.kube.client import MERGE_PATCH, ApiError, KubeClient
from joulie.kube.writes import Writer
from joulie.manager.lifecycle.actuator import (
    ActuatorResult,
    BuildArgs,
    Outcome,
    Registration,
    ShutdownRequest,
)

log = structlog.get_logger("joulie.manager")

CAPI_GROUP: Final = "cluster.x-k8s.io"
MACHINE_ANNOTATION: Final = "cluster.x-k8s.io/machine"
"""Node annotation Cluster API sets: the name of the node's Machine."""
CLUSTER_NAMESPACE_ANNOTATION: Final = "cluster.x-k8s.io/cluster-namespace"
"""Node annotation Cluster API sets: the namespace of that Machine."""
DELETE_MACHINE_ANNOTATION: Final = "cluster.x-k8s.io/delete-machine"
"""Machine annotation: remove this Machine first when its set shrinks."""

_CONFLICT_RETRIES: Final = 5


class CapiError(Exception):
    """A reason not to (or no longer able to) shut the node down, in words."""


class ScaleUnknown(CapiError):
    """The scale request was sent and no answer came: the set may or may not have shrunk."""


_TRANSPORT: Final = (aiohttp.ClientError, TimeoutError, OSError)
"""What a request to the API server raises when no answer came."""


@dataclass(frozen=True)
class _Scalable:
    """The MachineDeployment or MachineSet whose replicas are counted down."""

    kind: str
    namespace: str
    name: str
    path: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


class ClusterApiActuator:
    name = "cluster-api"

    def __init__(
        self,
        client: KubeClient,
        writer: Writer,
        *,
        version: str = "v1beta1",
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Reads go through ``client``, writes through ``writer`` (so each is refused with
        :class:`joulie.kube.writes.NotPermitted` once this process no longer leads).
        ``version`` is the Cluster API version served; ``clock`` gives epoch seconds for the
        mark's value."""
        self._client = client
        self._writer = writer
        self._base = f"/apis/{CAPI_GROUP}/{version}"
        self._clock = clock

    async def shutdown(self, request: ShutdownRequest) -> ActuatorResult:
        try:
            return await self._shutdown(request)
        except CapiError as exc:
            message = str(exc)
        except _TRANSPORT as exc:
            message = f"the API server did not answer: {type(exc).__name__}: {exc}"
        log.warning("cluster api shutdown failed", node=request.node, error=message)
        return ActuatorResult(Outcome.FAILED, f"node {request.node}: {message}")

    async def _shutdown(self, request: ShutdownRequest) -> ActuatorResult:
        name = request.annotations.get(MACHINE_ANNOTATION, "")
        namespace = request.annotations.get(CLUSTER_NAMESPACE_ANNOTATION, "")
        if not name or not namespace:
            raise CapiError(
                f"the Node lacks the annotations {MACHINE_ANNOTATION} and "
                f"{CLUSTER_NAMESPACE_ANNOTATION} that Cluster API sets on the Nodes of its "
                "Machines: it is not managed by Cluster API (or not linked to its Machine yet)"
            )
        path = f"{self._base}/namespaces/{namespace}/machines/{name}"
        machine = await self._get(path, f"Machine {namespace}/{name}")
        _check_same_node(machine, request)
        metadata = machine.get("metadata") or {}
        where = f"Machine {namespace}/{name}"
        if metadata.get("deletionTimestamp"):
            return ActuatorResult(Outcome.ACCEPTED, f"{where} is being deleted already")
        if DELETE_MACHINE_ANNOTATION in (metadata.get("annotations") or {}):
            return ActuatorResult(
                Outcome.ACCEPTED,
                f"{where} is marked for deletion already ({DELETE_MACHINE_ANNOTATION}); its "
                "set is not counted down a second time",
            )
        target = await self._scalable(machine, namespace)
        await self._mark(path, self._now(), request.node)
        try:
            replicas = await self._count_down(target)
        except ScaleUnknown:
            raise  # the set may have shrunk: the mark stays, so it is never shrunk twice
        except CapiError:
            await self._unmark(path, request.node)  # the set is whole: the next try starts clean
            raise
        log.info(
            "cluster api machine removal requested",
            node=request.node,
            machine=f"{namespace}/{name}",
            scaled=str(target),
            replicas=replicas,
        )
        return ActuatorResult(
            Outcome.ACCEPTED,
            f"{where} marked for deletion and {target} scaled down to {replicas}; Cluster API "
            "drains and removes the node",
        )

    async def close(self) -> None:
        """Nothing to release: the client and writer belong to the caller."""

    def _now(self) -> str:
        moment = datetime.datetime.fromtimestamp(int(self._clock()), datetime.UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    async def _get(self, path: str, what: str) -> dict[str, Any]:
        try:
            found = await self._client.request("GET", path)
        except ApiError as exc:
            if exc.not_found:
                raise CapiError(f"{what} not found") from exc
            raise CapiError(f"reading {what} failed: HTTP {exc.status} {exc.message}") from exc
        except _TRANSPORT as exc:
            raise CapiError(f"reading {what} failed: {type(exc).__name__}: {exc}") from exc
        return found if isinstance(found, dict) else {}

    async def _scalable(self, machine: Mapping[str, Any], namespace: str) -> _Scalable:
        """The object whose replicas to count down, found before anything is written."""
        machine_name = (machine.get("metadata") or {}).get("name", "")
        owner = _controller(machine, "MachineSet")
        if owner is None:
            raise CapiError(
                f"Machine {namespace}/{machine_name} is not controlled by a MachineSet (a "
                "control-plane or stand-alone Machine): Joulie does not remove it"
            )
        set_path = f"{self._base}/namespaces/{namespace}/machinesets/{owner}"
        machine_set = await self._get(set_path, f"MachineSet {namespace}/{owner}")
        deployment = _controller(machine_set, "MachineDeployment")
        if deployment is not None:
            return _Scalable(
                "MachineDeployment",
                namespace,
                deployment,
                f"{self._base}/namespaces/{namespace}/machinedeployments/{deployment}",
            )
        return _Scalable("MachineSet", namespace, owner, set_path)

    async def _mark(self, path: str, value: str, node: str) -> None:
        patch = {"metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: value}}}
        try:
            await self._writer.send("PATCH", path, body=patch, content_type=MERGE_PATCH)
        except ApiError as exc:
            raise CapiError(f"marking the Machine failed: HTTP {exc.status} {exc.message}") from exc
        except _TRANSPORT as exc:
            # The mark may have landed: left there, it would make the next try skip the scale.
            await self._unmark(path, node)
            raise CapiError(f"marking the Machine failed: {type(exc).__name__}: {exc}") from exc

    async def _unmark(self, path: str, node: str) -> None:
        """Take the mark off again after a failure, so the next attempt is not skipped as done."""
        patch = {"metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: None}}}
        try:
            await self._writer.send("PATCH", path, body=patch, content_type=MERGE_PATCH)
        except Exception as exc:  # the failure being reported matters more than this one
            log.error(
                "taking the delete-machine mark off failed: the next attempt will not scale",
                node=node,
                path=path,
                error=str(exc),
            )

    async def _count_down(self, target: _Scalable) -> int:
        """One replica fewer through the /scale subresource, guarded by the resourceVersion
        read (a concurrent change is read again, not overwritten); the new count."""
        scale_path = f"{target.path}/scale"
        for _ in range(_CONFLICT_RETRIES):
            scale = await self._get(scale_path, f"the scale of {target}")
            replicas = (scale.get("spec") or {}).get("replicas") or 0
            if not isinstance(replicas, int) or replicas < 1:
                raise CapiError(f"{target} has {replicas!r} replicas: nothing to scale down")
            body = {
                "apiVersion": scale.get("apiVersion", "autoscaling/v1"),
                "kind": "Scale",
                "metadata": {
                    "name": target.name,
                    "namespace": target.namespace,
                    "resourceVersion": (scale.get("metadata") or {}).get("resourceVersion"),
                },
                "spec": {"replicas": replicas - 1},
            }
            try:
                await self._writer.send("PUT", scale_path, body=body)
            except ApiError as exc:
                if exc.conflict:
                    continue
                raise CapiError(
                    f"scaling {target} down failed: HTTP {exc.status} {exc.message}"
                ) from exc
            except _TRANSPORT as exc:
                raise ScaleUnknown(
                    f"scaling {target} down got no answer ({type(exc).__name__}: {exc}); the "
                    "Machine stays marked for deletion, so it is not scaled down again: if the "
                    f"node is still there later, scale {target} down by hand"
                ) from exc
            return replicas - 1
        raise CapiError(f"scaling {target} down kept conflicting with other writers")


def _controller(obj: Mapping[str, Any], kind: str) -> str | None:
    """The name of ``obj``'s controlling owner when it is a Cluster API ``kind``."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if not ref.get("controller"):
            continue
        group = str(ref.get("apiVersion", "")).split("/")[0]
        if ref.get("kind") == kind and group == CAPI_GROUP and ref.get("name"):
            return str(ref["name"])
        return None
    return None


def _check_same_node(machine: Mapping[str, Any], request: ShutdownRequest) -> None:
    """The Machine must be proven this node's, or nothing is removed: an annotation left over
    from an earlier Machine, or written by someone else, must not remove another machine.

    Proof is the Machine's ``status.nodeRef`` naming this node (and this Node object, where
    both carry a uid), and where the Node has a providerID, the Machine carrying the same. A
    Machine without a nodeRef (its node never joined, or is not linked yet), or whose providerID
    cannot be compared, proves nothing: it had been taken as a match."""
    name = (machine.get("metadata") or {}).get("name", "")
    node_ref = (machine.get("status") or {}).get("nodeRef") or {}
    if not isinstance(node_ref, Mapping) or not node_ref.get("name"):
        raise CapiError(
            f"Machine {name} names no node (status.nodeRef): it cannot be shown to be node "
            f"{request.node}'s"
        )
    if node_ref["name"] != request.node:
        raise CapiError(f"Machine {name} belongs to node {node_ref['name']}, not to this one")
    ref_uid = node_ref.get("uid")
    if ref_uid and request.uid and ref_uid != request.uid:
        raise CapiError(
            f"Machine {name} belongs to an earlier Node {request.node} (uid {ref_uid}), not "
            f"to this one (uid {request.uid})"
        )
    provider_id = (machine.get("spec") or {}).get("providerID")
    if request.provider_id and provider_id != request.provider_id:
        raise CapiError(
            f"Machine {name} has providerID {provider_id or '(none)'}, the Node "
            f"{request.provider_id}"
        )


def _build(args: BuildArgs) -> ClusterApiActuator:
    return ClusterApiActuator(args.client, args.writer)


REGISTRATION = Registration(
    "cluster-api", "mark the node's Machine for deletion and scale its set down", _build
)
