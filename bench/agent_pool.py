"""Agent pool-mode figures at 5,000 KWOK nodes on 2 shards: the first pass (every NodeHardware
published, every node brought in line), the steady pass against a 20 s CONTROL_INTERVAL, and each
agent's CPU per pass and peak RSS.

    python -m bench.agent_pool [--passes 3] [--interval 20] [--json FILE] [--tracemalloc N]

Reuses the benchmark cluster of bench.informer (JOULIE_BENCH_CLUSTER_DIR; run that first). The
simulator and the two agents run as `joulie` processes with the admin kubeconfig; there is no
manager, so no node is planned and the agents clear caps and presets once (restored), which is
the same request load as enforcing a spec. ``--tracemalloc N`` traces both agents
(:mod:`bench.heap`; timings then mean nothing) and prints each one's top N allocation sites after
its first pass and at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench import heap
from bench.informer import bench_cluster
from hack.cluster.roles import simulator_telemetry_settings
from hack.cluster.runner import free_port

JOULIE = str(Path(sys.executable).parent / "joulie")
TICKS = os.sysconf("SC_CLK_TCK")


def metric(port: int, name: str, **labels: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and labels.items() <= s.labels.items()
    )


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def wait(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--passes", type=int, default=3, help="steady passes to measure")
    parser.add_argument("--interval", type=float, default=20, help="CONTROL_INTERVAL, seconds")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="N")
    args = parser.parse_args()
    cluster = bench_cluster()
    cluster.up()
    sim_port, sim_metrics = free_port(), free_port()
    base = {
        **os.environ,
        "KUBECONFIG": str(cluster.admin_kubeconfig),
        "LOG_FORMAT": "json",
        "LOG_LEVEL": "warning",
    }
    processes: list[subprocess.Popen[bytes]] = []
    figures: dict[str, Any] = {"interval_s": args.interval}
    heaps: list[str] = []
    try:
        processes.append(
            subprocess.Popen(
                [JOULIE, "--role=simulator"],
                env={
                    **base,
                    "SIM_ADDR": f"127.0.0.1:{sim_port}",
                    "METRICS_ADDR": f"127.0.0.1:{sim_metrics}",
                },
            )
        )
        wait(
            lambda: httpx.get(f"http://127.0.0.1:{sim_metrics}/readyz").status_code == 200,
            300,
            "the simulator",
        )
        endpoint = f"http://127.0.0.1:{sim_port}"
        agents: list[tuple[subprocess.Popen[bytes], int]] = []
        started = time.monotonic()
        for shard in range(2):
            port = free_port()
            env = {
                **base,
                "METRICS_ADDR": f"127.0.0.1:{port}",
                "AGENT_MODE": "pool",
                "POOL_SHARDS": "2",
                "POD_NAME": f"joulie-agent-pool-{shard}",
                "CONTROL_INTERVAL": f"{args.interval}s",
                **simulator_telemetry_settings(endpoint),
            }
            argv = [JOULIE, "--role=agent"]
            if args.tracemalloc:
                argv = heap.command(heap_file(cluster.work_dir, shard), args.tracemalloc, argv[1:])
            process = subprocess.Popen(argv, env=env)
            processes.append(process)
            agents.append((process, port))

        def passes_done(count: int) -> bool:
            return all(
                metric(port, "joulie_agent_pass_duration_seconds_count") >= count
                for _, port in agents
            )

        wait(lambda: passes_done(1), 900, "the first pass of both agents")
        figures["first_pass_wall_s"] = round(time.monotonic() - started, 1)
        if args.tracemalloc:
            for shard, (process, _) in enumerate(agents):
                dumped = heap.dump(process, heap_file(cluster.work_dir, shard))
                heaps.append(f"agent {shard}, after its first pass: {dumped}")
        figures["served"] = [metric(port, "joulie_agent_served_nodes") for _, port in agents]
        figures["first_pass_s"] = [
            round(metric(port, "joulie_agent_pass_duration_seconds_sum"), 1) for _, port in agents
        ]
        figures["first_pass_cpu_s"] = [round(cpu_seconds(p.pid), 1) for p, _ in agents]
        cpu0 = [cpu_seconds(p.pid) for p, _ in agents]
        sum0 = [metric(port, "joulie_agent_pass_duration_seconds_sum") for _, port in agents]
        wait(
            lambda: passes_done(1 + args.passes),
            60 + args.passes * args.interval * 3,
            "the steady passes",
        )
        figures["steady_pass_s"] = [
            round((metric(port, "joulie_agent_pass_duration_seconds_sum") - s0) / args.passes, 2)
            for (_, port), s0 in zip(agents, sum0, strict=True)
        ]
        figures["steady_cpu_per_pass_s"] = [
            round((cpu_seconds(p.pid) - c0) / args.passes, 2)
            for (p, _), c0 in zip(agents, cpu0, strict=True)
        ]
        figures["failed_syncs"] = sum(
            metric(port, "joulie_agent_node_syncs_total", result="failed") for _, port in agents
        )
        figures["peak_rss_mib"] = [round(peak_rss_mib(p.pid), 1) for p, _ in agents]
        if args.tracemalloc:
            for shard, (process, _) in enumerate(agents):
                dumped = heap.dump(process, heap_file(cluster.work_dir, shard))
                heaps.append(f"agent {shard}, at the end: {dumped}")
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=60)
        cluster.down()
    print(f"{'figure':44} value")
    print(f"{'nodes served per shard':44} {figures['served']}")
    print(f"{'first pass, both shards (wall)':44} {figures['first_pass_wall_s']} s")
    print(f"{'first pass per shard':44} {figures['first_pass_s']} s")
    print(f"{'steady pass per shard':44} {figures['steady_pass_s']} s (interval {args.interval} s)")
    print(f"{'CPU per steady pass per shard':44} {figures['steady_cpu_per_pass_s']} s")
    print(f"{'peak RSS per agent':44} {figures['peak_rss_mib']} MiB")
    print(f"{'failed node syncs':44} {figures['failed_syncs']:.0f}")
    for text in heaps:
        print(text)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


def heap_file(work_dir: Path, shard: int) -> Path:
    return work_dir / f"heap-agent-{shard}.txt"


if __name__ == "__main__":
    main()
