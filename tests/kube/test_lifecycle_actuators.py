"""The KWOK and Cluster API actuators against a real kube-apiserver: what each does to the
cluster's objects, what each refuses, and that nothing is written without leadership.

Cluster API itself does not run here: its CRDs are installed in a minimal form (any fields, the
/scale subresource of MachineSets and MachineDeployments, no status subresource), which is all
the actuator relies on. Nor does its controller: a group's ready replicas are written by hand.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio
from structlog.testing import capture_logs

from hack.cluster.runner import LocalCluster
from joulie.api.lifecycle import Action, BootGrace, IdleGrace, StateTuple, Window, WorkerState
from joulie.kube.client import MERGE_PATCH, ApiError, KubeClient
from joulie.kube.projections import SlimNode
from joulie.kube.writes import NotPermitted, Writer
from joulie.manager.lifecycle.actuator import BootOffer, Outcome, PowerOnRequest, ShutdownRequest
from joulie.manager.lifecycle.actuator_capi import (
    DELETE_MACHINE_ANNOTATION,
    ClusterApiActuator,
)
from joulie.manager.lifecycle.actuator_kwok import KwokActuator
from joulie.manager.lifecycle.actuators import build_actuator
from joulie.manager.lifecycle.capi_groups import (
    BOOT_REQUESTED_ANNOTATION,
    MAX_SIZE_ANNOTATION,
    MIN_SIZE_ANNOTATION,
)
from joulie.manager.lifecycle.settings import LifecycleSettings
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kube, pytest.mark.asyncio]

CAPI = "/apis/cluster.x-k8s.io/v1beta1"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
FIELD_MANAGER = "joulie-manager"


@pytest_asyncio.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[KubeClient]:
    # The admin identity: the manager's RBAC does not grant these verbs (see the report).
    async with await KubeClient.from_kubeconfig(str(cluster.admin_kubeconfig)) as c:
        yield c


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest_asyncio.fixture
async def nodes(client: KubeClient) -> AsyncIterator[Callable[..., Awaitable[dict[str, Any]]]]:
    """Creates Nodes for the test, and deletes what is left of them afterwards."""
    created: list[str] = []

    async def create(name: str, annotations: dict[str, str], provider_id: str = "") -> Any:
        spec = {"providerID": provider_id} if provider_id else {}
        body = {"metadata": {"name": name, "annotations": annotations}, "spec": spec}
        created.append(name)
        return await client.request("POST", "/api/v1/nodes", body=body)

    yield create
    for name in created:
        try:
            await client.request("DELETE", f"/api/v1/nodes/{name}")
        except ApiError as exc:
            if not exc.not_found:
                raise


def request_for(node: dict[str, Any], key: str = "attempt-1") -> ShutdownRequest:
    metadata = node["metadata"]
    return ShutdownRequest(
        node=metadata["name"],
        uid=metadata["uid"],
        provider_id=node.get("spec", {}).get("providerID", ""),
        action=Action.START_SHUTDOWN,
        tuple=StateTuple(WorkerState.IDLE, Window.OPEN, BootGrace.EXCEEDED, IdleGrace.EXCEEDED),
        reason="idle",
        idempotency_key=f"{metadata['uid']}/{key}",
        annotations=metadata.get("annotations") or {},
    )


async def exists(client: KubeClient, path: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = await client.request("GET", path)
    except ApiError as exc:
        if exc.not_found:
            return None
        raise
    return found


# --- KWOK ------------------------------------------------------------------------------------

FAKE = {"kwok.x-k8s.io/node": "fake"}


async def test_kwok_deletes_a_fake_node(client: KubeClient, nodes: Any) -> None:
    node = await nodes(unique("kwok"), FAKE)
    actuator = build_actuator("kwok", client=client, writer=Writer(client, FIELD_MANAGER))
    result = await actuator.shutdown(request_for(node))
    assert result.outcome is Outcome.DONE, result.message
    assert await exists(client, f"/api/v1/nodes/{node['metadata']['name']}") is None
    # Asked again (a restarted manager): already gone is done.
    again = await actuator.shutdown(request_for(node))
    assert again.outcome is Outcome.DONE
    assert "already gone" in again.message


async def test_kwok_refuses_a_real_node(client: KubeClient, nodes: Any) -> None:
    node = await nodes(unique("real"), {})
    result = await KwokActuator(Writer(client, FIELD_MANAGER)).shutdown(request_for(node))
    assert result.outcome is Outcome.FAILED
    assert "kwok.x-k8s.io/node=fake" in result.message
    assert await exists(client, f"/api/v1/nodes/{node['metadata']['name']}") is not None


async def test_kwok_leaves_a_new_node_of_the_same_name_alone(
    client: KubeClient, nodes: Any
) -> None:
    name = unique("kwok")
    old = await nodes(name, FAKE)
    await client.request("DELETE", f"/api/v1/nodes/{name}")
    new = await nodes(name, FAKE)
    result = await KwokActuator(Writer(client, FIELD_MANAGER)).shutdown(request_for(old))
    assert result.outcome is Outcome.DONE
    still = await exists(client, f"/api/v1/nodes/{name}")
    assert still is not None
    assert still["metadata"]["uid"] == new["metadata"]["uid"]


async def test_kwok_deletes_nothing_without_leadership(client: KubeClient, nodes: Any) -> None:
    node = await nodes(unique("kwok"), FAKE)
    follower = Writer(client, FIELD_MANAGER, may_write=lambda: False)
    with pytest.raises(NotPermitted):
        await KwokActuator(follower).shutdown(request_for(node))
    assert await exists(client, f"/api/v1/nodes/{node['metadata']['name']}") is not None


# --- Cluster API -----------------------------------------------------------------------------


def crd(plural: str, kind: str, scalable: bool) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": "v1beta1",
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        },
    }
    if scalable:
        version["subresources"] = {
            "scale": {
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas",
            }
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.cluster.x-k8s.io"},
        "spec": {
            "group": "cluster.x-k8s.io",
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [version],
        },
    }


@pytest.fixture(scope="module")
def capi_crds(cluster: LocalCluster) -> Iterator[None]:
    definitions = [
        crd("machines", "Machine", scalable=False),
        crd("machinesets", "MachineSet", scalable=True),
        crd("machinedeployments", "MachineDeployment", scalable=True),
    ]
    with cluster.api() as api:
        for definition in definitions:
            response = api.post(CRDS, json=definition)
            assert response.status_code in (201, 409), response.text

        def established() -> bool:
            for definition in definitions:
                got = api.get(f"{CRDS}/{definition['metadata']['name']}").json()
                # Right after creation the status may not be filled in yet (conditions: null).
                conditions = (got.get("status") or {}).get("conditions") or []
                if not any(
                    c["type"] == "Established" and c["status"] == "True" for c in conditions
                ):
                    return False
            return True

        wait_until(established, 60, "the Cluster API CRDs to be established")
    yield
    with cluster.api() as api:
        for definition in definitions:
            api.delete(f"{CRDS}/{definition['metadata']['name']}")


def owner(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


class Capi:
    """Cluster API objects of one test, in its own namespace."""

    def __init__(self, client: KubeClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace

    def path(self, plural: str, name: str = "") -> str:
        base = f"{CAPI}/namespaces/{self.namespace}/{plural}"
        return f"{base}/{name}" if name else base

    async def create(
        self,
        plural: str,
        kind: str,
        name: str,
        *,
        by: dict[str, Any] | None = None,
        annotations: dict[str, str] | None = None,
        **spec: Any,
    ) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": name}
        if by is not None:
            metadata["ownerReferences"] = [by]
        if annotations:
            metadata["annotations"] = annotations
        body = {
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": kind,
            "metadata": metadata,
            "spec": spec,
        }
        created: dict[str, Any] = await self.client.request("POST", self.path(plural), body=body)
        return created

    async def machine_for(
        self, node: str, by: dict[str, Any] | None, **extra: Any
    ) -> dict[str, Any]:
        machine = await self.create("machines", "Machine", f"m-{node}", by=by, **extra)
        # No status subresource in these CRDs: the link to the Node is written like any field.
        patch = {"status": {"nodeRef": {"kind": "Node", "name": node}}}
        linked: dict[str, Any] = await self.client.request(
            "PATCH",
            self.path("machines", machine["metadata"]["name"]),
            body=patch,
            content_type=MERGE_PATCH,
        )
        return linked

    def node_annotations(self, machine: dict[str, Any]) -> dict[str, str]:
        return {
            "cluster.x-k8s.io/machine": machine["metadata"]["name"],
            "cluster.x-k8s.io/cluster-namespace": self.namespace,
        }

    async def replicas(self, plural: str, name: str) -> int:
        got = await self.client.request("GET", self.path(plural, name))
        return int(got["spec"]["replicas"])

    async def annotations(
        self, machine: dict[str, Any], plural: str = "machines"
    ) -> dict[str, str]:
        got = await self.client.request("GET", self.path(plural, machine["metadata"]["name"]))
        return dict(got["metadata"].get("annotations") or {})

    async def patch(self, plural: str, obj: dict[str, Any], body: dict[str, Any]) -> None:
        path = self.path(plural, obj["metadata"]["name"])
        await self.client.request("PATCH", path, body=body, content_type=MERGE_PATCH)

    async def ready(self, plural: str, obj: dict[str, Any], replicas: int) -> None:
        """What Cluster API's controller would report once that many nodes are Ready (no
        status subresource here: the status is written like any field)."""
        await self.patch(plural, obj, {"status": {"readyReplicas": replicas}})


@pytest_asyncio.fixture
async def capi(capi_crds: None, client: KubeClient, namespace: str) -> Capi:
    return Capi(client, namespace)


async def deployment_with_machine(
    capi: Capi, nodes: Any, replicas: int = 3
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A MachineDeployment -> MachineSet -> Machine <- Node chain; returns all four."""
    md = await capi.create(
        "machinedeployments", "MachineDeployment", unique("md"), replicas=replicas
    )
    ms = await capi.create(
        "machinesets", "MachineSet", unique("ms"), by=owner(md), replicas=replicas
    )
    name = unique("capi")
    machine = await capi.machine_for(name, owner(ms))
    node = await nodes(name, capi.node_annotations(machine))
    return md, ms, machine, node


