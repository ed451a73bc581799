"""Powering a node that KWOK fakes off and on again: deleting its Node object powers it off,
creating it again from a record powers it on.

Only for fake nodes. A real Node deleted this way keeps running (and its kubelet registers it
again), so a node without KWOK's marker annotation is refused rather than "shut down", and a
record without the marker is never made into a Node.

The record: before the Node is deleted, what a re-created Node needs of it (its name, labels,
annotations less the lifecycle's own, its spec less the cordon and our drain taint, its
capacity and allocatable; KWOK's node controller writes the rest of its status) is written to
a ConfigMap in the manager's namespace, ``joulie-kwok-off-<hash of the name>``, labelled
``joulie.io/record=kwok-powered-off``. No record, no deletion: a node that could not be brought
back is not powered off. Powering on creates the Node from its record, marked ``booting`` and
launched now, then deletes the record.

Nothing of this is kept in memory: the records are objects, read afresh each pass, so a
restarted manager finds the powered-off nodes its predecessor left, and a Node that already
exists when it is created again is a boot that already happened (never a second one).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import aiohttp
import structlog

from joulie.api import keys
from joulie.api.keys import KWOK_NODE_ANNOTATION, KWOK_NODE_VALUE, kwok_node
from joulie.kube.client import ApiError
from joulie.kube.projections import SlimNode, node_projection
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
from joulie.manager.lifecycle.facts import (
    OffNode,
    Phase,
    format_time,
    offers_by_shape,
    registered_off_nodes,
)

if TYPE_CHECKING:
    from joulie.kube.client import KubeClient

log = structlog.get_logger("joulie.manager")

RECORD_PREFIX: Final = "joulie-kwok-off-"
RECORD_LABEL: Final = "joulie.io/record"
RECORD_VALUE: Final = "kwok-powered-off"
RECORD_LABELS: Final = {"app.kubernetes.io/managed-by": "joulie", RECORD_LABEL: RECORD_VALUE}
MAX_MANIFEST_BYTES: Final = 256 * 1024
"""A ConfigMap holds 1 MiB; a Node's labels, annotations and spec stay far below this, so a
bigger one is something odd (a huge annotation) that is refused rather than half kept."""

_NOT_RECORDED: Final = frozenset(
    {
        # The lifecycle's own marks describe the node being powered off; the re-created Node
        # gets those of its boot instead.
        keys.LIFECYCLE_PHASE_ANNOTATION,
        keys.LIFECYCLE_SINCE_ANNOTATION,
        keys.LIFECYCLE_CORDONED_ANNOTATION,
        keys.LIFECYCLE_RETRY_AFTER_ANNOTATION,
        keys.LIFECYCLE_FAILURES_ANNOTATION,
        keys.IDLE_SINCE_ANNOTATION,
    }
)
_CONDITION_TAINTS: Final = "node.kubernetes.io/"
"""Taints Kubernetes sets from a Node's conditions and cordon (not-ready, unschedulable...):
they describe the old Node's state, and the node controller sets them afresh on the new one."""
_TRANSPORT = (aiohttp.ClientError, TimeoutError, OSError)


def record_name(node: str) -> str:
    """The record's ConfigMap name: a Node's name may be longer than a ConfigMap's may be, and
    the hash keeps one record per node."""
    return RECORD_PREFIX + hashlib.sha256(node.encode()).hexdigest()[:16]


def recorded_manifest(node: Mapping[str, Any]) -> dict[str, Any]:
    """What a re-created Node needs of ``node`` (a Node as the API server returns it)."""
    metadata = node.get("metadata") or {}
    annotations = {
        k: v for k, v in (metadata.get("annotations") or {}).items() if k not in _NOT_RECORDED
    }
    spec = {k: v for k, v in (node.get("spec") or {}).items() if k != "unschedulable"}
    taints = [
        t
        for t in spec.pop("taints", None) or ()
        if t.get("key") != keys.DRAINING_TAINT
        and not str(t.get("key", "")).startswith(_CONDITION_TAINTS)
    ]
    if taints:
        spec["taints"] = taints
    status = node.get("status") or {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": metadata.get("name", ""),
            "labels": dict(metadata.get("labels") or {}),
            "annotations": annotations,
        },
        "spec": spec,
        "status": {
            "capacity": dict(status.get("capacity") or {}),
            "allocatable": dict(status.get("allocatable") or {}),
        },
    }


@dataclass(frozen=True)
class _Record:
    node: str
    manifest: Mapping[str, Any]
    uid: str
    """The ConfigMap's uid (its deletion is of this very record)."""

    @property
    def allocatable(self) -> dict[str, str]:
        status = self.manifest.get("status") or {}
        return {str(k): str(v) for k, v in (status.get("allocatable") or {}).items()}

    @property
    def labels(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in (self.manifest["metadata"].get("labels") or {}).items()}


