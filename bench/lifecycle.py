"""Node lifecycle figures at scale: the time of one lifecycle pass over 5,000 managed nodes with
100,000 pods in the caches.

    python -m bench.lifecycle [--passes 20] [--json FILE]

Reuses the benchmark cluster of bench.informer (JOULIE_BENCH_CLUSTER_DIR; created on the first
run). The manager role runs in this process in the lifecycle's default mode (dry-run) with
RECONCILE_INTERVAL and LIFECYCLE_INTERVAL at 1h, so only the timed passes run. That cluster has
no kubelets or KWOK: no node is Ready and none has a Lease, so every node derives to unpaired
and the circuit breaker holds them all. A pass does its full work all the same: a tuple and a
matrix look-up per node, the limits over every candidate, a report each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench.informer import bench_cluster, ensure_objects, peak_rss_mib

READY_TIMEOUT = 600.0


async def measure(kubeconfig: str, passes: int) -> dict[str, Any]:
    from joulie.kube.client import KubeClient
    from joulie.manager.role import ManagerRole
    from joulie.manager.settings import ManagerSettings

    os.environ["POD_NAMESPACE"] = "default"
    loaded = ManagerSettings.from_env({"RECONCILE_INTERVAL": "1h", "LIFECYCLE_INTERVAL": "1h"})
    if loaded.problems:
        raise SystemExit(f"settings: {loaded.problems}")
    figures: dict[str, Any] = {}
    async with await KubeClient.from_kubeconfig(kubeconfig) as client:
        role = ManagerRole(loaded.settings, client)
        stopping = asyncio.Event()
        task = asyncio.create_task(role.run(stopping))
        try:
            deadline = time.monotonic() + READY_TIMEOUT
            while not (role.is_ready() and role.is_leader and role.lifecycle is not None):
                if task.done():
                    task.result()
                    raise SystemExit("the manager role stopped before it was ready")
                if time.monotonic() > deadline:
                    raise SystemExit(f"not ready after {READY_TIMEOUT}s: {role.status()}")
                await asyncio.sleep(0.05)
            lifecycle = role.lifecycle
            assert role.cache is not None
            figures["nodes_cached"] = len(role.cache.nodes)
            figures["pods_cached"] = len(role.cache.pods)
            await lifecycle.run_pass()  # the first: reports every node once
            walls, cpus = [], []
            for _ in range(passes):
                cpu0, wall0 = time.process_time(), time.perf_counter()
                await lifecycle.run_pass()
                walls.append(time.perf_counter() - wall0)
                cpus.append(time.process_time() - cpu0)
            walls.sort()
            figures["pass_wall_ms_p50"] = round(statistics.median(walls) * 1000, 1)
            figures["pass_wall_ms_p95"] = round(walls[int(0.95 * (len(walls) - 1))] * 1000, 1)
            figures["pass_cpu_ms_mean"] = round(statistics.fmean(cpus) * 1000, 1)
            figures["peak_rss_mib"] = round(peak_rss_mib(), 1)
        finally:
            stopping.set()
            await asyncio.wait_for(task, 60)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    import logging

    from joulie.process.logs import configure_logging
    from joulie.process.settings import LogFormat, LogLevel

    configure_logging(LogFormat.JSON, LogLevel.WARNING)
    logging.getLogger().setLevel(logging.WARNING)
    cluster = bench_cluster()
    cluster.up()
    try:
        figures: dict[str, Any] = {"setup": ensure_objects(cluster, args.nodes, args.pods)}
        figures.update(asyncio.run(measure(str(cluster.admin_kubeconfig), args.passes)))
    finally:
        cluster.down()
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    print("node lifecycle pass (dry-run), one process")
    for key, value in figures.items():
        print(f"  {key}: {value}")


if __name__ == "__main__":
    main()