async def test_capi_marks_the_machine_and_scales_its_deployment_down_once(
    capi: Capi, client: KubeClient, nodes: Any
) -> None:
    md, ms, machine, node = await deployment_with_machine(capi, nodes)
    moment = datetime.datetime(2026, 1, 1, 3, 0, 0, tzinfo=datetime.UTC)
    actuator = ClusterApiActuator(
        client, Writer(client, FIELD_MANAGER), clock=lambda: moment.timestamp()
    )
    result = await actuator.shutdown(request_for(node))
    assert result.outcome is Outcome.ACCEPTED, result.message
    assert (await capi.annotations(machine))[DELETE_MACHINE_ANNOTATION] == "2026-01-01T03:00:00Z"
    assert await capi.replicas("machinedeployments", md["metadata"]["name"]) == 2
    # The MachineSet is the deployment's to resize, not ours.
    assert await capi.replicas("machinesets", ms["metadata"]["name"]) == 3

    # A restarted manager asks again: the Machine is marked already, nothing shrinks twice.
    again = await build_actuator(
        "cluster-api", client=client, writer=Writer(client, FIELD_MANAGER)
    ).shutdown(request_for(node))
    assert again.outcome is Outcome.ACCEPTED
    assert await capi.replicas("machinedeployments", md["metadata"]["name"]) == 2


