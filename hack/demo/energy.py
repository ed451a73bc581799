"""The demo's energy answer: what the manager booked per workload class, what the same work would
have drawn without Joulie's controls, and the saving (pure: the run passes the figures in).

Two readings of the same books: the live view reads the manager's counters from its /metrics
(the running saving), the summary reads the ``joulie-energy-accounts`` ConfigMap the leader
writes as its term ends, the way ``joulie status --energy`` does. Both go through
``joulie.cli.status.energy.energy_report``, so the arithmetic (net saving = saved less lost, its
share of used plus net saved) is the status command's, never a second copy.

Which clock: the manager integrates the node power it reads (the simulator's watts) over the
wall-clock seconds between its readings, so its kWh are wall-clock kWh. The simulator's own
"energy used" integrates the same watts over simulated time, which runs DEMO_TIME_SCALE times
faster: the same draw over the run is that many times larger there. The saving's share is the
same on either clock.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from joulie.cli.status.energy import Account, EnergyReport
from joulie.manager.energy_store import StoredTotals

USED = "joulie_workload_energy_joules_total"
SAVED = "joulie_workload_energy_saved_joules_total"
LOST = "joulie_workload_energy_lost_joules_total"
OVERHEAD = "joulie_node_overhead_energy_joules_total"


@dataclass(frozen=True)
class Saving:
    """Energy booked to some accounts (wall-clock kWh, as the manager counts)."""

    used_kwh: float
    without_kwh: float
    """What the same work would have drawn without Joulie's controls: used plus net saved."""
    saved_kwh: float
    """Net: saved less what the controls cost (negative when they cost more than they saved)."""
    saved_pct: float | None
    """The net saving as a share of ``without_kwh`` (None when nothing was booked)."""


@dataclass(frozen=True)
class Booked:
    """The manager's books at the end of the run, per workload class and in all."""

    by_class: dict[str, Saving]
    total: Saving
    overhead_kwh: float
    """Energy no pod explains (idle capacity nobody asked for); outside the saving."""
    source: str
    """Where the figures were read: the ConfigMap, or the counters when its last write lagged."""


def metric_totals(text: str) -> StoredTotals:
    """The manager's accounts as its /metrics exposition has them, in the stored totals' shape
    (``through`` unknown: 0)."""
    kinds: dict[str, dict[str, float]] = {USED: {}, SAVED: {}, LOST: {}}
    overhead = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == OVERHEAD:
                overhead += sample.value
            elif sample.name in kinds:
                key = f"{sample.labels.get('namespace', '')}/{sample.labels.get('class', '')}"
                kinds[sample.name][key] = kinds[sample.name].get(key, 0.0) + sample.value
    return StoredTotals(kinds[USED], overhead, 0.0, kinds[SAVED], kinds[LOST])


def saving(accounts: Iterable[Account]) -> Saving:
    """The accounts' energy and net saving, summed (the share as the status command takes it)."""
    report = EnergyReport(tuple(accounts), 0.0, 0.0)
    used = report.total_kwh
    return Saving(used, used + report.saved_kwh, report.saved_kwh, report.saved_pct)


def booked(report: EnergyReport, source: str) -> Booked:
    """The report's accounts summed over namespaces per workload class, and in all."""
    by_class: dict[str, list[Account]] = defaultdict(list)
    for account in report.accounts:
        by_class[account.workload_class].append(account)
    return Booked(
        {klass: saving(accounts) for klass, accounts in sorted(by_class.items())},
        saving(report.accounts),
        report.overhead_kwh,
        source,
    )
