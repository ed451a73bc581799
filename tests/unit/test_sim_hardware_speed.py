"""Where work lands changes how long it takes: per-model speed, and caps that bind per board.

The figures the tests compare are the catalog's cited ones (dense tensor TFLOPS, memory
bandwidth, the all-core clock), so a reader can check every ratio against a datasheet.
"""

from __future__ import annotations

import pytest

from joulie.api.inventory import parse_inventory
from joulie.core.intents import IntentConfig
from joulie.core.pod_power import pod_demand
from joulie.core.power_model import Controls
from joulie.hardware.catalog import Catalog
from joulie.sim.cluster import Cluster, Job
from joulie.sim.engine import Engine, Scenario
from joulie.sim.fleet import build_fleet
from joulie.sim.pods import pod_manifest
from joulie.sim.trace import Workload
from tests.support.builders import inventory_group, workload

CATALOG = Catalog.load()


def gpu_node(product: str) -> dict[str, object]:
    return inventory_group(product.lower().replace(" ", "-"), gpus=8, product=product)


def gpu_work(kind: str, cpu_share: float = 0.0, gpu_share: float = 0.0) -> Workload:
    return workload(
        cpu_millis=8000,
        memory_bytes=64 << 30,
        gpus=1,
        cpu_sensitivity=cpu_share,
        gpu_sensitivity=gpu_share,
        gpu_util=0.9,
        kind=kind,
    )


def run_time_on(product: str, workload: Workload) -> float:
    scenario = Scenario(
        name="t",
        baseline="A",
        seed=1,
        inventory=parse_inventory({"nodes": [gpu_node(product)]}),
        workloads=[workload],
        catalog=CATALOG,
        policy=None,
    )
    result = Engine(scenario).simulate()
    assert result.makespan_s is not None
    return result.makespan_s


def board(product: str) -> tuple[float, float]:
    spec = CATALOG.gpu(CATALOG.match_gpu(product).key or "")
    return spec.dense_tensor_tflops, spec.memory_bandwidth_gbs


def test_an_h100_finishes_compute_bound_training_faster_than_an_l40s() -> None:
    training = gpu_work("gpu-training", gpu_share=0.8)
    h100 = run_time_on("NVIDIA H100 80GB HBM3", training)
    l40s = run_time_on("NVIDIA L40S", training)
    assert h100 < l40s
    # Nothing of it is CPU-bound, so all of it runs on the board at its dense tensor TFLOPS.
    (h100_tflops, _), (l40s_tflops, _) = board("NVIDIA H100 80GB HBM3"), board("NVIDIA L40S")
    assert l40s / h100 == pytest.approx(h100_tflops / l40s_tflops)
    assert h100_tflops / l40s_tflops == pytest.approx(989.5 / 362.1, rel=1e-3)


def test_the_cpu_share_of_gpu_work_runs_at_the_cpu_s_speed() -> None:
    # Half CPU-bound: the host part does not get faster with a faster board.
    mixed = gpu_work("gpu-training", cpu_share=0.5, gpu_share=0.4)
    h100 = run_time_on("NVIDIA H100 80GB HBM3", mixed)
    l40s = run_time_on("NVIDIA L40S", mixed)
    (h100_tflops, _), (l40s_tflops, _) = board("NVIDIA H100 80GB HBM3"), board("NVIDIA L40S")
    assert 1.0 < l40s / h100 < h100_tflops / l40s_tflops


def test_memory_bound_inference_runs_at_the_ratio_of_memory_bandwidths() -> None:
    inference = gpu_work("gpu-inference")
    h100 = run_time_on("NVIDIA H100 80GB HBM3", inference)
    l40s = run_time_on("NVIDIA L40S", inference)
    (_, h100_gbs), (_, l40s_gbs) = board("NVIDIA H100 80GB HBM3"), board("NVIDIA L40S")
    assert l40s / h100 == pytest.approx(h100_gbs / l40s_gbs)
    assert h100_gbs / l40s_gbs == pytest.approx(3350 / 864)


def test_a_cap_binds_on_the_one_busy_board_of_an_eight_gpu_node() -> None:
    fleet = build_fleet(
        parse_inventory({"nodes": [gpu_node("NVIDIA H100 80GB HBM3")]}), CATALOG, IntentConfig()
    )
    cluster = Cluster(fleet, ambient_c=22.0)
    workload = gpu_work("gpu-training", gpu_share=0.8)
    manifest = pod_manifest(workload, joulie_aware=False)
    job = Job(0, workload, pod_demand(manifest), manifest)
    cluster.attach([job])
    cluster.start(job, [0], 0.0)
    uncapped = job.speed
    cluster.set_controls(0, Controls(gpu_cap_w=400.0), 60.0)
    steady = cluster.steady[0]
    # The busy board (0.9 busy: 640 W of work) is held at 400 W; the seven idle ones are not.
    assert steady.gpu_board_w[0] == pytest.approx(400.0)
    assert steady.gpu_board_w[1:] == (100.0,) * 7
    assert steady.gpu_cap_binding
    assert job.speed < uncapped
    # The node's average board (150 W) is far under the cap: judged on it, nothing would bind.
    assert steady.gpu_w_per_gpu < 400.0
