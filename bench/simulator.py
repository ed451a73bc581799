"""Simulator service figures: telemetry GET latency (p50/p99) and requests/s on one core, with
5,000 nodes registered, and the time the manager's http power source takes to read them all.

    python -m bench.simulator [--seconds 15] [--concurrency 32] [--json FILE]

Reuses the benchmark cluster of bench.informer (JOULIE_BENCH_CLUSTER_DIR; run that first to
create its 5,000 nodes). The simulator runs as `joulie --role=simulator` pinned to CPU 0; the
load comes from this process on the other core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from bench.informer import bench_cluster
from hack.cluster.runner import free_port
from joulie.manager.power import HttpSource


async def load(base: str, nodes: list[str], seconds: float, concurrency: int) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(base_url=base, connector=connector) as client:

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < deadline:
                node = random.choice(nodes)
                t0 = time.perf_counter()
                async with client.get(f"/telemetry/{node}") as response:
                    await response.read()
                    if response.status != 200:
                        errors += 1
                latencies.append(time.perf_counter() - t0)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "requests": len(latencies),
        "errors": errors,
        "requests_per_second": round(len(latencies) / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 2),
    }


async def read_all(base: str, nodes: list[str]) -> tuple[float, int]:
    """One read of every node by the manager's NODE_POWER_SOURCE=http (its default concurrency)."""
    source = HttpSource(f"{base}/telemetry/{{node}}", timeout_s=5, concurrency=32)
    try:
        started = time.perf_counter()
        got = await source.read(nodes)
        elapsed = time.perf_counter() - started
    finally:
        await source.close()
    return round(elapsed, 3), sum(p.watts is None for p in got.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    cluster = bench_cluster()
    cluster.up()
    port, metrics_port = free_port(), free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.admin_kubeconfig),
        "SIM_ADDR": f"127.0.0.1:{port}",
        "METRICS_ADDR": f"127.0.0.1:{metrics_port}",
        "LOG_FORMAT": "json",
        "LOG_LEVEL": "warning",
    }
    joulie = str(Path(sys.executable).parent / "joulie")
    sim = subprocess.Popen(["taskset", "-c", "0", joulie, "--role=simulator"], env=env)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{metrics_port}/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if sim.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the simulator did not become ready")
            time.sleep(0.5)
        with cluster.api() as api:
            listed = api.get("/api/v1/nodes", params={"limit": 10000}).json()["items"]
        nodes = [n["metadata"]["name"] for n in listed]
        # The load generator keeps to the other core, so the simulator has CPU 0 to itself.
        os.sched_setaffinity(0, {1})
        figures = asyncio.run(
            load(f"http://127.0.0.1:{port}", nodes, args.seconds, args.concurrency)
        )
        figures["nodes"] = len(nodes)
        read_s, failed = asyncio.run(read_all(f"http://127.0.0.1:{port}", nodes))
        figures["http_source_read_all_seconds"] = read_s
        figures["http_source_read_all_failed"] = failed
        t0 = time.perf_counter()
        scrape = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=60)
        figures["metrics_scrape_seconds"] = round(time.perf_counter() - t0, 3)
        figures["metrics_scrape_bytes"] = len(scrape.content)
    finally:
        sim.terminate()
        sim.wait(timeout=30)
        cluster.down()
    print(f"{'figure':44} value")
    print(f"{'nodes registered':44} {figures['nodes']}")
    print(f"{'telemetry GET p50 / p99 (one core)':44} {figures['p50_ms']} / {figures['p99_ms']} ms")
    print(
        f"{'requests/s sustained (one core)':44} {figures['requests_per_second']} "
        f"({figures['requests']} requests, {figures['errors']} errors)"
    )
    print(
        f"{'http power source: read every node':44} {figures['http_source_read_all_seconds']} s "
        f"({figures['http_source_read_all_failed']} failed)"
    )
    print(
        f"{'/metrics scrape at this size':44} {figures['metrics_scrape_seconds']} s, "
        f"{figures['metrics_scrape_bytes']} bytes"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