async def test_capi_scales_a_machineset_of_its_own(
    capi: Capi, client: KubeClient, nodes: Any
) -> None:
    ms = await capi.create("machinesets", "MachineSet", unique("ms"), replicas=2)
    name = unique("capi")
    machine = await capi.machine_for(name, owner(ms))
    node = await nodes(name, capi.node_annotations(machine))
    result = await ClusterApiActuator(client, Writer(client, FIELD_MANAGER)).shutdown(
        request_for(node)
    )
    assert result.outcome is Outcome.ACCEPTED, result.message
    assert DELETE_MACHINE_ANNOTATION in await capi.annotations(machine)
    assert await capi.replicas("machinesets", ms["metadata"]["name"]) == 1


class Interleaved(Writer):
    """A writer that lets someone else act on the cluster right before each of its requests."""

    def __init__(self, client: KubeClient, before: Callable[[str, str], Awaitable[None]]) -> None:
        super().__init__(client, FIELD_MANAGER)
        self._before = before

    async def send(self, method: str, path: str, **kwargs: Any) -> Any:
        await self._before(method, path)
        return await super().send(method, path, **kwargs)


async def test_capi_rereads_the_replicas_that_changed_under_it(
    capi: Capi, client: KubeClient, nodes: Any
) -> None:
    md, _, machine, node = await deployment_with_machine(capi, nodes)
    md_path = capi.path("machinedeployments", md["metadata"]["name"])
    operator_scaled = False

    async def operator_scales_up(method: str, path: str) -> None:
        nonlocal operator_scaled
        if method == "PUT" and not operator_scaled:
            operator_scaled = True
            patch = {"spec": {"replicas": 5}}
            await client.request("PATCH", md_path, body=patch, content_type=MERGE_PATCH)

    actuator = ClusterApiActuator(client, Interleaved(client, operator_scales_up))
    result = await actuator.shutdown(request_for(node))
    assert operator_scaled
    assert result.outcome is Outcome.ACCEPTED, result.message
    # The operator's 5 was read again and counted down, not overwritten with 3 - 1.
    assert await capi.replicas("machinedeployments", md["metadata"]["name"]) == 4
    assert DELETE_MACHINE_ANNOTATION in await capi.annotations(machine)


