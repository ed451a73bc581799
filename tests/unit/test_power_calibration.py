"""The power model held against published measurements and the laws a reader will check it by.

The GPU points are Zeus (NSDI '23) medians, computed here from the measured files in
``tests/data/zeus`` (Apache-2.0, see the README there): for every workload that reaches the board's
limit uncapped (an average draw of at least 80 % of the maximum, which is what a fully busy board
is in the model), the throughput and the energy per unit of work at each power limit relative to
the uncapped run, then the median over the workloads. The tolerances are stated per test.
"""

from __future__ import annotations

import csv
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.calibration import (
    BOARDS,
    ENERGY_TOLERANCE,
    THROUGHPUT_TOLERANCE,
    ZEUS,
    catalog_board,
    modelled,
    zeus_medians,
)
from joulie.core.power_model import (
    Controls,
    CpuPowerSpec,
    GpuPowerSpec,
    Load,
    NodePowerSpec,
    board_steady,
    steady_state,
)

# The tolerances (bench.calibration) are absolute, in shares of the uncapped run. The law has
# three parameters per board, fitted to every limit at once; the median workload still draws a
# little under the board's maximum, so the model errs on the pessimistic side near the top.


@pytest.mark.parametrize(("name", "gpu", "max_w"), BOARDS)
@pytest.mark.parametrize("cap_w", [150, 175, 200])
def test_the_gpu_law_meets_the_zeus_medians(name: str, gpu: str, max_w: int, cap_w: int) -> None:
    board = catalog_board(name)
    assert board.max_w == max_w
    measured_throughput, measured_energy, _ = zeus_medians(gpu, max_w)[cap_w]
    throughput, energy = modelled(board, cap_w)
    assert throughput == pytest.approx(measured_throughput, abs=THROUGHPUT_TOLERANCE)
    assert energy == pytest.approx(measured_energy, abs=ENERGY_TOLERANCE)


@pytest.mark.parametrize(("name", "gpu", "max_w"), BOARDS)
def test_a_moderate_cap_saves_energy_for_little_throughput(name: str, gpu: str, max_w: int) -> None:
    # The complaint the law answers: at 60-67 % of the maximum the old law lost 6-9 points more
    # throughput and saved 10 points less energy than measured.
    board = catalog_board(name)
    cap = 150 if gpu == "v100" else 200
    throughput, energy = modelled(board, cap)
    assert throughput > 0.82
    assert energy < 0.82


def test_the_a40_energy_minimum_is_where_it_was_measured() -> None:
    medians = zeus_medians("a40", 300)
    measured_best = min(medians, key=lambda limit: medians[limit][1])
    board = catalog_board("NVIDIA A40")
    caps = [board.min_cap_w + i for i in range(int(board.max_w - board.min_cap_w) + 1)]
    modelled_best = min(caps, key=lambda cap: modelled(board, cap)[1])
    # Measured, the minimum lies at 175 W (200 W is within 0.5 %); deep caps cost energy again.
    assert measured_best in (175, 200)
    assert 175 <= modelled_best <= 200
    assert modelled(board, 100)[1] > 1.3
    assert medians[100][1] > 1.3


def test_the_a40_bert_run_rises_again_below_the_knee() -> None:
    # One fixed piece of BERT training per limit (the profile file): energy falls to a minimum
    # and rises steeply below it; the model shows the same shape.
    rows = list(csv.DictReader((ZEUS / "A40-bert-base-uncased-gpu0.csv").open()))
    energy = {int(r["window_name"].rsplit("_", 1)[1]): float(r["gpu0_energy"]) for r in rows}
    assert energy[100] > energy[150] > energy[200] < energy[300]
    board = catalog_board("NVIDIA A40")
    assert modelled(board, 100)[1] > modelled(board, 150)[1] > modelled(board, 200)[1]
    assert modelled(board, 200)[1] < modelled(board, 300)[1]


@st.composite
def boards(draw: st.DrawFn) -> GpuPowerSpec:
    idle = draw(st.floats(5.0, 150.0))
    span = draw(st.floats(20.0, 800.0))
    floor_share = draw(st.floats(0.0, 0.3))
    min_share = floor_share + draw(st.floats(0.01, 0.3))
    knee_share = floor_share + draw(st.floats(0.02, 0.95 - floor_share))
    return GpuPowerSpec(
        count=1,
        idle_w=idle,
        max_w=idle + span,
        min_cap_w=idle + span * min(min_share, 0.99),
        knee_w=idle + span * knee_share,
        floor_w=idle + span * floor_share,
        cap_exponent=draw(st.floats(0.05, 0.95)),
    )


