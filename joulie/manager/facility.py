"""Facility metrics for the twin (ENABLE_FACILITY_METRICS): ambient temperature, total IT power
and power per rack, polled from Prometheus every FACILITY_POLL_INTERVAL.

Each figure is its own query and fails on its own: a figure that could not be read is unknown
(None) until a later poll reads it, and the twin treats unknown as the spec says (multiplier 1
for the ambient, the cluster total or 0 for PSU stress). Rack power maps to nodes through their
``joulie.io/rack`` label, by the series label FACILITY_RACK_LABEL.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import structlog
from prometheus_client import Counter, Gauge

from joulie.manager.power import node_watts_by_label
from joulie.manager.promql import QueryError, Series, instant_query, single_value
from joulie.manager.settings import ManagerSettings

log = structlog.get_logger("joulie.manager.facility")

__all__ = ["FacilityPoller", "FacilityReading"]

AMBIENT = Gauge(
    "joulie_facility_ambient_celsius", "Facility ambient temperature last read (NaN: unknown)"
)
IT_POWER = Gauge("joulie_facility_it_power_watts", "Total IT power last read (NaN: unknown)")
RACKS = Gauge("joulie_facility_racks", "Racks with a power figure in the last poll")
POLL_ERRORS = Counter(
    "joulie_facility_poll_errors_total", "Facility queries that failed, by figure", ["figure"]
)


@dataclass(frozen=True)
class FacilityReading:
    ambient_c: float | None = None
    it_power_w: float | None = None
    rack_power_w: Mapping[str, float] = field(default_factory=dict)


class FacilityPoller:
    def __init__(self, settings: ManagerSettings) -> None:
        self._settings = settings
        # httpx loads with the poller (only when facility metrics are configured), not with
        # the module: about 6 MiB of RSS a manager without them does not carry.
        import httpx

        self._client = httpx.AsyncClient(timeout=settings.node_power_timeout)
        self.latest = FacilityReading()
        self._errors: dict[str, str] = {}
        """The figures failing at the last poll, with why (to log each failure once)."""

    async def run(self, stopping: asyncio.Event) -> None:
        try:
            while not stopping.is_set():
                self.latest = await self.poll()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        stopping.wait(), timeout=self._settings.facility_poll_interval
                    )
        finally:
            await self._client.aclose()

    async def poll(self) -> FacilityReading:
        s = self._settings
        problems: dict[str, str] = {}
        ambient = await self._single("ambient", s.facility_ambient_temp_metric, problems)
        it_power = await self._single("it_power", s.facility_it_power_metric, problems)
        racks: dict[str, float] = {}
        figures = ["ambient", "it_power"]
        if s.facility_rack_power_metric:
            figures.append("rack_power")
            series = await self._series("rack_power", s.facility_rack_power_metric, problems)
            if series is not None:
                racks, unusable = node_watts_by_label(
                    [(x.labels, x.value) for x in series], s.facility_rack_label
                )
                if unusable:
                    problems["rack_power"] = "; ".join(
                        f"rack {rack}: {why}" for rack, why in sorted(unusable.items())
                    )
        self._note(figures, problems)
        reading = FacilityReading(ambient_c=ambient, it_power_w=it_power, rack_power_w=racks)
        AMBIENT.set(ambient if ambient is not None else float("nan"))
        IT_POWER.set(it_power if it_power is not None else float("nan"))
        RACKS.set(len(racks))
        return reading

    async def _series(
        self, figure: str, query: str, problems: dict[str, str]
    ) -> list[Series] | None:
        address = self._settings.facility_prometheus_address
        try:
            return await instant_query(self._client, address, query)
        except QueryError as exc:
            problems[figure] = str(exc)
            return None

    async def _single(self, figure: str, query: str, problems: dict[str, str]) -> float | None:
        series = await self._series(figure, query, problems)
        if series is None:
            return None
        try:
            return single_value(series, query)
        except QueryError as exc:
            problems[figure] = str(exc)
            return None

    def _note(self, figures: list[str], problems: dict[str, str]) -> None:
        """Count every failure; log a figure's failure when it starts or changes, and its
        recovery once."""
        for figure in figures:
            why = problems.get(figure)
            if why is not None:
                POLL_ERRORS.labels(figure).inc()
                if self._errors.get(figure) != why:
                    log.warning("facility metric unavailable", figure=figure, problem=why)
                self._errors[figure] = why
            elif self._errors.pop(figure, None) is not None:
                log.info("facility metric available again", figure=figure)
