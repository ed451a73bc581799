"""`joulie status --energy`: who used the cluster's energy, from the manager's energy accounts.

The accounts are one ConfigMap the manager's leader keeps (``joulie.manager.energy_store``), so
this is one GET, never a request per node or pod. They hold joules per namespace and workload
class since the manager began counting, the energy no pod explains (node overhead), and the
time of the last reading counted, and per account the energy the same work would have drawn
more without Joulie's controls (saved) and what the controls cost (lost). The saving shown is
the net (saved less lost), and its share is of what the work would have drawn without the
controls (used plus net saved). How the manager arrives at it: ``joulie.manager.energy``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from joulie.api.text_table import aligned
from joulie.manager.energy_store import StoredTotals

__all__ = ["Account", "EnergyReport", "energy_report", "energy_table"]

JOULES_PER_KWH = 3.6e6
ROWS_SHOWN = 30
"""Accounts in the table, largest first; the rest are counted in one line (JSON has all)."""
GROUPS_SHOWN = 10
"""PodGroups in the table, largest first (JSON has all the manager keeps)."""


@dataclass(frozen=True)
class Account:
    namespace: str
    workload_class: str
    kwh: float
    saved_kwh: float = 0.0
    """Net: what the same work would have drawn more without the controls, less what they cost."""

    @property
    def saved_pct(self) -> float | None:
        return _pct(self.saved_kwh, self.kwh)


@dataclass(frozen=True)
class EnergyReport:
    accounts: tuple[Account, ...]
    """Largest first."""
    overhead_kwh: float
    through: float
    """Epoch seconds of the last reading counted (0: none yet)."""
    groups: tuple[Account, ...] = ()
    """Per PodGroup (``workload_class`` holds the PodGroup's name), largest first."""

    @property
    def total_kwh(self) -> float:
        return sum(a.kwh for a in self.accounts) + self.overhead_kwh

    @property
    def saved_kwh(self) -> float:
        return sum(a.saved_kwh for a in self.accounts)

    @property
    def saved_pct(self) -> float | None:
        return _pct(self.saved_kwh, sum(a.kwh for a in self.accounts))

    def to_json(self) -> dict[str, Any]:
        return {
            "through": _when(self.through),
            "accounts": [
                {
                    "namespace": a.namespace,
                    "class": a.workload_class,
                    "kwh": a.kwh,
                    "saved_kwh": a.saved_kwh,
                    "saved_pct": a.saved_pct,
                }
                for a in self.accounts
            ],
            "podgroups": [
                {
                    "namespace": g.namespace,
                    "podgroup": g.workload_class,
                    "kwh": g.kwh,
                    "saved_kwh": g.saved_kwh,
                    "saved_pct": g.saved_pct,
                }
                for g in self.groups
            ],
            "overhead_kwh": self.overhead_kwh,
            "total_kwh": self.total_kwh,
            "saved_kwh": self.saved_kwh,
            "saved_pct": self.saved_pct,
        }


def _pct(saved: float, used: float) -> float | None:
    """The saving as a share of what the work would have drawn without the controls."""
    without = used + saved
    return 100.0 * saved / without if without > 0 else None


def energy_report(totals: StoredTotals) -> EnergyReport:
    accounts = []
    for key, joules in totals.accounts.items():
        namespace, _, workload_class = key.rpartition("/")
        net = totals.saved.get(key, 0.0) - totals.lost.get(key, 0.0)
        accounts.append(
            Account(namespace, workload_class, joules / JOULES_PER_KWH, net / JOULES_PER_KWH)
        )
    accounts.sort(key=_largest_first)
    groups = []
    for key, (used, saved, lost) in totals.groups:
        namespace, _, name = key.partition("/")
        groups.append(
            Account(namespace, name, used / JOULES_PER_KWH, (saved - lost) / JOULES_PER_KWH)
        )
    groups.sort(key=_largest_first)
    return EnergyReport(
        tuple(accounts), totals.overhead / JOULES_PER_KWH, totals.through, tuple(groups)
    )


def _largest_first(account: Account) -> tuple[float, str, str]:
    return (-account.kwh, account.namespace, account.workload_class)


def _when(epoch: float) -> str | None:
    if epoch <= 0:
        return None
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def energy_table(report: EnergyReport) -> str:
    total = report.total_kwh
    through = _when(report.through) or "no reading counted yet"
    lines = [f"energy used since the manager began counting, through {through}"]
    lines += _rows(report.accounts[:ROWS_SHOWN], "CLASS", total)
    hidden = len(report.accounts) - ROWS_SHOWN
    if hidden > 0:
        lines.append(f"... and {hidden} more accounts (-o json lists them all)")
    lines.append(f"node overhead (no pod explains it): {report.overhead_kwh:.3f} kWh")
    lines.append(f"total: {total:.3f} kWh")
    lines.append(
        f"saved: {report.saved_kwh:.3f} kWh ({_shown(report.saved_pct)} of what the same work "
        "would have drawn without Joulie's controls, by the power model's ratio)"
    )
    if report.groups:
        lines.append(f"PodGroups (the {GROUPS_SHOWN} largest of those the manager keeps):")
        lines += _rows(report.groups[:GROUPS_SHOWN], "PODGROUP", total)
    return "\n".join(lines)


def _rows(accounts: tuple[Account, ...], second: str, total: float) -> list[str]:
    rows = [["NAMESPACE", second, "kWh", "SHARE", "SAVED kWh", "SAVED"]]
    for account in accounts:
        share = f"{100.0 * account.kwh / total:.1f} %" if total > 0 else "-"
        rows.append(
            [
                account.namespace,
                account.workload_class,
                f"{account.kwh:.3f}",
                share,
                f"{account.saved_kwh:.3f}",
                _shown(account.saved_pct),
            ]
        )
    return aligned(rows, labels=2)


def _shown(pct: float | None) -> str:
    return "-" if pct is None else f"{pct:.1f} %"