class AnswerLost(Writer):
    """A writer whose scale request reaches the server but whose answer never comes back."""

    async def send(self, method: str, path: str, **kwargs: Any) -> Any:
        answer = await super().send(method, path, **kwargs)
        if method == "PUT" and path.endswith("/scale"):
            raise TimeoutError("the answer was lost")
        return answer


async def test_capi_never_scales_twice_when_an_answer_was_lost(
    capi: Capi, client: KubeClient, nodes: Any
) -> None:
    md, _, machine, node = await deployment_with_machine(capi, nodes)
    result = await ClusterApiActuator(client, AnswerLost(client, FIELD_MANAGER)).shutdown(
        request_for(node)
    )
    assert result.outcome is Outcome.FAILED
    assert "no answer" in result.message
    # The scale did happen: the mark stays, so the next attempt does not shrink the set again.
    assert DELETE_MACHINE_ANNOTATION in await capi.annotations(machine)
    assert await capi.replicas("machinedeployments", md["metadata"]["name"]) == 2
    again = await ClusterApiActuator(client, Writer(client, FIELD_MANAGER)).shutdown(
        request_for(node, "attempt-2")
    )
    assert again.outcome is Outcome.ACCEPTED
    assert await capi.replicas("machinedeployments", md["metadata"]["name"]) == 2


async def test_capi_takes_its_mark_off_when_the_scale_down_fails(
    capi: Capi, client: KubeClient, nodes: Any
) -> None:
    md, _, machine, node = await deployment_with_machine(capi, nodes, replicas=0)
    result = await ClusterApiActuator(client, Writer(client, FIELD_MANAGER)).shutdown(
        request_for(node)
    )
    assert result.outcome is Outcome.FAILED
    assert "0 replicas" in result.message
    assert DELETE_MACHINE_ANNOTATION not in await capi.annotations(machine)
    assert await capi.replicas("machinedeployments", md["metadata"]["name"]) == 0


