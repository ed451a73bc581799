"""DaemonSet-mode agent figures on a fake 2-socket Intel node: resident memory, and CPU per pass
turned into the share of one core it costs at a 20 s CONTROL_INTERVAL (it runs on every node of
the fleet; budget: 80 MiB RSS, 1 % of a core).

    python -m bench.agent_daemon [--passes 60] [--pass-interval 1] [--interval 20] [--json FILE]

Starts a local cluster of its own (the kube-apiserver alone is enough), one agent with an eco
NodeTwin in force, and measures over ``--passes`` steady passes run ``--pass-interval`` apart
(a short interval makes the measurement quick; every steady pass does the same reads), plus the
idle cost between passes (informer heartbeats, metrics endpoint) measured separately.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.agent_pool import JOULIE, cpu_seconds, metric, peak_rss_mib, wait
from hack.cluster.runner import LocalCluster, free_port
from joulie.api import keys
from tests.support.sysfs_trees import intel_xeon_8260

NODE = "bench-daemon-0"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def start_agent(cluster: LocalCluster, work: Path, interval: float) -> tuple[Any, int]:
    tree = intel_xeon_8260(work / "root")
    tree.put("/proc/sys/kernel/random/boot_id", "bench-boot")
    port = free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.admin_kubeconfig),
        "LOG_FORMAT": "json",
        "LOG_LEVEL": "warning",
        "METRICS_ADDR": f"127.0.0.1:{port}",
        "NODE_NAME": NODE,
        "HOST_ROOT": str(tree.root),
        "STATE_DIR": str(work / "state"),
        "GOVERNOR_WRITES": "true",
        "CONTROL_INTERVAL": f"{interval}s",
    }
    process = subprocess.Popen([JOULIE, "--role=agent"], env=env)
    return process, port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--passes", type=int, default=60)
    parser.add_argument("--pass-interval", type=float, default=1.0)
    parser.add_argument("--interval", type=float, default=20.0, help="the interval to report at")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds to measure idle cost")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="joulie-bench-daemon-") as tmp:
        work = Path(tmp)
        cluster = LocalCluster(work_dir=work / "cluster", log=lambda line: None)
        cluster.up()
        process = None
        try:
            with cluster.api() as api:
                api.post(
                    f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}",
                    json={
                        "apiVersion": keys.API_VERSION,
                        "kind": keys.NODE_TWIN_KIND,
                        "metadata": {"name": NODE},
                        "spec": {
                            "nodeName": NODE,
                            "profile": "eco",
                            "cpu": {
                                "packagePowerCapWatts": 120,
                                "governor": {"preset": "efficiency"},
                            },
                        },
                    },
                ).raise_for_status()
            figures: dict[str, Any] = {"report_interval_s": args.interval}
            # Steady passes, back to back at a short interval.
            process, port = start_agent(cluster, work / "steady", args.pass_interval)
            wait(lambda: metric(port, "joulie_agent_passes_total", result="ok") >= 5, 120, "passes")
            cpu0, passes0 = cpu_seconds(process.pid), metric(port, "joulie_agent_passes_total")
            wait(
                lambda: metric(port, "joulie_agent_passes_total") >= passes0 + args.passes,
                args.passes * args.pass_interval * 3 + 60,
                "the measured passes",
            )
            cpu1, passes1 = cpu_seconds(process.pid), metric(port, "joulie_agent_passes_total")
            per_pass = (cpu1 - cpu0) / (passes1 - passes0)
            figures["cpu_ms_per_pass"] = round(per_pass * 1000, 2)
            figures["failed_passes"] = metric(port, "joulie_agent_passes_total", result="failed")
            process.terminate()
            process.wait(30)
            # Idle: the real interval, so no pass runs while measuring the rest.
            process, port = start_agent(cluster, work / "idle", 3600)
            wait(lambda: metric(port, "joulie_agent_passes_total") >= 1, 120, "the first pass")
            time.sleep(2)
            cpu0 = cpu_seconds(process.pid)
            time.sleep(args.idle)
            idle_share = (cpu_seconds(process.pid) - cpu0) / args.idle
            figures["idle_core_pct"] = round(idle_share * 100, 3)
            figures["core_pct_at_interval"] = round(
                (per_pass / args.interval + idle_share) * 100, 3
            )
            figures["rss_mib"] = round(rss_mib(process.pid), 1)
            figures["peak_rss_mib"] = round(peak_rss_mib(process.pid), 1)
        finally:
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(30)
            cluster.down()
    print(f"{'figure':<24}{'value':>12}")
    for key, value in figures.items():
        print(f"{key:<24}{value!s:>12}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    sys.exit(0)


if __name__ == "__main__":
    main()
