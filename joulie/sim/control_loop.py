"""The controller manager and the node agents of the standalone engine, one reconcile at a time.

Each reconcile does what the live manager does with the same ``core`` calls: the policy's plan
(``core.policies.plan``) from the current power-profile labels and the performance pods running or
pending; per node the downgrade guard, caps and governor presets (``core.intents.node_intent``);
the control request the agent sends for that spec (``core.enforcement.control_request``),
applied to the virtual node as the simulator's control endpoint applies it; and the twin of
every node whose power moved (``core.twin``), handed to the extender's score table through
``core.scoring.terms_of``, exactly as the extender reads a twin's status.

Only what changed is recomputed: the plan when the performance-pod count or a label changed, a
node's intent when its planned profile or pods changed, a twin while its power changed within
the trend window. The trend history is the manager's ``PowerHistory``; a node that was quiet is
given the readings a reconcile would have taken of it (its unchanged power), so its trend equals
what the live manager computes from one reading per reconcile.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from joulie.api.enums import Profile, SchedulableClass
from joulie.api.nodetwin import NodeTwinSpec
from joulie.api.telemetry import ControlRequest
from joulie.core.enforcement import apply_control, control_request
from joulie.core.intents import IntentConfig, NodeIntent, node_intent
from joulie.core.policies import (
    ClassCaps,
    PlanNode,
    PolicyInputs,
    Reads,
    plan,
    policy_of,
    values_of,
)
from joulie.core.power_model import Controls
from joulie.core.score_table import ScoreTable
from joulie.core.scoring import filter_reason, terms_of
from joulie.core.twin import (
    PowerHistory,
    TwinInput,
    TwinOutput,
    cap_percentages,
    compute,
    display_value,
    status_fields,
)
from joulie.sim.cluster import BoardRule, Cluster
from joulie.sim.fleet import Fleet
from joulie.sim.placement import Scheduler

__all__ = ["POWER_SOURCE", "ControlLoop"]

POWER_SOURCE = "simulator"
"""powerMeasurement.source of the simulated twins (a working source: the twins are fresh)."""


@dataclass(slots=True)
class _NodeState:
    label: Profile | None = None
    """The node's joulie.io/power-profile label (NodeTwin.spec.profile last written)."""
    planned: Profile | None = None
    intent_inputs: tuple[object, ...] = ()
    spec: NodeTwinSpec | None = None
    schedulable_class: SchedulableClass | None = None
    last_w: float = 0.0
    """Power at the last reading."""
    cap_pct: tuple[float | None, float | None] = (None, None)
    cap_pct_of: NodeTwinSpec | None = None
    """The spec ``cap_pct`` was computed from."""
    changed_at: float | None = None
    """When the power last moved (None: not within the trend window)."""
    trend: float | None = None
    """The power trend the score table holds for the node (None: it holds nothing yet)."""
    terms_inputs: tuple[object, ...] = ()
    """The spec, class and power the table's terms were computed from."""


