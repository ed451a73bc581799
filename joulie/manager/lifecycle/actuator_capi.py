"""Powering nodes that Cluster API manages off and on: shrink or grow the node group that owns
them, as cluster-autoscaler would.

Powering off: deleting a Machine alone makes its MachineSet create a replacement, so the Machine
is marked with ``cluster.x-k8s.io/delete-machine`` (which makes it the first one removed when its
set shrinks) and then the set is shrunk by one: the MachineDeployment that owns the MachineSet, or
the MachineSet itself when nothing owns it. Cluster API then drains the node, runs its hooks,
deletes the infrastructure machine and the Node: the result is ACCEPTED, not DONE. A set that
carries cluster-autoscaler's minimum size is never shrunk below it, as cluster-autoscaler would
not.

Restarts: a Machine that already carries the mark is not counted down again, so a manager that
restarts mid-shutdown never removes two machines for one node. The price is one narrow window:
a process that dies between marking and shrinking leaves the Machine marked but the set whole;
the node then outlives the controller's shutdown timeout, which makes it visible. Whatever else
fails after the mark (the scale refused, the owner gone) takes the mark off again, so the next
attempt starts clean; only when the scale request's fate is unknown (it timed out, or its caller
was cancelled while the request ran on) does the mark stay, because the set may have shrunk.

The Machine's controlling owner must be a MachineSet: control-plane Machines (owned by a
KubeadmControlPlane) and Machines without an owner are refused, never scaled.

Powering on: the MachineDeployments and MachineSets are listed afresh each pass and read as
cluster-autoscaler reads them (which are node groups, what a node of one offers, its boots in
flight and whether it cools down) by :mod:`joulie.manager.lifecycle.capi_groups`. A group grows
through its /scale subresource, never past its maximum, like cluster-autoscaler's own scale-up;
its controller then makes the Machines and their nodes; one without both of cluster-autoscaler's
size annotations is refused.

Restarts: nothing of a boot is kept in memory. The group is stamped with
``joulie.io/boot-requested-at`` before it grows, and its nodes in flight are its replicas less
its ready replicas; both live on the object, so a restarted manager (or the next pass after a
scale request whose answer was lost) reads the boots in flight and never grows the group twice
for them.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import aiohttp
import structlog

from joulie.kube.client import MERGE_PATCH, ApiError, KubeClient
from joulie.kube.writes import Writer
from joulie.manager.lifecycle.actuator import (
    ActuatorResult,
    BootOffer,
    BuildArgs,
    Outcome,
    PowerOnRequest,
    Registration,
    ShutdownRequest,
)
from joulie.manager.lifecycle.capi_groups import (
    BOOT_REQUESTED_ANNOTATION,
    CAPI_GROUP,
    CLUSTER_NAMESPACE_ANNOTATION,
    MAX_SIZE_ANNOTATION,
    MIN_SIZE_ANNOTATION,
    Scalable,
    annotations_of,
    as_mapping,
    boot_offer,
    controller,
    group_sizes,
    named,
    node_groups,
    nodes_by_set,
    size,
    whole,
)

if TYPE_CHECKING:
    from joulie.kube.projections import SlimNode

log = structlog.get_logger("joulie.manager")

MACHINE_ANNOTATION: Final = "cluster.x-k8s.io/machine"
"""Node annotation Cluster API sets: the name of the node's Machine."""
DELETE_MACHINE_ANNOTATION: Final = "cluster.x-k8s.io/delete-machine"
"""Machine annotation: remove this Machine first when its set shrinks."""

_CONFLICT_RETRIES: Final = 5
_LIST_PAGE: Final = 500
_LIST_MAX: Final = 5000
"""The most objects of one kind read in a pass: node groups number tens, not thousands, and a
list past this is cut off (and reported) rather than read without end."""
_GROUP_KINDS: Final = {"MachineDeployment": "machinedeployments", "MachineSet": "machinesets"}
_DNS_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


class CapiError(Exception):
    """A reason not to (or no longer able to) power a node off or on, in words."""


