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
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

from joulie.api import keys
from joulie.cli.status.energy import EnergyReport, energy_report, energy_table
from joulie.cli.status.report import Report, build, table
from joulie.cli.status.views import TwinView, twin_view
from joulie.core.twin import lease_is_current
from joulie.kube.client import KubeClient
from joulie.kube.informer import Informer, InformerBundle
from joulie.kube.lease_watch import LeaseWatch
from joulie.kube.projections import SlimNode, SlimPod, node_projection, pod_projection
from joulie.manager import energy_store

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


def render(report: Report | EnergyReport, output: str) -> str:
    if output == "json":
        return json.dumps(report.to_json(), indent=2)
    if isinstance(report, EnergyReport):
        return energy_table(report)
    return table(report)


async def energy_accounts(client: KubeClient, namespace: str) -> EnergyReport:
    """The manager's energy accounts (empty before its first write). ClusterError when they
    cannot be read."""
    from joulie.kube.client import ApiError
    from joulie.kube.connection import ClusterError

    try:
        found = await client.request("GET", energy_store.path(namespace))
    except ApiError as exc:
        if exc.not_found:
            return energy_report(energy_store.StoredTotals())
        where = f"{namespace}/{energy_store.CONFIGMAP_NAME}"
        problem = f"reading the energy accounts ({where}) failed: {exc}"
        raise ClusterError(client.source, problem, config=False) from exc
    data = found.get("data") if isinstance(found, dict) else None
    try:
        return energy_report(energy_store.parse(data if isinstance(data, dict) else {}))
    except energy_store.UnusableStore as exc:
        problem = f"the energy accounts cannot be read: {exc}"
        raise ClusterError(client.source, problem, config=False) from exc


async def _print_loop(
    args: argparse.Namespace, out: TextIO, draw: Callable[[], Awaitable[str]]
) -> None:
    while True:
        text = await draw()
        if args.watch and args.output == "json":
            text = json.dumps(json.loads(text))  # one document per line
        elif args.watch and out.isatty():
            text = CLEAR + text
        print(text, file=out, flush=True)
        if not args.watch:
            return
        await asyncio.sleep(args.interval)


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
        if getattr(args, "energy", False):

            async def accounts() -> str:
                return render(await energy_accounts(client, args.manager_namespace), args.output)

            await _print_loop(args, out, accounts)
            return
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

            async def nodes() -> str:
                return render(caches.report(clock()), args.output)

            await _print_loop(args, out, nodes)
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
