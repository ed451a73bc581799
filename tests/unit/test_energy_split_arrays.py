"""The accountant's split of every node at once (``core.energy_split_arrays``, the manager's
``energy_nodes``) gives the same accounts as splitting node by node with each node's plan, the
computation it replaced: to floating rounding, on random plans, intervals, layouts and pod
changes seen through the informers."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from joulie.api import keys
from joulie.core.energy_accounting import NodeInterval, PodUse, SplitPlan, split_plan
from joulie.core.energy_split_arrays import plan_rows, split_rows
from joulie.core.power_model import Controls
from joulie.kube.client import KubeClient
from joulie.kube.writes import Writer
from joulie.manager.cache import ClusterCache
from joulie.manager.energy import GAP_INTERVALS, EnergyAccountant, EnergyCounters
from joulie.manager.energy_groups import GroupAccounts, GroupCounters
from joulie.manager.energy_nodes import PlanTable
from joulie.manager.energy_plans import GROUP_SEPARATOR, NodeModel, node_plan
from joulie.manager.power import NodePower, PowerReading
from tests.support import builders
from tests.unit.test_energy_accounts import StoringApi, one_a40

ACCOUNTS = ["a/standard", "a/performance", "b/standard", f"b/standard{GROUP_SEPARATOR}gang"]


@dataclass
class Sums:
    """The per-node computation the arrays replaced: each node's plan applied, the parts
    added per account (savings apart by sign, per node and account)."""

    used: dict[str, float] = field(default_factory=dict)
    saved: dict[str, float] = field(default_factory=dict)
    lost: dict[str, float] = field(default_factory=dict)
    overhead: float = 0.0

    def add(self, plan: SplitPlan, interval: NodeInterval) -> None:
        split = plan.apply(interval)
        for key, joules in split.used_j.items():
            self.used[key] = self.used.get(key, 0.0) + joules
        for key, joules in split.saved_j.items():
            if joules > 0:
                self.saved[key] = self.saved.get(key, 0.0) + joules
            elif joules < 0:
                self.lost[key] = self.lost.get(key, 0.0) - joules
        self.overhead += split.overhead_j


def close(got: Mapping[str, float], want: Mapping[str, float], scale: float) -> None:
    for key in set(got) | set(want):
        assert got.get(key, 0.0) == pytest.approx(
            want.get(key, 0.0), rel=1e-12, abs=1e-12 * scale
        ), key


_uses = st.lists(
    st.builds(
        PodUse,
        account=st.sampled_from(ACCOUNTS),
        cpu_share=st.floats(0.0, 1.0),
        memory_share=st.floats(0.0, 1.0),
        gpu_share=st.floats(0.0, 1.0),
        marginal_w=st.floats(0.0, 2_000.0),
        counterfactual=st.floats(0.5, 2.0),
    ),
    max_size=8,
)
_plans = st.builds(split_plan, _uses, st.booleans())
_nodes = st.lists(
    st.tuples(
        _plans,
        st.floats(0.0, 1e7),  # energy
        st.floats(0.0, 600.0),  # seconds
        st.floats(0.0, 3_000.0),  # idle watts
        st.booleans(),  # counted
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(nodes=_nodes)
def test_the_arrays_split_as_each_node_s_plan_does(nodes: list[Any]) -> None:
    want = Sums()
    for plan, energy, seconds, idle_w, counted in nodes:
        if counted:
            want.add(plan, NodeInterval(energy, seconds, idle_w))
    accounts: dict[str, int] = {}
    rows = plan_rows([(i, node[0]) for i, node in enumerate(nodes)], accounts)
    counted = np.array([n[4] for n in nodes], dtype=np.bool_)
    figures = np.array([n[1:4] for n in nodes], dtype=np.float64).reshape(-1, 3)
    got = split_rows(
        np.where(counted, figures[:, 0], 0.0),
        np.where(counted, figures[:, 1], 0.0),
        np.where(counted, figures[:, 2], 0.0),
        rows,
        len(accounts),
    )
    measured = float(np.sum(np.where(counted, figures[:, 0], 0.0)))
    scale = max(1.0, measured)
    positive = {
        kind: {k: float(values[i]) for k, i in accounts.items() if values[i] > 0}
        for kind, values in (("used", got.used), ("saved", got.saved), ("lost", got.lost))
    }
    close(positive["used"], {k: v for k, v in want.used.items() if v > 0}, scale)
    close(positive["saved"], want.saved, scale)
    close(positive["lost"], want.lost, scale)
    assert got.overhead_j == pytest.approx(want.overhead, rel=1e-12, abs=1e-12 * scale)
    # Conservation: the accounts and the overhead add up to what was measured.
    assert float(np.sum(got.used)) + got.overhead_j == pytest.approx(measured, abs=1e-12 * scale)


_steps = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 11), _plans),
        st.tuples(st.just("layout"), st.permutations(range(12)), st.integers(0, 12)),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_steps, compact_at=st.integers(0, 8))
def test_the_plan_table_holds_the_latest_plan_of_each_slot(
    steps: list[Any], compact_at: int
) -> None:
    # Slots are named nodes: a layout keeps some (reordered), drops the rest and adds new ones.
    table = PlanTable(compact_at)
    names: list[str] = []
    plans: dict[str, SplitPlan] = {}
    fresh = 0
    for step in steps:
        if step[0] == "put":
            if not names:
                continue
            name = names[step[1] % len(names)]
            table.put(names.index(name), step[2])
            plans[name] = step[2]
        else:
            order, size = step[1], step[2]
            pool = names + [f"new-{fresh + i}" for i in range(12)]
            fresh += 12
            layout = [pool[i] for i in order[:size] if i < len(pool)]
            old = {n: i for i, n in enumerate(names)}
            old_of_new = np.array([old.get(n, -1) for n in layout], dtype=np.intp)
            new_of_old = np.full(len(names), -1, dtype=np.intp)
            kept = np.flatnonzero(old_of_new >= 0)
            new_of_old[old_of_new[kept]] = kept
            table.relayout(old_of_new, new_of_old)
            names = layout
            plans = {n: p for n, p in plans.items() if n in names}
    energy = np.linspace(1_000.0, 2_000.0, len(names))
    seconds = np.full(len(names), 60.0)
    idle_w = np.full(len(names), 10.0)
    got = split_rows(energy, seconds, idle_w, table.rows(), len(table.keys))
    want = Sums()
    for i, name in enumerate(names):
        want.add(plans.get(name, SplitPlan(())), NodeInterval(energy[i], seconds[i], idle_w[i]))
    used = {k: float(got.used[i]) for i, k in enumerate(table.keys) if got.used[i] > 0}
    close(used, {k: v for k, v in want.used.items() if v > 0}, float(np.sum(energy)) + 1.0)
    assert got.overhead_j == pytest.approx(want.overhead, rel=1e-12, abs=1e-6)


# --- the accountant against the node-by-node computation, through the informers -------------

NODES = ["n0", "n1", "n2"]
INTERVAL = 60.0


class Cluster:
    def __init__(self) -> None:
        self.cache = ClusterCache(cast(KubeClient, StoringApi()), "joulie-manager", lambda: None)
        self.rv = 0
        for name in NODES:
            offered = {"cpu": "8", "memory": "16Gi"}
            if name == "n2":
                offered["nvidia.com/gpu"] = "1"
            self._apply("nodes", "ADDED", builders.node(name, rv=self._rv(), allocatable=offered))

    def _rv(self) -> int:
        self.rv += 1
        return self.rv

    def _apply(self, informer: str, kind: str, body: dict[str, Any]) -> None:
        getattr(self.cache, informer)._apply({"type": kind, "object": body})

    def pod(self, kind: str, name: str, node: str, nominated: str, group: str, cpu: int) -> None:
        namespace, workload_class = group.split("/")
        self._apply(
            "pods",
            kind,
            builders.pod(
                name,
                namespace=namespace,
                node_name=node or None,
                phase="Running" if node else "Pending",
                rv=self._rv(),
                uid=f"uid-{name}",
                annotations={keys.WORKLOAD_CLASS_ANNOTATION: workload_class},
                containers=[builders.container({"cpu": f"{cpu}m", "memory": "1Gi"})],
                status={"nominatedNodeName": nominated} if nominated else None,
            ),
        )


def reference(models: Any, readings: list[Any], max_gap: float) -> Sums:
    """The accountant as it was: per node and reading, the plan from the caches, applied."""
    sums = Sums()
    last: dict[str, tuple[float, float]] = {}
    idle: dict[str, float] = {}
    lowest: dict[str, float] = {}
    for reading, snapshot in readings:
        for table in (last, idle, lowest):
            for name in [n for n in table if n not in reading.nodes]:
                del table[name]
        for name, power in reading.nodes.items():
            watts = power.watts
            if watts is None or not math.isfinite(watts) or watts < 0:
                continue
            previous = last.get(name)
            if previous is not None and previous[0] == reading.at:
                continue
            last[name] = (reading.at, watts)
            pods, node, facts = snapshot[name]
            lowest[name] = min(lowest.get(name, watts), watts)
            if not pods:
                idle[name] = min(idle.get(name, watts), watts)
            if previous is None:
                continue
            seconds = reading.at - previous[0]
            if not 0 < seconds <= max_gap:
                continue
            planned = node_plan(name, node, facts, models(name), pods)
            idle_w = idle.get(name)
            if idle_w is None:
                idle_w = planned.modelled_idle_w
            if idle_w is None:
                idle_w = lowest[name]
            energy = (previous[1] + watts) / 2 * seconds
            sums.add(planned.plan, NodeInterval(energy, seconds, idle_w))
    return sums


_pod_events = st.lists(
    st.tuples(
        st.sampled_from(["ADDED", "MODIFIED", "DELETED"]),
        st.integers(0, 5),  # pod
        st.sampled_from(["", *NODES]),  # bound to
        st.sampled_from(["", *NODES]),  # nominated to
        st.sampled_from(["a/standard", "a/performance", "b/standard"]),
        st.integers(0, 4_000),  # CPU millis
    ),
    max_size=4,
)
_readings = st.lists(
    st.tuples(
        _pod_events,
        st.sampled_from([0.0, INTERVAL, INTERVAL / 2, GAP_INTERVALS * INTERVAL + 1]),  # step
        st.lists(st.one_of(st.none(), st.floats(0.0, 2_000.0)), min_size=3, max_size=3),
        st.sets(st.sampled_from(NODES), min_size=1),  # nodes read
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(readings=_readings, modelled=st.booleans(), followed=st.booleans())
def test_the_accountant_books_what_the_node_by_node_split_does(
    readings: list[Any], modelled: bool, followed: bool
) -> None:
    cluster = Cluster()
    spec = one_a40()
    capped = Controls(gpu_cap_w=200.0)
    model: dict[str, NodeModel] = {"n2": (spec, capped)} if modelled else {}
    listeners: list[Any] = []
    registry = CollectorRegistry()
    accountant = EnergyAccountant(
        cluster.cache,
        Writer(cast(KubeClient, StoringApi()), "joulie-manager"),
        "joulie-system",
        INTERVAL,
        500,
        EnergyCounters.registered(registry),
        clock=lambda: 0.0,
        models=model.get,
        groups=GroupAccounts(200, GroupCounters.registered(registry)),
    )
    if followed:
        accountant.follow_models(listeners.append)
    accountant.new_term()
    at = 1_000.0
    seen: list[Any] = []
    for events, step, watts, read in readings:
        for kind, pod, node, nominated, group, cpu in events:
            cluster.pod(kind, f"p{pod}", node, nominated, group, cpu)
        at += step
        names = [n for n in NODES if n in read]
        reading = PowerReading(at, {n: NodePower(watts[NODES.index(n)], "http") for n in names})
        snapshot = {
            n: (
                cluster.cache.workload_pods(n),
                cluster.cache.nodes.get(n),
                cluster.cache.hardware_of(n),
            )
            for n in names
        }
        seen.append((reading, snapshot))
        asyncio.run(accountant.record(reading))
    want = reference(model.get, seen, GAP_INTERVALS * INTERVAL)
    total = want.overhead + sum(want.used.values())
    scale = max(1.0, total)

    def counter(name: str, key: str) -> float:
        namespace, workload_class = key.split(GROUP_SEPARATOR)[0].split("/")
        labels = {"namespace": namespace, "class": workload_class}
        return registry.get_sample_value(name, labels) or 0.0

    for kind, table in (("", want.used), ("saved_", want.saved), ("lost_", want.lost)):
        for key, joules in table.items():
            got = counter(f"joulie_workload_energy_{kind}joules_total", key)
            assert got == pytest.approx(joules, rel=1e-12, abs=1e-12 * scale), (kind, key)
    overhead = registry.get_sample_value("joulie_node_overhead_energy_joules_total") or 0.0
    assert overhead == pytest.approx(max(0.0, want.overhead), rel=1e-12, abs=1e-9 * scale)
