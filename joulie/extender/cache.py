"""The extender's view of the cluster: every NodeTwin and NodeHardware, and the manager's Lease,
kept by watches (never a timed re-list), with each node's pod-independent score terms computed
when its twin or hardware changes, so a request does only the per-pod arithmetic.

A twin's status and a NodeHardware's status are parsed once, in the informer's projection, to
the few figures scoring reads; one that cannot be parsed is reported once and treated as absent
(the node scores neutral and passes the filter, as an unknown node does). The manager's Lease is
read at request time: when it is not renewed within its duration, every twin is stale at once.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import structlog
from pydantic import ValidationError

from joulie.api import keys
from joulie.api.enums import Profile
from joulie.api.nodehardware import NodeHardwareStatus
from joulie.api.nodetwin import NodeTwinStatus
from joulie.core.pod_power import NodePowerProfile, node_power_profile
from joulie.core.score_table import ScoreTable
from joulie.core.scoring import NodeTerms, node_terms
from joulie.core.twin import lease_is_current, measurement_failed
from joulie.extender.groups import GroupCache
from joulie.kube.client import KubeClient
from joulie.kube.informer import Handlers, Informer, InformerBundle
from joulie.kube.lease_watch import LeaseWatch

log = structlog.get_logger("joulie.extender")

NODETWINS = f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}"
NODEHARDWARES = f"/apis/{keys.API_VERSION}/{keys.NODE_HARDWARE_PLURAL}"
NODES = "/api/v1/nodes"
ECO_LABELLED = f"{keys.POWER_PROFILE_LABEL}={Profile.ECO.value}"
"""The label selector of the nodes whose profile label says eco: the only Nodes the extender
watches (their metadata alone), for the filter of a node without a twin class when
kube-scheduler sends names."""

_TWIN_FIELDS = (
    "schedulableClass",
    "predictedPowerHeadroomScore",
    "predictedCoolingStressScore",
    "powerMeasurement",
)
"""What scoring reads of a twin's status (the spec's list); the rest is never parsed."""


@dataclass(frozen=True, slots=True)
class TwinView:
    """What scoring reads of one NodeTwin, parsed once and kept as plain figures (a parsed
    status model cost about 1.5 KiB a twin, its figures a tenth of that)."""

    name: str
    terms: NodeTerms | None
    """The twin's terms without the node's hardware (``power`` None), ``fresh`` its own half of
    freshness (its last power reading worked); None when there is no status or it cannot be
    read."""
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class HardwareView:
    """What scoring reads of one NodeHardware: the node's power profile. The status is validated
    whole, then dropped: a parsed model cost about 11 KiB a node (57 MiB at 5,000 nodes)."""

    name: str
    power: NodePowerProfile | None
    problem: str | None = None


def _problem(exc: ValidationError) -> str:
    first = exc.errors(include_url=False)[0]
    where = ".".join(map(str, first["loc"])) or "status"
    return f"{exc.error_count()} invalid field(s); {where}: {first['msg']}"


def _node_name(raw: Mapping[str, Any]) -> str:
    # Interned: the same name is held by the score table and the twin cache too.
    return sys.intern(str(raw["metadata"]["name"]))


def twin_view(raw: Mapping[str, Any]) -> TwinView:
    name = _node_name(raw)
    status = raw.get("status") or {}
    used = {k: status[k] for k in _TWIN_FIELDS if k in status}
    if not used:
        return TwinView(name, None)
    try:
        parsed = NodeTwinStatus.model_validate(used)
    except ValidationError as exc:
        return TwinView(name, None, _problem(exc))
    measurement = parsed.power_measurement
    # The twin's own half of freshness: its last power reading worked and the node is planned
    # (the Lease is the other half, checked per request).
    source_ok = measurement is not None and not measurement_failed(measurement.source)
    return TwinView(name, node_terms(parsed, None, fresh=source_ok))


def hardware_view(raw: Mapping[str, Any]) -> HardwareView:
    name = _node_name(raw)
    status = raw.get("status")
    if not status:
        return HardwareView(name, None)
    try:
        return HardwareView(name, node_power_profile(NodeHardwareStatus.model_validate(status)))
    except ValidationError as exc:
        return HardwareView(name, None, _problem(exc))


def view_terms(twin: TwinView | None, hardware: HardwareView | None) -> NodeTerms | None:
    """A node's terms from its cached twin and hardware; None without a readable twin."""
    if twin is None or twin.terms is None:
        return None
    power = hardware.power if hardware is not None else None
    return replace(twin.terms, power=power) if power is not None else twin.terms


class ExtenderCache(InformerBundle):
    """Watches and the score table they keep current."""

    def __init__(
        self, client: KubeClient, manager_namespace: str, groups: GroupCache | None = None
    ) -> None:
        self.table = ScoreTable()
        """Every node with a readable twin status: its terms, and its class for the filter."""
        self._reported: dict[str, str] = {}
        self.twins: Informer[TwinView] = Informer(client, NODETWINS, twin_view)
        self.hardware: Informer[HardwareView] = Informer(client, NODEHARDWARES, hardware_view)
        self.manager_lease = LeaseWatch(client, manager_namespace, keys.MANAGER_LEASE)
        self.eco_labelled: Informer[str] = Informer(
            client,
            NODES,
            _node_name,
            resource="nodes",
            label_selector=ECO_LABELLED,
            metadata_only=True,
        )
        """Names of the nodes labelled eco (a watch leaving the selector deletes the name)."""
        self.informers: list[Informer[Any]] = [
            self.twins,
            self.hardware,
            self.manager_lease.informer,
            self.eco_labelled,
        ]
        self.groups = groups
        """Pods and PodGroups, for the preempt verb (None: candidates are screened by node class
        alone)."""
        if groups is not None:
            self.informers += groups.informers
        changed: Callable[[Any], None] = lambda view: self._refresh(view.name)  # noqa: E731
        for informer in (self.twins, self.hardware):
            informer.add_handlers(
                Handlers(
                    on_add=changed,
                    on_update=lambda _old, new: self._refresh(new.name),
                    on_delete=changed,
                )
            )

    def manager_alive(self, now: float) -> bool:
        """The manager's Lease is renewed within its duration (then twins can be trusted)."""
        lease = self.manager_lease.view()
        return lease is not None and lease_is_current(lease.renewed_at, lease.duration_s, now)

    def _refresh(self, node: str) -> None:
        """Recompute one node's terms from its twin and hardware as the caches hold them."""
        twin = self.twins.get(node)
        hardware = self.hardware.get(node)
        for view in (twin, hardware):
            if view is not None and view.problem is not None:
                self._report(node, view.problem)
        self.table.set(node, view_terms(twin, hardware))

    def _report(self, node: str, problem: str) -> None:
        if self._reported.get(node) != problem:
            self._reported[node] = problem
            log.warning("unreadable status; the node scores neutral", node=node, problem=problem)