@given(boards(), st.floats(0.3, 1.0))
def test_energy_per_unit_of_work_has_one_minimum_at_or_above_the_knee(
    board: GpuPowerSpec, util: float
) -> None:
    steps = 400
    caps = [board.min_cap_w + (board.max_w - board.min_cap_w) * i / steps for i in range(steps + 1)]
    energy = []
    for cap in caps:
        watts, speed, _ = board_steady(board, util, Controls(gpu_cap_w=cap))
        energy.append(watts / speed)
    best = min(range(len(caps)), key=energy.__getitem__)
    # Falling to the minimum, never falling again after it (flat once the cap no longer binds).
    assert all(a >= b * (1 - 1e-12) for a, b in itertools.pairwise(energy[: best + 1]))
    assert all(b >= a * (1 - 1e-12) for a, b in itertools.pairwise(energy[best:]))
    # The knee scales with the work's draw: a board busy ``util`` meets it at this cap.
    draw_w = board_steady(board, util, Controls())[0]
    knee_w = board.idle_w + board.knee_share * (draw_w - board.idle_w)
    step = (board.max_w - board.min_cap_w) / steps
    assert caps[best] >= min(knee_w, caps[-1]) - step or best == 0


def test_one_busy_board_of_eight_is_capped_and_the_other_seven_idle() -> None:
    board = GpuPowerSpec(count=8, idle_w=100.0, max_w=700.0, min_cap_w=200.0)
    spec = NodePowerSpec(CpuPowerSpec(2, 60.0, 350.0, 175.0), board)
    one_busy = Load(gpu_util=1 / 8, gpu_boards=(1.0,))
    s = steady_state(spec, one_busy, Controls(gpu_cap_w=400.0))
    assert s.gpu_board_w == (400.0,) + (100.0,) * 7
    assert s.gpu_cap_binding
    assert s.gpu_board_speed[0] < 1.0
    assert s.gpu_board_speed[1:] == (1.0,) * 7
    # Judged on the node's average (175 W a board) the cap would never have bound.
    averaged = steady_state(spec, Load(gpu_util=1 / 8), Controls(gpu_cap_w=400.0))
    assert not averaged.gpu_cap_binding
    assert s.node_w < averaged.node_w + 300.0


def test_the_efficiency_preset_costs_full_load_work_only_the_all_core_gap() -> None:
    # A part that boosts to 3.7 GHz, runs 3.1 GHz with every core busy and 2.4 GHz nominal:
    # with every core busy the nominal ceiling costs 2.4 / 3.1, not 2.4 / 3.7.
    cpu = CpuPowerSpec(1, 60.0, 360.0, 180.0, nominal_ghz=2.4, boost_ghz=3.7, all_core_ghz=3.1)
    node = NodePowerSpec(cpu)
    full = steady_state(node, Load(cpu_util=1.0), Controls(cpu_preset="efficiency"))
    assert full.cpu_speed == pytest.approx(2.4 / 3.1)
    assert steady_state(node, Load(cpu_util=1.0), Controls()).cpu_speed == 1.0
    # Where nothing better is known, the all-core clock is the nominal one: no cost at all.
    plain = NodePowerSpec(CpuPowerSpec(1, 60.0, 360.0, 180.0, nominal_ghz=2.4, boost_ghz=3.7))
    assert (
        steady_state(plain, Load(cpu_util=1.0), Controls(cpu_preset="efficiency")).cpu_speed == 1.0
    )


def test_a_package_cap_is_held_against_package_power() -> None:
    # 80 W of the socket's 400 W at the wall is platform power (memory, fans): a 320 W package
    # cap does not bind on a package drawing 320 W, though the socket draws 400 W.
    cpu = CpuPowerSpec(1, 100.0, 320.0, 160.0, platform_w=80.0)
    node = NodePowerSpec(cpu)
    free = steady_state(node, Load(cpu_util=1.0), Controls())
    assert free.cpu_w == pytest.approx(400.0)
    at_package = steady_state(node, Load(cpu_util=1.0), Controls(cpu_cap_w=320.0))
    assert (at_package.cpu_cap_binding, at_package.cpu_speed) == (False, 1.0)
    capped = steady_state(node, Load(cpu_util=1.0), Controls(cpu_cap_w=250.0))
    assert capped.cpu_cap_binding
    assert capped.cpu_w == pytest.approx(250.0 + 80.0)


def test_memory_bound_work_that_never_reaches_the_cap_runs_at_full_speed() -> None:
    # A board kept 40 % busy (memory- or input-bound work) draws 100 + 0.4 x 600 = 340 W: a cap
    # at 60 % of the maximum (420 W) never binds on it, and it loses nothing.
    board = GpuPowerSpec(count=1, idle_w=100.0, max_w=700.0, min_cap_w=200.0)
    watts, speed, binding = board_steady(board, 0.4, Controls(gpu_cap_w=420.0))
    assert watts == pytest.approx(340.0)
    assert (speed, binding) == (1.0, False)
    # The same cap on a fully busy board costs throughput and saves energy per unit of work.
    watts, speed, binding = board_steady(board, 1.0, Controls(gpu_cap_w=420.0))
    assert binding
    assert speed < 1.0
    assert watts / speed < 700.0
