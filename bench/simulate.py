"""The standalone simulator's speed: wall time and peak memory of one run, and how run time grows
with the cluster.

    python -m bench.simulate [--hours 60] [--baselines A,B,C] [--scale-hours 24]
                             [--scale-nodes 1000,5000,20000] [--json FILE] [--lifecycle]

The inventory is upstream's exp02 (5,000 nodes, 8 hardware families) with 60 simulated hours of
generated arrivals. The budget figure stops each run at 60 simulated hours, as upstream's
standalone runs stopped at a fixed window (15-30 minutes of wall time each, by its report); the
second set runs the same workload until every workload finished (the engine's normal mode,
which simulates nearly twice as long). Each run happens in a fresh process
(``python -m bench.simulate --one SPEC``), so its peak RSS is its own and nothing is warm from
the run before. The scaling runs multiply or divide every node group of that inventory.
``--lifecycle`` times every run with the node lifecycle on (what it costs in wall time).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from joulie.sim.run_spec import RunSpec
from joulie.sim.scenario import load_named_inventory

UPSTREAM_S = (15 * 60, 30 * 60)


def _one(spec_json: str) -> None:
    """Child process: run one spec, print wall time, peak RSS and what it simulated."""
    from joulie.sim.engine import simulate
    from joulie.sim.scenario import scenario_of

    spec = RunSpec.model_validate_json(spec_json)
    started = time.perf_counter()
    scenario = scenario_of(spec)
    built = time.perf_counter()
    result = simulate(scenario)
    done = time.perf_counter()
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "baseline": spec.baseline + ("+L" if spec.lifecycle else ""),
                "nodes": result.nodes,
                "workloads": result.workloads,
                "simulated_h": round(result.simulated_s / 3600, 1),
                "setup_s": round(built - started, 2),
                "run_s": round(done - built, 2),
                "wall_s": round(done - started, 2),
                "peak_rss_mib": round(peak_kib / 1024),
                "makespan_h": round(result.makespan_s / 3600, 1) if result.makespan_s else None,
            }
        )
    )


def measure(spec: RunSpec) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.simulate", "--one", spec.model_dump_json()],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    figures: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return figures


def scaled_inventory(nodes: int, folder: Path) -> str:
    """The exp02 5k inventory with every group's replicas scaled to about ``nodes`` in all."""
    base = load_named_inventory("exp02-5k")
    factor = nodes / base.node_count()
    groups = [
        {**g.model_dump(exclude_none=True), "replicas": max(1, round(g.replicas * factor))}
        for g in base.nodes
    ]
    path = folder / f"exp02-{nodes}.yaml"
    path.write_text(yaml.safe_dump({"nodes": groups}))
    return str(path)


def _table(rows: list[dict[str, Any]], title: str) -> str:
    columns = list(rows[0])
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in columns]
    lines = [title, "  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True))]
    lines += [
        "  ".join(str(r[c]).rjust(w) for c, w in zip(columns, widths, strict=True)) for r in rows
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--hours", type=float, default=60.0)
    parser.add_argument("--baselines", default="A,B,C")
    parser.add_argument("--scale-hours", type=float, default=24.0)
    parser.add_argument("--scale-nodes", default="1000,5000,20000")
    parser.add_argument("--scale-baseline", default="B")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--lifecycle", action="store_true", help="runs with the node lifecycle")
    args = parser.parse_args()
    if args.one:
        _one(args.one)
        return
    main_rows = []
    for limit in (args.hours, None):
        for baseline in args.baselines.split(","):
            spec = RunSpec(
                inventory="exp02-5k",
                baseline=baseline,
                hours=args.hours,
                limit_hours=limit,
                lifecycle=args.lifecycle,
            )
            main_rows.append({"until": "limit" if limit else "done", **measure(spec)})
    print(
        _table(
            main_rows,
            f"exp02 5,000 nodes, {args.hours:g} h of arrivals: stopped at {args.hours:g} h "
            "(limit), and run until every workload finished (done)",
        )
    )
    for row in main_rows:
        low, high = UPSTREAM_S
        print(
            f"  {row['baseline']}: {low / row['wall_s']:.0f}-{high / row['wall_s']:.0f}x faster "
            "than upstream's 15-30 min"
        )
    scale_rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for nodes in (int(n) for n in args.scale_nodes.split(",")):
            spec = RunSpec(
                inventory=scaled_inventory(nodes, Path(tmp)),
                baseline=args.scale_baseline,
                hours=args.scale_hours,
                lifecycle=args.lifecycle,
            )
            scale_rows.append(measure(spec))
    print()
    print(
        _table(
            scale_rows,
            f"scaling: baseline {args.scale_baseline}, {args.scale_hours:g} h of arrivals",
        )
    )
    if args.json:
        args.json.write_text(json.dumps({"main": main_rows, "scaling": scale_rows}, indent=2))


if __name__ == "__main__":
    main()
