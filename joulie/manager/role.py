"""The controller manager role: plans every eligible node's power profile and writes its NodeTwin.

It reads Nodes, Pods, NodeHardware and NodeTwins through informers only, so a reconcile costs no
API reads. A reconcile runs every RECONCILE_INTERVAL and soon after anything that can change the
plan (a performance pod starting or finishing, a node joining or leaving, new NodeHardware); all
triggers go through one work-queue key, so a burst of events costs one reconcile.

Only the holder of the ``joulie-manager`` Lease writes. Writes compare with the informer copies
first, so a reconcile at constant demand sends nothing.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple, TypeVar

import structlog
from prometheus_client import Counter, Gauge, Histogram
from pydantic import ValidationError

from joulie.api import keys
from joulie.api.enums import ConditionStatus, SchedulableClass
from joulie.api.nodehardware import NodeHardwareStatus
from joulie.api.selector import LabelSelector, parse_selector
from joulie.core.intents import (
    TRANSITION_DEFERRED,
    AgentReporting,
    NodeIntent,
    agent_reporting,
    is_active_performance_pod,
    max_running_pod_gpus,
    node_twin_spec,
    transition_event,
)
from joulie.core.policy import Plan, PlanNode, family_split, plan
from joulie.core.twin import TwinHardware, retired_status
from joulie.kube.client import KubeClient
from joulie.kube.events import EventRecorder, ObjectRef
from joulie.kube.informer import Handlers, Informer
from joulie.kube.leader import LeaderElectionConfig, LeaderElector, default_identity
from joulie.kube.projections import (
    SlimNode,
    SlimPod,
    identity,
    node_projection,
    pod_projection,
    pods_by_annotation_and_phase,
    pods_by_node,
)
from joulie.kube.workqueue import WorkQueue, run_workers
from joulie.kube.writes import Writer
from joulie.manager.config import intent_config, policy_inputs
from joulie.manager.facility import FacilityPoller, FacilityReading
from joulie.manager.hardware import HardwareView, hardware_view
from joulie.manager.power import PowerReader, PowerReading, build_source
from joulie.manager.settings import ManagerSettings
from joulie.manager.twin_status import TwinTracker, twin_hardware
from joulie.sim.catalog import Catalog

log = structlog.get_logger("joulie.manager")
_T = TypeVar("_T")

FIELD_MANAGER = "joulie-manager"
LEASE_NAME = "joulie-manager"
DEFAULT_NAMESPACE = "joulie-system"
RECONCILE_KEY = "reconcile"
NODETWINS = f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}"
NODEHARDWARES = f"/apis/{keys.API_VERSION}/{keys.NODE_HARDWARE_PLURAL}"
DEFERRED_REASON = "DowngradeDeferred"
WRITE_CONCURRENCY = 16
"""Nodes whose writes are in flight at once (the first reconcile of a large cluster writes three
objects per node)."""

FAMILY_NODES = Gauge("joulie_policy_family_nodes", "Eligible nodes per hardware family", ["family"])
FAMILY_PERFORMANCE = Gauge(
    "joulie_policy_family_performance_nodes",
    "Nodes per hardware family planned in performance (draining nodes count as not performance)",
    ["family"],
)
HP_COUNT = Gauge("joulie_policy_hp_count", "Performance node count the policy asked for")
PERFORMANCE_PODS = Gauge(
    "joulie_policy_performance_pods",
    "Running and pending performance pods cluster-wide (not terminating)",
)
RECONCILE_SECONDS = Histogram(
    "joulie_manager_reconcile_duration_seconds",
    "Time one reconcile took, writes included",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
LAST_RECONCILE = Gauge(
    "joulie_manager_last_reconcile_timestamp_seconds",
    "When the last reconcile finished without error (Unix time); the twins are only as current "
    "as this",
)
TRANSITIONS = Counter(
    "joulie_policy_transitions_total",
    "Schedulable-class changes of nodes, by result (deferred: a downgrade waits for pods)",
    ["result"],
)

_PERFORMANCE = "performance"
_CLASS_INDEX = "class"


def _pod_class(pod: SlimPod) -> str | None:
    return pod.annotations.get(keys.WORKLOAD_CLASS_ANNOTATION)


_CLASSES = frozenset(c.value for c in SchedulableClass)
_ACTIVE_PERFORMANCE_INDEX = "active-performance"
_MULTI_GPU_INDEX = "multi-gpu"


def _active_performance_node(pod: SlimPod) -> tuple[str, ...]:
    """Index: the node of a pod that holds back a downgrade (guard)."""
    if pod.node_name and is_active_performance_pod(pod.phase, pod.deleting, _pod_class(pod)):
        return (pod.node_name,)
    return ()


def _multi_gpu_node(pod: SlimPod) -> tuple[str, ...]:
    """Index: the node of a running pod using 2 or more GPUs (the sustained-preset rule)."""
    if pod.node_name and max_running_pod_gpus([(pod.phase, pod.deleting, pod.gpus)]) >= 2:
        return (pod.node_name,)
    return ()


def _hardware_node(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """Index NodeHardware by the node it describes (spec.nodeName, else its own name)."""
    spec = obj.get("spec") or {}
    name = spec.get("nodeName") or obj["metadata"]["name"]
    return (str(name),)


def _planning_labels(node: SlimNode) -> dict[str, str]:
    """The labels that matter to eligibility and hardware: all but the one this role writes, so
    our own label patch does not trigger another reconcile."""
    return {k: v for k, v in node.labels.items() if k != keys.POWER_PROFILE_LABEL}


def _parse_hardware(obj: Mapping[str, Any] | None) -> NodeHardwareStatus | None:
    if obj is None or not obj.get("status"):
        return None
    try:
        return NodeHardwareStatus.model_validate(obj["status"])
    except ValidationError as exc:
        log.warning("NodeHardware status unusable", name=obj["metadata"]["name"], error=str(exc))
        return None


def _updated_at(hardware: NodeHardwareStatus | None) -> datetime | None:
    return hardware.updated_at if hardware is not None else None


def _same(a: Any, b: Any) -> bool:
    """Equal as the API server stores them: JSON values compare by value (``60 == 60.0``), and
    dict equality runs in C, which matters at thousands of nodes per reconcile."""
    return bool(a == b)


class Planned(NamedTuple):
    nodes: list[SlimNode]
    hardware: dict[str, tuple[bool, NodeHardwareStatus | None]]
    views: dict[str, HardwareView]
    plan_nodes: list[PlanNode]
    perf_pods: int
    result: Plan


class ManagerRole:
    name = "manager"

    def __init__(self, settings: ManagerSettings, client: KubeClient | None = None) -> None:
        self.settings = settings
        self._client = client
        self._selector: LabelSelector = parse_selector(settings.node_selector)
        self._config = intent_config(settings)
        self._inputs = policy_inputs(settings)
        self._namespace = os.environ.get("POD_NAMESPACE") or DEFAULT_NAMESPACE
        self._informers: list[Informer[Any]] = []
        self._elector: LeaderElector | None = None
        self._queue: WorkQueue[str] | None = None
        # The schedulable class last written per node: the informer copy may lag our own write,
        # and a transition must be recorded once, not again at the next reconcile.
        self._classes: dict[str, SchedulableClass] = {}
        # Per-node caches keyed on the identity of the informer objects they were built from.
        self._intents: dict[str, tuple[Any, ...]] = {}
        self._views: dict[str, tuple[Any, ...]] = {}
        self._parsed: dict[str, tuple[Any, NodeHardwareStatus | None]] = {}
        self._wire: dict[str, tuple[NodeIntent, dict[str, Any]]] = {}
        self._twin_hw: dict[str, tuple[Any, ...]] = {}
        self._verified: dict[str, tuple[Any, ...]] = {}
        """Per node: the inputs last found to need no write (see _write_node)."""
        self._now = datetime.now(UTC)
        """The time of the current reconcile (one clock read, not one per node)."""
        self._writes = 0
        """Writes this role sent (for the reconcile log line)."""
        # Event-triggered reconciles between two ticks reuse the tick's power reading.
        self._power = PowerReader(build_source(settings), settings.reconcile_interval / 2)
        self._twin = TwinTracker(settings.node_power_trend_window)
        self._facility = FacilityPoller(settings) if settings.enable_facility_metrics else None

    # --- what the runtime reads -----------------------------------------------------------

    def is_ready(self) -> bool:
        synced = bool(self._informers) and all(i.has_synced for i in self._informers)
        return synced and self._elector is not None and self._elector.is_ready()

    def status(self) -> str:
        return self._elector.status() if self._elector is not None else "starting"

    # --- running --------------------------------------------------------------------------

    async def observe(
        self, client: KubeClient, stopping: asyncio.Event
    ) -> list[asyncio.Task[None]]:
        """Start the informers only (no election, no writes) and wait until they synced."""
        self._catalog = Catalog.load()
        self._build_informers(client)
        tasks = [asyncio.create_task(i.run(stopping)) for i in self._informers]
        for informer in self._informers:
            await informer.wait_synced()
        return tasks

    async def run(self, stopping: asyncio.Event) -> None:
        client = self._client or await KubeClient.connect()
        self._catalog = Catalog.load()
        self._writer = Writer(client, FIELD_MANAGER)
        self._events = EventRecorder(client, FIELD_MANAGER, default_identity())
        self._build_informers(client)
        queue: WorkQueue[str] = WorkQueue("joulie-manager")
        self._queue = queue
        elector = LeaderElector(
            client,
            LeaderElectionConfig(namespace=self._namespace, name=LEASE_NAME),
            on_started_leading=lambda: queue.add(RECONCILE_KEY),
            name="manager-leader-election",
        )
        self._elector = elector
        tasks = [asyncio.create_task(i.run(stopping)) for i in self._informers]
        tasks.append(asyncio.create_task(elector.run(stopping)))
        if self._facility is not None:
            tasks.append(asyncio.create_task(self._facility.run(stopping)))
        worker = asyncio.create_task(self._work(queue, stopping))
        try:
            await stopping.wait()
        finally:
            queue.shutdown()
            await asyncio.gather(worker, return_exceptions=True)
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._power.close()
            if self._client is None:
                await client.close()

    def _build_informers(self, client: KubeClient) -> None:
        self.nodes: Informer[SlimNode] = Informer(
            client,
            "/api/v1/nodes",
            node_projection(
                annotation_keys=[keys.HW_CPU_MODEL_ANNOTATION, keys.HW_GPU_MODEL_ANNOTATION]
            ),
        )
        self.pods: Informer[SlimPod] = Informer(
            client,
            "/api/v1/pods",
            pod_projection(annotation_keys=[keys.WORKLOAD_CLASS_ANNOTATION]),
            indexers={
                "node": pods_by_node,
                _CLASS_INDEX: pods_by_annotation_and_phase(keys.WORKLOAD_CLASS_ANNOTATION, ""),
                # Per-node facts the intents need, kept up to date by the informer so that a
                # reconcile looks them up instead of walking every node's pods.
                _ACTIVE_PERFORMANCE_INDEX: _active_performance_node,
                _MULTI_GPU_INDEX: _multi_gpu_node,
            },
        )
        self.hardware: Informer[Mapping[str, Any]] = Informer(
            client, NODEHARDWARES, identity, indexers={"node": _hardware_node}
        )
        self.twins: Informer[Mapping[str, Any]] = Informer(client, NODETWINS, identity)
        self._informers = [self.nodes, self.pods, self.hardware, self.twins]
        self.nodes.add_handlers(
            Handlers(
                on_add=lambda _: self._trigger(),
                on_update=self._node_updated,
                on_delete=lambda _: self._trigger(),
            )
        )
        self.pods.add_handlers(
            Handlers(
                on_add=self._pod_seen,
                on_update=self._pod_updated,
                on_delete=self._pod_seen,
            )
        )
        self.hardware.add_handlers(
            Handlers(
                on_add=lambda _: self._trigger(),
                on_update=lambda old, new: self._trigger() if old != new else None,
                on_delete=lambda _: self._trigger(),
            )
        )

    # --- triggers -------------------------------------------------------------------------

    def _trigger(self) -> None:
        if self._queue is not None:
            self._queue.add(RECONCILE_KEY)

    def _node_updated(self, old: SlimNode, new: SlimNode) -> None:
        if (
            _planning_labels(old) != _planning_labels(new)
            or old.annotations != new.annotations
            or old.unschedulable != new.unschedulable
            or old.allocatable != new.allocatable
        ):
            self._trigger()

    def _pod_seen(self, pod: SlimPod) -> None:
        if _pod_class(pod) == _PERFORMANCE:
            self._trigger()

    def _pod_updated(self, old: SlimPod, new: SlimPod) -> None:
        if _PERFORMANCE not in (_pod_class(old), _pod_class(new)):
            return
        if (old.phase, old.deleting, old.node_name) != (new.phase, new.deleting, new.node_name):
            self._trigger()

    # --- the loop -------------------------------------------------------------------------

    async def _work(self, queue: WorkQueue[str], stopping: asyncio.Event) -> None:
        for informer in self._informers:
            await informer.wait_synced()
        queue.add(RECONCILE_KEY)
        await run_workers(queue, self._handle, 1, stopping)

    async def _handle(self, key: str) -> None:
        if self._elector is not None and self._elector.is_leader:
            await self.reconcile()
        # The periodic reconcile: the queue keeps only the earliest deadline. (A failed
        # reconcile comes back sooner, through the queue's backoff.)
        self._queue_add_after(key)

    def _queue_add_after(self, key: str) -> None:
        if self._queue is not None:
            self._queue.add_after(key, self.settings.reconcile_interval)

    # --- one reconcile --------------------------------------------------------------------

    def _eligible(self, node: SlimNode) -> bool:
        return (
            self._selector.matches(node.labels)
            and not node.unschedulable
            and not node.deleting
            and node.labels.get(self.settings.reserved_label_key) != "true"
        )

    def performance_pod_count(self) -> int:
        """P: running and pending performance pods cluster-wide, not terminating (index look-ups,
        never a LIST)."""
        return sum(
            not pod.deleting
            for phase in ("Running", "Pending")
            for pod in self.pods.by_index(_CLASS_INDEX, f"{_PERFORMANCE}/{phase}")
        )

    def _hardware_of(self, node: str) -> tuple[bool, NodeHardwareStatus | None]:
        found = self.hardware.by_index("node", node)
        if not found:
            return False, None
        raw = found[0]
        cached = self._parsed.get(node)
        if cached is None or cached[0] is not raw:
            cached = (raw, _parse_hardware(raw))
            self._parsed[node] = cached
        return True, cached[1]

    def _view(self, node: SlimNode, status: NodeHardwareStatus | None) -> HardwareView:
        cached = self._views.get(node.name)
        if cached is not None and cached[0] is node and cached[1] is status:
            return cached[2]  # type: ignore[no-any-return]
        view = hardware_view(
            status,
            node.labels,
            node.annotations,
            node.allocatable,
            self._catalog,
            self._config.gpu_product_label_keys,
        )
        self._views[node.name] = (node, status, view)
        return view

    def planned(self) -> Planned:
        """The plan for the eligible nodes from the caches, before anything is written (the
        reconcile writes it; `joulie plan` against a live cluster only prints it)."""
        nodes = sorted((n for n in self.nodes.values() if self._eligible(n)), key=lambda n: n.name)
        hardware = {n.name: self._hardware_of(n.name) for n in nodes}
        views = {n.name: self._view(n, hardware[n.name][1]) for n in nodes}
        plan_nodes = [
            PlanNode(n.name, views[n.name].family, n.labels.get(keys.POWER_PROFILE_LABEL))
            for n in nodes
        ]
        perf_pods = self.performance_pod_count()
        result = plan(plan_nodes, self._inputs, perf_pods, time.time())
        return Planned(nodes, hardware, views, plan_nodes, perf_pods, result)

    async def reconcile(self) -> None:
        started = time.perf_counter()
        nodes, hardware, views, plan_nodes, perf_pods, result = self.planned()
        writes_before = self._writes
        reading = await self._power.reading([n.name for n in nodes])
        self._now = datetime.now(UTC)
        facility = self._facility.latest if self._facility is not None else FacilityReading()
        performing: set[str] = set()
        transitions = {"deferred": 0, "applied": 0}

        def work() -> Iterator[Awaitable[str | None]]:
            for node in nodes:
                present, status = hardware[node.name]
                view = views[node.name]
                intent = self._intent(node, result, view, status)
                if intent.schedulable_class is SchedulableClass.PERFORMANCE:
                    performing.add(node.name)
                twin = self._twin_status(node, intent, view, status, reading, facility)
                yield self._write_node(node, intent, present, status, twin)

        for event in await _drain(work(), WRITE_CONCURRENCY):
            if event is not None:
                transitions[event] += 1
        self._twin.forget(n.name for n in nodes)
        await self._retire_unplanned({n.name for n in nodes})
        deleted = await self._delete_orphans()
        self._record(plan_nodes, result, perf_pods, frozenset(performing))
        RECONCILE_SECONDS.observe(time.perf_counter() - started)
        LAST_RECONCILE.set_to_current_time()
        log.info(
            "reconciled",
            policy=result.policy_name,
            nodes=len(nodes),
            hp_count=result.hp_count,
            performance=len(performing),
            deferred=transitions["deferred"],
            applied=transitions["applied"],
            performance_pods=perf_pods,
            writes=self._writes - writes_before,
            deleted_twins=deleted,
            seconds=round(time.perf_counter() - started, 4),
        )

    def _intent(
        self,
        node: SlimNode,
        result: Plan,
        view: HardwareView,
        status: NodeHardwareStatus | None,
    ) -> NodeIntent:
        active = self.pods.index_count(_ACTIVE_PERFORMANCE_INDEX, node.name)
        # Only "2 or more" matters to the sustained rule, so the index answers with 2 or 0.
        multi_gpu = 2 if self.pods.index_count(_MULTI_GPU_INDEX, node.name) else 0
        profile = result.profiles[node.name]
        key = (profile, active, multi_gpu, result.policy_name)
        cached = self._intents.get(node.name)
        # Inputs come from immutable cache objects, replaced on every change: identity says
        # whether anything this node's intent depends on moved since the last reconcile.
        if (
            cached is not None
            and cached[0] is node
            and cached[1] is view
            and cached[2] is status
            and cached[3] == key
        ):
            return cached[4]  # type: ignore[no-any-return]
        intent = node_twin_spec(
            node.name,
            profile,
            active_perf_pods=active,
            gpu_count=view.gpu_count,
            hardware=status,
            labels=node.labels,
            catalog_gpu_range=view.catalog_gpu_range,
            running_pod_max_gpus=multi_gpu,
            policy_name=result.policy_name,
            config=self._config,
        )
        self._intents[node.name] = (node, view, status, key, intent)
        return intent

    def _twin_hardware(
        self, node: SlimNode, view: HardwareView, status: NodeHardwareStatus | None
    ) -> TwinHardware:
        cached = self._twin_hw.get(node.name)
        if cached is not None and cached[0] is view and cached[1] is status:
            return cached[2]  # type: ignore[no-any-return]
        found = twin_hardware(view, status, node.labels, self._config)
        self._twin_hw[node.name] = (view, status, found)
        return found

    def _twin_status(
        self,
        node: SlimNode,
        intent: NodeIntent,
        view: HardwareView,
        status: NodeHardwareStatus | None,
        reading: PowerReading,
        facility: FacilityReading,
    ) -> dict[str, Any]:
        twin = self.twins.get(node.name)
        return self._twin.status(
            node.name,
            intent.spec,
            intent.schedulable_class,
            self._twin_hardware(node, view, status),
            reading.nodes[node.name],
            reading.at,
            facility,
            node.labels,
            ((twin or {}).get("status") or {}),
        )

    async def _write_node(
        self,
        node: SlimNode,
        intent: NodeIntent,
        hardware_present: bool,
        status: NodeHardwareStatus | None,
        twin_fields: dict[str, Any],
    ) -> str | None:
        """Write the node's twin spec, profile label and twin status where they differ; returns
        the transition recorded, if any."""
        name = node.name
        twin = self.twins.get(name)
        reporting = agent_reporting(hardware_present, _updated_at(status), self._now)
        # Everything stored for this node was found equal to these very inputs before (cache
        # objects are replaced on every change, so identity says nothing moved): no comparison.
        verified = self._verified.get(name)
        if (
            verified is not None
            and verified[0] is twin
            and verified[1] is node
            and verified[2] is intent
            and verified[3] is twin_fields
            and verified[4] == reporting
        ):
            return None
        writes = self._writes
        cached = self._wire.get(name)
        if cached is None or cached[0] is not intent:
            cached = (intent, intent.spec.to_wire())
            self._wire[name] = cached
        spec = cached[1]
        desired = {
            "apiVersion": keys.API_VERSION,
            "kind": keys.NODE_TWIN_KIND,
            "metadata": {"name": name},
            "spec": spec,
        }
        # A field that left the spec (a governor no longer listed) is a change too, which a
        # subset comparison alone would miss; {} as observed forces the apply.
        same_spec = twin is not None and _same(spec, twin.get("spec"))
        if not same_spec and await self._writer.apply(f"{NODETWINS}/{name}", desired, observed={}):
            self._writes += 1
        profile = str(intent.spec.profile)
        if node.labels.get(keys.POWER_PROFILE_LABEL) != profile and await self._writer.merge_patch(
            f"/api/v1/nodes/{name}",
            {"metadata": {"labels": {keys.POWER_PROFILE_LABEL: profile}}},
            observed={"metadata": {"labels": dict(node.labels)}},
        ):
            self._writes += 1
        await self._write_status(name, twin, twin_fields, reporting)
        event = await self._transition(node, twin, intent.schedulable_class)
        if self._writes == writes and twin is not None:
            self._verified[name] = (twin, node, intent, twin_fields, reporting)
        return event

    async def _write_status(
        self,
        name: str,
        twin: Mapping[str, Any] | None,
        twin_fields: dict[str, Any],
        reporting: AgentReporting,
    ) -> None:
        """Apply the manager's part of the twin's status when any of it differs from what is
        stored (figures are rounded to display precision, so noise below it writes nothing)."""
        condition = {
            "type": keys.AGENT_REPORTING_CONDITION,
            "status": str(reporting.status),
            "reason": reporting.reason,
            "message": reporting.message,
            "lastTransitionTime": _transition_time(twin, reporting.status, self._now),
        }
        desired_status = {**twin_fields, "conditions": [condition]}
        observed = (twin or {}).get("status") or {}
        if all(_same(observed.get(k), v) for k, v in desired_status.items()):
            return
        desired = {
            "apiVersion": keys.API_VERSION,
            "kind": keys.NODE_TWIN_KIND,
            "metadata": {"name": name},
            "status": desired_status,
        }
        if await self._writer.apply(f"{NODETWINS}/{name}/status", desired, observed={}):
            self._writes += 1

    async def _transition(
        self, node: SlimNode, twin: Mapping[str, Any] | None, current: SchedulableClass
    ) -> str | None:
        observed = ((twin or {}).get("status") or {}).get("schedulableClass")
        previous = self._classes.get(node.name)
        if previous is None and observed in _CLASSES:
            previous = SchedulableClass(observed)
        self._classes[node.name] = current
        event = transition_event(previous, current)
        if event is None:
            return None
        TRANSITIONS.labels(event).inc()
        if event == TRANSITION_DEFERRED:
            await self._events.emit(
                ObjectRef(kind="Node", name=node.name, uid=node.uid),
                "Normal",
                DEFERRED_REASON,
                "Reconcile",
                "Planned eco, but performance pods still run: keeping performance caps "
                "(draining) until they finish.",
            )
        return event

    async def _retire_unplanned(self, planned: set[str]) -> None:
        """Strip the figures from the twin status of nodes that exist but are no longer planned
        (reserved, cordoned, or out of the selector): nothing keeps them current, so they must
        not look current. The schedulable class stays, as the spec (and the caps the agent
        enforces) stay too; the source says ``unmanaged``."""

        def work() -> Iterator[Awaitable[None]]:
            for name, twin in self.twins.items():
                if name not in planned and self.nodes.get(name) is not None:
                    desired = retired_status(twin.get("status") or {})
                    if desired is not None:
                        yield self._retire(name, desired)

        await _drain(work(), WRITE_CONCURRENCY)

    async def _retire(self, name: str, status: dict[str, Any]) -> None:
        body = {
            "apiVersion": keys.API_VERSION,
            "kind": keys.NODE_TWIN_KIND,
            "metadata": {"name": name},
            "status": status,
        }
        if await self._writer.apply(f"{NODETWINS}/{name}/status", body, observed={}):
            self._writes += 1
            log.info("twin of an unplanned node marked unmanaged", node=name)

    async def _delete_orphans(self) -> int:
        """Delete the NodeTwins of nodes that no longer exist."""
        existing = set(self.nodes.keys())
        deleted = 0
        for name in sorted(self.twins.keys()):
            if name in existing:
                continue
            if await self._writer.delete(f"{NODETWINS}/{name}"):
                deleted += 1
                self._writes += 1
            self._classes.pop(name, None)
        for cache in (
            self._intents,
            self._views,
            self._parsed,
            self._wire,
            self._twin_hw,
            self._verified,
        ):
            for name in [n for n in cache if n not in existing]:
                del cache[name]
        return deleted

    def _record(
        self, nodes: list[PlanNode], result: Plan, perf_pods: int, performing: frozenset[str]
    ) -> None:
        FAMILY_NODES.clear()
        FAMILY_PERFORMANCE.clear()
        for family, (total, performance) in family_split(nodes, performing).items():
            FAMILY_NODES.labels(family).set(total)
            FAMILY_PERFORMANCE.labels(family).set(performance)
        HP_COUNT.set(result.hp_count)
        PERFORMANCE_PODS.set(perf_pods)


async def _drain(jobs: Iterator[Awaitable[_T]], concurrency: int) -> list[_T]:
    """Await ``jobs`` with at most ``concurrency`` in flight, taking the next one only when a slot
    is free. A job that needs no I/O finishes without yielding, so a reconcile with nothing to
    write costs no more than a plain loop; one that writes thousands of nodes overlaps them."""
    results: list[_T] = []

    async def worker() -> None:
        for job in jobs:  # one shared iterator: each job is taken by exactly one worker
            results.append(await job)

    # A failing job cancels the others: the reconcile is retried as a whole.
    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())
    return results


def _transition_time(twin: Mapping[str, Any] | None, status: ConditionStatus, now: datetime) -> str:
    """The condition's lastTransitionTime: kept while its status stays the same."""
    conditions = ((twin or {}).get("status") or {}).get("conditions") or ()
    for condition in conditions:
        if (
            condition.get("type") == keys.AGENT_REPORTING_CONDITION
            and condition.get("status") == str(status)
            and condition.get("lastTransitionTime")
        ):
            return str(condition["lastTransitionTime"])
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def build(settings: ManagerSettings) -> ManagerRole:
    return ManagerRole(settings)