def _parse(config_map: Mapping[str, Any]) -> _Record | str:
    """The record in ``config_map``, or what is wrong with it."""
    data = config_map.get("data") or {}
    node = data.get("node")
    if not isinstance(node, str) or not node:
        return "it names no node (data.node)"
    try:
        manifest = json.loads(data.get("manifest") or "")
    except ValueError as exc:
        return f"data.manifest is not JSON: {exc}"
    if not isinstance(manifest, dict) or not isinstance(manifest.get("metadata"), dict):
        return "data.manifest is not a Node"
    metadata = manifest["metadata"]
    if metadata.get("name") != node:
        return f"data.manifest is of Node {metadata.get('name')!r}, not {node!r}"
    for field in ("labels", "annotations"):
        if not isinstance(metadata.get(field) or {}, dict):
            return f"data.manifest's metadata.{field} is not a map"
    status = manifest.get("status") or {}
    if not isinstance(status, dict) or not isinstance(status.get("allocatable") or {}, dict):
        return "data.manifest's status.allocatable is not a map"
    if not kwok_node(metadata.get("annotations") or {}):
        # Whoever wrote it, a Node without the marker would be a "real" Node nobody runs.
        return (
            f"data.manifest lacks the annotation {KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}: "
            "only Nodes KWOK fakes are created"
        )
    return _Record(node, manifest, str((config_map.get("metadata") or {}).get("uid", "")))


