"""Builders for the demo's figures (``hack.demo``): a closing :class:`Outcome`, a live
:class:`Frame`, and the manager's energy accounts as the demo reads them. Each builds a small
valid value and takes keyword overrides, so a test states only the figures it is about."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hack.demo.energy import Booked, booked
from hack.demo.view import Frame, Outcome, Placements
from joulie.cli.status.energy import energy_report
from joulie.manager.energy_store import StoredTotals

KWH = 3.6e6
"""Joules in a kWh: accounts in tests are written in kWh and stored in joules, as the manager
stores them."""


def stored_totals(
    used: Mapping[str, float],
    *,
    saved: Mapping[str, float] | None = None,
    lost: Mapping[str, float] | None = None,
    overhead: float = 0.0,
    through: float = 1_700_000_000.0,
) -> StoredTotals:
    """The manager's accounts with every figure in kWh: ``{"<namespace>/<class>": kWh}``."""

    def joules(kwh: Mapping[str, float] | None) -> dict[str, float]:
        return {account: value * KWH for account, value in (kwh or {}).items()}

    return StoredTotals(joules(used), overhead * KWH, through, joules(saved), joules(lost))


def booked_energy(totals: StoredTotals, source: str = "the accounts ConfigMap") -> Booked:
    """What the demo's summary shows of ``totals`` (through the status command's report)."""
    return booked(energy_report(totals), source)


def outcome(**overrides: Any) -> Outcome:
    """A three-minute run at 60x on 41 nodes with every performance pod well placed and no
    energy accounts read unless ``booked`` is given."""
    fields: dict[str, Any] = {
        "duration_s": 180.0,
        "simulated_s": 180.0 * 60,
        "energy_kwh": 36.1,
        "mean_it_power_kw": 12.0,
        "pods_submitted": 72,
        "performance_placed": {"performance": 24},
        "standard_placed": {"eco": 40, "performance": 8},
        "performance_on_kept_off_nodes": [],
        "performance_nodes_peak": 12,
        "nodes": 41,
        "deferred_transitions": 2.0,
        "control_results": {"applied": 41},
    }
    return Outcome(**(fields | overrides))


def frame(**overrides: Any) -> Frame:
    """Half-way through a three-minute run at 60x, before the caches synced."""
    fields: dict[str, Any] = {
        "elapsed_s": 90.0,
        "duration_s": 180.0,
        "time_scale": 60.0,
        "submitted": 36,
        "total_pods": 72,
        "it_power_w": 12_000.0,
        "energy_j": 18 * KWH,
        "cluster": None,
        "placements": Placements(),
        "performance_nodes_peak": 6,
    }
    return Frame(**(fields | overrides))