async def test_capi_refuses_what_it_cannot_remove_safely(
    capi: Capi, client: KubeClient, nodes: Any
) -> None:
    actuator = ClusterApiActuator(client, Writer(client, FIELD_MANAGER))

    plain = await nodes(unique("plain"), {})
    result = await actuator.shutdown(request_for(plain))
    assert result.outcome is Outcome.FAILED
    assert "cluster.x-k8s.io/machine" in result.message

    orphan = await nodes(unique("orphan"), capi.node_annotations({"metadata": {"name": "gone"}}))
    result = await actuator.shutdown(request_for(orphan))
    assert result.outcome is Outcome.FAILED
    assert f"Machine {capi.namespace}/gone not found" in result.message

    # A control-plane Machine (its controller is a KubeadmControlPlane) is never scaled.
    control_plane = {
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta1",
        "kind": "KubeadmControlPlane",
        "name": "cp",
        "uid": str(uuid.uuid4()),
        "controller": True,
    }
    name = unique("cp")
    machine = await capi.machine_for(name, control_plane)
    node = await nodes(name, capi.node_annotations(machine))
    result = await actuator.shutdown(request_for(node))
    assert result.outcome is Outcome.FAILED
    assert "not controlled by a MachineSet" in result.message
    assert DELETE_MACHINE_ANNOTATION not in await capi.annotations(machine)

    # A Node whose annotation names another node's Machine leaves that Machine alone.
    md, _, machine, _ = await deployment_with_machine(capi, nodes)
    stray = await nodes(unique("stray"), capi.node_annotations(machine))
    result = await actuator.shutdown(request_for(stray))
    assert result.outcome is Outcome.FAILED
    assert "belongs to node" in result.message
    assert DELETE_MACHINE_ANNOTATION not in await capi.annotations(machine)
    assert await capi.replicas("machinedeployments", md["metadata"]["name"]) == 3

    # Nothing proves a match: a Machine that names no node, and a Node whose providerID the
    # Machine does not carry (each was taken as a match).
    md, ms, _, _ = await deployment_with_machine(capi, nodes)
    unlinked = await capi.create("machines", "Machine", unique("unlinked"), by=owner(ms))
    claimed = await nodes(unique("claims"), capi.node_annotations(unlinked))
    result = await actuator.shutdown(request_for(claimed))
    assert result.outcome is Outcome.FAILED
    assert "names no node (status.nodeRef)" in result.message
    name = unique("pid")
    linked = await capi.machine_for(name, owner(ms))
    with_id = await nodes(name, capi.node_annotations(linked), "aws:///eu-1a/i-0abc")
    result = await actuator.shutdown(request_for(with_id))
    assert result.outcome is Outcome.FAILED
    assert "has providerID (none), the Node aws:///eu-1a/i-0abc" in result.message
    for machine in (unlinked, linked):
        assert DELETE_MACHINE_ANNOTATION not in await capi.annotations(machine)
    assert await capi.replicas("machinedeployments", md["metadata"]["name"]) == 3


async def test_capi_writes_nothing_without_leadership(
    capi: Capi, client: KubeClient, nodes: Any
) -> None:
    md, _, machine, node = await deployment_with_machine(capi, nodes)
    follower = Writer(client, FIELD_MANAGER, may_write=lambda: False)
    with pytest.raises(NotPermitted):
        await ClusterApiActuator(client, follower).shutdown(request_for(node))
    assert DELETE_MACHINE_ANNOTATION not in await capi.annotations(machine)
    assert await capi.replicas("machinedeployments", md["metadata"]["name"]) == 3


async def test_capi_scale_down_stops_at_the_groups_minimum(
    capi: Capi, client: KubeClient, nodes: Any
) -> None:
    md, _, machine, node = await deployment_with_machine(capi, nodes, replicas=2)
    await capi.patch("machinedeployments", md, {"metadata": {"annotations": sizes(2, 5)}})
    result = await ClusterApiActuator(client, Writer(client, FIELD_MANAGER)).shutdown(
        request_for(node)
    )
    assert result.outcome is Outcome.FAILED
    assert "its minimum size is 2" in result.message
    # Refused after the mark: the mark is taken off, so the next attempt starts clean.
    assert DELETE_MACHINE_ANNOTATION not in await capi.annotations(machine)
    assert await capi.replicas("machinedeployments", md["metadata"]["name"]) == 2


# --- Cluster API: powering on ----------------------------------------------------------------

CAPACITY = "capacity.cluster-autoscaler.kubernetes.io"
GPU_NODE = {f"{CAPACITY}/cpu": "16", f"{CAPACITY}/memory": "64Gi"} | {
    f"{CAPACITY}/gpu-count": "4",
    f"{CAPACITY}/gpu-type": "amd.com/gpu",
}
MOMENT = datetime.datetime(2026, 1, 1, 3, 0, 0, tzinfo=datetime.UTC).timestamp()


