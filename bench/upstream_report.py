"""Baselines A/B/C on upstream Joulie's three 5,000-node experiment inventories, for the
comparison with the savings upstream published (docs/simulator-report.md).

    python -m bench.upstream_report [--hours 60] [--seeds 1] [--workers 2] [--output DIR]
                                    [--inventories exp02-5k] [--lifecycle]

The policy parameters are upstream's where its experiment configurations give them (static
fraction per experiment, queue-aware base and limits for exp01, the GPU eco cap); everything
else is the manager's default, and the workload is the generator's default mix at its default
load, not upstream's trace. ``--lifecycle`` adds each baseline again with the node lifecycle
(``+L``, its default settings), to measure what powering idle nodes off saves and costs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from joulie.sim.report import comparison_table, write_outputs
from joulie.sim.run_spec import BASELINES, RunSpec
from joulie.sim.sweep import run_all

EXPERIMENTS: dict[str, dict[str, dict[str, Any]]] = {
    "exp01-5k": {
        "B": {"static_hp_frac": 0.30},
        "C": {
            "queue_hp_base_frac": 0.05,
            "queue_hp_min": 50,
            "queue_hp_max": 3750,
            "queue_perf_per_hp_node": 3,
        },
    },
    "exp02-5k": {
        "B": {"static_hp_frac": 0.35, "gpu_eco_cap_pct_of_max": 60.0},
        "C": {"queue_hp_base_frac": 0.35, "gpu_eco_cap_pct_of_max": 60.0},
    },
    "exp03-5k": {
        "B": {"static_hp_frac": 0.25, "gpu_eco_cap_pct_of_max": 70.0},
        "C": {"queue_hp_base_frac": 0.25, "gpu_eco_cap_pct_of_max": 70.0},
    },
}


def specs(
    hours: float,
    seeds: list[int],
    inventories: list[str] | None = None,
    lifecycle: bool = False,
) -> list[RunSpec]:
    return [
        RunSpec(
            scenario=inventory,
            inventory=inventory,
            baseline=baseline,
            seed=seed,
            hours=hours,
            params=EXPERIMENTS[inventory].get(baseline, {}),
            lifecycle=life,
        )
        for inventory in inventories or EXPERIMENTS
        for seed in seeds
        for baseline in BASELINES
        for life in ((False, True) if lifecycle else (False,))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=60.0)
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--output", type=Path)
    parser.add_argument(
        "--inventories",
        help=f"comma list of {', '.join(EXPERIMENTS)} (default all three)",
    )
    parser.add_argument(
        "--lifecycle", action="store_true", help="each baseline also with the node lifecycle"
    )
    args = parser.parse_args()
    inventories = args.inventories.split(",") if args.inventories else None
    unknown = sorted(set(inventories or ()) - set(EXPERIMENTS))
    if unknown:
        parser.error(f"--inventories: unknown {', '.join(unknown)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = specs(args.hours, seeds, inventories, args.lifecycle)

    def progress(fraction: float) -> None:
        print(f"{fraction:.0%} of {len(runs)} runs", file=sys.stderr, flush=True)

    results = run_all(runs, args.workers, progress=progress)
    if args.output:
        write_outputs(results, args.output)
    print(comparison_table(results))


if __name__ == "__main__":
    main()