class KwokActuator:
    name = "kwok"

    def __init__(
        self,
        writer: Writer,
        client: KubeClient | None = None,
        *,
        namespace: str = "joulie-system",
        clock: Callable[[], float] = time.time,
        eligible: Callable[[SlimNode], bool] = lambda _: True,
    ) -> None:
        """Reads go through ``client`` (the writer's when None), writes through ``writer`` (so
        each is refused with :class:`joulie.kube.writes.NotPermitted` once this process no
        longer leads). Records are kept in ``namespace``; ``clock`` gives epoch seconds for a
        re-created Node's marks."""
        self._writer = writer
        self._client = client if client is not None else writer.client
        self._namespace = namespace
        self._clock = clock
        self._eligible = eligible
        self._records = f"/api/v1/namespaces/{namespace}/configmaps"
        self._warned: dict[str, str] = {}
        """Record name -> the problem last warned about (each warned once)."""

    # --- powering off ---------------------------------------------------------------------

    async def shutdown(self, request: ShutdownRequest) -> ActuatorResult:
        """Record the Node, then delete it. Raises :class:`joulie.kube.writes.NotPermitted`
        when this process may not write (it no longer leads)."""
        node = request.node
        if not kwok_node(request.annotations):
            return ActuatorResult(Outcome.FAILED, _not_fake(node))
        path = f"/api/v1/nodes/{node}"
        try:
            live = await self._client.request("GET", path)
        except ApiError as exc:
            if exc.not_found:
                # A retry after the deletion went through: the record it wrote stays.
                return ActuatorResult(Outcome.DONE, f"Node {node} was already gone")
            return _failed(f"reading Node {node} failed: HTTP {exc.status} {exc.message}", node)
        except _TRANSPORT as exc:
            return _failed(f"reading Node {node} got no answer: {_what(exc)}", node)
        if request.uid and live["metadata"].get("uid") != request.uid:
            return ActuatorResult(Outcome.DONE, _replaced(node, request.uid))
        if not kwok_node(live["metadata"].get("annotations") or {}):
            return ActuatorResult(Outcome.FAILED, _not_fake(node))
        recorded = await self._record(node, recorded_manifest(live))
        if recorded is not None:
            return ActuatorResult(Outcome.FAILED, recorded)
        return await self._delete(request, path)

    async def _record(self, node: str, manifest: Mapping[str, Any]) -> str | None:
        """Write the record of ``node``; None once written, else why not."""
        text = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
        size = len(text.encode())
        if size > MAX_MANIFEST_BYTES:
            return (
                f"Node {node} was not powered off: its record would take {size} bytes, more "
                f"than the {MAX_MANIFEST_BYTES} kept, and without a record it could not be "
                "powered on again"
            )
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": record_name(node),
                "namespace": self._namespace,
                "labels": dict(RECORD_LABELS),
            },
            "data": {"node": node, "manifest": text},
        }
        try:
            try:
                await self._writer.send("POST", self._records, body=body)
            except ApiError as exc:
                if not exc.conflict:
                    raise
                # A record left by an earlier attempt whose deletion got no answer (and did not
                # happen: the Node is here): this one describes the Node as it is now.
                await self._writer.send("PUT", f"{self._records}/{record_name(node)}", body=body)
        except ApiError as exc:
            message = f"HTTP {exc.status} {exc.message}"
        except _TRANSPORT as exc:
            message = f"no answer: {_what(exc)}"
        else:
            return None
        log.warning("recording the node failed", node=node, error=message)
        return (
            f"Node {node} was not powered off: its record (ConfigMap {self._namespace}/"
            f"{record_name(node)}) could not be written ({message}), and without it the node "
            "could not be powered on again"
        )

    async def _delete(self, request: ShutdownRequest, path: str) -> ActuatorResult:
        node = request.node
        kwargs: dict[str, Any] = {}
        if request.uid:
            # The decision was about this very Node: a namesake registered since is not deleted.
            kwargs["body"] = {"preconditions": {"uid": request.uid}}
        self._writer.forget(path)
        try:
            await self._writer.send("DELETE", path, **kwargs)
        except ApiError as exc:
            if exc.not_found:
                return ActuatorResult(Outcome.DONE, f"Node {node} was already gone")
            if exc.conflict and request.uid:
                # Only the uid precondition makes a DELETE conflict: the Node asked about is
                # gone, and the object of that name now is another one, which the record (of
                # the one asked about) must not bring back after it.
                await self._drop_record(node)
                return ActuatorResult(Outcome.DONE, _replaced(node, request.uid))
            log.warning("deleting the node failed", node=node, status=exc.status, error=str(exc))
            # The Node stays: a record of it would bring back a namesake if it went otherwise.
            await self._drop_record(node)
            return ActuatorResult(
                Outcome.FAILED, f"deleting Node {node} failed: HTTP {exc.status} {exc.message}"
            )
        except _TRANSPORT as exc:
            # Whether it was deleted is unknown, so the record stays; asking again is safe (a
            # deletion is idempotent, and the record is rewritten).
            log.warning("deleting the node got no answer", node=node, error=repr(exc))
            return ActuatorResult(
                Outcome.FAILED, f"deleting Node {node} got no answer: {_what(exc)}"
            )
        return ActuatorResult(Outcome.DONE, f"Node {node} deleted (KWOK fakes it)")

    # --- powering on ----------------------------------------------------------------------

    async def bootable(self, nodes: Sequence[SlimNode], now: float) -> list[BootOffer]:
        """The recorded nodes whose Node does not exist, by shape, with the re-created ones
        still booting. Records are read afresh each pass (they are what a restart keeps)."""
        try:
            answer = await self._client.request(
                "GET", self._records, params={"labelSelector": f"{RECORD_LABEL}={RECORD_VALUE}"}
            )
        except ApiError as exc:
            log.warning(
                "the records of powered-off KWOK nodes cannot be read",
                namespace=self._namespace,
                error=f"HTTP {exc.status} {exc.message}",
            )
            return []
        except _TRANSPORT as exc:
            log.warning(
                "the records of powered-off KWOK nodes cannot be read",
                namespace=self._namespace,
                error=_what(exc),
            )
            return []
        present = {n.name for n in nodes}
        off: list[OffNode] = []
        seen: set[str] = set()
        for item in answer.get("items") or ():
            name = str((item.get("metadata") or {}).get("name", ""))
            seen.add(name)
            record = _parse(item)
            if isinstance(record, str):
                self._warn_once(name, record)
                continue
            self._warned.pop(name, None)
            # Another manager's nodes (another NODE_SELECTOR) are not this one's to power on.
            if record.node not in present and self._eligible(_project(record.manifest)):
                off.append(OffNode(record.node, record.allocatable, record.labels))
        # Only records still there are remembered: the memory is bounded by them.
        for gone in set(self._warned) - seen:
            del self._warned[gone]
        _, booting = registered_off_nodes(nodes)
        return offers_by_shape(off, booting, now)

    def _warn_once(self, name: str, problem: str) -> None:
        if self._warned.get(name) == problem:
            return
        self._warned[name] = problem
        log.warning(
            "a record of a powered-off KWOK node is unusable; skipped",
            record=f"{self._namespace}/{name}",
            problem=problem,
        )

    async def power_on(self, request: PowerOnRequest) -> ActuatorResult:
        """Create the Node from its record, then delete the record. Raises
        :class:`joulie.kube.writes.NotPermitted` when this process may not write."""
        node = request.node
        if not node:
            return ActuatorResult(
                Outcome.FAILED, f"{request.group}: KWOK powers on recorded nodes by name only"
            )
        path = f"{self._records}/{record_name(node)}"
        try:
            found = await self._client.request("GET", path)
        except ApiError as exc:
            if exc.not_found:
                return await self._without_record(node)
            return _failed(f"reading the record of node {node} failed: {_http(exc)}", node)
        except _TRANSPORT as exc:
            return _failed(f"reading the record of node {node} got no answer: {_what(exc)}", node)
        record = _parse(found)
        if isinstance(record, str):
            return _failed(f"the record of node {node} is refused: {record}", node)
        if record.node != node:
            return _failed(f"the record {path} is of node {record.node}, not {node}", node)
        try:
            await self._writer.send("POST", "/api/v1/nodes", body=self._booting(record))
        except ApiError as exc:
            if not exc.conflict:
                return _failed(f"creating Node {node} failed: {_http(exc)}", node)
            # Created by an earlier try (a restart mid-boot): the boot is under way already.
            await self._drop_record(node, record.uid)
            return ActuatorResult(Outcome.DONE, f"Node {node} was back already")
        except _TRANSPORT as exc:
            # Whether it was created is unknown; asking again is safe (it exists: done).
            return _failed(f"creating Node {node} got no answer: {_what(exc)}", node)
        await self._drop_record(node, record.uid)
        return ActuatorResult(
            Outcome.DONE, f"Node {node} re-created from its record (KWOK fakes it)"
        )

    async def _without_record(self, node: str) -> ActuatorResult:
        """No record: done when the Node is back (a power-on asked again after it succeeded,
        its record deleted since), else nothing to create it from."""
        try:
            found = await self._client.request("GET", f"/api/v1/nodes/{node}")
        except (ApiError, *_TRANSPORT):
            found = None
        if found is not None and kwok_node(found["metadata"].get("annotations") or {}):
            return ActuatorResult(Outcome.DONE, f"Node {node} was back already")
        return _failed(
            f"no record of node {node} (ConfigMap {self._namespace}/{record_name(node)}): it "
            "was not powered off by this actuator, so there is nothing to create it from",
            node,
        )

    def _booting(self, record: _Record) -> dict[str, Any]:
        """The Node to create: the record's, marked as booting since now, and launched now (its
        boot grace counts from this launch, not from its first one)."""
        manifest: dict[str, Any] = json.loads(json.dumps(record.manifest))
        manifest.update(apiVersion="v1", kind="Node")
        metadata = manifest["metadata"]
        stamp = format_time(self._clock())
        annotations = {
            k: v for k, v in (metadata.get("annotations") or {}).items() if k not in _NOT_RECORDED
        }
        annotations[keys.LIFECYCLE_PHASE_ANNOTATION] = Phase.BOOTING.value
        annotations[keys.LIFECYCLE_SINCE_ANNOTATION] = stamp
        annotations[keys.LAUNCHED_AT_ANNOTATION] = stamp
        metadata["annotations"] = annotations
        return manifest

    async def _drop_record(self, node: str, uid: str = "") -> None:
        """Delete the record of ``node`` (of uid ``uid`` when given, so that a newer one stays);
        a failure is logged, not returned: a record of a Node that exists is never offered."""
        kwargs: dict[str, Any] = {}
        if uid:
            kwargs["body"] = {"preconditions": {"uid": uid}}
        try:
            await self._writer.send("DELETE", f"{self._records}/{record_name(node)}", **kwargs)
        except ApiError as exc:
            if not (exc.not_found or exc.conflict):
                log.warning("deleting the record failed", node=node, error=_http(exc))
        except _TRANSPORT as exc:
            log.warning("deleting the record got no answer", node=node, error=_what(exc))

    async def close(self) -> None:
        """Nothing to release: the client and writer belong to the caller."""


