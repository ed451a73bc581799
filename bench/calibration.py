"""The GPU power-cap law held against published measurements: the calibration table.

    python -m bench.calibration [--json FILE]

Prints, for every power limit of the Zeus (NSDI '23) V100 and A40 sweeps, the measured median
throughput and energy per unit of work next to the model's, and the differences; the markdown is
the table in ``docs/calibration.md``. The measured files are the project's copy in
``tests/data/zeus`` (Apache-2.0, see the README there); the unit tests in
``tests/unit/test_power_calibration.py`` pin the same points with these functions.

A point: the workloads that reach the board's limit uncapped (an average draw of at least 80 % of
its maximum, which is what a fully busy board is in the model); per workload the throughput
t(max) / t(limit) and the energy P(limit) t(limit) / (P(max) t(max)); the median over them.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from joulie.core.power_model import Controls, GpuPowerSpec, board_steady
from joulie.hardware.catalog import Catalog
from joulie.hardware.power_spec import gpu_power_spec

ZEUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "zeus"
REACHES_THE_LIMIT = 0.8
"""Workloads whose uncapped average draw is at least this share of the board's maximum."""

OLD_EXPONENT = 0.6
"""The law before the knee: throughput (cap / draw) ** 0.6 at every cap (the catalog's default
exponent then), shown for comparison."""
THROUGHPUT_TOLERANCE = 0.065
ENERGY_TOLERANCE = 0.05
"""Within both, a point agrees (absolute, in shares of the uncapped run)."""

BOARDS = (("Tesla V100-PCIE-32GB", "v100", 250), ("NVIDIA A40", "a40", 300))
"""(name as nvidia-smi reports it, Zeus file suffix, maximum power limit in W)."""


def zeus_medians(gpu: str, max_w: int) -> dict[int, tuple[float, float, int]]:
    """Power limit -> (median relative throughput, median relative energy per unit of work,
    number of workloads)."""
    runs: dict[tuple[str, ...], dict[int, tuple[float, float]]] = defaultdict(dict)
    with (ZEUS / f"summary_power_{gpu}.csv").open() as f:
        for row in csv.DictReader(f):
            key = (row["dataset"], row["network"], row["batch_size"], row["optimizer"])
            runs[key][int(row["power_limit"])] = (
                float(row["time_per_epoch"]),
                float(row["average_power"]),
            )
    chosen = [r for r in runs.values() if r[max_w][1] >= REACHES_THE_LIMIT * max_w]
    medians = {}
    for limit in sorted({limit for r in chosen for limit in r}):
        at = [r for r in chosen if limit in r]
        throughput = [r[max_w][0] / r[limit][0] for r in at]
        energy = [r[limit][0] * r[limit][1] / (r[max_w][0] * r[max_w][1]) for r in at]
        medians[limit] = (statistics.median(throughput), statistics.median(energy), len(at))
    return medians


def catalog_board(reported_name: str, catalog: Catalog | None = None) -> GpuPowerSpec:
    """One board of the catalog model ``reported_name`` matches, as the simulator models it."""
    catalog = catalog or Catalog.load()
    match = catalog.match_gpu(reported_name)
    if match.key is None:
        raise KeyError(f"{reported_name!r} is not in the catalog")
    return gpu_power_spec(catalog.gpu(match.key), 1)


def modelled(board: GpuPowerSpec, cap_w: float) -> tuple[float, float]:
    """(throughput, energy per unit of work) of a fully busy board at ``cap_w``, relative to the
    board uncapped."""
    free_w, free_speed, _ = board_steady(board, 1.0, Controls())
    watts, speed, _ = board_steady(board, 1.0, Controls(gpu_cap_w=cap_w))
    return speed / free_speed, (watts / speed) / (free_w / free_speed)


@dataclass(frozen=True)
class Point:
    board: str
    cap_w: int
    pct_of_max: float
    workloads: int
    measured_throughput: float
    model_throughput: float
    measured_energy: float
    model_energy: float
    old_throughput: float
    old_energy: float

    def agrees(self, throughput: float, energy: float) -> bool:
        return (
            abs(throughput - self.measured_throughput) <= THROUGHPUT_TOLERANCE
            and abs(energy - self.measured_energy) <= ENERGY_TOLERANCE
        )


def points() -> list[Point]:
    catalog = Catalog.load()
    rows = []
    for name, gpu, max_w in BOARDS:
        board = catalog_board(name, catalog)
        for cap, (throughput, energy, n) in zeus_medians(gpu, max_w).items():
            if cap == max_w:
                continue
            model_t, model_e = modelled(board, cap)
            old_t = (cap / max_w) ** OLD_EXPONENT
            old_e = (cap / max_w) / old_t
            share = 100.0 * cap / max_w
            rows.append(
                Point(
                    gpu.upper(), cap, share, n, throughput, model_t, energy, model_e, old_t, old_e
                )
            )
    return rows


def markdown(rows: list[Point]) -> str:
    lines = [
        "| board | cap W (% of max) | workloads | throughput: measured / model (diff) / old law "
        "| energy per work: measured / model (diff) / old law | agrees: model / old |",
        "|---|---:|---:|---:|---:|:---:|",
    ]
    for p in rows:
        new_ok = p.agrees(p.model_throughput, p.model_energy)
        old_ok = p.agrees(p.old_throughput, p.old_energy)
        lines.append(
            f"| {p.board} | {p.cap_w} ({p.pct_of_max:.0f} %) | {p.workloads} "
            f"| {p.measured_throughput:.3f} / {p.model_throughput:.3f} "
            f"({p.model_throughput - p.measured_throughput:+.3f}) / {p.old_throughput:.3f} "
            f"| {p.measured_energy:.3f} / {p.model_energy:.3f} "
            f"({p.model_energy - p.measured_energy:+.3f}) / {p.old_energy:.3f} "
            f"| {'yes' if new_ok else 'no'} / {'yes' if old_ok else 'no'} |"
        )
    new_total = sum(p.agrees(p.model_throughput, p.model_energy) for p in rows)
    old_total = sum(p.agrees(p.old_throughput, p.old_energy) for p in rows)
    lines.append("")
    lines.append(
        f"Within {THROUGHPUT_TOLERANCE} of throughput and {ENERGY_TOLERANCE} of energy: "
        f"the model {new_total} of {len(rows)} points, the old law {old_total} of {len(rows)}."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the points as JSON")
    args = parser.parse_args()
    rows = points()
    print(markdown(rows))
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(p) for p in rows], indent=2) + "\n")


if __name__ == "__main__":
    main()
