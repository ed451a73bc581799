"""Powering a KWOK node on again, against a real kube-apiserver: its shutdown records the Node
before deleting it, the record is offered for a boot, and the boot creates the Node from it.

What a user would notice: the node comes back as it was (labels, capacity, KWOK's marker) and
marked booting; a restart mid-boot neither fails nor makes a second Node; a node that could not
be recorded is not deleted; a record that would make a "real" Node is refused; nothing is
written without leadership; and the manager's own grant (manifests/kwok) allows all of it and
no more.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from typing import Any, cast

import pytest
import pytest_asyncio

from hack.cluster.runner import LocalCluster
from joulie.api import keys
from joulie.api.lifecycle import Action, BootGrace, IdleGrace, StateTuple, Window, WorkerState
from joulie.kube.client import ApiError, KubeClient
from joulie.kube.projections import node_projection
from joulie.kube.writes import NotPermitted, Writer
from joulie.manager.cache import LIFECYCLE_NODE_ANNOTATIONS
from joulie.manager.lifecycle import actuator_kwok
from joulie.manager.lifecycle.actuator import BootOffer, Outcome, PowerOnRequest, ShutdownRequest
from joulie.manager.lifecycle.actuator_kwok import (
    MAX_MANIFEST_BYTES,
    RECORD_LABELS,
    KwokActuator,
    record_name,
)
from joulie.manager.lifecycle.actuators import build_actuator
from tests.support.lifecycle_nodes import KWOK_RBAC
from tests.support.tokens import role_client
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kube, pytest.mark.asyncio]

NAMESPACE = "joulie-system"
RECORDS = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
FIELD_MANAGER = "joulie-manager"
FAKE = {keys.KWOK_NODE_ANNOTATION: keys.KWOK_NODE_VALUE}
NOW = 1_790_000_000.0
"""The actuator's clock in these tests (2026-09-21T14:13:20Z)."""
STAMP = datetime.fromtimestamp(NOW, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
project = node_projection(annotation_keys=LIFECYCLE_NODE_ANNOTATIONS)
"""Nodes as the manager's cache keeps them."""

NodeMaker = Callable[..., Awaitable[dict[str, Any]]]


@pytest_asyncio.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[KubeClient]:
    async with await KubeClient.from_kubeconfig(str(cluster.admin_kubeconfig)) as c:
        try:
            await c.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})
        except ApiError as exc:
            if not exc.conflict:
                raise
        yield c


@pytest_asyncio.fixture
async def nodes(client: KubeClient) -> AsyncIterator[NodeMaker]:
    """Creates KWOK Nodes (of a memory size of their own, so that their shape is offered apart
    from any other record's); deletes them and their records afterwards."""
    created: list[str] = []

    async def create(
        annotations: dict[str, str] | None = None,
        *,
        cordoned: bool = False,
        name: str = "",
    ) -> dict[str, Any]:
        name = name or unique("kwok-on")
        resources = {
            "cpu": "8",
            "memory": f"{32_000_000 + uuid.uuid4().int % 1_000_000}Ki",
            "nvidia.com/gpu": "2",
            "pods": "110",
        }
        spec: dict[str, Any] = {"podCIDR": "10.244.7.0/24"}
        if cordoned:
            # As the lifecycle leaves a node it powers off: cordoned, tainted, in its phase.
            spec["unschedulable"] = True
            spec["taints"] = [
                {"key": keys.DRAINING_TAINT, "effect": "NoSchedule"},
                {"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"},
            ]
        body = {
            "metadata": {
                "name": name,
                "labels": {"joulie.io/test": "power-on", "topology.kubernetes.io/zone": "z1"},
                "annotations": {**FAKE, **(annotations or {})},
            },
            "spec": spec,
            "status": {"capacity": resources, "allocatable": resources},
        }
        created.append(name)
        node: dict[str, Any] = await client.request("POST", "/api/v1/nodes", body=body)
        return node

    yield create
    for name in created:
        for path in (f"/api/v1/nodes/{name}", f"{RECORDS}/{record_name(name)}"):
            try:
                await client.request("DELETE", path)
            except ApiError as exc:
                if not exc.not_found:
                    raise


