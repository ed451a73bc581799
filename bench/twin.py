"""The twin's per-reconcile CPU cost at scale, without a cluster: every node's status fields as the
manager computes them (TwinTracker: readings that change every time, and steady ones), and turning
one Prometheus answer with a series per node into readings.

    python -m bench.twin [--nodes 5000] [--rounds 20] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from joulie.api.enums import Profile, SchedulableClass
from joulie.api.nodetwin import CpuSpec, GpuPowerCap, GpuSpec, NodeTwinSpec
from joulie.core.twin import TwinHardware
from joulie.manager.facility import FacilityReading
from joulie.manager.power import NodePower, node_watts_by_label
from joulie.manager.promql import parse_instant_result
from joulie.manager.twin_status import TwinTracker


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
    }


def run(nodes: int, rounds: int) -> dict[str, object]:
    hw = TwinHardware(360, 2, 192, 8, 400)
    spec = NodeTwinSpec(
        node_name="n",
        profile=Profile.ECO,
        cpu=CpuSpec(package_power_cap_pct_of_max=60),
        gpu=GpuSpec(power_cap=GpuPowerCap(cap_pct_of_max=60)),
    )
    facility = FacilityReading(ambient_c=24, it_power_w=3e6)
    names = [f"node-{i:05d}" for i in range(nodes)]
    tracker = TwinTracker(trend_window_s=300)
    times: dict[str, list[float]] = {"changing": [], "steady": []}
    for r in range(2 * rounds):
        # First every node's power moves at every reading, then it holds still.
        mode = "changing" if r < rounds else "steady"
        started = time.perf_counter()
        for i, name in enumerate(names):
            watts = 1000.0 + (i % 97) * 10 + (r if mode == "changing" else rounds)
            tracker.status(
                name,
                spec,
                SchedulableClass.ECO,
                hw,
                NodePower(watts, "prometheus"),
                r * 60.0,
                facility,
                {},
                {},
            )
        times[mode].append(time.perf_counter() - started)
    compute_times = times["changing"]
    steady_times = times["steady"][2:]  # once the trend has settled to 0

    body = json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [
                    {"metric": {"__name__": "w", "node": n, "job": "x"}, "value": [1.0, "812.5"]}
                    for n in names
                ],
            },
        }
    )
    parse_times = []
    for _ in range(rounds):
        started = time.perf_counter()
        series = parse_instant_result(json.loads(body))
        mapped, _ = node_watts_by_label([(s.labels, s.value) for s in series], "node")
        parse_times.append(time.perf_counter() - started)
    assert len(mapped) == nodes
    return {
        "nodes": nodes,
        "rounds": rounds,
        "twin_status_all_nodes_changing": _ms(compute_times),
        "twin_status_all_nodes_steady": _ms(steady_times),
        "prometheus_answer_bytes": len(body),
        "prometheus_parse_and_map": _ms(parse_times),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    figures = run(args.nodes, args.rounds)
    print(f"{'figure':<48} {'p50 ms':>10} {'max ms':>10}")
    for key in (
        "twin_status_all_nodes_changing",
        "twin_status_all_nodes_steady",
        "prometheus_parse_and_map",
    ):
        value = figures[key]
        assert isinstance(value, dict)
        label = f"{key} ({args.nodes} nodes)"
        print(f"{label:<48} {value['p50_ms']:>10} {value['max_ms']:>10}")
    print(f"Prometheus answer: {figures['prometheus_answer_bytes']:,} bytes")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
