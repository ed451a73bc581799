"""The ``simulate`` subcommand's arguments, kept apart from :mod:`joulie.cli.simulate` so that
building the CLI's parser imports neither numpy nor the engine."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from joulie.cli.arg_types import at_least

__all__ = ["add_parser"]


def _common_output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        type=Path,
        metavar="DIR",
        help="write results.json, table.txt, a CSV time series per run and PNG charts here",
    )
    parser.add_argument(
        "--format",
        choices=("table", "json"),
        default="table",
        help="what to print on standard output (default: table)",
    )
    parser.add_argument("--no-plots", action="store_true", help="with --output: skip the PNGs")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")


def add_parser(sub: Any) -> None:
    """The ``simulate`` subcommand (``sub`` is the CLI's subparsers object)."""
    simulate = sub.add_parser(
        "simulate",
        help="simulate Joulie on a virtual cluster: energy against job time, per baseline",
        description="Runs the embedded default scenario (a heterogeneous 500-node inventory "
        "of 8 hardware families, a generated day of work) for baselines A (no Joulie), B "
        "(static_partition) and C (queue_aware_v1) and prints a comparison table; "
        "--scenario steady-state runs a week with a day of warm-up instead. The options "
        "change the inventory, the workload, the baselines and seeds; the sub-commands run "
        "sweeps.",
    )
    simulate.add_argument(
        "--inventory",
        default="default",
        metavar="FILE_OR_NAME",
        help="an embedded inventory (default, exp01, exp01-5k, exp02, exp02-5k, exp03, "
        "exp03-5k) or an inventory file",
    )
    simulate.add_argument(
        "--trace", metavar="FILE", help="a JSONL workload trace (default: generate one)"
    )
    simulate.add_argument(
        "--hours",
        type=float,
        metavar="HOURS",
        help="hours of arrivals to generate (default: 24; steady-state: 168)",
    )
    simulate.add_argument(
        "--warmup-hours",
        type=float,
        metavar="HOURS",
        help="measure only from here to the end of arrivals: energy, completed work and the "
        "slowdown of the work submitted in that window, savings taken over it (default: none; "
        "steady-state: 24)",
    )
    simulate.add_argument(
        "--limit-hours",
        type=float,
        metavar="HOURS",
        help="stop each run here even if work remains (default: 10 x --hours)",
    )
    simulate.add_argument(
        "--baselines",
        default="A,B,C",
        metavar="LIST",
        help="comma list of A, B, C, D (default: A,B,C); D: class_caps, each GPU capped by "
        "the class of its pod, with performance work first in the queue",
    )
    simulate.add_argument(
        "--seeds", metavar="LIST", help="comma list of seeds (default: 1; steady-state: 1,2,3)"
    )
    simulate.add_argument(
        "--governors",
        action="store_true",
        help="B and C also write governor presets (GOVERNOR_CONTROL=all)",
    )
    simulate.add_argument(
        "--lifecycle",
        nargs="?",
        const="on",
        default="off",
        choices=("on", "off", "both"),
        help="run the node lifecycle too: idle nodes drained and powered off, booted again "
        "for pending work (baselines labelled +L); 'both' runs each baseline with and without "
        "it (knobs: --param lifecycle_idle_grace_s=600, lifecycle_boot_delay_s=300, "
        "lifecycle_min_nodes=0, ...)",
    )
    simulate.add_argument(
        "--gen",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a generator option, e.g. --gen load=0.8 --gen arrivals=diurnal (repeatable)",
    )
    simulate.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a policy, intent or engine setting, e.g. --param static_hp_frac=0.3 (repeatable)",
    )
    simulate.add_argument(
        "--workers",
        type=at_least(1),
        default=1,
        metavar="N",
        help="runs in parallel on this machine (default: 1)",
    )
    simulate.add_argument(
        "--scenario",
        default="default",
        metavar="NAME",
        help="an embedded scenario: 'default' (a day of Poisson arrivals) or 'steady-state' (a "
        "week of diurnal arrivals at offered load 0.6, the first day a warm-up, seeds 1,2,3); "
        "any other name labels the runs of the default settings. Options given still win.",
    )
    _common_output(simulate)

    commands = simulate.add_subparsers(dest="simulate_command", metavar="SUBCOMMAND")
    sweep = commands.add_parser("sweep", help="run a sweep file's grid on local cores")
    sweep.add_argument("file", type=Path, help="sweep file (YAML or JSON)")
    sweep.add_argument(
        "--workers",
        type=at_least(1),
        default=1,
        dest="sweep_workers",
        metavar="N",
        help="runs in parallel on this machine",
    )
    _common_output(sweep)

    job = commands.add_parser(
        "job", help="print a Kubernetes Indexed Job (and its ConfigMap) that runs a sweep"
    )
    job.add_argument("file", type=Path, help="sweep file (YAML or JSON)")
    job.add_argument("--image", required=True, metavar="IMAGE", help="the Joulie image")
    job.add_argument(
        "--namespace", default="default", metavar="NAMESPACE", help="the Job's namespace"
    )
    job.add_argument(
        "--name",
        default="joulie-sweep",
        metavar="NAME",
        help="the Job's name (its ConfigMap is NAME-specs)",
    )
    job.add_argument(
        "--results-claim",
        metavar="CLAIM",
        help="PersistentVolumeClaim the runs write to (default: an emptyDir, only for trying)",
    )
    job.add_argument(
        "--parallelism",
        type=at_least(1),
        metavar="N",
        help="pods running at once (default: the number of runs, at most 16)",
    )

    index = commands.add_parser("run-index", help="run one index of a sweep (the Job's pods)")
    index.add_argument(
        "--specs", type=Path, required=True, metavar="FILE", help="the sweep's specs.json"
    )
    index.add_argument(
        "--index", type=at_least(0), required=True, metavar="I", help="which spec to run"
    )
    index.add_argument(
        "--output",
        type=Path,
        required=True,
        dest="index_output",
        metavar="DIR",
        help="where run-<I>.json is written",
    )

    collect = commands.add_parser("collect", help="gather an Indexed Job's run files")
    collect.add_argument("dir", type=Path, help="the folder the runs wrote to")
    collect.add_argument(
        "--expected", type=at_least(1), metavar="N", help="how many runs there should be"
    )
    _common_output(collect)