@pytest.fixture
def manager_grant(cluster: LocalCluster) -> Iterator[None]:
    cluster.kubectl("apply", "-f", str(KWOK_RBAC))
    yield
    cluster.kubectl("delete", "--ignore-not-found", "-f", str(KWOK_RBAC))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def actuator(client: KubeClient, *, may_write: bool = True, **kwargs: Any) -> KwokActuator:
    writer = Writer(client, FIELD_MANAGER, may_write=lambda: may_write)
    return KwokActuator(writer, client, clock=lambda: NOW, **kwargs)


def shutdown_of(node: dict[str, Any]) -> ShutdownRequest:
    metadata = node["metadata"]
    return ShutdownRequest(
        node=metadata["name"],
        uid=metadata["uid"],
        provider_id="",
        action=Action.START_SHUTDOWN,
        tuple=StateTuple(WorkerState.IDLE, Window.OPEN, BootGrace.EXCEEDED, IdleGrace.EXCEEDED),
        reason="idle",
        idempotency_key=f"{metadata['uid']}/off",
        annotations=metadata.get("annotations") or {},
        labels=metadata.get("labels") or {},
    )


def power_on_of(name: str, group: str = "") -> PowerOnRequest:
    return PowerOnRequest(group or name, name, 1, "1 pending pod", f"{name}/on")


