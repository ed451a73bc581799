"""Figures for the local control plane: build time, warm start, node registration, memory.

    python -m bench.cluster [--sizes 1000,5000] [--json FILE]

Prints a table and (optionally) JSON. Nothing here passes or fails on time.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from hack.cluster.nodes import node_manifests
from hack.cluster.runner import LocalCluster, bin_dir
from joulie.api.inventory import load_inventory

INVENTORY = Path(__file__).resolve().parents[1] / "tests/data/inventories/02-cluster-nodes-5k.yaml"


def rss_mib(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def recorded_build_seconds() -> dict[str, int]:
    """Per-component build time recorded by hack/build-binaries.sh at its last real build."""
    stamps = bin_dir().parent / "stamps"
    out = {}
    for stamp in sorted(stamps.iterdir()):
        for line in stamp.read_text().splitlines():
            if line.startswith("build_seconds="):
                out[stamp.name] = int(line.split("=", 1)[1])
    return out


def run(sizes: list[int]) -> dict[str, Any]:
    figures: dict[str, Any] = {"build_seconds_last_build": recorded_build_seconds()}
    manifests = node_manifests(load_inventory(INVENTORY))
    with tempfile.TemporaryDirectory(prefix="joulie-bench-") as tmp:
        # Long node leases, as a large real cluster would tune them (see LocalCluster).
        cluster = LocalCluster(
            work_dir=Path(tmp), log=lambda _: None, node_lease_seconds=600, node_grace_seconds=1200
        )
        started = time.monotonic()
        cluster.up()
        figures["warm_start_seconds"] = round(time.monotonic() - started, 2)
        try:
            created = 0
            for size in sorted(sizes):
                batch = manifests[created:size]
                t0 = time.monotonic()
                cluster.create_nodes(batch)
                created_at = time.monotonic() - t0
                cluster.wait_nodes_ready([m["metadata"]["name"] for m in batch], timeout=1800)
                figures[f"nodes_{size}"] = {
                    "added": len(batch),
                    "create_seconds": round(created_at, 2),
                    "all_ready_seconds": round(time.monotonic() - t0, 2),
                    "apiserver_rss_mib": round(rss_mib(cluster.components["apiserver"].pid), 1),
                    "etcd_rss_mib": round(rss_mib(cluster.components["etcd"].pid), 1),
                    "kwok_rss_mib": round(rss_mib(cluster.components["kwok"].pid), 1),
                }
                created = size
        finally:
            cluster.down()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,5000")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    figures = run([int(s) for s in args.sizes.split(",")])
    print(f"{'figure':44} value")
    for component, seconds in figures["build_seconds_last_build"].items():
        print(f"{'build (last real build) ' + component:44} {seconds} s")
    print(f"{'warm cluster start':44} {figures['warm_start_seconds']} s")
    for key, value in figures.items():
        if key.startswith("nodes_"):
            size = key.removeprefix("nodes_")
            print(
                f"{'register ' + size + ' nodes (+' + str(value['added']) + ') until Ready':44} "
                f"{value['all_ready_seconds']} s (POSTs {value['create_seconds']} s)"
            )
            print(
                f"{'  RSS at ' + size + ' nodes: apiserver / etcd / kwok':44} "
                f"{value['apiserver_rss_mib']} / {value['etcd_rss_mib']} / "
                f"{value['kwok_rss_mib']} MiB"
            )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
