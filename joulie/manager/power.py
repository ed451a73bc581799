"""Measured node power for the twin (NODE_POWER_SOURCE).

* ``static``: 0 W for every node. The default, so an unconfigured cluster scores every node alike.
* ``http``: one GET per node of a URL template (``{node}`` replaced), answered with the simulator's
  telemetry document (``power.nodeW``) or any JSON with a top-level ``packagePowerWatts``.
* ``prometheus``: ONE instant query per read for all nodes, each series mapped to its node by a
  label (NODE_POWER_PROMETHEUS_NODE_LABEL). Never a query per node: at 5,000 nodes that would be
  5,000 queries a minute against the monitoring stack.

A failed read degrades only the nodes it could not read: each gets the source name with
``-error`` (the source could not be read, or its answer was unusable) or ``-no-data`` (the source
answered without a usable value for the node), and the next read tries again.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import aiohttp
import structlog
from prometheus_client import Counter, Gauge, Histogram

from joulie.api import json_body
from joulie.api.enums import NodePowerSource
from joulie.manager.promql import QueryError, instant_query
from joulie.manager.settings import ManagerSettings

log = structlog.get_logger("joulie.manager.power")

__all__ = [
    "HttpSource",
    "NodePower",
    "PowerReader",
    "PowerReading",
    "PowerSource",
    "PrometheusSource",
    "StaticSource",
    "build_source",
    "node_watts_by_label",
    "telemetry_watts",
]

READS = Counter(
    "joulie_power_source_reads_total",
    "Reads of the node power source, by result (ok, partial: some nodes failed, failed: all did)",
    ["source", "result"],
)
REQUESTS = Counter(
    "joulie_power_source_requests_total",
    "HTTP requests sent to the node power source (one per read for prometheus, one per node for "
    "http)",
    ["source"],
)
FAILED_NODES = Gauge(
    "joulie_power_source_failed_nodes", "Nodes whose last power read failed", ["source"]
)
READ_SECONDS = Histogram(
    "joulie_power_source_read_duration_seconds",
    "Time one read of the node power source took",
    ["source"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)

_EXAMPLES = 3
"""Failed nodes named in a read's warning; the rest are counted."""


@dataclass(frozen=True)
class NodePower:
    watts: float | None
    """None when this node's read failed."""
    source: str
    """powerMeasurement.source: the source's name, or it with -error / -no-data."""
    problem: str | None = None
    """Why the read failed, for the log."""


@dataclass(frozen=True)
class PowerReading:
    at: float
    """When the read started (epoch seconds)."""
    nodes: Mapping[str, NodePower]


class PowerSource(Protocol):
    name: str

    async def read(self, nodes: Sequence[str]) -> dict[str, NodePower]: ...

    async def close(self) -> None: ...


def _failed(source: str, kind: str, problem: str) -> NodePower:
    return NodePower(None, f"{source}-{kind}", problem)


def _usable_watts(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} is {value!r}, not a number")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} is {value}, not a finite number of watts >= 0")
    return float(value)


def telemetry_watts(body: Any) -> float:
    """Whole-node watts from a telemetry document: ``power.nodeW`` (the simulator's contract),
    else a top-level ``packagePowerWatts``. Raises ValueError naming what is missing or wrong."""
    if not isinstance(body, Mapping):
        raise ValueError("the answer is not a JSON object")
    power = body.get("power")
    if isinstance(power, Mapping) and "nodeW" in power:
        return _usable_watts(power["nodeW"], "power.nodeW")
    if "packagePowerWatts" in body:
        return _usable_watts(body["packagePowerWatts"], "packagePowerWatts")
    raise ValueError("the answer has neither power.nodeW nor packagePowerWatts")


class StaticSource:
    name = NodePowerSource.STATIC.value

    def __init__(self) -> None:
        # One reading for every node (it is frozen): a new one per node took 0.56 MiB at 5,000
        # nodes, kept for as long as the reading is reused (tracemalloc, bench.manager).
        self._zero = NodePower(0.0, self.name)

    async def read(self, nodes: Sequence[str]) -> dict[str, NodePower]:
        zero = self._zero
        return dict.fromkeys(nodes, zero)

    async def close(self) -> None:
        return None


MAX_ANSWER_BYTES = 1024**2
"""Largest telemetry answer read (a report is about a kilobyte; a bigger one is refused as it
streams in, not held)."""
_CHUNK = 64 * 1024


