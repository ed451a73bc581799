"""The extender's decisions over its cache: the glue between kube-scheduler's requests and
``joulie.core.scoring``.

* Filter: a performance pod is kept off nodes whose twin says eco or draining; where there is
  no twin class, the ``joulie.io/power-profile`` label decides: from the Node objects when
  kube-scheduler sends them, else (names only, the shipped configuration) from the extender's
  own watch of the nodes labelled eco. Standard pods pass everywhere without a look at the
  nodes.
* Prioritize: the score table's 0..10 priorities for the pod; every node neutral (5) while the
  manager's Lease is not current, since then no twin can be trusted.
* Preempt: kube-scheduler's candidates screened by :mod:`joulie.core.preemption_candidates`: for
  a performance pod none on a node the filter refuses, and none that breaks an all-or-nothing
  PodGroup in part while another candidate does not.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from joulie.api import keys
from joulie.api.enums import Profile
from joulie.core.pod_power import is_performance_pod, pod_demand
from joulie.core.preemption_candidates import NO_GROUPS, Candidate, screen_candidates
from joulie.core.scoring import NEUTRAL_PRIORITY, filter_reason
from joulie.extender.cache import ExtenderCache
from joulie.extender.wire import Scores


class CachePlacement:
    def __init__(self, cache: ExtenderCache, clock: Callable[[], float] = time.time) -> None:
        self.cache = cache
        self._clock = clock

    def ready(self) -> bool:
        return self.cache.synced

    def filter(
        self,
        pod: Mapping[str, Any],
        nodes: Sequence[str],
        labels: Mapping[str, Mapping[str, str]] | None,
    ) -> list[str | None]:
        if not is_performance_pod(pod):
            return [None] * len(nodes)
        table = self.cache.table
        reasons = table.filter_reasons(nodes)
        # A node without a twin class goes by its profile label. Only those nodes are looked at,
        # none where every node has a twin: a Python loop over every name, with the manager's
        # eco label on most of them, had been one of three costs that took a performance pod's
        # filter on 5,000 new names to 3.4-4.0 ms (2.6-3.1 without them, bench.prioritize
        # --verb filter).
        if labels:
            # Whole Node objects: the label as sent.
            for i in table.unclassified(nodes):
                label = labels.get(nodes[i], {}).get(keys.POWER_PROFILE_LABEL)
                reasons[i] = filter_reason(True, None, label)
            return reasons
        eco = self.cache.eco_labelled
        if len(eco):
            # Names only: the nodes labelled eco are the extender's own watch.
            for i in table.unclassified(nodes):
                if nodes[i] in eco:
                    reasons[i] = filter_reason(True, None, Profile.ECO.value)
        return reasons

    def prioritize(self, pod: Mapping[str, Any], nodes: Sequence[str]) -> Scores:
        if not self.cache.manager_alive(self._clock()):
            return [NEUTRAL_PRIORITY] * len(nodes)
        return self.cache.table.priority_array(pod_demand(pod), nodes)

    def names_distinct(self, nodes: tuple[Any, ...]) -> bool:
        return self.cache.table.checked_rows(nodes) is not None

    def preempt(self, pod: Mapping[str, Any], candidates: Sequence[Candidate]) -> list[Candidate]:
        nodes = [c.node for c in candidates]
        refused = dict(zip(nodes, self.cache.table.filter_reasons(nodes), strict=True))
        groups = self.cache.groups
        membership = (
            groups.membership(uid for c in candidates for uid in c.victims)
            if groups is not None
            else NO_GROUPS
        )
        return screen_candidates(
            candidates,
            performance_pod=is_performance_pod(pod),
            kept_off=lambda node: refused[node] is not None,
            groups=membership,
        )

    def explain(self, pod: Mapping[str, Any], node: str) -> Mapping[str, Any]:
        alive = self.cache.manager_alive(self._clock())
        terms = dict(self.cache.table.explain(pod_demand(pod), node))
        terms["managerLeaseCurrent"] = alive
        if not alive:
            terms["priority"] = NEUTRAL_PRIORITY
            terms["neutral"] = "the manager's Lease is not current: no twin is trusted"
        return terms
