"""What the manager makes of power-source and Prometheus answers, good and bad, and how the twin
glue keeps figures across failed reads and restarts."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

import pytest

from joulie.api.enums import NodePowerSource, Profile, SchedulableClass
from joulie.api.nodetwin import CpuSpec, GpuPowerCap, GpuSpec, NodeTwinSpec
from joulie.core.twin import TwinFigures, TwinHardware, cap_percentages, retired_status
from joulie.manager.facility import FacilityReading
from joulie.manager.power import (
    NodePower,
    PowerReader,
    StaticSource,
    build_source,
    node_watts_by_label,
    telemetry_watts,
)
from joulie.manager.promql import QueryError, Series, parse_instant_result, single_value
from joulie.manager.settings import ManagerSettings
from joulie.manager.twin_status import TwinTracker


def vector(*series: tuple[dict[str, str], str]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": m, "value": [1700000000.0, v]} for m, v in series],
        },
    }


# --- Prometheus answers ----------------------------------------------------------------------


def test_vector_and_scalar_answers() -> None:
    got = parse_instant_result(vector(({"node": "a"}, "12.5"), ({"node": "b"}, "NaN")))
    assert got[0] == Series({"node": "a"}, 12.5)
    assert got[1].value != got[1].value  # NaN kept for the caller to judge
    scalar = {"status": "success", "data": {"resultType": "scalar", "result": [1.0, "21"]}}
    assert single_value(parse_instant_result(scalar), "q") == 21.0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("not json", "not a JSON object"),
        ({"status": "error", "error": "parse error at char 3"}, "parse error at char 3"),
        ({"status": "success"}, "no data object"),
        ({"status": "success", "data": {"resultType": "matrix", "result": []}}, "'matrix'"),
        ({"status": "success", "data": {"resultType": "vector", "result": [{}]}}, "no metric"),
        (vector(({"node": "a"}, "watts")), "'watts' is not a number"),
        (
            {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}},
            "[timestamp, value]",
        ),
    ],
)
def test_malformed_answers_say_what_is_wrong(body: Any, message: str) -> None:
    with pytest.raises(QueryError, match=re.escape(message)):
        parse_instant_result(body)


def test_a_single_figure_must_be_one_finite_series() -> None:
    with pytest.raises(QueryError, match="returned 2 series"):
        single_value([Series({}, 1.0), Series({}, 2.0)], "ambient")
    with pytest.raises(QueryError, match="returned 0 series"):
        single_value([], "ambient")
    with pytest.raises(QueryError, match="inf"):
        single_value([Series({}, float("inf"))], "ambient")


def test_series_map_to_nodes_by_label_and_ambiguity_is_refused() -> None:
    series = [
        ({"node": "a", "job": "x"}, 100.0),
        ({"node": "b"}, 50.0),
        ({"node": "b"}, 60.0),  # two series for b: upstream silently took the first
        ({"node": "c"}, float("nan")),
        ({"node": "d"}, -3.0),
        ({"instance": "e"}, 10.0),  # no node label: ignored
    ]
    watts, problems = node_watts_by_label(series, "node")
    assert watts == {"a": 100.0}
    assert "2 series carry node=b" in problems["b"]
    assert "sum by (node)" in problems["b"]
    assert set(problems) == {"b", "c", "d"}


def test_the_node_label_is_configurable() -> None:
    watts, _ = node_watts_by_label([({"instance": "n1"}, 7.0)], "instance")
    assert watts == {"n1": 7.0}


# --- telemetry answers -----------------------------------------------------------------------


def test_telemetry_watts_reads_the_simulator_contract_and_the_upstream_field() -> None:
    assert telemetry_watts({"power": {"nodeW": 812.5, "cpuPackageW": 300}}) == 812.5
    assert telemetry_watts({"packagePowerWatts": 410}) == 410.0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "not a JSON object"),
        ({"power": {}}, "neither power.nodeW nor packagePowerWatts"),
        ({"power": {"nodeW": "lots"}}, "power.nodeW is 'lots'"),
        ({"power": {"nodeW": -1}}, "not a finite number of watts"),
        ({"power": {"nodeW": True}}, "not a number"),
        ({"packagePowerWatts": float("nan")}, "not a finite number"),
    ],
)
def test_bad_telemetry_is_refused_with_a_reason(body: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        telemetry_watts(body)


# --- the reader ------------------------------------------------------------------------------


class Scripted:
    """A power source whose answers the test sets (in-process, no server)."""

    name = "http"

    def __init__(self) -> None:
        self.reads = 0
        self.watts: dict[str, float | None] = {}
        self.explode = False

    async def read(self, nodes: Sequence[str]) -> dict[str, NodePower]:
        self.reads += 1
        if self.explode:
            raise RuntimeError("bug in a source")
        return {
            n: NodePower(w, "http")
            if (w := self.watts.get(n)) is not None
            else NodePower(None, "http-error", "connection refused")
            for n in nodes
        }

    async def close(self) -> None:
        return None


def test_event_reconciles_between_ticks_reuse_the_reading() -> None:
    now = [1000.0]
    source = Scripted()
    source.watts = {"a": 10.0, "b": 20.0}
    reader = PowerReader(source, min_age_s=30, clock=lambda: now[0])

    async def go() -> None:
        first = await reader.reading(["a", "b"])
        now[0] += 5
        assert await reader.reading(["a", "b"]) is first
        assert source.reads == 1
        # A node the last reading did not cover: read again.
        source.watts["c"] = 5.0
        third = await reader.reading(["a", "b", "c"])
        assert source.reads == 2
        assert third.nodes["c"].watts == 5.0
        now[0] += 30
        await reader.reading(["a", "b", "c"])
        assert source.reads == 3

    asyncio.run(go())


def test_a_failing_node_degrades_alone_and_a_broken_source_fails_every_node() -> None:
    source = Scripted()
    source.watts = {"a": 10.0}
    reader = PowerReader(source, min_age_s=0)

    async def go() -> None:
        got = await reader.reading(["a", "b"])
        assert got.nodes["a"] == NodePower(10.0, "http")
        assert got.nodes["b"].watts is None
        assert got.nodes["b"].source == "http-error"
        source.explode = True
        broken = await reader.reading(["a", "b"])
        assert {p.source for p in broken.nodes.values()} == {"http-error"}
        assert "bug in a source" in (broken.nodes["a"].problem or "")

    asyncio.run(go())


def test_static_source_is_zero_everywhere() -> None:
    got = asyncio.run(StaticSource().read(["a", "b"]))
    assert got == {"a": NodePower(0.0, "static"), "b": NodePower(0.0, "static")}


def test_build_source_follows_the_setting() -> None:
    settings = ManagerSettings.model_validate(
        {
            "node_power_source": "prometheus",
            "node_power_prometheus_address": "http://127.0.0.1:9090",
            "node_power_prometheus_query": "node_watts",
        }
    )
    source = build_source(settings)
    assert source.name == NodePowerSource.PROMETHEUS
    asyncio.run(source.close())
    assert build_source(ManagerSettings()).name == "static"


# --- twin glue -------------------------------------------------------------------------------

HW = TwinHardware(cpu_max_watts_per_socket=360, sockets=2, physical_cores=192, gpu_count=4,
                  gpu_max_watts=400)  # fmt: skip


def spec(cpu: CpuSpec, gpu_pct: float | None = 60) -> NodeTwinSpec:
    return NodeTwinSpec(
        node_name="n",
        profile=Profile.ECO,
        cpu=cpu,
        gpu=GpuSpec(power_cap=GpuPowerCap(cap_pct_of_max=gpu_pct, cap_watts_per_gpu=240)),
    )


def test_cap_percentages_from_the_intent() -> None:
    assert cap_percentages(spec(CpuSpec(package_power_cap_pct_of_max=60)), HW) == (60, 60)
    # A GPU node's CPU is capped at 5000 W a package: as good as uncapped.
    assert cap_percentages(spec(CpuSpec(package_power_cap_watts=5000)), HW) == (100, 60)
    assert cap_percentages(spec(CpuSpec(package_power_cap_watts=180), gpu_pct=None), HW) == (
        50,
        60,
    )


def status(
    tracker: TwinTracker,
    power: NodePower,
    at: float,
    observed: dict[str, Any] | None = None,
    facility: FacilityReading | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return tracker.status(
        "n",
        spec(CpuSpec(package_power_cap_pct_of_max=60)),
        SchedulableClass.ECO,
        HW,
        power,
        at,
        facility or FacilityReading(),
        labels or {},
        observed or {},
    ).wire()


def test_a_failed_read_keeps_the_last_written_measurement_and_says_so() -> None:
    tracker = TwinTracker(300)
    observed = {"powerMeasurement": {"measuredNodePowerW": 1160, "powerTrendWPerMin": 12.5}}
    got = status(tracker, NodePower(None, "prometheus-error"), 100, observed)
    assert got["powerMeasurement"]["source"] == "prometheus-error"
    assert got["powerMeasurement"]["measuredNodePowerW"] == 1160
    assert got["predictedPowerHeadroomScore"] == 16.7
    # The trend written before a restart stands until new readings span enough time.
    assert got["powerMeasurement"]["powerTrendWPerMin"] == 12.5


def test_trend_comes_from_readings_once_they_span_time() -> None:
    tracker = TwinTracker(300)
    status(tracker, NodePower(1000, "http"), 0)
    got = status(tracker, NodePower(1100, "http"), 60, {"powerMeasurement": {}})
    assert got["powerMeasurement"]["powerTrendWPerMin"] == 100.0
    tracker.forget([])
    assert len(tracker.history) == 0


def test_facility_figures_reach_the_scores() -> None:
    tracker = TwinTracker(300)
    facility = FacilityReading(ambient_c=25, it_power_w=90_000, rack_power_w={"r1": 30_000})
    got = status(tracker, NodePower(1160, "http"), 0, facility=facility,
                 labels={"joulie.io/rack": "r1"})  # fmt: skip
    assert got["predictedCoolingStressScore"] == 55.6
    assert got["predictedPsuStressScore"] == 60.0
    assert got["estimatedPUE"] == 1.24
    other_rack = status(tracker, NodePower(1160, "http"), 1, facility=facility,
                        labels={"joulie.io/rack": "r9"})  # fmt: skip
    assert other_rack["predictedPsuStressScore"] == 100.0  # cluster total, clamped


def test_one_warning_per_node_for_a_joules_counter(capsys: pytest.CaptureFixture[str]) -> None:
    tracker = TwinTracker(300)
    for t in range(3):
        status(tracker, NodePower(5_000_000, "prometheus"), t)
    out = capsys.readouterr()
    assert (out.out + out.err).count("joules counter") == 1


def test_an_unplanned_twin_is_retired_once() -> None:
    live = {
        "schedulableClass": "eco",
        "predictedPowerHeadroomScore": 40.0,
        "powerMeasurement": {"source": "http", "measuredNodePowerW": 800},
        "conditions": [{"type": "AgentReporting", "status": "True"}],
        "controlStatus": {"cpu": {"result": "applied"}},  # the agent's: left alone
    }
    retired = retired_status(live)
    assert retired == {"schedulableClass": "eco", "powerMeasurement": {"source": "unmanaged"}}
    # What the API server holds after that apply: nothing more to do.
    assert retired_status({**retired, "controlStatus": live["controlStatus"]}) is None
    assert retired_status({}) == {"powerMeasurement": {"source": "unmanaged"}}


def test_an_http_source_answer_past_the_limit_or_too_deep_fails_that_node_alone() -> None:
    # The answer was read whole and decoded by the standard library: a source streaming without
    # end grew the manager with it, and a nested answer raised RecursionError out of the read.
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from joulie.manager.power import HttpSource

    async def answer(request: web.Request) -> web.StreamResponse:
        node = request.match_info["node"]
        if node == "deep":
            return web.Response(body=b"[" * 1000 + b"]" * 1000)
        if node == "ok":
            return web.json_response({"power": {"nodeW": 321.0}})
        response = web.StreamResponse()
        await response.prepare(request)
        for _ in range(10_000):  # 640 MiB if it were all read
            await response.write(b" " * 65536)
        return response

    async def scenario() -> dict[str, NodePower]:
        app = web.Application()
        app.router.add_get("/t/{node}", answer)
        server = TestServer(app)
        await server.start_server()
        source = HttpSource(f"http://127.0.0.1:{server.port}/t/{{node}}", 30, 4)
        try:
            return await source.read(["endless", "deep", "ok"])
        finally:
            await source.close()
            await server.close()

    read = asyncio.run(scenario())
    assert read["ok"].watts == 321.0
    assert read["endless"].watts is None
    assert "more than the 1048576 bytes" in (read["endless"].problem or "")
    assert "nested deeper than 254 levels" in (read["deep"].problem or "")


def test_alike_nodes_share_one_instance_of_their_figures() -> None:
    tracker = TwinTracker(300)
    intent = spec(CpuSpec(package_power_cap_pct_of_max=60))

    def figures(node: str, watts: float) -> TwinFigures:
        return tracker.status(
            node, intent, SchedulableClass.ECO, HW, NodePower(watts, "http"), 0.0,
            FacilityReading(), {}, {},
        )  # fmt: skip

    a = figures("a", 1160)
    assert figures("b", 1160) is a
    assert a.wire() == status(TwinTracker(300), NodePower(1160, "http"), 0.0)
    # The same node, the same inputs: the very same figures (the writer skips on identity).
    assert figures("a", 1160) is a
    other = figures("c", 900)
    assert other is not a
    assert other.measured_power_w == 900