class HttpSource:
    """One GET per node. aiohttp rather than httpx here: at 5,000 nodes a read is 5,000 requests
    every tick, and httpx's per-request cost made that read take 15 s against the simulator
    (bench.simulator) where aiohttp takes about one."""

    name = NodePowerSource.HTTP.value

    def __init__(self, endpoint: str, timeout_s: float, concurrency: int) -> None:
        self._endpoint = endpoint
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._concurrency = concurrency
        self._limit = asyncio.Semaphore(concurrency)
        self._session: aiohttp.ClientSession | None = None

    def url(self, node: str) -> str:
        return self._endpoint.replace("{node}", quote(node, safe=""))

    def _client(self) -> aiohttp.ClientSession:
        # Created on first use: a session belongs to the running event loop.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout,
                connector=aiohttp.TCPConnector(limit=self._concurrency),
            )
        return self._session

    async def _one(self, node: str) -> NodePower:
        async with self._limit:
            REQUESTS.labels(self.name).inc()
            try:
                async with self._client().get(self.url(node)) as response:
                    if response.status != 200:
                        return _failed(self.name, "error", f"HTTP {response.status}")
                    body = await json_body.read_capped(
                        response.content.iter_chunked(_CHUNK), MAX_ANSWER_BYTES, "the answer"
                    )
            except (aiohttp.ClientError, TimeoutError) as exc:
                why = f"{type(exc).__name__}: {exc}".rstrip(": ")
                return _failed(self.name, "error", why)
            except json_body.JsonBodyError as exc:
                return _failed(self.name, "error", exc.reason)
        try:
            decoded = json_body.loads(body, max_bytes=MAX_ANSWER_BYTES, what="the answer")
            return NodePower(telemetry_watts(decoded), self.name)
        except ValueError as exc:  # JsonBodyError is a ValueError too
            return _failed(self.name, "error", str(exc))

    async def read(self, nodes: Sequence[str]) -> dict[str, NodePower]:
        results = await asyncio.gather(*(self._one(node) for node in nodes))
        return dict(zip(nodes, results, strict=True))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def node_watts_by_label(
    series: Sequence[tuple[Mapping[str, str], float]], node_label: str
) -> tuple[dict[str, float], dict[str, str]]:
    """Map the series of one query to nodes by ``node_label``: the watts of every node with one
    usable series, and for the others why not (several series, a value that is not watts)."""
    seen: dict[str, list[float]] = {}
    unlabelled = 0
    for labels, value in series:
        node = labels.get(node_label)
        if not node:
            unlabelled += 1
            continue
        seen.setdefault(node, []).append(value)
    if unlabelled:
        log.debug("series without the node label ignored", label=node_label, count=unlabelled)
    watts: dict[str, float] = {}
    problems: dict[str, str] = {}
    for node, values in seen.items():
        if len(values) > 1:
            problems[node] = (
                f"{len(values)} series carry {node_label}={node}; the query must return one per "
                f"node (aggregate it, for example sum by ({node_label}) (...))"
            )
            continue
        try:
            watts[node] = _usable_watts(values[0], "the value")
        except ValueError as exc:
            problems[node] = str(exc)
    return watts, problems


class PrometheusSource:
    name = NodePowerSource.PROMETHEUS.value

    def __init__(self, address: str, query: str, node_label: str, timeout_s: float) -> None:
        self._address = address
        self._query = query
        self._label = node_label
        # httpx loads with the first Prometheus source, not with the module: a manager reading
        # power another way does not carry it (about 6 MiB of RSS).
        import httpx

        self._client = httpx.AsyncClient(timeout=timeout_s)

    async def read(self, nodes: Sequence[str]) -> dict[str, NodePower]:
        REQUESTS.labels(self.name).inc()
        try:
            series = await instant_query(self._client, self._address, self._query)
        except QueryError as exc:
            return {node: _failed(self.name, "error", str(exc)) for node in nodes}
        watts, problems = node_watts_by_label([(s.labels, s.value) for s in series], self._label)
        result: dict[str, NodePower] = {}
        for node in nodes:
            if node in watts:
                result[node] = NodePower(watts[node], self.name)
            else:
                why = problems.get(node) or f"no series with {self._label}={node}"
                result[node] = _failed(self.name, "no-data", why)
        return result

    async def close(self) -> None:
        await self._client.aclose()


def build_source(settings: ManagerSettings) -> PowerSource:
    timeout = settings.node_power_timeout
    match settings.node_power_source:
        case NodePowerSource.HTTP:
            return HttpSource(
                settings.node_power_http_endpoint, timeout, settings.node_power_http_concurrency
            )
        case NodePowerSource.PROMETHEUS:
            return PrometheusSource(
                settings.node_power_prometheus_address,
                settings.node_power_prometheus_query,
                settings.node_power_prometheus_node_label,
                timeout,
            )
        case _:
            # Reserved sources are refused by the settings check before any role starts.
            return StaticSource()


class PowerReader:
    """Reads the source at most once per ``min_age_s``: reconciles triggered by events in between
    reuse the last reading, so a burst of pod events does not multiply the reads."""

    def __init__(
        self,
        source: PowerSource,
        min_age_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self._min_age = min_age_s
        self._clock = clock
        self._last: PowerReading | None = None
        self._failing: frozenset[str] = frozenset()

    @property
    def last(self) -> PowerReading | None:
        return self._last

    async def reading(self, nodes: Sequence[str]) -> PowerReading:
        now = self._clock()
        last = self._last
        if (
            last is not None
            and now - last.at < self._min_age
            and all(node in last.nodes for node in nodes)
        ):
            return last
        started = time.perf_counter()
        try:
            result = await self.source.read(nodes)
        except Exception as exc:  # a source bug must not take the reconcile down
            log.exception("node power source failed unexpectedly", source=self.source.name)
            why = f"{type(exc).__name__}: {exc}"
            result = {node: _failed(self.source.name, "error", why) for node in nodes}
        READ_SECONDS.labels(self.source.name).observe(time.perf_counter() - started)
        self._report(result)
        self._last = PowerReading(now, result)
        return self._last

    def _report(self, result: Mapping[str, NodePower]) -> None:
        name = self.source.name
        failed = {node: p for node, p in result.items() if p.watts is None}
        FAILED_NODES.labels(name).set(len(failed))
        outcome = "ok" if not failed else "failed" if len(failed) == len(result) else "partial"
        READS.labels(name, outcome).inc()
        failing = frozenset(failed)
        if failed:
            examples = {node: failed[node].problem for node in sorted(failed)[:_EXAMPLES]}
            log.warning(
                "node power read failed",
                source=name,
                failed=len(failed),
                nodes=len(result),
                examples=examples,
            )
        elif self._failing:
            log.info("node power read recovered", source=name, nodes=len(result))
        self._failing = failing

    async def close(self) -> None:
        await self.source.close()
