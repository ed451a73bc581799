"""Writes one node's decisions: its NodeTwin spec and ``joulie.io/simulated`` label, its
power-profile label, the manager's part of its twin status (figures, schedulable class, the
AgentReporting condition), and the Event of a deferred downgrade.

The twin's ``joulie.io/simulated`` label says whether KWOK fakes the node ("true") or not
("false"). Admission reads it: the pool-mode agent may write the status of a twin labelled
"true" only. Only the manager may change a twin's metadata, and it owns the label on every twin,
so a label changed by anyone else is put back at the next reconcile.

Each write compares only what this manager owns (``joulie.kube.ownership``), so the agent's
``controlStatus``, another controller's condition or a field someone else added never cause a
write. Every write goes through the role's fenced ``Writer``: once leadership is gone, nothing
more is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from joulie.api import keys
from joulie.api.enums import ConditionStatus, SchedulableClass
from joulie.core.intents import (
    TRANSITION_DEFERRED,
    AgentReporting,
    NodeIntent,
    agent_reporting,
    transition_event,
)
from joulie.core.twin import TwinFigures
from joulie.kube.events import EventRecorder, ObjectRef
from joulie.kube.ownership import OwnedObject
from joulie.kube.projections import SlimNode
from joulie.kube.writes import Writer
from joulie.manager.cache import NODETWINS, simulated_node
from joulie.manager.hardware_facts import HardwareFacts
from joulie.manager.metrics import TRANSITIONS
from joulie.manager.planner import NodeMemo

DEFERRED_REASON = "DowngradeDeferred"
NODES = "/api/v1/nodes"
MAP_LISTS = {"conditions": ("type",)}
"""NodeTwin's lists that server-side apply merges by key (the CRD's list-map-keys)."""

_CLASSES = frozenset(c.value for c in SchedulableClass)


class NodeWriter:
    def __init__(self, writer: Writer, events: EventRecorder) -> None:
        self._writer = writer
        self._events = events
        self._classes: dict[str, SchedulableClass] = {}
        """The schedulable class last written per node, this term: the informer copy may lag our
        own write, and a transition is recorded once, not again at the next reconcile."""
        self.writes = 0
        """Requests sent (for the reconcile's log line)."""

    def new_term(self) -> None:
        """A new leadership term starts from what the cluster shows, not from what this process
        remembered of an earlier term (another leader may have written since)."""
        self._classes.clear()
        self._writer.reset()

    async def settle(self) -> None:
        """Wait for the writes already sent (see ``Writer.settle``), within the 5 s the leader
        elector gives its work to stop before it would rather let the Lease expire."""
        await self._writer.settle(timeout=4.0)

    def forget(self, name: str) -> None:
        self._classes.pop(name, None)
        self._writer.forget(f"{NODETWINS}/{name}")
        self._writer.forget(f"{NODES}/{name}")

    def retain(self, existing: set[str]) -> None:
        """Forget everything about nodes that no longer exist, so memory follows the cluster."""
        names = {_node_of(path) for path in self._writer.remembered()} | set(self._classes)
        for name in names - existing:
            self.forget(name)

    @staticmethod
    def reporting(facts: HardwareFacts | None, now: datetime) -> AgentReporting:
        return agent_reporting(
            facts is not None,
            facts is not None and facts.status is not None,
            facts.last_write if facts is not None else None,
            now,
        )

    def verified(
        self,
        memo: NodeMemo,
        twin: OwnedObject | None,
        node: SlimNode,
        intent: NodeIntent,
        twin_figures: TwinFigures,
        reporting: AgentReporting,
    ) -> bool:
        """Everything stored for this node was found equal to these very inputs before (cache
        objects are replaced on every change, so identity says nothing moved): no comparison."""
        v = memo.verified
        return (
            bool(v)
            and v[0] is twin
            and v[1] is node
            and v[2] is intent
            and v[3] is twin_figures
            and v[4] == reporting
        )

    async def write(
        self,
        memo: NodeMemo,
        node: SlimNode,
        intent: NodeIntent,
        spec: dict[str, Any],
        twin: OwnedObject | None,
        twin_figures: TwinFigures,
        reporting: AgentReporting,
        now: datetime,
    ) -> str | None:
        """Write whatever of this node differs; returns the transition recorded, if any."""
        name = node.name
        before = self.writes
        desired = {
            "apiVersion": keys.API_VERSION,
            "kind": keys.NODE_TWIN_KIND,
            "metadata": {
                "name": name,
                "labels": {keys.SIMULATED_LABEL: "true" if simulated_node(node) else "false"},
            },
            "spec": spec,
        }
        if await self._writer.apply(
            f"{NODETWINS}/{name}", desired, observed=twin.main if twin else None
        ):
            self.writes += 1
        profile = str(intent.spec.profile)
        if node.labels.get(keys.POWER_PROFILE_LABEL) != profile and await self._writer.merge_patch(
            f"{NODES}/{name}",
            {"metadata": {"labels": {keys.POWER_PROFILE_LABEL: profile}}},
            observed={"metadata": {"labels": dict(node.labels)}},
        ):
            self.writes += 1
        await self._write_status(name, twin, twin_figures, reporting, now)
        event = await self._transition(node, twin, intent.schedulable_class)
        if self.writes == before and twin is not None:
            memo.verified = (twin, node, intent, twin_figures, _shared_reporting(reporting))
        return event

    async def _write_status(
        self,
        name: str,
        twin: OwnedObject | None,
        twin_figures: TwinFigures,
        reporting: AgentReporting,
        now: datetime,
    ) -> None:
        """Apply the manager's part of the twin's status (figures are rounded to display
        precision, so noise below it writes nothing)."""
        stored = twin.stored_status if twin is not None else {}
        condition = {
            "type": keys.AGENT_REPORTING_CONDITION,
            "status": str(reporting.status),
            "reason": reporting.reason,
            "message": reporting.message,
            "lastTransitionTime": _transition_time(stored, reporting.status, now),
        }
        desired = {
            "apiVersion": keys.API_VERSION,
            "kind": keys.NODE_TWIN_KIND,
            "metadata": {"name": name},
            "status": {**twin_figures.wire(), "conditions": [condition]},
        }
        if await self._writer.apply(
            f"{NODETWINS}/{name}/status", desired, observed=twin.status if twin else None
        ):
            self.writes += 1

    async def retire(self, twin: OwnedObject, status: dict[str, Any]) -> bool:
        """Apply ``status`` (see ``core.twin.retired_status``) as the manager's whole part of an
        unplanned node's twin status."""
        body = {
            "apiVersion": keys.API_VERSION,
            "kind": keys.NODE_TWIN_KIND,
            "metadata": {"name": twin.name},
            "status": status,
        }
        if await self._writer.apply(f"{NODETWINS}/{twin.name}/status", body, observed=twin.status):
            self.writes += 1
            return True
        return False

    async def delete(self, name: str) -> bool:
        self.forget(name)
        if await self._writer.delete(f"{NODETWINS}/{name}"):
            self.writes += 1
            return True
        return False

    async def _transition(
        self, node: SlimNode, twin: OwnedObject | None, current: SchedulableClass
    ) -> str | None:
        observed = (twin.stored_status if twin is not None else {}).get("schedulableClass")
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


_REPORTINGS_MAX = 1024
_reportings: dict[AgentReporting, AgentReporting] = {}


def _shared_reporting(reporting: AgentReporting) -> AgentReporting:
    """One instance of each distinct condition kept in the nodes' memos: a stale agent's message
    names the second of its last write, which thousands of nodes share after one publication
    round, and a copy each took 0.79 MiB at 5,000 nodes (tracemalloc, bench.manager). Only what
    a memo keeps goes through here, not every reconcile's check. Bounded: a full table starts
    over."""
    found = _reportings.get(reporting)
    if found is not None:
        return found
    if len(_reportings) >= _REPORTINGS_MAX:
        _reportings.clear()
    _reportings[reporting] = reporting
    return reporting


def _node_of(path: str) -> str:
    """The node a remembered path belongs to: ``.../nodetwins/<name>[/status]`` or
    ``/api/v1/nodes/<name>``."""
    return path.removesuffix("/status").rsplit("/", 1)[-1]


def _transition_time(stored: Mapping[str, Any], status: ConditionStatus, now: datetime) -> str:
    """The condition's lastTransitionTime: kept while its status stays the same."""
    for condition in stored.get("conditions") or ():
        if (
            condition.get("type") == keys.AGENT_REPORTING_CONDITION
            and condition.get("status") == str(status)
            and condition.get("lastTransitionTime")
        ):
            return str(condition["lastTransitionTime"])
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")
