"""`joulie status --energy`: who used the cluster's energy, from the manager's energy accounts.

The accounts are one ConfigMap the manager's leader keeps (``joulie.manager.energy_store``), so
this is one GET, never a request per node or pod. They hold joules per namespace and workload
class since the manager began counting, the energy no pod explains (node overhead), and the
time of the last reading counted. The saving is not in them yet: the manager does not model
each node's draw in the performance profile, so the table says so instead of showing a figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from joulie.manager.energy_store import StoredTotals

__all__ = ["EnergyReport", "energy_report", "energy_table"]

JOULES_PER_KWH = 3.6e6
ROWS_SHOWN = 30
"""Accounts in the table, largest first; the rest are counted in one line (JSON has all)."""
NOT_MEASURED = "not measured yet (the manager does not model each node's performance draw)"


@dataclass(frozen=True)
class Account:
    namespace: str
    workload_class: str
    kwh: float


@dataclass(frozen=True)
class EnergyReport:
    accounts: tuple[Account, ...]
    """Largest first."""
    overhead_kwh: float
    through: float
    """Epoch seconds of the last reading counted (0: none yet)."""

    @property
    def total_kwh(self) -> float:
        return sum(a.kwh for a in self.accounts) + self.overhead_kwh

    def to_json(self) -> dict[str, Any]:
        return {
            "through": _when(self.through),
            "accounts": [
                {"namespace": a.namespace, "class": a.workload_class, "kwh": a.kwh}
                for a in self.accounts
            ],
            "overhead_kwh": self.overhead_kwh,
            "total_kwh": self.total_kwh,
            "saved_kwh": None,
            "saved": NOT_MEASURED,
        }


def energy_report(totals: StoredTotals) -> EnergyReport:
    accounts = []
    for key, joules in totals.accounts.items():
        namespace, _, workload_class = key.rpartition("/")
        accounts.append(Account(namespace, workload_class, joules / JOULES_PER_KWH))
    accounts.sort(key=lambda a: (-a.kwh, a.namespace, a.workload_class))
    return EnergyReport(tuple(accounts), totals.overhead / JOULES_PER_KWH, totals.through)


def _when(epoch: float) -> str | None:
    if epoch <= 0:
        return None
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def energy_table(report: EnergyReport) -> str:
    total = report.total_kwh
    through = _when(report.through) or "no reading counted yet"
    lines = [f"energy used since the manager began counting, through {through}"]
    rows = [["NAMESPACE", "CLASS", "kWh", "SHARE"]]
    for account in report.accounts[:ROWS_SHOWN]:
        share = f"{100.0 * account.kwh / total:.1f} %" if total > 0 else "-"
        rows.append([account.namespace, account.workload_class, f"{account.kwh:.3f}", share])
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        lines.append(
            "  ".join(
                cell.rjust(width) if i >= 2 else cell.ljust(width)
                for i, (cell, width) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
    hidden = len(report.accounts) - ROWS_SHOWN
    if hidden > 0:
        lines.append(f"... and {hidden} more accounts (-o json lists them all)")
    lines.append(f"node overhead (no pod explains it): {report.overhead_kwh:.3f} kWh")
    lines.append(f"total: {total:.3f} kWh")
    lines.append(f"saved: {NOT_MEASURED}")
    return "\n".join(lines)