class ScaleUnknown(CapiError):
    """The scale request was sent and no answer came: the set may or may not have shrunk."""


_TRANSPORT: Final = (aiohttp.ClientError, TimeoutError, OSError)
"""What a request to the API server raises when no answer came."""


class _Warnings:
    """Warnings logged when their cause appears, not again at every pass while it lasts: what
    is remembered is only what the last pass found, so it stays as small as the causes."""

    def __init__(self) -> None:
        self._last: set[str] = set()
        self._now: set[str] = set()

    def next_pass(self) -> None:
        self._last, self._now = self._now, set()

    def warn(self, event: str, **fields: Any) -> None:
        key = f"{event} {sorted(fields.items())}"
        self._now.add(key)
        if key not in self._last:
            log.warning(event, **fields)


class ClusterApiActuator:
    name = "cluster-api"

    def __init__(
        self,
        client: KubeClient,
        writer: Writer,
        *,
        version: str = "v1beta1",
        clock: Callable[[], float] = time.time,
        boot_grace_s: float = 1200.0,
        cooldown_s: float = 300.0,
    ) -> None:
        """Reads go through ``client``, writes through ``writer`` (so each is refused with
        :class:`joulie.kube.writes.NotPermitted` once this process no longer leads).
        ``version`` is the Cluster API version served; ``clock`` gives epoch seconds for the
        marks' values. A group whose boot is still in flight ``boot_grace_s`` after it was
        asked for boots nothing more for ``cooldown_s``."""
        self._client = client
        self._writer = writer
        self._base = f"/apis/{CAPI_GROUP}/{version}"
        self._clock = clock
        self._boot_grace_s = boot_grace_s
        self._cooldown_s = cooldown_s
        self._warnings = _Warnings()

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

    async def bootable(self, nodes: Sequence[SlimNode], now: float) -> list[BootOffer]:
        """The node groups cluster-autoscaler would manage, read afresh (a group's size and
        its boots in flight live on the object, not here). A list that cannot be read offers
        nothing this pass."""
        self._warnings.next_pass()
        try:
            deployments = await self._list("machinedeployments")
            sets = await self._list("machinesets")
        except CapiError as exc:
            self._warnings.warn("cluster api node groups cannot be read", error=str(exc))
            return []
        groups = node_groups(self._base, deployments, sets)
        examples = nodes_by_set(nodes)
        return [
            boot_offer(
                group,
                examples,
                now,
                boot_grace_s=self._boot_grace_s,
                cooldown_s=self._cooldown_s,
            )
            for group in groups
        ]

    async def power_on(self, request: PowerOnRequest) -> ActuatorResult:
        try:
            return await self._power_on(request)
        except CapiError as exc:
            message = str(exc)
        except _TRANSPORT as exc:
            message = f"{request.group}: the API server did not answer: {type(exc).__name__}: {exc}"
        log.warning("cluster api power on failed", group=request.group, error=message)
        return ActuatorResult(Outcome.FAILED, message)

    async def _power_on(self, request: PowerOnRequest) -> ActuatorResult:
        target = self._parse_group(request.group)
        if request.count < 1:
            raise CapiError(f"{target}: asked to power on {request.count} nodes, none scaled up")
        group = await self._get(target.path, str(target))
        annotations = annotations_of(group)
        if MIN_SIZE_ANNOTATION not in annotations or MAX_SIZE_ANNOTATION not in annotations:
            raise CapiError(
                f"{target} lacks {MIN_SIZE_ANNOTATION} or {MAX_SIZE_ANNOTATION}: it is not a "
                "node group cluster-autoscaler manages, and Joulie does not size it"
            )
        sizes = group_sizes(annotations)
        if isinstance(sizes, str):
            raise CapiError(f"{target}: {sizes}")
        maximum = sizes[1]
        # Refused before the stamp, so a refusal leaves no trace of a boot that never began.
        replicas = whole(as_mapping(group.get("spec")).get("replicas"), 0)
        if replicas is not None:
            _check_room(target, replicas, request.count, maximum)
        await self._stamp(target)
        before, after = await self._count_up(target, request.count, maximum)
        log.info(
            "cluster api node group scaled up",
            group=str(target),
            replicas=after,
            reason=request.reason,
        )
        return ActuatorResult(Outcome.ACCEPTED, f"{target} scaled up from {before} to {after}")

    def _parse_group(self, group: str) -> Scalable:
        """The group an offer named (``MachineDeployment ns/name``); its parts become a path,
        so each must be a name the API server could have given."""
        kind, _, rest = group.partition(" ")
        namespace, _, name = rest.partition("/")
        plural = _GROUP_KINDS.get(kind)
        if plural is None or not _DNS_NAME.fullmatch(namespace) or not _DNS_NAME.fullmatch(name):
            raise CapiError(
                f"{group!r} is not a Cluster API node group (MachineDeployment ns/name or "
                "MachineSet ns/name)"
            )
        return Scalable(
            kind, namespace, name, f"{self._base}/namespaces/{namespace}/{plural}/{name}"
        )

    async def _stamp(self, target: Scalable) -> None:
        patch = {"metadata": {"annotations": {BOOT_REQUESTED_ANNOTATION: self._now()}}}
        try:
            await self._writer.send("PATCH", target.path, body=patch, content_type=MERGE_PATCH)
        except ApiError as exc:
            raise CapiError(
                f"stamping {target} with {BOOT_REQUESTED_ANNOTATION} failed: HTTP {exc.status} "
                f"{exc.message}; it was not scaled up"
            ) from exc
        except _TRANSPORT as exc:
            raise CapiError(
                f"stamping {target} with {BOOT_REQUESTED_ANNOTATION} got no answer "
                f"({type(exc).__name__}: {exc}); it was not scaled up"
            ) from exc

    async def _count_up(self, target: Scalable, count: int, maximum: int) -> tuple[int, int]:
        """``count`` replicas more through the /scale subresource, never past ``maximum``,
        guarded by the resourceVersion read like :meth:`_count_down`; the counts before and
        after."""
        scale_path = f"{target.path}/scale"
        for _ in range(_CONFLICT_RETRIES):
            scale = await self._get(scale_path, f"the scale of {target}")
            replicas = whole(as_mapping(scale.get("spec")).get("replicas"), 0)
            if replicas is None:
                raise CapiError(f"{target} has replicas that are not a count: not scaled up")
            _check_room(target, replicas, count, maximum)
            try:
                await self._writer.send(
                    "PUT", scale_path, body=_scale_body(scale, target, replicas + count)
                )
            except ApiError as exc:
                if exc.conflict:
                    continue
                raise CapiError(
                    f"scaling {target} up failed: HTTP {exc.status} {exc.message}"
                ) from exc
            except _TRANSPORT as exc:
                raise CapiError(
                    f"scaling {target} up from {replicas} to {replicas + count} got no answer "
                    f"({type(exc).__name__}: {exc}): whether it grew is not known; the next "
                    "pass reads its replicas again, so it is not scaled up twice"
                ) from exc
            return replicas, replicas + count
        raise CapiError(f"scaling {target} up kept conflicting with other writers")

    async def _list(self, plural: str) -> list[Mapping[str, Any]]:
        """Every object of ``plural`` in every namespace, up to :data:`_LIST_MAX`."""
        items: list[Mapping[str, Any]] = []
        params: dict[str, Any] = {"limit": _LIST_PAGE}
        path = f"{self._base}/{plural}"
        while True:
            try:
                page = await self._client.request("GET", path, params=params)
            except ApiError as exc:
                raise CapiError(
                    f"listing {plural} failed: HTTP {exc.status} {exc.message}"
                ) from exc
            except _TRANSPORT as exc:
                raise CapiError(f"listing {plural} failed: {type(exc).__name__}: {exc}") from exc
            found = page.get("items") if isinstance(page, Mapping) else None
            if not isinstance(found, list):
                raise CapiError(f"listing {plural} answered something other than a list")
            for item in found:
                if named(item):
                    items.append(item)
                else:
                    self._warnings.warn("a malformed Cluster API object is ignored", kind=plural)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items
            if len(items) >= _LIST_MAX:
                self._warnings.warn(
                    "cluster api objects past the limit are not read", kind=plural, read=len(items)
                )
                return items
            params = {"limit": _LIST_PAGE, "continue": token}

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

    async def _scalable(self, machine: Mapping[str, Any], namespace: str) -> Scalable:
        """The object whose replicas to count down, found before anything is written."""
        machine_name = (machine.get("metadata") or {}).get("name", "")
        owner = controller(machine, "MachineSet")
        if owner is None:
            raise CapiError(
                f"Machine {namespace}/{machine_name} is not controlled by a MachineSet (a "
                "control-plane or stand-alone Machine): Joulie does not remove it"
            )
        set_path = f"{self._base}/namespaces/{namespace}/machinesets/{owner}"
        machine_set = await self._get(set_path, f"MachineSet {namespace}/{owner}")
        deployment = controller(machine_set, "MachineDeployment")
        if deployment is not None:
            return Scalable(
                "MachineDeployment",
                namespace,
                deployment,
                f"{self._base}/namespaces/{namespace}/machinedeployments/{deployment}",
            )
        return Scalable("MachineSet", namespace, owner, set_path)

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

    async def _count_down(self, target: Scalable) -> int:
        """One replica fewer through the /scale subresource, guarded by the resourceVersion
        read (a concurrent change is read again, not overwritten); the new count."""
        scale_path = f"{target.path}/scale"
        minimum = await self._minimum(target)
        for _ in range(_CONFLICT_RETRIES):
            scale = await self._get(scale_path, f"the scale of {target}")
            replicas = (scale.get("spec") or {}).get("replicas") or 0
            if not isinstance(replicas, int) or replicas < 1:
                raise CapiError(f"{target} has {replicas!r} replicas: nothing to scale down")
            if minimum is not None and replicas - 1 < minimum:
                # cluster-autoscaler refuses the same (replicas <= min): the group's owner set
                # that floor, and a shutdown must not undercut it.
                raise CapiError(
                    f"{target} has {replicas} replicas and its minimum size is {minimum} "
                    f"({MIN_SIZE_ANNOTATION}): it is not scaled down below it"
                )
            try:
                await self._writer.send(
                    "PUT", scale_path, body=_scale_body(scale, target, replicas - 1)
                )
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

    async def _minimum(self, target: Scalable) -> int | None:
        """The group's minimum size, None when it has none."""
        value = annotations_of(await self._get(target.path, str(target))).get(MIN_SIZE_ANNOTATION)
        if value is None:
            return None
        minimum = size(value)
        if minimum is None:
            raise CapiError(
                f"{target} has {MIN_SIZE_ANNOTATION} {value!r}, not a non-negative integer: its "
                "minimum size is not known, so it is not scaled down"
            )
        return minimum


