"""Controller manager figures at scale: reconcile time and API writes with 5,000 managed nodes and
100,000 pods in the informer caches.

    python -m bench.manager [--reconciles 20] [--gc MODE] [--json FILE] [--profile N]
        [--tracemalloc N] [--energy]

Reuses the benchmark cluster of bench.informer (JOULIE_BENCH_CLUSTER_DIR; run that first to
create its objects). The manager role runs in this process (static_partition, 20 % performance,
RECONCILE_INTERVAL=1h so that only the timed calls below reconcile at steady state). The first
pass writes every node's NodeTwin, profile label and twin status; the passes after it, at
constant demand, should write nothing. ``--profile N`` prints the top N cProfile entries of the
steady-state passes.

``--energy`` measures what energy accounting adds (issue #29; :mod:`bench.energy_accounts`): the
controller reads a plausible power per node, a new reading each pass, and the steady passes are
pairs without and with the accountant (the "steady" figures are those without); the node
lifecycle is off. ``--profile`` then profiles the accounted passes only; the peak RSS at the end
includes the accountant's traced passes (tracemalloc's own memory).

``--rss-every S`` samples the process's RSS every S seconds from a thread and prints the highest
sample of each phase (set-up, list and sync, first pass, steady passes, shutdown): where the
peak is reached. Off by default: the thread's reads are counted in the passes' CPU time.

``--gc policy`` (the default) installs the runtime's garbage-collector policy, as the process
would (``joulie.process.gc_policy``); ``--gc freeze`` only its freeze after large lists,
``--gc threshold`` only its young-generation threshold, and ``--gc default`` leaves CPython's
collector as it is.
Every collection during the steady passes is timed either way. ``--tracemalloc N`` traces
allocations (slow: figures of time are then meaningless) and prints the N files holding the most
memory after sync and after the first pass.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import threading
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench import energy_accounts, heap
from bench.informer import bench_cluster, ensure_objects, peak_rss_mib
from joulie.kube import metrics
from joulie.kube.writes import NotPermitted

READY_TIMEOUT = 900.0
FIRST_PASS_TIMEOUT = 3600.0
PROFILED = frozenset({"bench", "accounting"})
"""The passes ``--profile`` covers (with ``--energy``, the accounted ones)."""


def writes_excluding_leases() -> float:
    """Write requests sent so far, Lease renewals left out."""
    total = 0.0
    for metric in metrics.REQUESTS.collect():
        for sample in metric.samples:
            if not sample.name.endswith("_total"):
                continue
            labels = sample.labels
            if labels["verb"] in metrics.WRITE_VERBS and labels["resource"] != "leases":
                total += sample.value
    return total


class RssPhases:
    """The highest RSS sampled in each phase of the run, from a thread reading /proc/self/statm
    (the peak that ``ru_maxrss`` reports says how high, not when)."""

    def __init__(self, every: float) -> None:
        self.phase = "set-up"
        self.peaks: dict[str, float] = {}
        self._every = every
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-phases", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def enter(self, phase: str) -> None:
        self._sample()
        self.phase = phase

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        self._sample()
        return {k: round(v, 1) for k, v in self.peaks.items()}

    def _sample(self) -> None:
        with open("/proc/self/statm", "rb") as f:
            rss = int(f.read().split()[1]) * self._page / 2**20
        if rss > self.peaks.get(self.phase, 0.0):
            self.peaks[self.phase] = rss

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self._sample()


def grown_sites(before: tracemalloc.Snapshot, limit: int) -> str:
    """The lines whose traced memory grew most since ``before`` (the worker's first pass runs
    before the bench reports the sync, so "after sync" holds what that pass kept)."""
    now = tracemalloc.take_snapshot()
    stats = now.compare_to(before, "lineno")
    grown = sum(s.size_diff for s in stats)
    lines = [f"traced memory grown since the first pass started: {grown / 2**20:+.1f} MiB"]
    for stat in stats[:limit]:
        frame = stat.traceback[0]
        lines.append(
            f"  {stat.size_diff / 2**20:+8.2f} MiB {stat.count_diff:>+9} blocks  "
            f"{frame.filename.split('/work/main/')[-1]}:{frame.lineno}"
        )
    return "\n".join(lines)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(q * len(ordered)) - 1))
    return ordered[index]


class GcPauses:
    """Every cyclic collection, timed (independently of the policy's own metric)."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._started))

    def summary(self, since: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for generation in range(3):
            times = [t for g, t in self.pauses[since:] if g == generation]
            out[f"gen{generation}"] = {
                "collections": len(times),
                "total_ms": round(sum(times) * 1000, 1),
                "max_ms": round(max(times, default=0.0) * 1000, 1),
            }
        return out


class Timed:
    """Wraps ``role.reconcile`` so every call, the role's own worker's included, is serialized
    and measured (wall time, CPU time, writes)."""

    def __init__(
        self, reconcile: Callable[[], Awaitable[None]], phases: RssPhases | None = None
    ) -> None:
        self._reconcile = reconcile
        self._lock = asyncio.Lock()
        self.records: list[dict[str, Any]] = []
        self.profiler: cProfile.Profile | None = None
        self._phases = phases
        self.before_first: Any = None
        """With ``--tracemalloc``: the traced heap as the first pass starts."""

    async def __call__(self, source: str = "worker") -> dict[str, Any]:
        async with self._lock:
            if not self.records:
                if self._phases is not None:
                    self._phases.enter("first pass")
                if tracemalloc.is_tracing():
                    self.before_first = tracemalloc.take_snapshot()
            writes0 = writes_excluding_leases()
            cpu0 = time.process_time()
            wall0 = time.perf_counter()
            if self.profiler is not None and source in PROFILED:
                self.profiler.enable()
            refused = False
            try:
                await self._reconcile()
            except NotPermitted:
                # Leadership lost mid-pass: a pass that blocks the event loop for seconds (the
                # accounting's, under the profiler) starves the Lease's renewal. What ran before
                # the refused write is measured; the figures say how many passes it hit.
                refused = True
            finally:
                if self.profiler is not None:
                    self.profiler.disable()
            record = {
                "refused": refused,
                "source": source,
                "wall_seconds": time.perf_counter() - wall0,
                "cpu_seconds": time.process_time() - cpu0,
                "writes": int(writes_excluding_leases() - writes0),
            }
            self.records.append(record)
            if self._phases is not None and len(self.records) == 1:
                self._phases.enter("after the first pass")
            return record


async def measure(
    kubeconfig: str,
    reconciles: int,
    profile_top: int,
    gc_mode: str,
    trace_top: int,
    with_energy: bool = False,
    phases: RssPhases | None = None,
) -> dict[str, Any]:
    from joulie.kube.client import KubeClient
    from joulie.manager.role import ManagerRole
    from joulie.manager.settings import ManagerSettings
    from joulie.process.gc_policy import DEFAULT_YOUNG_THRESHOLD, GcPolicy

    os.environ["POD_NAMESPACE"] = "default"
    loaded = ManagerSettings.from_env(
        {
            "RECONCILE_INTERVAL": "1h",
            "POLICY_TYPE": "static_partition",
            "STATIC_HP_FRAC": "0.2",
        }
        | (energy_accounts.SETTINGS if with_energy else {})
    )
    if loaded.problems:
        raise SystemExit(f"settings: {loaded.problems}")
    settings = loaded.settings
    assert settings.reconcile_interval == 3600.0, settings.reconcile_interval

    figures: dict[str, Any] = {"gc": gc_mode}
    policy = GcPolicy(
        young_threshold=None if gc_mode == "freeze" else DEFAULT_YOUNG_THRESHOLD,
        min_objects=2**62 if gc_mode == "threshold" else 1000,
    )
    if gc_mode != "default":
        policy.install()
    pauses = GcPauses()
    gc.callbacks.append(pauses)
    if trace_top:
        heap.start()

    def enter(phase: str) -> None:
        if phases is not None:
            phases.enter(phase)

    enter("list, sync and wait to lead")
    async with await KubeClient.from_kubeconfig(kubeconfig) as client:
        role = ManagerRole(settings, client)
        stopping = asyncio.Event()
        t0 = time.perf_counter()
        task = asyncio.create_task(role.run(stopping))
        while role.controller is None:  # noqa: ASYNC110 - run() builds it before its first await
            await asyncio.sleep(0)
        timed = Timed(role.controller.reconcile, phases)
        # The worker calls self.reconcile: the instance attribute routes it through the timer.
        role.controller.reconcile = timed  # type: ignore[method-assign,assignment]
        if with_energy:
            power, accountant = energy_accounts.install(
                role.controller, settings.reconcile_interval
            )
        try:
            deadline = time.monotonic() + READY_TIMEOUT
            while not (role.is_ready() and role.is_leader):
                if task.done():
                    task.result()
                    raise SystemExit("the manager role stopped before it was ready")
                if time.monotonic() > deadline:
                    raise SystemExit(f"not ready/leader after {READY_TIMEOUT}s: {role.status()}")
                await asyncio.sleep(0.05)
            figures["ready_seconds"] = round(time.perf_counter() - t0, 2)
            # The policy's one collection-and-freeze after the sync is start-up work, not a
            # steady reconcile's: let it happen before anything is timed.
            while policy.pending:  # noqa: ASYNC110 - a timer of its own, no event to wait on
                await asyncio.sleep(0.05)
            assert role.cache is not None
            figures["nodes_cached"] = len(role.cache.nodes)
            figures["pods_cached"] = len(role.cache.pods)
            figures["performance_pods"] = role.cache.performance_pods()
            figures["peak_rss_at_sync_mib"] = round(peak_rss_mib(), 1)
            if trace_top:
                figures["memory_after_sync"] = heap.top_sites(trace_top, "after sync")
                if timed.before_first is not None:
                    figures["memory_grown_in_first_pass"] = grown_sites(
                        timed.before_first, trace_top
                    )

            # The first pass: whichever reconcile comes first (the worker's own, started as soon
            # as it leads and has synced, or ours, which then waits behind it).
            await asyncio.wait_for(timed("bench"), FIRST_PASS_TIMEOUT)
            first = timed.records[0]
            figures["first_pass"] = {
                "source": first["source"],
                "wall_seconds": round(first["wall_seconds"], 3),
                "cpu_seconds": round(first["cpu_seconds"], 3),
                "writes": first["writes"],
            }
            # The worker's queued trigger (if ours came first) runs now, before the timed set.
            await asyncio.sleep(0.5)
            async with timed._lock:
                pass
            if trace_top:
                figures["memory_after_first_pass"] = heap.top_sites(
                    trace_top, "after the first pass"
                )

            enter("steady passes")
            if profile_top:
                timed.profiler = cProfile.Profile()
            steady: list[dict[str, Any]] = []
            pauses_before = len(pauses.pauses)
            if with_energy:
                profiles = role.planned().result.profiles
                names = list(profiles)
                figures["energy"] = await energy_accounts.measure(
                    role.controller, power, accountant, timed, profiles, reconciles
                )
                steady = [r for r in timed.records if r["source"] == "plain"]
            else:
                for _ in range(reconciles):
                    steady.append(await timed("bench"))
            figures["steady_gc"] = pauses.summary(pauses_before)
            if with_energy:
                figures["energy"]["memory"] = await energy_accounts.traced_memory(
                    accountant, role.controller._planner, power, names
                )
            walls = [r["wall_seconds"] for r in steady]
            cpus = [r["cpu_seconds"] for r in steady]
            writes = [r["writes"] for r in steady]
            figures["steady"] = {
                "reconciles": len(steady),
                "wall_p50_ms": round(statistics.median(walls) * 1000, 1),
                "wall_p99_ms": round(percentile(walls, 0.99) * 1000, 1),
                "cpu_p50_ms": round(statistics.median(cpus) * 1000, 1),
                "cpu_p99_ms": round(percentile(cpus, 0.99) * 1000, 1),
                "writes_per_reconcile_max": max(writes),
                "writes_total": sum(writes),
            }
            figures["reconciles_total"] = len(timed.records)
            figures["worker_reconciles"] = sum(r["source"] == "worker" for r in timed.records)
            figures["refused_passes"] = sum(r["refused"] for r in timed.records)
            if timed.profiler is not None:
                out = io.StringIO()
                stats = pstats.Stats(timed.profiler, stream=out)
                stats.sort_stats("cumulative").print_stats(profile_top)
                stats.sort_stats("tottime").print_stats(profile_top)
                figures["profile"] = out.getvalue()
        finally:
            enter("shutdown")
            stopping.set()
            await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 120)
    figures["peak_rss_mib"] = round(peak_rss_mib(), 1)
    figures["frozen_objects"] = gc.get_freeze_count()
    gc.callbacks.remove(pauses)
    policy.uninstall()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reconciles", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    parser.add_argument(
        "--gc", choices=("policy", "freeze", "threshold", "default"), default="policy"
    )
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="N")
    parser.add_argument(
        "--energy",
        action="store_true",
        help="steady passes without and with energy accounting (bench.energy_accounts)",
    )
    parser.add_argument("--rss-every", type=float, default=0.0, metavar="S")
    args = parser.parse_args()
    phases = RssPhases(args.rss_every) if args.rss_every > 0 else None
    if phases is not None:
        phases.start()

    import logging

    from joulie.process.logs import configure_logging
    from joulie.process.runtime import event_loop_factory
    from joulie.process.settings import LogFormat, LogLevel

    configure_logging(LogFormat.JSON, LogLevel.WARNING)
    logging.getLogger().setLevel(logging.WARNING)

    cluster = bench_cluster()
    cluster.up()
    try:
        figures: dict[str, Any] = {"setup": ensure_objects(cluster, args.nodes, args.pods)}
        # The loop the process runs its roles on (uvloop): its TLS buffers and timings are
        # the manager's own; asyncio's loop allocates and zero-fills 256 KiB per connection.
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            figures.update(
                runner.run(
                    measure(
                        str(cluster.admin_kubeconfig),
                        args.reconciles,
                        args.profile,
                        args.gc,
                        args.tracemalloc,
                        args.energy,
                        phases,
                    )
                )
            )
    finally:
        cluster.down()
    if phases is not None:
        figures["rss_peak_by_phase_mib"] = phases.stop()
    profile = figures.pop("profile", None)
    memory = [
        figures.pop(k, None)
        for k in ("memory_after_sync", "memory_grown_in_first_pass", "memory_after_first_pass")
    ]
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    first, steady = figures["first_pass"], figures["steady"]
    print(f"{'figure':52} value")
    print(
        f"{'objects cached (nodes + pods)':52} {figures['nodes_cached']} + {figures['pods_cached']}"
    )
    print(f"{'performance pods (running + pending)':52} {figures['performance_pods']}")
    print(f"{'start to synced and leading':52} {figures['ready_seconds']} s")
    print(
        f"{'first pass: wall / CPU':52} {first['wall_seconds']} / {first['cpu_seconds']} s "
        f"({first['source']})"
    )
    print(f"{'first pass: API writes (leases excluded)':52} {first['writes']}")
    print(
        f"{'steady reconcile wall p50 / p99':52} "
        f"{steady['wall_p50_ms']} / {steady['wall_p99_ms']} ms ({steady['reconciles']} passes)"
    )
    print(
        f"{'steady reconcile CPU p50 / p99':52} {steady['cpu_p50_ms']} / {steady['cpu_p99_ms']} ms"
    )
    print(
        f"{'steady writes per reconcile (max / total)':52} "
        f"{steady['writes_per_reconcile_max']} / {steady['writes_total']}"
    )
    print(
        f"{'peak RSS at sync / at end':52} "
        f"{figures['peak_rss_at_sync_mib']} / {figures['peak_rss_mib']} MiB"
    )
    for phase, mib in figures.get("rss_peak_by_phase_mib", {}).items():
        print(f"{'highest RSS sampled: ' + phase:52} {mib} MiB")
    for generation, g in figures["steady_gc"].items():
        print(
            f"{'steady GC ' + generation + ': collections / total / max':52} "
            f"{g['collections']} / {g['total_ms']} / {g['max_ms']} ms"
        )
    print(f"{'GC mode / objects frozen':52} {figures['gc']} / {figures['frozen_objects']}")
    if figures["refused_passes"]:
        print(
            f"{'passes whose writes were refused (leadership lost)':52} {figures['refused_passes']}"
        )
    if "energy" in figures:
        energy_accounts.print_figures(figures["energy"])
    for text in memory:
        if text:
            print(text)
    if profile:
        print(profile)


if __name__ == "__main__":
    main()