def sizes(minimum: int | str, maximum: int | str) -> dict[str, str]:
    return {MIN_SIZE_ANNOTATION: str(minimum), MAX_SIZE_ANNOTATION: str(maximum)}


async def node_group(
    capi: Capi,
    replicas: int,
    annotations: dict[str, str],
    *,
    ready: int | None = None,
    labels: dict[str, str] | None = None,
) -> tuple[dict[str, Any], str]:
    """A MachineDeployment and the group name its offers carry."""
    spec: dict[str, Any] = {"replicas": replicas}
    if labels:
        spec["template"] = {"metadata": {"labels": labels}}
    md = await capi.create(
        "machinedeployments", "MachineDeployment", unique("md"), annotations=annotations, **spec
    )
    if ready is not None:
        await capi.ready("machinedeployments", md, ready)
    return md, f"MachineDeployment {capi.namespace}/{md['metadata']['name']}"


def power_on(group: str, count: int) -> PowerOnRequest:
    return PowerOnRequest(
        group=group, node="", count=count, reason="pods wait", idempotency_key=f"{group}/{count}"
    )


def offer_of(offers: list[BootOffer], group: str) -> BootOffer | None:
    # Every namespace is listed: other tests' groups are there too.
    found = [offer for offer in offers if offer.group == group]
    assert len(found) <= 1, found
    return found[0] if found else None


def slim_node(name: str, annotations: dict[str, str], allocatable: dict[str, str]) -> SlimNode:
    return SlimNode(
        name=name,
        labels={},
        annotations=annotations,
        allocatable=allocatable,
        unschedulable=False,
        ready=True,
        deleting=False,
        uid=str(uuid.uuid4()),
    )


async def test_capi_powers_on_by_scaling_a_node_group_up(capi: Capi, client: KubeClient) -> None:
    md, group = await node_group(capi, 2, sizes(1, 5) | GPU_NODE, ready=2, labels={"pool": "gpu"})
    actuator = ClusterApiActuator(client, Writer(client, FIELD_MANAGER), clock=lambda: MOMENT)
    before = offer_of(await actuator.bootable([], MOMENT), group)
    assert before == BootOffer(
        group,
        {"cpu": "16", "memory": "64Gi", "amd.com/gpu": "4"},
        can_boot=3,
        labels={"pool": "gpu"},
    )

    result = await actuator.power_on(power_on(group, 2))
    assert result.outcome is Outcome.ACCEPTED, result.message
    assert result.message == f"{group} scaled up from 2 to 4"
    assert await capi.replicas("machinedeployments", md["metadata"]["name"]) == 4
    stamped = await capi.annotations(md, "machinedeployments")
    assert stamped[BOOT_REQUESTED_ANNOTATION] == "2026-01-01T03:00:00Z"

    # A restarted manager reads the boot in flight from the group itself: two booting, and
    # room for one more below the maximum, not three.
    settings = LifecycleSettings(lifecycle_boot_grace=600.0, lifecycle_backoff=60.0)
    restarted = build_actuator(
        "cluster-api", client=client, writer=Writer(client, FIELD_MANAGER), settings=settings
    )
    during = offer_of(await restarted.bootable([], MOMENT + 60), group)
    assert during is not None
    assert (during.booting, during.can_boot, during.cooling_until) == (2, 1, None)

    # Still not Ready past the boot grace: the group cools down, as cluster-autoscaler backs it
    # off, for LIFECYCLE_BACKOFF past the grace.
    late = offer_of(await restarted.bootable([], MOMENT + 601), group)
    assert late is not None
    assert (late.booting, late.cooling_until) == (2, MOMENT + 600 + 60)

    # The nodes came up: nothing in flight, nothing cooling.
    await capi.ready("machinedeployments", md, 4)
    after = offer_of(await restarted.bootable([], MOMENT + 601), group)
    assert after is not None
    assert (after.booting, after.can_boot, after.cooling_until) == (0, 1, None)


