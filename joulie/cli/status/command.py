"""`joulie status`: the report over informers of Nodes, NodeTwins, Pods and the manager's Lease.

One list per kind to sync (never a request per node); with ``--watch`` the same watches keep the
report current and it is drawn again every interval. Finished pods are left out by a field
selector: a long-running cluster holds many more of them than of pods that count.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from joulie.api import keys
from joulie.cli.status.report import Report, build, table
from joulie.cli.status.views import TwinView, twin_view
from joulie.core.twin import lease_is_current
from joulie.kube.client import KubeClient
from joulie.kube.informer import Informer, InformerBundle
from joulie.kube.lease_watch import LeaseWatch
from joulie.kube.projections import SlimNode, SlimPod, node_projection, pod_projection

NODETWINS = f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}"
UNFINISHED = "status.phase!=Succeeded,status.phase!=Failed"
CLEAR = "\x1b[H\x1b[2J"


class StatusCaches(InformerBundle):
    """The four informers the report reads."""

    def __init__(self, client: KubeClient, manager_namespace: str) -> None:
        self.nodes: Informer[SlimNode] = Informer(client, "/api/v1/nodes", node_projection())
        self.twins: Informer[TwinView] = Informer(client, NODETWINS, twin_view)
        self.pods: Informer[SlimPod] = Informer(
            client,
            "/api/v1/pods",
            pod_projection(annotation_keys=(keys.WORKLOAD_CLASS_ANNOTATION,)),
            field_selector=UNFINISHED,
        )
        self.manager_lease = LeaseWatch(client, manager_namespace, keys.MANAGER_LEASE)
        self.informers: list[Informer[Any]] = [
            self.nodes,
            self.twins,
            self.pods,
            self.manager_lease.informer,
        ]

    def report(self, now: float) -> Report:
        lease = self.manager_lease.view()
        current = lease is not None and lease_is_current(lease.renewed_at, lease.duration_s, now)
        return build(
            self.nodes.values(),
            self.twins.values(),
            self.pods.values(),
            manager_lease_current=current,
        )


def render(report: Report, output: str) -> str:
    if output == "json":
        return json.dumps(report.to_json(), indent=2)
    return table(report)


async def show(
    args: argparse.Namespace,
    out: TextIO = sys.stdout,
    clock: Callable[[], float] = time.time,
) -> None:
    """Connect, sync, print the report; with ``args.watch``, again every interval until
    cancelled. ClusterError when the cluster cannot be used."""
    from joulie.kube.connection import connect, wait_synced

    stopping = asyncio.Event()
    async with await connect(args.kubeconfig, timeout=args.timeout) as client:
        caches = StatusCaches(client, args.manager_namespace)
        tasks = caches.start(stopping)
        try:
            await wait_synced(
                caches.wait_synced(),
                lambda: caches.informers,
                client.source,
                client.host,
                args.timeout,
            )
            while True:
                text = render(caches.report(clock()), args.output)
                if args.watch and args.output == "json":
                    text = json.dumps(json.loads(text))  # one document per line
                elif args.watch and out.isatty():
                    text = CLEAR + text
                print(text, file=out, flush=True)
                if not args.watch:
                    return
                await asyncio.sleep(args.interval)
        finally:
            stopping.set()
            for task in tasks:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*tasks, return_exceptions=True)


def run(args: argparse.Namespace) -> int:
    """The subcommand: 0, 1 when the cluster cannot be used, 2 for bad arguments."""
    import logging

    from joulie.kube.connection import ClusterError
    from joulie.process.logs import configure_logging
    from joulie.process.settings import LogFormat, LogLevel

    if not args.interval > 0 or not args.timeout > 0:
        print("joulie: --interval and --timeout must be more than 0 seconds", file=sys.stderr)
        return 2
    # Standard output carries the report; the informers' log lines go to standard error, and
    # their "retrying" warnings would only repeat the one line a failure ends with.
    configure_logging(LogFormat.AUTO, LogLevel.WARNING, stream=sys.stderr)
    logging.getLogger("joulie.informer").setLevel(logging.ERROR)
    try:
        asyncio.run(show(args))
    except ClusterError as exc:
        print(f"joulie: {exc}", file=sys.stderr)
        return 2 if exc.config else 1
    except KeyboardInterrupt:
        return 0
    return 0
