"""Informer figures at scale: initial sync of 5,000 nodes and 100,000 pods, peak memory, watch
event throughput, and the same sync through kubernetes-asyncio's generated models.

    python -m bench.informer [--pods 100000] [--nodes 5000] [--json FILE]

The cluster (etcd + kube-apiserver only) and its objects are created once in
JOULIE_BENCH_CLUSTER_DIR (default ~/.cache/joulie/bench-informer) and reused by later runs.
Each measurement runs in a fresh process so its peak RSS is its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from hack.cluster.nodes import node_manifests
from hack.cluster.runner import LocalCluster
from joulie.api.inventory import load_inventory

INVENTORY = Path(__file__).resolve().parents[1] / "tests/data/inventories/02-cluster-nodes-5k.yaml"
WORK_DIR = Path(
    os.environ.get("JOULIE_BENCH_CLUSTER_DIR", Path.home() / ".cache/joulie/bench-informer")
)
NAMESPACES = 50


def bench_cluster() -> LocalCluster:
    """The benchmarks' API server and etcd (no scheduler, controllers or KWOK: only the
    objects matter), kept in WORK_DIR between runs."""
    return LocalCluster(
        work_dir=WORK_DIR,
        controller_manager=False,
        scheduler=False,
        kwok=False,
        log=lambda line: print(line, file=sys.stderr),
    )


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pod_manifest(i: int, node: dict[str, Any]) -> dict[str, Any]:
    """Pod ``i``, the same on every machine and in every run (its own seeded generator), so a
    set-up that stopped half-way can create exactly the pods that are missing."""
    rng = random.Random(i)
    gpu = any(k.endswith("/gpu") for k in node["status"]["capacity"])
    requests: dict[str, str] = {"cpu": rng.choice(["250m", "1", "2", "4"]), "memory": "2Gi"}
    if gpu and i % 3 == 0:
        resource_name = next(k for k in node["status"]["capacity"] if k.endswith("/gpu"))
        requests[resource_name] = "1"
    annotations = {"joulie.io/workload-class": "performance"} if i % 4 == 0 else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"job-{i:06d}",
            "labels": {"app": f"app-{i % 200}", "team": f"team-{i % 7}"},
            "annotations": annotations,
        },
        "spec": {
            "nodeName": node["metadata"]["name"],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example.com/train:1.0",
                    "command": ["python", "train.py", "--epochs", "10"],
                    "env": [{"name": "RANK", "value": str(i % 8)}],
                    "resources": {
                        "requests": requests,
                        "limits": {k: v for k, v in requests.items() if k != "cpu"},
                    },
                }
            ],
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
        },
    }


def count_objects(api: httpx.Client, path: str) -> int:
    """How many objects a collection holds, from a one-item list (the server counts the rest)."""
    response = api.get(path, params={"limit": 1})
    response.raise_for_status()
    body = response.json()
    return len(body.get("items") or ()) + int(body["metadata"].get("remainingItemCount") or 0)


def object_names(api: httpx.Client, path: str) -> set[str]:
    """``namespace/name`` (or ``name``) of every object in a collection, as metadata only."""
    names: set[str] = set()
    params: dict[str, Any] = {"limit": 1000}
    headers = {"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"}
    while True:
        response = api.get(path, params=params, headers=headers, timeout=120)
        response.raise_for_status()
        body = response.json()
        for item in body.get("items") or ():
            meta = item["metadata"]
            names.add(
                f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
            )
        token = body["metadata"].get("continue")
        if not token:
            return names
        params = {"limit": 1000, "continue": token}


def ensure_objects(cluster: LocalCluster, nodes: int, pods: int) -> dict[str, float]:
    """Make the cluster hold exactly the benchmark's objects, creating only what is missing.

    A complete cluster is recognised by its counts and reused as it is. Anything less (a first
    run, or one that was interrupted) is completed by name, so a set-up can always be re-run.
    """
    figures: dict[str, float] = {}
    manifests = node_manifests(load_inventory(INVENTORY), limit=nodes)
    with cluster.api() as api:
        have_nodes = count_objects(api, "/api/v1/nodes")
        have_pods = count_objects(api, "/api/v1/pods")
        if have_nodes >= nodes and have_pods >= pods:
            return figures
        existing = object_names(api, "/api/v1/nodes") | object_names(api, "/api/v1/pods")
    missing_nodes = [m for m in manifests if m["metadata"]["name"] not in existing]
    if missing_nodes:
        t0 = time.monotonic()
        cluster.create_objects("/api/v1/nodes", missing_nodes, workers=8)
        figures["create_nodes_seconds"] = round(time.monotonic() - t0, 1)
    if have_pods < pods:
        # No controller manager here to create each namespace's default ServiceAccount, and
        # admission wants it.
        namespaces = [f"bench-{n}" for n in range(NAMESPACES)]
        cluster.create_objects(
            "/api/v1/namespaces", [{"metadata": {"name": n}} for n in namespaces]
        )
        for namespace in namespaces:
            cluster.create_objects(
                f"/api/v1/namespaces/{namespace}/serviceaccounts",
                [{"metadata": {"name": "default"}}],
            )
        t0 = time.monotonic()
        created = 0
        for n, namespace in enumerate(namespaces):
            batch = [
                pod_manifest(i, manifests[i % nodes])
                for i in range(n, pods, NAMESPACES)
                if f"{namespace}/job-{i:06d}" not in existing
            ]
            cluster.create_objects(f"/api/v1/namespaces/{namespace}/pods", batch, workers=8)
            created += len(batch)
            print(
                f"  pods: {namespace} done, {created} created in {time.monotonic() - t0:.0f}s",
                file=sys.stderr,
            )
        figures["create_pods_seconds"] = round(time.monotonic() - t0, 1)
        figures["pods_created"] = created
    with cluster.api() as api:
        have_nodes = count_objects(api, "/api/v1/nodes")
        have_pods = count_objects(api, "/api/v1/pods")
    if have_nodes < nodes or have_pods < pods:
        raise SystemExit(
            f"set-up incomplete: {have_nodes}/{nodes} nodes, {have_pods}/{pods} pods; run again"
        )
    return figures


def setup_summary(setup: dict[str, float]) -> str:
    if not setup:
        return "none, the cluster was complete"
    parts = []
    if "create_nodes_seconds" in setup:
        parts.append(f"nodes in {setup['create_nodes_seconds']} s")
    if "create_pods_seconds" in setup:
        parts.append(f"{int(setup['pods_created'])} pods in {setup['create_pods_seconds']} s")
    return ", ".join(parts)


# --- measurements, each in its own process -----------------------------------------------


async def measure_slim(kubeconfig: str, watch_events: int) -> dict[str, Any]:
    from joulie.api.gpu import pod_gpu_count
    from joulie.kube.client import KubeClient
    from joulie.kube.informer import Informer
    from joulie.kube.projections import (
        node_projection,
        pod_projection,
        pods_by_annotation_and_phase,
        pods_by_node,
    )

    baseline = current_rss_mib()
    async with await KubeClient.from_kubeconfig(kubeconfig) as client:
        nodes = Informer(client, "/api/v1/nodes", node_projection())
        pods = Informer(
            client,
            "/api/v1/pods",
            pod_projection(annotation_keys=["joulie.io/workload-class"], gpu_count=pod_gpu_count),
            indexers={
                "node": pods_by_node,
                "class-phase": pods_by_annotation_and_phase("joulie.io/workload-class", "standard"),
            },
        )
        stopping = asyncio.Event()
        t0 = time.perf_counter()
        tasks = [asyncio.create_task(i.run(stopping)) for i in (nodes, pods)]
        await nodes.wait_synced(600)
        await pods.wait_synced(600)
        sync_seconds = time.perf_counter() - t0
        figures: dict[str, Any] = {
            "sync_seconds": round(sync_seconds, 2),
            "nodes": len(nodes),
            "pods": len(pods),
            "rss_baseline_mib": round(baseline, 1),
            "rss_after_sync_mib": round(current_rss_mib(), 1),
            "peak_rss_sync_mib": round(peak_rss_mib(), 1),
        }

        # Watch throughput: label N pods from 16 concurrent writers; time until all are seen.
        targets = pods.values()[:watch_events]
        seen = 0
        done = asyncio.Event()

        def on_update(old: Any, new: Any) -> None:
            nonlocal seen
            if new.annotations != old.annotations or new.labels != old.labels:
                seen += 1
            if seen >= len(targets):
                done.set()

        # Count every applied event, not only those that changed the projection.
        from joulie.kube import metrics
        from joulie.kube.informer import Handlers

        before = metrics.WATCH_EVENTS.labels("pods", "MODIFIED")._value.get()
        pods.add_handlers(Handlers(on_update=on_update))
        marker = str(random.randint(0, 10**9))
        sem = asyncio.Semaphore(16)

        async def touch(p: Any) -> None:
            async with sem:
                await client.request(
                    "PATCH",
                    f"/api/v1/namespaces/{p.namespace}/pods/{p.name}",
                    body={"metadata": {"annotations": {"bench": marker}}},
                    content_type="application/merge-patch+json",
                )

        t1 = time.perf_counter()
        await asyncio.gather(*(touch(p) for p in targets))
        written = time.perf_counter() - t1
        while (  # noqa: ASYNC110 - polling a metric on purpose
            metrics.WATCH_EVENTS.labels("pods", "MODIFIED")._value.get() - before < len(targets)
            and time.perf_counter() - t1 < 300
        ):
            await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - t1
        applied = metrics.WATCH_EVENTS.labels("pods", "MODIFIED")._value.get() - before
        figures["watch"] = {
            "events": int(applied),
            "seconds": round(elapsed, 2),
            "events_per_second": round(applied / elapsed, 1),
            "write_seconds": round(written, 2),
        }
        stopping.set()
        await asyncio.gather(*tasks)

        # The store's own cost per event, without the server in the loop.
        raw = await client.request("GET", "/api/v1/pods", params={"limit": 500})
        events = [{"type": "MODIFIED", "object": item} for item in raw["items"]]
        for e in events:
            e["object"]["metadata"]["annotations"] = {"joulie.io/workload-class": "performance"}
        t2 = time.perf_counter()
        rounds = 40
        for r in range(rounds):
            for e in events:
                e["object"]["status"]["phase"] = "Running" if r % 2 else "Pending"
                pods._apply(e)
        apply_seconds = time.perf_counter() - t2
        figures["apply_events_per_second"] = round(rounds * len(events) / apply_seconds)
        figures["peak_rss_total_mib"] = round(peak_rss_mib(), 1)
    return figures


async def measure_models(kubeconfig: str) -> dict[str, Any]:
    from joulie.kube.k8s_library import full_library

    library = full_library()  # Joulie itself loads only the client and the config loaders
    client, config = library.client, library.config

    baseline = current_rss_mib()
    configuration = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    async with client.ApiClient(configuration=configuration) as api_client:
        core = client.CoreV1Api(api_client)
        t0 = time.perf_counter()
        store: dict[str, Any] = {}
        for lister in (core.list_node, core.list_pod_for_all_namespaces):
            token = None
            while True:
                kwargs: dict[str, Any] = {"limit": 500}
                if token:
                    kwargs["_continue"] = token
                page = await lister(**kwargs)
                for item in page.items:
                    store[f"{item.metadata.namespace}/{item.metadata.name}"] = item
                token = page.metadata._continue
                if not token:
                    break
        seconds = time.perf_counter() - t0
    return {
        "sync_seconds": round(seconds, 2),
        "objects": len(store),
        "rss_baseline_mib": round(baseline, 1),
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }


def child(args: argparse.Namespace) -> None:
    if args.child == "slim":
        result = asyncio.run(measure_slim(args.kubeconfig, args.watch_events))
    else:
        result = asyncio.run(measure_models(args.kubeconfig))
    print(json.dumps(result))


def run_child(kind: str, kubeconfig: Path, watch_events: int) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.informer",
            "--child",
            kind,
            "--kubeconfig",
            str(kubeconfig),
            "--watch-events",
            str(watch_events),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--watch-events", type=int, default=5000)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", choices=("slim", "models"))
    parser.add_argument("--kubeconfig")
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    cluster = bench_cluster()
    cluster.up()
    try:
        figures: dict[str, Any] = {"setup": ensure_objects(cluster, args.nodes, args.pods)}
        figures["slim"] = run_child("slim", cluster.admin_kubeconfig, args.watch_events)
        figures["models"] = run_child("models", cluster.admin_kubeconfig, 0)
    finally:
        cluster.down()
    slim, models = figures["slim"], figures["models"]
    figures["speedup"] = round(models["sync_seconds"] / slim["sync_seconds"], 2)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    print(f"{'figure':52} value")
    print(f"{'set-up (objects created this run)':52} {setup_summary(figures['setup'])}")
    print(f"{'objects synced (nodes + pods)':52} {slim['nodes']} + {slim['pods']}")
    print(f"{'initial sync, slim informers':52} {slim['sync_seconds']} s")
    print(f"{'initial sync, kubernetes-asyncio models':52} {models['sync_seconds']} s")
    print(f"{'speed-up':52} {figures['speedup']}x")
    print(
        f"{'peak RSS holding the 5k/100k caches (at sync)':52} "
        f"{slim['peak_rss_sync_mib']} MiB (after imports {slim['rss_baseline_mib']} MiB)"
    )
    print(
        f"{'  RSS after sync / peak incl. watch benchmark':52} "
        f"{slim['rss_after_sync_mib']} / {slim['peak_rss_total_mib']} MiB"
    )
    print(f"{'peak RSS, models process':52} {models['peak_rss_mib']} MiB")
    w = slim["watch"]
    print(
        f"{'watch events applied end to end':52} {w['events']} in {w['seconds']} s "
        f"= {w['events_per_second']}/s (writes took {w['write_seconds']} s)"
    )
    print(
        f"{'store apply rate, no server in the loop':52} {slim['apply_events_per_second']} events/s"
    )


if __name__ == "__main__":
    main()