async def test_capi_never_scales_a_node_group_past_its_maximum(
    capi: Capi, client: KubeClient
) -> None:
    md, group = await node_group(capi, 4, sizes(0, 5) | GPU_NODE, ready=4)
    actuator = ClusterApiActuator(client, Writer(client, FIELD_MANAGER))
    refused = await actuator.power_on(power_on(group, 2))
    assert refused.outcome is Outcome.FAILED
    assert "2 more would pass its maximum size 5" in refused.message
    assert await capi.replicas("machinedeployments", md["metadata"]["name"]) == 4
    # A refusal leaves no stamp: no boot began, so nothing may cool the group down for it.
    assert BOOT_REQUESTED_ANNOTATION not in await capi.annotations(md, "machinedeployments")

    assert (await actuator.power_on(power_on(group, 1))).outcome is Outcome.ACCEPTED
    full = offer_of(await actuator.bootable([], MOMENT), group)
    assert full is not None
    assert (full.can_boot, full.booting) == (0, 1)
    again = await actuator.power_on(power_on(group, 1))
    assert again.outcome is Outcome.FAILED
    assert "maximum size 5" in again.message
    assert await capi.replicas("machinedeployments", md["metadata"]["name"]) == 5


async def test_capi_scale_up_rereads_the_replicas_that_changed_under_it(
    capi: Capi, client: KubeClient
) -> None:
    md, group = await node_group(capi, 1, sizes(0, 5) | GPU_NODE)

    def scaled_meanwhile(replicas: int) -> ClusterApiActuator:
        """An actuator whose first scale request finds the group resized to ``replicas``."""
        pending = [replicas]

        async def someone_scales(method: str, path: str) -> None:
            if method == "PUT" and path.endswith("/scale") and pending:
                patch = {"spec": {"replicas": pending.pop()}}
                await capi.patch("machinedeployments", md, patch)

        return ClusterApiActuator(client, Interleaved(client, someone_scales))

    result = await scaled_meanwhile(3).power_on(power_on(group, 1))
    assert result.outcome is Outcome.ACCEPTED, result.message
    # The 3 written meanwhile was read again and counted up, not overwritten with 1 + 1.
    assert result.message == f"{group} scaled up from 3 to 4"
    assert await capi.replicas("machinedeployments", md["metadata"]["name"]) == 4

    # Read again, the group is at its maximum: the new count is refused, not overwritten.
    refused = await scaled_meanwhile(5).power_on(power_on(group, 1))
    assert refused.outcome is Outcome.FAILED
    assert "maximum size 5" in refused.message
    assert await capi.replicas("machinedeployments", md["metadata"]["name"]) == 5


async def test_capi_boot_whose_answer_was_lost_is_seen_booting_not_repeated(
    capi: Capi, client: KubeClient
) -> None:
    md, group = await node_group(capi, 2, sizes(0, 5) | GPU_NODE, ready=2)
    lost = await ClusterApiActuator(client, AnswerLost(client, FIELD_MANAGER)).power_on(
        power_on(group, 1)
    )
    assert lost.outcome is Outcome.FAILED
    assert "whether it grew is not known" in lost.message
    assert await capi.replicas("machinedeployments", md["metadata"]["name"]) == 3
    # The next pass (here a restarted manager) reads the boot that did happen.
    offer = offer_of(
        await ClusterApiActuator(client, Writer(client, FIELD_MANAGER)).bootable([], MOMENT),
        group,
    )
    assert offer is not None
    assert (offer.booting, offer.can_boot) == (1, 2)