def _scale_body(scale: Mapping[str, Any], target: Scalable, replicas: int) -> dict[str, Any]:
    """A Scale setting ``replicas``, valid only while the object is as it was read."""
    return {
        "apiVersion": scale.get("apiVersion", "autoscaling/v1"),
        "kind": "Scale",
        "metadata": {
            "name": target.name,
            "namespace": target.namespace,
            "resourceVersion": (scale.get("metadata") or {}).get("resourceVersion"),
        },
        "spec": {"replicas": replicas},
    }


def _check_room(target: Scalable, replicas: int, count: int, maximum: int) -> None:
    if replicas + count > maximum:
        raise CapiError(
            f"{target} has {replicas} replicas: {count} more would pass its maximum size "
            f"{maximum} ({MAX_SIZE_ANNOTATION}); not scaled up"
        )


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
    if args.settings is None:
        return ClusterApiActuator(args.client, args.writer)
    return ClusterApiActuator(
        args.client,
        args.writer,
        boot_grace_s=args.settings.lifecycle_boot_grace,
        cooldown_s=args.settings.lifecycle_backoff,
    )


REGISTRATION = Registration(
    "cluster-api",
    "mark the node's Machine for deletion and scale its set down; scale a node group up to "
    "power nodes on",
    _build,
)
