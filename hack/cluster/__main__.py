"""`python -m hack.cluster up|down|status`: a local control plane with KWOK nodes, for people.

    up [--inventory FILE] [--nodes N]   start it (and create nodes from an inventory)
    down                                stop everything `up` started
    status                              what runs, and how to reach it

The cluster lives in JOULIE_CLUSTER_DIR (default .cache/cluster in the checkout).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from hack.cluster.nodes import node_manifests
from hack.cluster.runner import REPO, ClusterError, LocalCluster, is_running
from joulie.api.inventory import InventoryError, load_inventory


def _work_dir() -> Path:
    return Path(os.environ.get("JOULIE_CLUSTER_DIR", REPO / ".cache" / "cluster"))


def up(inventory: Path | None, nodes: int | None) -> int:
    work_dir = _work_dir()
    if (work_dir / "state.json").exists():
        LocalCluster.attach(work_dir).down()
    # A fresh cluster every time: old etcd data would not match the new certificates.
    shutil.rmtree(work_dir, ignore_errors=True)
    cluster = LocalCluster(work_dir=work_dir)
    cluster.up()
    if inventory is not None:
        manifests = node_manifests(load_inventory(inventory), limit=nodes)
        started = time.monotonic()
        cluster.create_ready_nodes(manifests, timeout=300)
        print(f"{len(manifests)} KWOK nodes Ready in {time.monotonic() - started:.1f}s")
    print(f"export KUBECONFIG={cluster.admin_kubeconfig}")
    print(f"kubectl: {cluster.binaries}/kubectl")
    return 0


def down() -> int:
    work_dir = _work_dir()
    if not (work_dir / "state.json").exists():
        print("no cluster recorded in", work_dir)
        return 0
    LocalCluster.attach(work_dir).down()
    print("stopped")
    return 0


def status() -> int:
    work_dir = _work_dir()
    state_file = work_dir / "state.json"
    if not state_file.exists():
        print("no cluster recorded in", work_dir)
        return 1
    state = json.loads(state_file.read_text())
    running = 0
    for name, comp in state["components"].items():
        alive = comp["pid"] is not None and is_running(comp["pid"], comp["argv"][0])
        running += alive
        print(f"{name:20} {'running' if alive else 'stopped'}  pid {comp['pid']}")
    print(f"server: {state['server']}\nkubeconfig: {work_dir / 'kubeconfig'}")
    return 0 if running else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hack.cluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up_parser = sub.add_parser("up")
    up_parser.add_argument("--inventory", type=Path)
    up_parser.add_argument("--nodes", type=int, help="create only the first N nodes")
    sub.add_parser("down")
    sub.add_parser("status")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            return up(args.inventory, args.nodes)
        if args.command == "down":
            return down()
        return status()
    except (ClusterError, InventoryError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