async def get(client: KubeClient, path: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = await client.request("GET", path)
    except ApiError as exc:
        if exc.not_found:
            return None
        raise
    return found


def offer_of(offers: list[BootOffer], name: str) -> BootOffer | None:
    return next((o for o in offers if name in o.nodes), None)


async def write_record(client: KubeClient, name: str, manifest: Any) -> None:
    body = {
        "metadata": {"name": record_name(name), "labels": RECORD_LABELS},
        "data": {"node": name, "manifest": json.dumps(manifest)},
    }
    await client.request("POST", RECORDS, body=body)


# --- a node powered off and on again ------------------------------------------------------------


async def test_a_node_powered_off_comes_back_from_its_record_as_it_was(
    client: KubeClient, nodes: NodeMaker
) -> None:
    marks = {keys.LIFECYCLE_PHASE_ANNOTATION: "shutting-down", keys.IDLE_SINCE_ANNOTATION: "1"}
    node = await nodes({"example.com/rack": "r7", **marks}, cordoned=True)
    name = node["metadata"]["name"]
    kwok = build_actuator("kwok", client=client, writer=Writer(client, FIELD_MANAGER))

    off = await kwok.shutdown(shutdown_of(node))
    assert off.outcome is Outcome.DONE, off.message
    assert await get(client, f"/api/v1/nodes/{name}") is None
    record = await get(client, f"{RECORDS}/{record_name(name)}")
    assert record is not None
    assert record["metadata"]["labels"] == RECORD_LABELS
    assert record["data"]["node"] == name

    offers = await kwok.bootable([], NOW)
    offer = offer_of(offers, name)
    assert offer is not None, offers
    assert offer.allocatable == node["status"]["allocatable"]
    assert offer.labels == node["metadata"]["labels"]
    assert offer.can_boot >= 1
    # A Node of that name exists (registered again by someone): nothing to power on.
    assert offer_of(await kwok.bootable([project(node)], NOW), name) is None

    on = await actuator(client).power_on(power_on_of(name, offer.group))
    assert on.outcome is Outcome.DONE, on.message
    assert on.message == f"Node {name} re-created from its record (KWOK fakes it)"
    back = await get(client, f"/api/v1/nodes/{name}")
    assert back is not None
    assert back["metadata"]["labels"] == node["metadata"]["labels"]
    assert back["status"]["capacity"] == node["status"]["capacity"]
    annotations = back["metadata"]["annotations"]
    assert annotations[keys.KWOK_NODE_ANNOTATION] == keys.KWOK_NODE_VALUE
    assert annotations["example.com/rack"] == "r7"
    assert annotations[keys.LIFECYCLE_PHASE_ANNOTATION] == "booting"
    assert annotations[keys.LIFECYCLE_SINCE_ANNOTATION] == STAMP
    assert annotations[keys.LAUNCHED_AT_ANNOTATION] == STAMP
    assert keys.IDLE_SINCE_ANNOTATION not in annotations
    # Back schedulable: the cordon and drain taint were the power-off's, the other taint is the
    # node's own (Kubernetes' node.kubernetes.io/ ones come and go with its Ready condition).
    assert not back["spec"].get("unschedulable")
    taints = [t["key"] for t in back["spec"].get("taints") or ()]
    assert [t for t in taints if not t.startswith("node.kubernetes.io/")] == [
        "example.com/dedicated"
    ]
    assert await get(client, f"{RECORDS}/{record_name(name)}") is None

    assert offer_of(await kwok.bootable([], NOW), name) is None
    coming = await kwok.bootable([project(back)], NOW)
    mine = [o for o in coming if o.group == name]
    assert [(o.can_boot, o.booting) for o in mine] == [(0, 1)]


async def test_a_power_on_asked_again_is_done_without_a_second_node(
    client: KubeClient, nodes: NodeMaker
) -> None:
    node = await nodes()
    name = node["metadata"]["name"]
    kwok = actuator(client)
    assert (await kwok.shutdown(shutdown_of(node))).outcome is Outcome.DONE
    record = await get(client, f"{RECORDS}/{record_name(name)}")
    assert record is not None

    first = await kwok.power_on(power_on_of(name))
    assert first.outcome is Outcome.DONE, first.message
    created = await get(client, f"/api/v1/nodes/{name}")
    assert created is not None
    # A manager restarted after it created the Node but before it deleted the record.
    await write_record(client, name, json.loads(record["data"]["manifest"]))
    again = await actuator(client).power_on(power_on_of(name))
    assert again.outcome is Outcome.DONE, again.message
    assert "back already" in again.message
    assert await get(client, f"{RECORDS}/{record_name(name)}") is None
    # And asked once more, the record gone: still done, still the one Node.
    third = await actuator(client).power_on(power_on_of(name))
    assert third.outcome is Outcome.DONE, third.message
    listed = await client.request(
        "GET", "/api/v1/nodes", params={"fieldSelector": f"metadata.name={name}"}
    )
    assert [n["metadata"]["uid"] for n in listed["items"]] == [created["metadata"]["uid"]]


# --- nothing deleted that could not be brought back ---------------------------------------------


async def test_a_node_that_cannot_be_recorded_is_not_deleted(
    client: KubeClient, nodes: NodeMaker
) -> None:
    node = await nodes()
    name = node["metadata"]["name"]
    missing = unique("joulie-missing")
    result = await actuator(client, namespace=missing).shutdown(shutdown_of(node))
    assert result.outcome is Outcome.FAILED
    assert "record" in result.message
    assert missing in result.message
    assert await get(client, f"/api/v1/nodes/{name}") is not None


async def test_a_node_too_big_to_record_is_not_deleted(
    client: KubeClient, nodes: NodeMaker
) -> None:
    # The API server allows 256 KiB of annotations, so with its labels, spec and status the
    # Node's record is over the bound.
    key = "example.com/blob"
    room = 256 * 1024 - len(key) - sum(len(k) + len(v) for k, v in FAKE.items())
    node = await nodes({key: "x" * room})
    result = await actuator(client).shutdown(shutdown_of(node))
    assert result.outcome is Outcome.FAILED
    assert str(MAX_MANIFEST_BYTES) in result.message
    assert await get(client, f"/api/v1/nodes/{node['metadata']['name']}") is not None
    assert await get(client, f"{RECORDS}/{record_name(node['metadata']['name'])}") is None


async def test_a_follower_records_nothing_and_deletes_nothing(
    client: KubeClient, nodes: NodeMaker
) -> None:
    node = await nodes()
    name = node["metadata"]["name"]
    with pytest.raises(NotPermitted):
        await actuator(client, may_write=False).shutdown(shutdown_of(node))
    assert await get(client, f"/api/v1/nodes/{name}") is not None
    assert await get(client, f"{RECORDS}/{record_name(name)}") is None


# --- what is not powered on --------------------------------------------------------------------


async def test_a_node_without_a_record_is_not_powered_on(client: KubeClient) -> None:
    name = unique("kwok-never")
    result = await actuator(client).power_on(power_on_of(name))
    assert result.outcome is Outcome.FAILED
    assert f"no record of node {name}" in result.message
    assert await get(client, f"/api/v1/nodes/{name}") is None


async def test_a_record_without_the_kwok_marker_is_refused_and_skipped(
    client: KubeClient, nodes: NodeMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    warnings: list[dict[str, Any]] = []

    class Log:
        def warning(self, event: str, **fields: Any) -> None:
            warnings.append({"event": event, **fields})

    monkeypatch.setattr(actuator_kwok, "log", Log())
    real = unique("kwok-real")
    broken = unique("kwok-broken")
    # Registered through `nodes` so that the fixture deletes their records (and any Node).
    for name in (real, broken):
        await nodes(name=name)
        await client.request("DELETE", f"/api/v1/nodes/{name}")
    manifest = {"metadata": {"name": real, "labels": {}, "annotations": {}}, "spec": {}}
    await write_record(client, real, manifest)
    await client.request(
        "POST",
        RECORDS,
        body={
            "metadata": {"name": record_name(broken), "labels": RECORD_LABELS},
            "data": {"node": broken, "manifest": "{not json"},
        },
    )
    kwok = actuator(client)

    result = await kwok.power_on(power_on_of(real))
    assert result.outcome is Outcome.FAILED
    assert keys.KWOK_NODE_ANNOTATION in result.message
    assert await get(client, f"/api/v1/nodes/{real}") is None

    for _ in range(2):
        offers = await kwok.bootable([], NOW)
        assert offer_of(offers, real) is None
        assert offer_of(offers, broken) is None
    mine = sorted(f"{NAMESPACE}/{record_name(n)}" for n in (real, broken))
    skipped = [w["record"] for w in warnings if "unusable" in w["event"]]
    assert sorted(r for r in skipped if r in mine) == mine  # once each, over two passes


async def test_a_follower_powers_nothing_on(client: KubeClient, nodes: NodeMaker) -> None:
    node = await nodes()
    name = node["metadata"]["name"]
    assert (await actuator(client).shutdown(shutdown_of(node))).outcome is Outcome.DONE
    with pytest.raises(NotPermitted):
        await actuator(client, may_write=False).power_on(power_on_of(name))
    assert await get(client, f"/api/v1/nodes/{name}") is None
    assert await get(client, f"{RECORDS}/{record_name(name)}") is not None


class Unanswered:
    """A client whose every request fails as the far end may."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        raise self.error


@pytest.mark.parametrize(
    "error", [ApiError(403, "Forbidden", "no"), ConnectionRefusedError("refused")]
)
async def test_records_that_cannot_be_read_offer_nothing(
    client: KubeClient, error: Exception
) -> None:
    failing = cast(KubeClient, Unanswered(error))
    kwok = KwokActuator(Writer(client, FIELD_MANAGER), failing)
    assert await kwok.bootable([], NOW) == []


# --- the manager's own grant -------------------------------------------------------------------


async def test_the_managers_grant_powers_fake_nodes_off_and_on_and_creates_no_real_node(
    cluster: LocalCluster, client: KubeClient, nodes: NodeMaker, manager_grant: None
) -> None:
    real = {"metadata": {"name": unique("real")}, "spec": {}}

    def in_force() -> bool:
        with role_client(cluster, "manager") as as_manager:
            if as_manager.get(RECORDS).status_code != 200:
                return False
            # Tried without effect (dryRun): a real Node is refused by the policy, not by RBAC.
            refused = as_manager.post("/api/v1/nodes", params={"dryRun": "All"}, json=real)
            return refused.status_code == 403 and "creates only Nodes that KWOK fakes" in (
                refused.text
            )

    wait_until(in_force, 30, "the grant and the admission policy to be in force")
    node = await nodes()
    name = node["metadata"]["name"]
    async with await KubeClient.from_kubeconfig(str(cluster.role_kubeconfig("manager"))) as manager:
        kwok = build_actuator("kwok", client=manager, writer=Writer(manager, FIELD_MANAGER))
        off = await kwok.shutdown(shutdown_of(node))
        assert off.outcome is Outcome.DONE, off.message
        offer = offer_of(await kwok.bootable([], time.time()), name)
        assert offer is not None
        on = await kwok.power_on(power_on_of(name, offer.group))
        assert on.outcome is Outcome.DONE, on.message
    assert await get(client, f"/api/v1/nodes/{name}") is not None
    assert await get(client, f"{RECORDS}/{record_name(name)}") is None
