"""Glue between the manager's caches and :mod:`joulie.core.twin`: one node's twin input from its
hardware view, its NodeTwin intent, the latest power reading and the facility figures, and the
per-node memory the twin needs across reconciles (power history, one-shot warnings).

Nothing is lost on restart: a node whose read failed keeps the measurement already written in
its NodeTwin.status, and until the new process has readings spanning enough time for a trend, the
trend already written stands.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from joulie.api import keys
from joulie.api.enums import SchedulableClass
from joulie.api.nodetwin import NodeTwinSpec
from joulie.core.twin import (
    PowerHistory,
    TwinFigures,
    TwinHardware,
    TwinInput,
    cap_percentages,
    compute,
    looks_like_energy,
    status_figures,
    twin_hardware,
)
from joulie.manager.facility import FacilityReading
from joulie.manager.power import NodePower

log = structlog.get_logger("joulie.manager.twin")

__all__ = ["TwinTracker", "twin_hardware"]


def _observed_number(measurement: Mapping[str, Any], key: str) -> float | None:
    value = measurement.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


_FIGURES_MAX = 4096


class TwinTracker:
    """The twin's memory across reconciles, for every node the manager plans."""

    def __init__(self, trend_window_s: float) -> None:
        self.history = PowerHistory(window_s=trend_window_s)
        self._warned: set[str] = set()
        """Nodes already warned of a reading above twice their TDP."""
        self._computed: dict[str, tuple[Any, ...]] = {}
        """Per node: the inputs of the last computation and its figures. At steady state most
        nodes' inputs repeat, and recomputing 5,000 twins would cost a tenth of a second."""
        self._figures: dict[TwinFigures, TwinFigures] = {}
        """One instance of each distinct set of figures, shared by the nodes that have it: nodes
        of one model in one class, reading alike, have the same figures (bounded, see
        :meth:`_shared`)."""

    def status(
        self,
        node: str,
        intent_spec: NodeTwinSpec,
        schedulable_class: SchedulableClass,
        hardware: TwinHardware,
        power: NodePower,
        read_at: float,
        facility: FacilityReading,
        labels: Mapping[str, str],
        observed: Mapping[str, Any],
    ) -> TwinFigures:
        """The twin's NodeTwin.status figures for ``node`` at display precision (``wire()``
        gives the status fields).

        ``observed`` is the node's NodeTwin.status as last seen; ``read_at`` the time of the read
        that produced ``power``. The same figures come back, as the same object, for as long as
        the node's inputs stay the same.
        """
        measurement = observed.get("powerMeasurement") or {}
        if power.watts is not None:
            watts = power.watts
            self.history.record(node, read_at, watts)
        else:
            # The read failed: keep the last good figure, and say so in the source.
            watts = _observed_number(measurement, "measuredNodePowerW") or 0.0
        if self.history.known(node):
            trend = self.history.trend(node)
        else:
            trend = _observed_number(measurement, "powerTrendWPerMin") or 0.0
        rack = labels.get(keys.RACK_LABEL)
        rack_power = facility.rack_power_w.get(rack) if rack else None
        key = (
            schedulable_class,
            watts,
            power.source,
            trend,
            facility.ambient_c,
            facility.it_power_w,
            rack_power,
        )
        cached = self._computed.get(node)
        if (
            cached is not None
            and cached[0] is hardware
            and cached[1] is intent_spec
            and cached[2] == key
        ):
            return cached[3]  # type: ignore[no-any-return]
        cpu_pct, gpu_pct = cap_percentages(intent_spec, hardware)
        out = compute(
            TwinInput(
                hardware=hardware,
                schedulable_class=schedulable_class,
                cpu_cap_pct=cpu_pct,
                gpu_cap_pct=gpu_pct,
                measured_power_w=watts,
                source=power.source,
                power_trend_w_per_min=trend,
                ambient_c=facility.ambient_c,
                rack_power_w=rack_power,
                cluster_power_w=facility.it_power_w,
            )
        )
        suspicious = power.watts is not None and looks_like_energy(power.watts, out.node_tdp_w)
        if suspicious and node not in self._warned:
            self._warned.add(node)
            log.warning(
                "measured power is above twice the node's TDP: is the source a cumulative "
                "joules counter read as watts?",
                node=node,
                source=power.source,
                measured_w=round(out.measured_power_w, 1),
                node_tdp_w=round(out.node_tdp_w, 1),
            )
        figures = self._shared(status_figures(out))
        self._computed[node] = (hardware, intent_spec, key, figures)
        return figures

    def _shared(self, figures: TwinFigures) -> TwinFigures:
        """The instance of ``figures`` already held, if any. Why: at 5,000 nodes the per-node
        figures took 4.9 MiB as wire-form dicts; as flat tuples shared between alike nodes,
        under 0.1 MiB in bench.manager, whose static source reads 0 W everywhere (tracemalloc).
        Where each node's reading differs, each keeps its own tuple (about 0.5 KiB with its
        numbers). Bounded: a full table starts over (the nodes keep their tuples)."""
        found = self._figures.get(figures)
        if found is not None:
            return found
        if len(self._figures) >= _FIGURES_MAX:
            self._figures.clear()
        self._figures[figures] = figures
        return figures

    def forget(self, existing: Iterable[str]) -> None:
        """Drop what is kept of nodes that are gone."""
        keep = set(existing)
        self.history.forget(keep)
        self._warned &= keep
        for node in [n for n in self._computed if n not in keep]:
            del self._computed[node]
