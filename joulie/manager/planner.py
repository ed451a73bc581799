"""From the cluster cache to the plan: which nodes are eligible, what hardware each has, the
policy's profiles, and each node's intent (NodeTwin spec and schedulable class).

Everything here is a cache read plus a pure ``core`` call. Per node, a :class:`NodeMemo` keeps
what was last computed together with the cache objects it came from; the informers replace an
object on every change, so identity tells whether an input moved, and a steady reconcile at
5,000 nodes recomputes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import structlog

from joulie.api import keys
from joulie.api.selector import parse_selector
from joulie.api.telemetry import HardwareSummary
from joulie.core.enforcement import controls_in_force
from joulie.core.intents import NodeIntent, max_running_pod_gpus, node_intent
from joulie.core.policies import Plan, PlanNode, plan
from joulie.core.power_model import Controls, NodePowerSpec
from joulie.core.twin import TwinHardware
from joulie.hardware.catalog import Catalog
from joulie.hardware.power_spec import optimal_gpu_cap_w, power_spec
from joulie.hardware.recognition import HardwareView, hardware_view
from joulie.hardware.unknown_models import WARNED, Kind, unknown_models, unknown_parts
from joulie.kube.projections import SlimNode
from joulie.manager.cache import ClusterCache
from joulie.manager.config import intent_config, policy_inputs
from joulie.manager.hardware_facts import HardwareFacts
from joulie.manager.settings import ManagerSettings
from joulie.manager.twin_status import twin_hardware

log = structlog.get_logger("joulie.manager")

_UNCONTROLLED = Controls()
"""One object, so that a reader comparing models by identity sees an unchanged one."""


@dataclass(slots=True)
class NodeMemo:
    """What was last computed for one node, and from which cache objects."""

    node: SlimNode | None = None
    hardware: HardwareFacts | None = None
    view: HardwareView | None = None
    intent_inputs: tuple[Any, ...] = ()
    intent: NodeIntent | None = None
    twin_hardware: TwinHardware | None = None
    verified: tuple[Any, ...] = ()
    """The inputs last found to need no write (see ``NodeWriter.write``)."""
    power: tuple[NodePowerSpec, HardwareSummary] | None = None
    """The power model of the node's hardware (from ``view``) and its summary."""
    controls: tuple[NodeIntent, Controls] | None = None
    """The controls ``intent`` puts in force, and the intent they were computed from."""


_T = TypeVar("_T", HardwareView, TwinHardware)
_SHARED_MAX = 4096
_shared_values: dict[object, object] = {}


def _shared(value: _T) -> _T:
    """One instance of each distinct (frozen) hardware view or twin hardware, held by every node
    of that hardware: nodes of one model are alike, and a copy each cost 1.9 MiB at 5,000 nodes
    (1.2 for the views with their family strings, 0.65 for the twin hardware), under 0.1 MiB
    shared (tracemalloc, bench.manager's first pass). Equal values compute equally, so a node
    handed another node's instance decides as it would with its own. Bounded: a full table
    starts over."""
    found = _shared_values.get(value)
    if found is not None:
        return found  # type: ignore[return-value]
    if len(_shared_values) >= _SHARED_MAX:
        _shared_values.clear()
    _shared_values[value] = value
    return value


class Planned(NamedTuple):
    nodes: list[SlimNode]
    hardware: dict[str, HardwareFacts | None]
    views: dict[str, HardwareView]
    plan_nodes: list[PlanNode]
    perf_pods: int
    result: Plan


