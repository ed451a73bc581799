"""The ``status`` subcommand's arguments, kept apart from :mod:`joulie.cli.status.command` so that
building the CLI's parser does not import the Kubernetes client for every other subcommand."""

from __future__ import annotations

from typing import Any

from joulie.cli.arg_types import seconds


def add_parser(sub: Any) -> None:
    """The ``status`` subcommand's arguments (``sub`` is the CLI's subparsers object)."""
    status = sub.add_parser(
        "status",
        help="the cluster's energy state: a summary and one row per node",
        description="Reads KUBECONFIG (or --kubeconfig, or the in-cluster account). Also "
        "installed as kubectl-joulie, so `kubectl joulie status` runs it.",
    )
    status.add_argument(
        "--output", "-o", choices=("table", "json"), default="table", help="what to print"
    )
    status.add_argument("--watch", "-w", action="store_true", help="redraw until interrupted")
    status.add_argument(
        "--energy",
        action="store_true",
        help="energy used per namespace and workload class, from the manager's accounts",
    )
    status.add_argument(
        "--interval", type=seconds, default=2.0, metavar="SECONDS", help="--watch: redraw period"
    )
    status.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig file (default: KUBECONFIG)"
    )
    status.add_argument(
        "--manager-namespace",
        default="joulie-system",
        metavar="NAMESPACE",
        help="where the manager's Lease is (twins are fresh only while it is renewed), and "
        "its energy accounts",
    )
    status.add_argument(
        "--timeout",
        type=seconds,
        default=15.0,
        metavar="SECONDS",
        help="give up when the API server has not answered for this long",
    )
