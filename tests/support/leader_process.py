"""A process that campaigns for one Lease, for multi-process leader-election tests.

    python -m tests.support.leader_process --kubeconfig K --name L --identity I --state-file F

It appends one line per transition to F: ``<unix time> leader`` when it starts leading and
``<unix time> follower [holder=<identity>]`` when it stops leading or sees another holder. SIGTERM
(or SIGINT) stops it gracefully: it releases the Lease if it holds it and exits 0. Timings default
to client-go's 15 s / 10 s / 2 s; tests that do not measure them pass faster ones.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path

from hack.cluster.runner import NAMESPACE
from joulie.kube.client import KubeClient
from joulie.kube.leader import LeaderElectionConfig, LeaderElector
from joulie.process.logs import configure_logging
from joulie.process.settings import LogFormat, LogLevel


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.support.leader_process")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", default=NAMESPACE)
    parser.add_argument("--name", required=True, help="name of the Lease")
    parser.add_argument("--identity", required=True)
    parser.add_argument("--state-file", required=True, type=Path)
    parser.add_argument("--lease-duration", type=float, default=15.0)
    parser.add_argument("--renew-deadline", type=float, default=10.0)
    parser.add_argument("--retry-period", type=float, default=2.0)
    parser.add_argument("--no-watch", action="store_true", help="poll only, like client-go")
    return parser.parse_args(argv)


async def campaign(args: argparse.Namespace) -> int:
    state_file: Path = args.state_file

    def note(state: str) -> None:
        with state_file.open("a") as f:
            f.write(f"{time.time():.6f} {state}\n")

    def on_new_leader(holder: str) -> None:
        if holder != args.identity:
            note(f"follower holder={holder}")

    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)

    config = LeaderElectionConfig(
        namespace=args.namespace,
        name=args.name,
        identity=args.identity,
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
        watch=not args.no_watch,
    )
    async with await KubeClient.from_kubeconfig(args.kubeconfig) as client:
        elector = LeaderElector(
            client,
            config,
            on_started_leading=lambda: note("leader"),
            on_stopped_leading=lambda: note("follower"),
            on_new_leader=on_new_leader,
        )
        await elector.run(stopping)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(LogFormat.JSON, LogLevel.INFO, stream=sys.stderr)
    return asyncio.run(campaign(args))


if __name__ == "__main__":
    sys.exit(main())