class Planner:
    def __init__(
        self,
        settings: ManagerSettings,
        cache: ClusterCache,
        catalog: Catalog,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self.cache = cache
        self.catalog = catalog
        self.config = intent_config(settings)
        self.inputs = policy_inputs(settings)
        self._selector = parse_selector(settings.node_selector)
        self.memos: dict[str, NodeMemo] = {}
        self._views_changed = False
        self._model_listeners: list[Callable[[str], None]] = []

    def on_model_change(self, listener: Callable[[str], None]) -> None:
        """Call ``listener`` with a node's name whenever what :meth:`power_model` answers for it
        may have changed (its hardware view, its intent, or the node itself went)."""
        self._model_listeners.append(listener)

    def _model_changed(self, name: str) -> None:
        for listener in self._model_listeners:
            listener(name)

    def managed(self, node: SlimNode) -> bool:
        """Selected by NODE_SELECTOR and not reserved: the nodes the lifecycle looks after
        (cordoned ones too: a drain cordons them)."""
        return (
            self._selector.matches(node.labels)
            and node.labels.get(self.settings.reserved_label_key) != "true"
        )

    def eligible(self, node: SlimNode) -> bool:
        return self.managed(node) and not node.unschedulable and not node.deleting

    def memo(self, name: str) -> NodeMemo:
        found = self.memos.get(name)
        if found is None:
            found = self.memos[name] = NodeMemo()
        return found

    def forget(self, keep: set[str]) -> None:
        """Drop the memos of nodes that no longer exist."""
        for name in [n for n in self.memos if n not in keep]:
            del self.memos[name]
            self._model_changed(name)

    def current(self, node: SlimNode, facts: HardwareFacts | None) -> NodeMemo:
        """The node's memo, its hardware view brought up to date with ``node`` and ``facts``
        (and everything derived from them dropped when either changed)."""
        memo = self.memo(node.name)
        if memo.view is None or memo.node is not node or memo.hardware is not facts:
            memo.view = _shared(
                hardware_view(
                    facts.status if facts is not None else None,
                    node.labels,
                    node.annotations,
                    node.allocatable,
                    self.catalog,
                    self.config.gpu_product_label_keys,
                )
            )
            # Everything derived from the node or its hardware is stale now.
            memo.node, memo.hardware = node, facts
            memo.intent = memo.twin_hardware = None
            memo.power = memo.controls = None
            self._views_changed = True
            self._model_changed(node.name)
        return memo

    def view(self, node: SlimNode, facts: HardwareFacts | None) -> HardwareView:
        view = self.current(node, facts).view
        assert view is not None
        return view

    def power_model(self, name: str) -> tuple[NodePowerSpec, Controls] | None:
        """The node's power model and the controls its last intent puts in force (none when it
        is not managed: it runs uncontrolled); None for a node the planner has not seen. Built
        once per hardware view and per intent."""
        memo = self.memos.get(name)
        if memo is None or memo.view is None:
            return None
        if memo.power is None:
            memo.power = power_spec(memo.view, self.catalog)
        spec, summary = memo.power
        intent = memo.intent
        if intent is None:
            return spec, _UNCONTROLLED
        if memo.controls is None or memo.controls[0] is not intent:
            try:
                controls = controls_in_force(intent.spec, spec, summary)
            except ValueError:  # a preset the power model does not know: judged uncontrolled
                controls = Controls()
            memo.controls = (intent, controls)
        return spec, memo.controls[1]

    def planned(self) -> Planned:
        """The plan for the eligible nodes from the caches, before anything is written (the
        reconcile writes it; `joulie plan --live` only prints it)."""
        nodes = sorted(
            (n for n in self.cache.nodes.values() if self.eligible(n)), key=lambda n: n.name
        )
        hardware = {n.name: self.cache.hardware_of(n.name) for n in nodes}
        views = {n.name: self.view(n, hardware[n.name]) for n in nodes}
        if self._views_changed:
            self._views_changed = False
            self._warn_unknown_models(views, hardware)
        plan_nodes = [
            PlanNode(n.name, views[n.name].family, n.labels.get(keys.POWER_PROFILE_LABEL))
            for n in nodes
        ]
        perf_pods = self.cache.performance_pods()
        result = plan(plan_nodes, self.inputs, perf_pods, self._clock())
        return Planned(nodes, hardware, views, plan_nodes, perf_pods, result)

    def _warn_unknown_models(
        self, views: dict[str, HardwareView], hardware: dict[str, HardwareFacts | None]
    ) -> None:
        """Once per model per process. A model not given counts only once the node's agent
        has reported (before that, its labels may simply not name one)."""
        seen: list[tuple[Kind, str | None, int]] = [
            (kind, model, 1)
            for name, view in views.items()
            for kind, model in unknown_parts(view, self.catalog)
            if model is not None or hardware[name] is not None
        ]
        for found in WARNED.first_time(unknown_models(seen)):
            log.warning(
                "hardware model not in the catalog, planned as generic parts",
                kind=found.kind,
                model=found.model,
                nodes=found.nodes,
            )

    def intent(self, memo: NodeMemo, result: Plan) -> NodeIntent:
        """The intent of the node of ``memo`` (fresh from :meth:`current`) under ``result``."""
        node, facts, view = memo.node, memo.hardware, memo.view
        assert node is not None
        assert view is not None
        multi_gpu = max_running_pod_gpus(
            (p.phase, p.deleting, p.gpus) for p in self.cache.multi_gpu_pods(node.name)
        )
        inputs = (
            result.profiles[node.name],
            self.cache.active_performance_pods(node.name),
            multi_gpu,
            result.policy_name,
            result.class_caps,
        )
        if memo.intent is not None and memo.intent_inputs == inputs:
            return memo.intent  # current() keeps it only while the node and hardware stay
        # Unnamed, so that alike nodes share one intent (see node_intent); spec_wire names it.
        memo.intent = node_intent(
            inputs[0],
            active_perf_pods=inputs[1],
            gpu_count=view.gpu_count,
            hardware=facts.status if facts is not None else None,
            labels=node.labels,
            catalog_gpu_range=view.catalog_gpu_range,
            running_pod_max_gpus=multi_gpu,
            policy_name=result.policy_name,
            config=self.config,
            class_caps=result.class_caps,
            gpu_optimal_cap_w=optimal_gpu_cap_w(view, self.catalog) if result.class_caps else None,
        )
        memo.intent_inputs = inputs
        self._model_changed(node.name)
        return memo.intent

    def twin_hardware(self, memo: NodeMemo) -> TwinHardware:
        """The twin's hardware figures of the node of ``memo`` (fresh from :meth:`current`)."""
        if memo.twin_hardware is None:
            node, facts, view = memo.node, memo.hardware, memo.view
            assert node is not None
            assert view is not None
            memo.twin_hardware = _shared(
                twin_hardware(
                    view, facts.status if facts is not None else None, node.labels, self.config
                )
            )
        return memo.twin_hardware
