"""What energy accounting (issue #29) adds to the manager's steady reconcile at 5,000 nodes /
100,000 pods: ``python -m bench.manager --energy`` runs these passes after its first pass.

The benchmark cluster has no power source, and the manager's static one reads 0 W once per half
RECONCILE_INTERVAL: with RECONCILE_INTERVAL=1h every steady pass of ``bench.manager`` reuses the
first reading, so its accountant skips every node (a reading already counted) and attributes
nothing. Here the controller reads a plausible power per node instead, a new reading each pass,
``at`` advanced by RECONCILE_INTERVAL each time:

* each node's watts are its power model's (the planner's, uncontrolled) at 60 % CPU and GPU
  utilisation, the same in every pass, so the twin's status stays as the first pass wrote it and
  a steady pass still writes nothing;
* one reading at the power model's idle draw goes to the accountant alone before the accounted
  passes, so that the first of them closes an interval on every node (past the ``through`` of
  accounts an earlier run stored, which the accountant would skip as already counted).

The first reading builds every node's split plan (its CPU is reported apart; it closes no
interval). The passes: the first accounted one alone, then ``reconciles`` pairs of one pass
without the accountant and one with it (the controller's ``_energy`` set to None and back), so
both halves of a pair run on the same machine state; the accountant spans two readings, within
its gap of three intervals. The node lifecycle is off (SETTINGS). The accountant's memory is
traced afterwards: a fresh accountant (with counters of its own, its writes refused) and the
split plans' caches emptied, four readings accounted under tracemalloc, what is still
allocated after a collection.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from bench.informer import current_rss_mib
from joulie.core.power_model import Controls, Load, steady_state
from joulie.kube import metrics
from joulie.kube.writes import NotPermitted, Writer
from joulie.manager import energy_plans
from joulie.manager.controller import Controller
from joulie.manager.energy import EnergyAccountant, EnergyCounters, NodeModel
from joulie.manager.planner import Planner
from joulie.manager.power import NodePower, PowerReading

SETTINGS = {"LIFECYCLE_MODE": "off"}
"""The node lifecycle's dry-run pass holds every node of this cluster (none is Ready) with an
Event: 5,000 Events written over the next minutes, in whichever pass they interleaved with (a
pass yields while its writes run), CPU and writes included."""
STEADY_UTIL = 0.6
"""CPU and GPU utilisation of the steady readings."""
FALLBACK_W = (180.0, 300.0)
"""Idle and steady watts of a node the planner has no power model for."""
SOURCE = "bench"
BREATHER_S = 0.2
"""The event loop's time between two passes: a pass that writes nothing never yields, and
back-to-back slow passes (accounting, under the profiler) starved the Lease's renewal."""


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q * len(ordered)) - 1))]


class SteppedPower:
    """The controller's power reader: the same watts per node in every reading, each reading
    RECONCILE_INTERVAL after the last."""

    def __init__(self, models: Callable[[str], NodeModel | None], interval: float) -> None:
        self._models = models
        self.interval = interval
        self.at = time.time()
        self._steady: dict[str, NodePower] = {}
        self._idle: dict[str, NodePower] = {}

    def _watts(self, name: str) -> tuple[float, float]:
        model = self._models(name)
        if model is None:
            return FALLBACK_W
        spec = model[0]
        busy = Load(STEADY_UTIL, STEADY_UTIL, (STEADY_UTIL,) * spec.gpu_count)
        return (
            steady_state(spec, Load(), Controls()).node_w,
            steady_state(spec, busy, Controls()).node_w,
        )

    def _readings(self, names: Sequence[str]) -> None:
        if len(self._steady) == len(names) and all(n in self._steady for n in names):
            return
        for name in names:
            if name not in self._steady:
                idle, busy = self._watts(name)
                self._idle[name] = NodePower(idle, SOURCE)
                self._steady[name] = NodePower(busy, SOURCE)

    def idle_reading(self, names: Sequence[str]) -> PowerReading:
        """A reading at every node's idle draw, the next in time."""
        self._readings(names)
        self.at += self.interval
        return PowerReading(self.at, {n: self._idle[n] for n in names})

    async def reading(self, nodes: Sequence[str]) -> PowerReading:
        self._readings(nodes)
        self.at += self.interval
        if len(nodes) == len(self._steady):
            return PowerReading(self.at, self._steady)
        return PowerReading(self.at, {n: self._steady[n] for n in nodes})


def install(controller: Controller, interval: float) -> tuple[SteppedPower, EnergyAccountant]:
    """Give the controller the stepped reader and take its accountant away (the first pass runs
    without it); returns both."""
    accountant = controller._energy
    assert accountant is not None, "the manager role builds an accountant"
    power = SteppedPower(accountant._models, interval)
    controller._power = power  # type: ignore[assignment]
    controller._energy = None
    return power, accountant


