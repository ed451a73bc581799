"""The simulator's bookkeeping on its own: hardware from node labels, load from pods, controls,
and results that depend only on the sequence of events in simulated time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from joulie.api import keys
from joulie.api.telemetry import ControlRequest
from joulie.hardware.catalog import Catalog
from joulie.hardware.recognition import hardware_view
from joulie.kube.projections import SlimNode, SlimPod, node_projection
from joulie.sim.kwok_hardware import Simulation, UnknownNode, node_load, node_spec
from tests.support.builders import kwok_node, node_group

CATALOG = Catalog.load()
PROJECT = node_projection(
    annotation_keys=[keys.HW_CPU_MODEL_ANNOTATION, keys.HW_GPU_MODEL_ANNOTATION]
)
NOW = datetime(2026, 11, 29, tzinfo=UTC)


def node(name: str, cpu: str, gpu: str = "", gpus: int = 0, cores: int = 64) -> SlimNode:
    group = node_group(
        node_name=name, cpu=cpu, cpu_cores=cores, memory_gib=256, product=gpu, gpus=gpus
    )
    return PROJECT(kwok_node(name, group))


def pod(
    name: str,
    node_name: str,
    cpu_millis: int,
    gpus: int = 0,
    namespace: str = "ns",
    **annotations: str,
) -> SlimPod:
    return SlimPod(
        namespace=namespace,
        name=name,
        node_name=node_name,
        phase="Running",
        annotations=annotations,
        labels={},
        cpu_millis=cpu_millis,
        gpus=gpus,
        deleting=False,
        owner_kind="",
    )


@pytest.mark.parametrize("key", sorted(CATALOG.cpus))
def test_every_catalog_cpu_builds_a_power_spec(key: str) -> None:
    spec, summary = node_spec(node("n", key), CATALOG)
    assert summary.cpu_model == key
    assert spec.cpu.sockets == 2
    assert summary.cpu_max_w >= CATALOG.cpu(key).tdp_w * 2


@pytest.mark.parametrize("key", sorted(CATALOG.gpus))
def test_every_catalog_gpu_builds_a_power_spec(key: str) -> None:
    spec, summary = node_spec(node("n", "AMD EPYC 9654", key, gpus=4), CATALOG)
    assert summary.gpu_model == key
    assert spec.gpu is not None
    assert spec.gpu.max_w == CATALOG.gpu(key).max_w


def test_unknown_hardware_gets_generic_parts() -> None:
    spec, summary = node_spec(node("n", "Mystery CPU 1", "Mystery GPU", gpus=2), CATALOG)
    assert summary.cpu_model == "Mystery CPU 1"
    assert spec.gpu is not None
    assert spec.idle_w > 0


def test_gpu_product_label_keys_are_honoured_as_the_manager_honours_them() -> None:
    # A GPU node known only through a product label the operator configured: the simulator
    # models the model the manager plans for, from the same recognition.
    raw = {
        "metadata": {
            "name": "n",
            "labels": {
                keys.HW_CPU_MODEL_LABEL: "AMD-EPYC-9654",
                keys.HW_CPU_SOCKETS_LABEL: "2",
                "example.com/accelerator": "NVIDIA-L40S",
            },
        },
        "status": {"allocatable": {"cpu": "192", "nvidia.com/gpu": "4"}},
    }
    labelled = PROJECT(raw)
    custom = ("example.com/accelerator",)
    spec, summary = node_spec(labelled, CATALOG, custom)
    view = hardware_view(
        None, labelled.labels, labelled.annotations, labelled.allocatable, CATALOG, custom
    )
    assert (summary.cpu_model, summary.gpu_model, summary.gpu_count) == (
        view.cpu_model,
        view.gpu_model,
        view.gpu_count,
    )
    assert summary.gpu_model == "NVIDIA_L40S"
    assert spec.gpu is not None
    assert spec.gpu.max_w == CATALOG.gpu("NVIDIA_L40S").max_w
    # Without the key the product is not found: generic GPUs, no model.
    _, default = node_spec(labelled, CATALOG)
    assert default.gpu_model is None
    # The simulation passes its configured keys down.
    sim = Simulation(CATALOG, lambda _: (), gpu_product_label_keys=custom)
    sim.upsert_node(labelled, 0.0)
    assert sim.nodes["n"].hardware.gpu_model == "NVIDIA_L40S"


def test_load_from_requests_and_utilisation_annotations() -> None:
    pods = [
        pod("a", "n", 32_000),
        pod(
            "b",
            "n",
            16_000,
            gpus=2,
            **{
                keys.SIM_CPU_UTILIZATION_ANNOTATION: "0.5",
                keys.SIM_GPU_UTILIZATION_ANNOTATION: "0.25",
            },
        ),
    ]
    load = node_load(pods, cores=64, gpu_count=4)
    assert load.cpu_util == pytest.approx((32 + 8) / 64)
    assert load.gpu_util == pytest.approx(0.5 / 4)
    junk = [pod("c", "n", 64_000, gpus=0, **{keys.SIM_CPU_UTILIZATION_ANNOTATION: "lots"})]
    assert node_load(junk, cores=64, gpu_count=0).cpu_util == 1.0


def run(events: list[tuple[float, str]], reports: list[float]) -> tuple[float, float]:
    """Play events at simulated times, reporting at the given times in between."""
    running: list[SlimPod] = []
    sim = Simulation(CATALOG, lambda name: running, settle_s=2.0)
    sim.upsert_node(node("n", "AMD EPYC 9654 96-Core Processor", cores=192), 0.0)
    timeline = sorted([(t, e) for t, e in events] + [(t, "report") for t in reports])
    for t, what in timeline:
        if what == "start":
            running.append(pod("job", "n", 192_000))
            sim.pods_changed("n", t)
        elif what == "cap":
            sim.control("n", ControlRequest.model_validate({"cpu": {"capPctOfMax": 60}}), t)
        elif what == "stop":
            running.clear()
            sim.pods_changed("n", t)
        else:
            sim.report("n", t, NOW)
    final = sim.report("n", 100.0, NOW)
    return final.energy.node_joules, final.power.node_w


def test_results_depend_only_on_events_in_simulated_time() -> None:
    events = [(10.0, "start"), (30.0, "cap"), (60.0, "stop")]
    few = run(events, [])
    many = run(events, [t / 4 for t in range(1, 400)])
    assert few[0] == pytest.approx(many[0], rel=1e-9)
    assert few[1] == pytest.approx(many[1], rel=1e-9)


def test_controls_are_clamped_and_reported() -> None:
    sim = Simulation(CATALOG, lambda name: [])
    sim.upsert_node(node("cpu", "AMD EPYC 9654"), 0.0)
    sim.upsert_node(node("gpu", "AMD EPYC 9654", "NVIDIA H100 NVL", gpus=8), 0.0)
    answer = sim.control("cpu", ControlRequest.model_validate({"cpu": {"capWatts": 1}}), 1.0)
    assert answer.cpu_cap is not None
    assert answer.cpu_cap.result == "applied"
    assert "clamped" in answer.cpu_cap.message
    gpu_on_cpu = sim.control(
        "cpu", ControlRequest.model_validate({"gpu": {"capPctOfMax": 50}}), 1.0
    )
    assert gpu_on_cpu.gpu_cap is not None
    assert gpu_on_cpu.gpu_cap.result == "unsupported"
    half = sim.control("gpu", ControlRequest.model_validate({"gpu": {"capPctOfMax": 50}}), 1.0)
    assert half.controls.gpu_cap_watts_per_gpu == 200
    cleared = sim.control("gpu", ControlRequest.model_validate({"gpu": {"clearCap": True}}), 2.0)
    assert cleared.controls.gpu_cap_watts_per_gpu is None
    with pytest.raises(UnknownNode):
        sim.report("nope", 1.0, NOW)


def test_the_ground_truth_splits_each_nodes_energy_by_what_each_pod_draws() -> None:
    # One GPU node: a performance pod keeps four boards busy, a standard one of another
    # namespace two boards at a quarter; both ask for the same CPU.
    busy = pod(
        "train",
        "g",
        16_000,
        gpus=4,
        namespace="ml",
        **{keys.WORKLOAD_CLASS_ANNOTATION: "performance"},
    )
    light = pod(
        "infer",
        "g",
        16_000,
        gpus=2,
        namespace="web",
        **{keys.SIM_GPU_UTILIZATION_ANNOTATION: "0.25"},
    )
    running = [busy, light]
    sim = Simulation(CATALOG, lambda name: running, settle_s=2.0)
    sim.upsert_node(node("g", "AMD EPYC 9654", "NVIDIA H100 NVL", gpus=8), 0.0)
    sim.advance_all(600.0)
    node_energy = sim.nodes["g"].state.energy_j
    truth = dict(sim.workload_energy)
    assert set(truth) == {"ml/performance", "web/standard"}
    assert sum(truth.values()) + sim.overhead_energy == pytest.approx(node_energy)
    # The busy pod draws more above idle; both hold the same share of the idle draw and the
    # two idle boards and unrequested CPU are overhead.
    assert truth["ml/performance"] > 2 * truth["web/standard"]
    assert sim.overhead_energy > 0
    # Once the pods are gone, the node's energy is all overhead.
    overhead = sim.overhead_energy
    running.clear()
    sim.pods_changed("g", 600.0)
    sim.advance_all(700.0)
    assert sim.workload_energy == pytest.approx(truth)
    assert sim.overhead_energy - overhead == pytest.approx(
        sim.nodes["g"].state.energy_j - node_energy
    )