class ControlLoop:
    def __init__(
        self,
        fleet: Fleet,
        cluster: Cluster,
        scheduler: Scheduler,
        table: ScoreTable,
        inputs: PolicyInputs,
        config: IntentConfig,
        trend_window_s: float,
    ) -> None:
        self.fleet = fleet
        self.cluster = cluster
        self.scheduler = scheduler
        self.table = table
        self.inputs = inputs
        self.config = config
        self.interval_s = inputs.reconcile_interval_s
        self.history = PowerHistory(window_s=trend_window_s)
        self.nodes = [_NodeState(last_w=float(w)) for w in cluster.node_w]
        self._plan_nodes: list[PlanNode] | None = None
        self._policy = policy_of(inputs.policy)
        self._values = values_of(inputs.params)
        self._planned_for: Hashable = None
        self._policy_name = ""
        self._class_caps: ClassCaps | None = None
        self._recent: set[int] = set()
        """Nodes whose power moved within the trend window (their twins move every reconcile)."""
        self._reconciled = False
        self._first_reconcile = 0.0
        """When the manager started: it has no readings from before."""
        self.governor_writes = config.governor_control.value != "off"
        self.eco = np.zeros(len(fleet), dtype=np.bool_)
        """Nodes whose class is eco (not draining): no performance pod may run there."""
        self.classes_changed = False
        """Set when a node's class changed (the engine counts classes again and clears it)."""
        self.plans = 0
        """Plans computed (the policy is only asked again when its inputs moved)."""
        self._intents: dict[tuple[object, ...], tuple[NodeIntent, ControlRequest]] = {}
        """(group, intent inputs, policy) -> the intent and the control request that puts it
        in force. A few entries per group: profiles x performance pods running x the largest
        pod's GPUs."""
        self._controls_after: dict[tuple[int, Controls, int], Controls] = {}
        """(group, controls before, id of a request held in ``_intents``) -> controls after."""
        self._rules: dict[tuple[int, int, Controls], BoardRule] = {}
        """(group, id of a spec held in ``_intents``, the node's controls) -> its per-board
        rule."""

    # --- the plan -----------------------------------------------------------------------

    def _demand(self, perf_pods: int) -> Hashable:
        """What the performance-pod count comes to for the policy, as it declares
        (``queue_aware_v1``: the node count it asks for); None for a policy that does not read
        the demand."""
        if Reads.DEMAND not in self._policy.reads or self._policy.demand is None:
            return None
        return self._policy.demand(len(self.fleet), perf_pods, self._values)

    def _plan(self, perf_pods: int, t: float) -> set[int]:
        """Ask the policy again if what it reads moved (the demand as it counts it, or the
        clock); the nodes whose planned profile changed. The labels it also reads only move
        by its own plan here."""
        demand = self._demand(perf_pods)
        if (
            self._plan_nodes is not None
            and Reads.CLOCK not in self._policy.reads
            and demand == self._planned_for
        ):
            return set()
        if self._plan_nodes is None:
            self._plan_nodes = [
                PlanNode(name, self.fleet.family(i), self.nodes[i].label)
                for i, name in enumerate(self.fleet.names)
            ]
        result = plan(self._plan_nodes, self.inputs, perf_pods, t)
        self.plans += 1
        self._planned_for = demand
        self._policy_name = result.policy_name
        self._class_caps = result.class_caps
        moved: set[int] = set()
        for i, name in enumerate(self.fleet.names):
            profile = result.profiles[name]
            if self.nodes[i].planned != profile:
                self.nodes[i].planned = profile
                moved.add(i)
        return moved

    # --- one node -----------------------------------------------------------------------

    def _intent(self, node: int, t: float) -> bool:
        """Bring the node's intent, controls and class up to date; True when its class or
        spec changed (its twin must be recomputed)."""
        state = self.nodes[node]
        cluster = self.cluster
        planned = state.planned
        assert planned is not None
        inputs = (planned, int(cluster.performance_pods[node]), cluster.max_pod_gpus(node))
        if inputs == state.intent_inputs:
            return False
        state.intent_inputs = inputs
        group = int(self.fleet.group_of[node])
        model = self.fleet.groups[group]
        name = self.fleet.names[node]
        # The nodes of a group are alike: what the same inputs give is worked out once per
        # group (its spec unnamed: nothing here reads a node name from it).
        key = (group, inputs, self._policy_name, self._class_caps)
        found = self._intents.get(key)
        if found is None:
            intent = node_intent(
                planned,
                active_perf_pods=inputs[1],
                gpu_count=model.view.gpu_count,
                hardware=model.hardware,
                labels=model.labels,
                catalog_gpu_range=model.view.catalog_gpu_range,
                running_pod_max_gpus=inputs[2],
                policy_name=self._policy_name,
                config=self.config,
                class_caps=self._class_caps,
                gpu_optimal_cap_w=model.gpu_optimal_cap_w if self._class_caps else None,
            )
            request = control_request(
                intent.spec, model.summary, governor_writes=self.governor_writes
            )
            found = self._intents[key] = (intent, request)
        intent, request = found
        changed = False
        if intent.spec is not state.spec and intent.spec != state.spec:
            state.spec = intent.spec
            before = cluster.controls[node]
            after_key = (group, before, id(request))
            controls = self._controls_after.get(after_key)
            if controls is None:
                controls, _ = apply_control(name, model.power, before, request)
                self._controls_after[after_key] = controls
            cluster.set_controls(node, controls, t)
            cluster.set_board_rule(node, self._board_rule(group, intent.spec, controls), t)
            if state.label != intent.spec.profile:
                state.label = intent.spec.profile
                self._plan_nodes = None  # the plan reads the labels
            changed = True
        if intent.schedulable_class != state.schedulable_class:
            state.schedulable_class = intent.schedulable_class
            self.classes_changed = True
            refused = filter_reason(True, intent.schedulable_class, None) is not None
            self.scheduler.kept_off[node] = refused
            self.eco[node] = intent.schedulable_class is SchedulableClass.ECO
            changed = True
        return changed

    def _board_rule(self, group: int, spec: NodeTwinSpec, controls: Controls) -> BoardRule | None:
        """The per-board caps ``spec`` sets by class (``class_caps``) on the group's boards;
        None without per-class caps."""
        gpu = self.fleet.groups[group].power.gpu
        if gpu is None or spec.gpu is None or spec.gpu.class_caps is None:
            return None
        key = (group, id(spec), controls)  # specs live on in ``_intents``: ids stay theirs
        rule = self._rules.get(key)
        if rule is None:
            rule = self._rules[key] = BoardRule(spec, gpu, controls)
        return rule

    def _twin_output(self, node: int) -> TwinOutput:
        state = self.nodes[node]
        model = self.fleet.model(node)
        spec = state.spec
        assert spec is not None
        assert state.schedulable_class is not None
        if state.cap_pct_of is not spec:
            state.cap_pct = cap_percentages(spec, model.twin_hardware)
            state.cap_pct_of = spec
        return compute(
            TwinInput(
                hardware=model.twin_hardware,
                schedulable_class=state.schedulable_class,
                cpu_cap_pct=state.cap_pct[0],
                gpu_cap_pct=state.cap_pct[1],
                measured_power_w=state.last_w,
                source=POWER_SOURCE,
                power_trend_w_per_min=self.history.trend(self.fleet.names[node]),
            )
        )

    def twin_status(self, node: int) -> dict[str, object]:
        """The twin's part of the node's NodeTwin.status, as the manager would write it now
        (wire form, display precision)."""
        return status_fields(self._twin_output(node))

    def _twin(self, node: int) -> bool:
        """Hand the node's twin to the score table with the figures at the precision the
        extender reads them from NodeTwin.status; False when they did not change.

        Between two moves of a node's power only its trend moves, and the twin passes the trend
        through untouched (no other figure depends on it), so while the spec, class and power
        are those of the last computation only the trend is read again."""
        state = self.nodes[node]
        name = self.fleet.names[node]
        inputs = (state.spec, state.schedulable_class, state.last_w)
        if state.trend is not None and state.terms_inputs == inputs:
            trend = display_value(self.history.trend(name), "trend")
            if trend == state.trend:
                return False
            state.trend = trend
            self.table.set_trend(name, trend)
            return True
        out = self._twin_output(node)
        terms = terms_of(
            schedulable_class=out.schedulable_class,
            measured_w=display_value(out.measured_power_w, "watts"),
            capped_w=display_value(out.node_capped_power_w, "watts"),
            trend_w_per_min=display_value(out.power_trend_w_per_min, "trend"),
            headroom_score=display_value(out.power_headroom, "score"),
            cooling_stress=display_value(out.cooling_stress, "score"),
            has_measurement=True,
            power=self.fleet.model(node).power_profile,
            fresh=True,
        )
        state.terms_inputs = inputs
        state.trend = terms.trend_w_per_min
        self.table.set(name, terms)
        return True

    def _read_power(self, node: int, t: float) -> None:
        """One reconcile's reading of a node whose power moved since the last one."""
        state = self.nodes[node]
        name = self.fleet.names[node]
        watts = float(self.cluster.node_w[node])
        if state.changed_at is None:
            # Quiet until now: the readings the live manager took meanwhile all said last_w.
            steps = int(self.history.window_s // self.interval_s)
            for k in range(steps, 0, -1):
                if t - k * self.interval_s >= self._first_reconcile:
                    self.history.record(name, t - k * self.interval_s, state.last_w)
        state.changed_at = t
        state.last_w = watts
        self._recent.add(node)
        self.history.record(name, t, watts)

    # --- the reconcile ------------------------------------------------------------------

    def reconcile(self, t: float, perf_pods: int) -> None:
        cluster = self.cluster
        if not self._reconciled:
            self._first_reconcile = t
        dirty = self._plan(perf_pods, t) | cluster.pods_changed
        cluster.pods_changed.clear()
        twins: set[int] = set()
        for node in sorted(dirty):
            if self._intent(node, t):
                twins.add(node)
        for node in sorted(cluster.power_changed):
            self._read_power(node, t)
        cluster.power_changed.clear()
        for node in sorted(self._recent):
            state = self.nodes[node]
            assert state.changed_at is not None
            if state.changed_at < t:
                self.history.record(self.fleet.names[node], t, state.last_w)
            twins.add(node)
            if t - state.changed_at >= self.history.window_s:
                # Every reading in the window now says last_w: the trend is 0 until it moves.
                state.changed_at = None
                self._recent.discard(node)
        if not self._reconciled:
            twins = set(range(len(self.fleet)))
            self._reconciled = True
        for node in sorted(twins):
            self._twin(node)

    def planned(self) -> dict[str, Profile | None]:
        """Each node's profile in the last plan."""
        return {name: self.nodes[i].planned for i, name in enumerate(self.fleet.names)}

    def class_of(self, node: int) -> SchedulableClass | None:
        return self.nodes[node].schedulable_class