def writes_by_resource() -> dict[str, float]:
    """Write requests sent so far, by "verb resource" (Lease renewals left out)."""
    out: dict[str, float] = {}
    for metric in metrics.REQUESTS.collect():
        for sample in metric.samples:
            labels = sample.labels
            if (
                sample.name.endswith("_total")
                and labels["verb"] in metrics.WRITE_VERBS
                and labels["resource"] != "leases"
            ):
                key = f"{labels['verb']} {labels['resource']}"
                out[key] = out.get(key, 0.0) + sample.value
    return out


def _caches() -> list[tuple[str, Any]]:
    """The split plans' lru caches (the saving factors' among them), by name."""
    return [
        (name, value)
        for name, value in sorted(vars(energy_plans).items())
        if callable(getattr(value, "cache_info", None))
    ]


def _summary(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    cpus = [r["cpu_seconds"] * 1000 for r in records]
    walls = [r["wall_seconds"] * 1000 for r in records]
    return {
        "passes": len(records),
        "cpu_p50_ms": round(statistics.median(cpus), 1),
        "cpu_p95_ms": round(percentile(cpus, 0.95), 1),
        "wall_p50_ms": round(statistics.median(walls), 1),
        "wall_p95_ms": round(percentile(walls, 0.95), 1),
        "writes_total": sum(r["writes"] for r in records),
    }


def _controlled(
    accountant: EnergyAccountant, profiles: Mapping[str, object]
) -> dict[str, list[int]]:
    """Per planned profile, [nodes, nodes whose intent puts controls in force]."""
    counts: dict[str, list[int]] = {}
    for name, profile in profiles.items():
        count = counts.setdefault(str(profile), [0, 0])
        count[0] += 1
        model = accountant._models(name)
        if model is not None and model[1] != Controls():
            count[1] += 1
    return counts


async def measure(
    controller: Controller,
    power: SteppedPower,
    accountant: EnergyAccountant,
    timed: Callable[[str], Awaitable[dict[str, Any]]],
    profiles: Mapping[str, object],
    pairs: int,
) -> dict[str, Any]:
    """The first accounted pass and the pairs (after the manager's first pass)."""
    names = list(profiles)
    figures: dict[str, Any] = {"nodes_with_controls": _controlled(accountant, profiles)}
    rss_before = current_rss_mib()
    cpu = time.process_time()
    await accountant.record(power.idle_reading(names))  # reads the stored accounts first
    if power.at <= accountant.totals.through:
        # An earlier run's stored accounts reach past this run's clock: the reading was
        # skipped as already counted. Continue after them.
        power.at = accountant.totals.through
        await accountant.record(power.idle_reading(names))
    # Every node's plan is built at its first reading, which closes no interval yet.
    figures["first_reading_cpu_ms"] = round((time.process_time() - cpu) * 1000, 1)
    controller._energy = accountant
    cold = await timed("cold")  # not profiled: the profile is of the steady passes
    await asyncio.sleep(BREATHER_S)
    rss_after_cold = current_rss_mib()
    figures["cold_pass"] = {
        "cpu_ms": round(cold["cpu_seconds"] * 1000, 1),
        "wall_ms": round(cold["wall_seconds"] * 1000, 1),
        "writes": cold["writes"],
    }
    plain: list[dict[str, Any]] = []
    accounted: list[dict[str, Any]] = []
    writes_before = writes_by_resource()
    # The accountant's own CPU in each accounted pass: the difference of two passes is below
    # this machine's noise once the accounting costs a few milliseconds.
    own: list[float] = []
    record = accountant.record

    async def timed_record(reading: PowerReading) -> None:
        cpu = time.process_time()
        try:
            await record(reading)
        finally:
            own.append(time.process_time() - cpu)

    accountant.record = timed_record  # type: ignore[method-assign]
    for _ in range(pairs):
        controller._energy = None
        plain.append(await timed("plain"))
        await asyncio.sleep(BREATHER_S)
        controller._energy = accountant
        accounted.append(await timed("accounting"))
        await asyncio.sleep(BREATHER_S)
    del accountant.record
    figures["record_cpu_ms"] = {
        "p50": round(statistics.median(own) * 1000, 2),
        "p95": round(percentile(own, 0.95) * 1000, 2),
    }
    after = writes_by_resource()
    figures["steady_writes_by_resource"] = {
        k: int(v - writes_before.get(k, 0.0))
        for k, v in after.items()
        if v > writes_before.get(k, 0.0)
    }
    figures["without"] = _summary(plain)
    figures["with"] = _summary(accounted)
    figures["cpu_ratio_p50"] = round(
        figures["with"]["cpu_p50_ms"] / figures["without"]["cpu_p50_ms"], 3
    )
    added = [a["cpu_seconds"] - p["cpu_seconds"] for p, a in zip(plain, accounted, strict=True)]
    figures["added_cpu_pairs_p50_ms"] = round(statistics.median(added) * 1000, 1)
    figures["rss_mib"] = {
        "before": round(rss_before, 1),
        "after_cold_pass": round(rss_after_cold, 1),
        "after_steady": round(current_rss_mib(), 1),
    }
    for name, cached in _caches():
        info = cached.cache_info()
        figures.setdefault("caches", {})[name] = {
            "hits": info.hits,
            "misses": info.misses,
            "size": info.currsize,
        }
    return figures


async def traced_memory(
    template: EnergyAccountant, planner: Planner, power: SteppedPower, names: Sequence[str]
) -> dict[str, Any]:
    """What a fresh accountant keeps after four readings (an idle one, then three accounted),
    factor cache included: traced blocks still allocated after a collection."""
    # Its writes are refused (it must not overwrite the role's stored accounts); it reads them.
    writer = Writer(template._writer.client, "joulie-bench", may_write=lambda: False)
    fresh = EnergyAccountant(
        template._cache,
        writer,
        template._namespace,
        power.interval,
        template._max_accounts,
        counters=EnergyCounters.registered(CollectorRegistry()),
        models=template._models,
    )
    fresh.follow_models(planner.on_model_change)  # as the controller has the role's follow
    for _, cached in _caches():
        cached.cache_clear()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        await fresh.record(power.idle_reading(names))
        after: list[tracemalloc.Snapshot] = []
        for _ in range(3):
            with contextlib.suppress(NotPermitted):  # the write, after the accounting
                await fresh.record(await power.reading(names))
            gc.collect()
            after.append(tracemalloc.take_snapshot())
    finally:
        tracemalloc.stop()
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    before = before.filter_traces(ignore)
    grown = [s.filter_traces(ignore).compare_to(before, "filename") for s in after]
    top = sorted(grown[-1], key=lambda d: d.size_diff, reverse=True)[:6]
    return {
        "after_first_accounted_mib": round(sum(d.size_diff for d in grown[0]) / 2**20, 2),
        "after_third_accounted_mib": round(sum(d.size_diff for d in grown[-1]) / 2**20, 2),
        "by_file": [
            f"{d.size_diff / 2**20:7.2f} MiB {d.count_diff:>8} blocks  {d.traceback}" for d in top
        ],
    }


def print_figures(figures: Mapping[str, Any]) -> None:
    cold, plain, acc = figures["cold_pass"], figures["without"], figures["with"]
    rss, memory = figures["rss_mib"], figures["memory"]
    for profile, (nodes, controlled) in sorted(figures["nodes_with_controls"].items()):
        title = f"energy: {profile} nodes / with controls in force"
        print(f"{title:52} {nodes} / {controlled}")
    print(
        f"{'energy: first reading (every plan built) CPU':52} {figures['first_reading_cpu_ms']} ms"
    )
    print(
        f"{'energy: first accounted pass (cold caches) CPU/wall':52} "
        f"{cold['cpu_ms']} / {cold['wall_ms']} ms, {cold['writes']} writes"
    )
    for title, s in (("without accounting", plain), ("with accounting", acc)):
        print(
            f"{'energy: steady CPU p50 / p95, ' + title:52} "
            f"{s['cpu_p50_ms']} / {s['cpu_p95_ms']} ms ({s['passes']} passes, "
            f"{s['writes_total']} writes)"
        )
    print(
        f"{'energy: CPU with / without (p50); added per pair p50':52} "
        f"{figures['cpu_ratio_p50']}; {figures['added_cpu_pairs_p50_ms']} ms"
    )
    own = figures["record_cpu_ms"]
    print(
        f"{'energy: accountant CPU per accounted pass p50 / p95':52} {own['p50']} / {own['p95']} ms"
    )
    writes = ", ".join(f"{k}: {v}" for k, v in figures["steady_writes_by_resource"].items())
    print(f"{'energy: writes in the steady passes, by resource':52} {writes or 'none'}")
    print(
        f"{'energy: RSS before / after cold pass / after steady':52} "
        f"{rss['before']} / {rss['after_cold_pass']} / {rss['after_steady']} MiB"
    )
    for name, c in figures.get("caches", {}).items():
        print(
            f"{'energy: cache ' + name + ' hits / misses / entries':52} "
            f"{c['hits']} / {c['misses']} / {c['size']}"
        )
    print(
        f"{'energy: traced, fresh accountant, 1st / 3rd pass':52} "
        f"{memory['after_first_accounted_mib']} / {memory['after_third_accounted_mib']} MiB"
    )
    print("energy: traced memory kept, by file:")
    for line in memory["by_file"]:
        print(f"  {line}")