async def test_capi_offers_only_the_node_groups_cluster_autoscaler_manages(
    capi: Capi, client: KubeClient
) -> None:
    writer = Writer(client, FIELD_MANAGER)
    actuator = ClusterApiActuator(client, writer)
    plain, plain_group = await node_group(capi, 1, {})
    _, half_group = await node_group(capi, 1, {MAX_SIZE_ANNOTATION: "5"} | GPU_NODE)
    _, word_group = await node_group(capi, 1, sizes("one", 5) | GPU_NODE)
    _, upside_group = await node_group(capi, 1, sizes(4, 2) | GPU_NODE)
    _, blind_group = await node_group(capi, 1, sizes(0, 5))
    # A MachineSet its deployment owns is sized through the deployment, never on its own.
    seen, seen_group = await node_group(capi, 1, sizes(0, 5))
    owned = await capi.create(
        "machinesets", "MachineSet", unique("ms"), by=owner(seen), annotations=sizes(0, 5)
    )
    # A MachineSet of its own is a group; a GPU count without a type is NVIDIA's.
    lone = await capi.create(
        "machinesets",
        "MachineSet",
        unique("ms"),
        annotations=sizes(0, 2)
        | {f"{CAPACITY}/cpu": "8", f"{CAPACITY}/memory": "32Gi", f"{CAPACITY}/gpu-count": "1"},
        replicas=0,
    )
    lone_group = f"MachineSet {capi.namespace}/{lone['metadata']['name']}"

    of_the_group = {
        "cluster.x-k8s.io/owner-kind": "MachineSet",
        "cluster.x-k8s.io/owner-name": owned["metadata"]["name"],
        "cluster.x-k8s.io/cluster-namespace": capi.namespace,
    }
    nodes = [
        # The same MachineSet name in another namespace is another group's.
        slim_node("elsewhere", of_the_group | {"cluster.x-k8s.io/cluster-namespace": "x"}, {}),
        slim_node("n1", of_the_group, {"cpu": "4", "memory": "16Gi"}),
    ]
    offers = await actuator.bootable(nodes, MOMENT)
    for absent in (
        plain_group,
        half_group,
        f"MachineSet {capi.namespace}/{owned['metadata']['name']}",
    ):
        assert offer_of(offers, absent) is None

    word = offer_of(offers, word_group)
    assert word is not None
    assert word.can_boot == 0
    assert f"{MIN_SIZE_ANNOTATION} is 'one', not a non-negative integer" in word.problem
    upside = offer_of(offers, upside_group)
    assert upside is not None
    assert upside.can_boot == 0
    assert "minimum size 4 is above its maximum size 2" in upside.problem
    blind = offer_of(offers, blind_group)
    assert blind is not None
    assert blind.can_boot == 0
    assert "cannot tell what a node of it offers" in blind.problem

    from_node = offer_of(offers, seen_group)
    assert from_node is not None
    assert (from_node.allocatable, from_node.can_boot, from_node.problem) == (
        {"cpu": "4", "memory": "16Gi"},
        4,
        "",
    )
    alone = offer_of(offers, lone_group)
    assert alone is not None
    assert (alone.allocatable, alone.can_boot) == (
        {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
        2,
    )

    # What is not offered is not scaled either, whatever asks.
    for group in (plain_group, word_group, "Deployment default/web", "MachineSet ../x"):
        result = await actuator.power_on(power_on(group, 1))
        assert result.outcome is Outcome.FAILED, group
    assert await capi.replicas("machinedeployments", plain["metadata"]["name"]) == 1
    assert (await actuator.power_on(power_on(lone_group, 1))).outcome is Outcome.ACCEPTED
    assert await capi.replicas("machinesets", lone["metadata"]["name"]) == 1


async def test_capi_offers_nothing_where_cluster_api_is_not_served(client: KubeClient) -> None:
    absent = ClusterApiActuator(client, Writer(client, FIELD_MANAGER), version="v1alpha0")
    with capture_logs() as logs:
        for _ in range(3):
            assert await absent.bootable([], MOMENT) == []
    # Said once, not at every pass while it lasts.
    warned = [entry for entry in logs if entry["log_level"] == "warning"]
    assert len(warned) == 1, warned
    assert "HTTP 404" in warned[0]["error"]
    result = await absent.power_on(power_on("MachineDeployment default/md", 1))
    assert result.outcome is Outcome.FAILED
    assert "not found" in result.message


async def test_capi_powers_on_nothing_without_leadership(capi: Capi, client: KubeClient) -> None:
    md, group = await node_group(capi, 1, sizes(0, 5) | GPU_NODE)
    follower = Writer(client, FIELD_MANAGER, may_write=lambda: False)
    with pytest.raises(NotPermitted):
        await ClusterApiActuator(client, follower).power_on(power_on(group, 1))
    assert await capi.replicas("machinedeployments", md["metadata"]["name"]) == 1
    assert BOOT_REQUESTED_ANNOTATION not in await capi.annotations(md, "machinedeployments")