def _not_fake(node: str) -> str:
    return (
        f"node {node} is not faked by KWOK (it lacks the annotation "
        f"{KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}): deleting a real Node does not "
        "power it off, and its kubelet would register it again"
    )


def _replaced(node: str, uid: str) -> str:
    return (
        f"Node {node} (uid {uid}) was already gone; the Node of that name now is a new one and "
        "was left alone"
    )


def _http(exc: ApiError) -> str:
    return f"HTTP {exc.status} {exc.message}"


def _what(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _failed(message: str, node: str) -> ActuatorResult:
    log.warning("kwok actuator failed", node=node, error=message)
    return ActuatorResult(Outcome.FAILED, message)


_project = node_projection()


def _build(args: BuildArgs) -> KwokActuator:
    return KwokActuator(args.writer, args.client, namespace=args.namespace, eligible=args.eligible)


REGISTRATION = Registration(
    "kwok",
    "delete a KWOK node, recording it in a ConfigMap; create it again from that record to power "
    "it on",
    _build,
)
# LIFECYCLE_ACTUATOR=kwok: the manager powers a KWOK node off by deleting its Node object, and
# on by creating it again from its record. Only for KWOK clusters (manifests/kwok includes it):
# the actuator refuses real nodes, and deleting a real Node would not power it off anyway.
