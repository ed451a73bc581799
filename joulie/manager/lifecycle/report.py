"""How the lifecycle's decisions reach people: a log line and an Event on the Node when a node's
decision changes, and a ``NodeLifecycle`` condition on its NodeTwin that always shows the latest.

A pass looks at every node every LIFECYCLE_INTERVAL; repeating an unchanged decision would fill
the log and the Event store with copies. So a node is reported when its tuple, action or outcome
differs from its last report in this term, and its condition is written only when it differs
from the stored one.

The condition is applied with a field manager of its own (``joulie-lifecycle``): server-side
apply merges it beside the manager's conditions by type, and neither writer's comparison sees
the other's.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from joulie.api import keys
from joulie.api.lifecycle import Action, StateTuple
from joulie.kube.events import NORMAL, WARNING, EventRecorder, ObjectRef
from joulie.kube.ownership import OwnedObject
from joulie.kube.projections import SlimNode
from joulie.kube.writes import Writer
from joulie.manager.lifecycle import metrics
from joulie.manager.lifecycle.facts import format_time

log = structlog.get_logger("joulie.lifecycle")

CONDITION_MANAGER = "joulie-lifecycle"

_WARNINGS = frozenset({"failed", "refused", "boot_failed"})
_BOOTS = frozenset({"booting", "booted", "boot_failed"})
_REASONS = {
    "none": "NoAction",
    "held": "Held",
    "started": "Started",
    "waiting": "InFlight",
    "cancelled": "Cancelled",
    "refused": "Refused",
    "accepted": "ShutdownAccepted",
    "shut_down": "ShutDown",
    "off": "PoweredOff",
    "failed": "ShutdownFailed",
    "rolled_back": "RolledBack",
    "dry_run": "DryRun",
    "booting": "PoweringOn",
    "booted": "PoweredOn",
    "boot_failed": "PowerOnFailed",
}


@dataclass(frozen=True)
class Decision:
    tuple: StateTuple
    action: Action
    outcome: str
    """One of the keys of ``_REASONS``."""
    detail: str
    """Why (a reason with no changing figures, so repeats compare equal)."""

    @property
    def reason(self) -> str:
        return _REASONS[self.outcome]

    def message(self) -> str:
        if self.outcome in _BOOTS:
            return f"{self.tuple}: {self.detail}"
        return f"{self.tuple} -> {self.action}: {self.detail}"


class Reporter:
    def __init__(self, events: EventRecorder, writer: Writer, *, dry_run: bool) -> None:
        self._events = events
        self._writer = writer
        self._dry_run = dry_run
        self._last: dict[str, Decision] = {}

    def new_term(self) -> None:
        self._last.clear()

    def forget(self, existing: set[str]) -> None:
        for name in [n for n in self._last if n not in existing]:
            del self._last[name]

    async def report(
        self, node: SlimNode, decision: Decision, twin: OwnedObject | None, now: float
    ) -> None:
        last = self._last.get(node.name)
        self._last[node.name] = decision
        # A node the matrix leaves alone, and that was not being acted on, is not news: at
        # start-up that is most nodes.
        quiet = decision.outcome == "none" and (last is None or last.outcome == "none")
        if last != decision and not quiet:
            if decision.outcome != "none":
                metrics.outcome(decision.action, decision.outcome)
            log.info(
                "lifecycle decision",
                node=node.name,
                tuple=decision.tuple.as_list(),
                action=decision.action.value,
                outcome=decision.outcome,
                detail=decision.detail,
                dry_run=self._dry_run,
            )
            if decision.action is not Action.NONE or decision.outcome not in ("none", "held"):
                await self._events.emit(
                    ObjectRef(kind="Node", name=node.name, uid=node.uid),
                    WARNING if decision.outcome in _WARNINGS else NORMAL,
                    f"Lifecycle{decision.reason}",
                    decision.action.value,
                    decision.message(),
                )
        if twin is not None and not self._dry_run:
            await self._condition(node.name, decision, twin, now, create=not quiet)

    async def _condition(
        self, name: str, decision: Decision, twin: OwnedObject, now: float, *, create: bool
    ) -> None:
        """Bring the condition up to date; a node never acted on gets none (``create`` False),
        so a quiet cluster costs no write per node."""
        status = "True" if decision.outcome not in ("none",) else "False"
        stored = next(
            (
                c
                for c in twin.stored_status.get("conditions") or ()
                if c.get("type") == keys.LIFECYCLE_CONDITION
            ),
            None,
        )
        wanted = {
            "type": keys.LIFECYCLE_CONDITION,
            "status": status,
            "reason": decision.reason,
            "message": decision.message(),
        }
        if stored is None and not create:
            return
        if stored is not None and all(stored.get(k) == v for k, v in wanted.items()):
            return
        if (
            stored is not None
            and stored.get("status") == status
            and stored.get("lastTransitionTime")
        ):
            wanted["lastTransitionTime"] = str(stored["lastTransitionTime"])
        else:
            wanted["lastTransitionTime"] = format_time(now)
        body = {
            "apiVersion": keys.API_VERSION,
            "kind": keys.NODE_TWIN_KIND,
            "metadata": {"name": name},
            "status": {"conditions": [wanted]},
        }
        await self._writer.apply(
            f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}/{name}/status",
            body,
            observed=None,
        )
