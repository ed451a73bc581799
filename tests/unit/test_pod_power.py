"""The pod marginal-power estimate: what a raw pod asks for (Kubernetes quantity syntax, init
containers, fallbacks), what a node can draw (NodeHardware), and the watts a pod adds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from joulie.api.nodehardware import NodeHardwareStatus
from joulie.core.pod_power import (
    MarginalCoefficients,
    NodePowerProfile,
    PodDemand,
    is_performance_pod,
    marginal_watts,
    node_power_profile,
    pod_demand,
)
from tests.support import builders
from tests.support.builders import container

EXAMPLES: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[1] / "data/spec/extender-examples.yaml").read_text()
)
POWER = EXAMPLES["power"]
GIB = 2**30


def pod(
    *containers: dict[str, Any],
    init: list[dict[str, Any]] | None = None,
    workload_class: str | None = None,
    overhead: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if init is not None:
        spec["initContainers"] = init
    if overhead is not None:
        spec["overhead"] = overhead
    annotations = None if workload_class is None else {"joulie.io/workload-class": workload_class}
    return builders.pod(
        namespace="default", containers=list(containers), annotations=annotations, spec=spec
    )


def hardware(**status: Any) -> NodeHardwareStatus:
    return NodeHardwareStatus.model_validate(status)


# --- pod demand ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu", "cores"),
    [("1500m", 1.5), ("2", 2.0), (2, 2.0), (0.5, 0.5), ("2e3", 2000.0), ("100u", 0.0001)],
)
def test_cpu_quantity_syntax(cpu: Any, cores: float) -> None:
    assert pod_demand(pod(container({"cpu": cpu}))).cpu_cores == pytest.approx(cores)


@pytest.mark.parametrize(
    ("memory", "gib"),
    [
        ("1.5Gi", 1.5),
        ("500M", 500e6 / GIB),
        ("512Mi", 0.5),
        ("1Ti", 1024.0),
        ("2e9", 2e9 / GIB),
        ("1k", 1000 / GIB),
        (1073741824, 1.0),
    ],
)
def test_memory_quantity_syntax(memory: Any, gib: float) -> None:
    demand = pod_demand(pod(container({"cpu": "1", "memory": memory})))
    assert demand.memory_gib == pytest.approx(gib)


def test_requests_win_over_limits_and_limits_stand_in_per_container() -> None:
    demand = pod_demand(
        pod(
            container({"cpu": "1", "memory": "1Gi"}, {"cpu": "4", "memory": "8Gi"}),
            container(limits={"cpu": "500m", "memory": "2Gi"}),
        )
    )
    assert demand.cpu_cores == pytest.approx(1.5)
    assert demand.memory_gib == pytest.approx(3.0)


def test_init_containers_count_as_kubernetes_counts_them() -> None:
    # The larger of the app sum (2 cores) and the largest init container (3 cores).
    assert pod_demand(
        pod(container({"cpu": "1"}), container({"cpu": "1"}), init=[container({"cpu": "3"})])
    ).cpu_cores == pytest.approx(3.0)
    assert pod_demand(
        pod(container({"cpu": "1"}), container({"cpu": "1"}), init=[container({"cpu": "1500m"})])
    ).cpu_cores == pytest.approx(2.0)
    # A sidecar (restartable init container) runs alongside the app containers.
    sidecar = container({"cpu": "500m", "memory": "1Gi"}, restartPolicy="Always")
    demand = pod_demand(pod(container({"cpu": "1", "memory": "1Gi"}), init=[sidecar]))
    assert demand.cpu_cores == pytest.approx(1.5)
    assert demand.memory_gib == pytest.approx(2.0)


def test_pod_overhead_is_added() -> None:
    demand = pod_demand(pod(container({"cpu": "1"}), overhead={"cpu": "250m", "memory": "1Gi"}))
    assert demand.cpu_cores == pytest.approx(1.25)
    assert demand.memory_gib == pytest.approx(1.0)


def test_no_cpu_request_falls_back_by_class() -> None:
    fallback = POWER["cpu_fallback_cores"]
    assert pod_demand(pod(container())).cpu_cores == fallback["standard"]
    performance = pod_demand(pod(container(), workload_class="performance"))
    assert performance.cpu_cores == fallback["performance"]
    assert performance.performance


@pytest.mark.parametrize("bad", ["lots", "1.5.5", "", "-2", "1e400", None, [1], {"a": 1}, True])
def test_bad_quantities_count_as_zero(bad: Any) -> None:
    demand = pod_demand(pod(container({"cpu": bad, "memory": bad}), container({"cpu": "1"})))
    assert demand.cpu_cores == pytest.approx(1.0)
    assert demand.memory_gib == 0.0
    # Nothing else usable: the class fallback applies.
    assert (
        pod_demand(pod(container({"cpu": bad}))).cpu_cores
        == POWER["cpu_fallback_cores"]["standard"]
    )


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"spec": None},
        {"spec": "x"},
        {"spec": {"containers": "x"}},
        {"spec": {"containers": [None, 3, "c"]}},
        {"spec": {"containers": [{"resources": "x"}]}},
        {"spec": {"containers": [{"resources": {"requests": "x", "limits": 3}}]}},
        {"metadata": {"annotations": "x"}, "spec": {"initContainers": [{"restartPolicy": 1}]}},
    ],
)
def test_malformed_pods_never_raise(raw: dict[str, Any]) -> None:
    demand = pod_demand(raw)
    assert demand.cpu_cores == POWER["cpu_fallback_cores"]["standard"]
    assert demand.gpus == 0


def test_gpus_counted_as_everywhere_in_joulie() -> None:
    assert pod_demand(pod(container(limits={"nvidia.com/gpu": "2"}))).gpus == 2
    assert pod_demand(pod(container({"amd.com/gpu": 1}))).gpus == 1
    assert pod_demand(pod(container({"gpu.intel.com/i915": "1"}))).gpus == 1
    assert pod_demand(pod(container({"nvidia.com/mig-1g.10gb": "3"}))).gpus == 3
    assert (
        pod_demand(
            pod(container({"nvidia.com/gpu": "1"}), init=[container({"nvidia.com/gpu": "4"})])
        ).gpus
        == 4
    )


@pytest.mark.parametrize(
    ("annotation", "performance"),
    [("performance", True), ("standard", False), ("Performance", False), (None, False)],
)
def test_performance_is_the_exact_annotation(annotation: str | None, performance: bool) -> None:
    raw = pod(container({"cpu": "1"}), workload_class=annotation)
    assert is_performance_pod(raw) is performance
    assert pod_demand(raw).performance is performance


def test_node_selector_does_not_make_a_performance_pod() -> None:
    raw = pod(container({"cpu": "1"}))
    raw["spec"]["nodeSelector"] = {"joulie.io/power-profile": "performance"}
    assert not pod_demand(raw).performance


# --- node power profile -------------------------------------------------------------------------


def test_upstream_node_hardware_example() -> None:
    case = EXAMPLES["node_hardware"]
    profile = node_power_profile(NodeHardwareStatus.model_validate(case["status"]))
    assert profile == NodePowerProfile(
        cores=96, cpu_max_watts=case["cpu_max_watts"], has_gpu=True, gpu_max_watts=700.0
    )


def test_cpu_maximum_from_cap_range_with_at_least_one_socket() -> None:
    profile = node_power_profile(hardware(cpu={"capRange": {"maxWattsPerSocket": 250}}))
    assert profile is not None
    assert profile.cpu_max_watts == 250.0


@pytest.mark.parametrize(("cores", "watts"), [(96, 96 * 3.5), (16, 150.0), (0, 150.0)])
def test_cpu_maximum_fallback_per_logical_cpu(cores: int, watts: float) -> None:
    profile = node_power_profile(hardware(cpu={"totalCores": cores, "sockets": 2}))
    assert profile is not None
    assert profile.cpu_max_watts == pytest.approx(watts)
    assert profile.cores == cores


def test_logical_cpus_from_cores_per_socket_when_total_missing() -> None:
    profile = node_power_profile(
        hardware(cpu={"coresPerSocket": 48, "sockets": 2, "physicalCores": 48})
    )
    assert profile is not None
    assert profile.cores == 96


@pytest.mark.parametrize(("vendor", "watts"), sorted(POWER["gpu_fallback_watts"].items()))
def test_gpu_fallback_watts_by_vendor(vendor: str, watts: float) -> None:
    profile = node_power_profile(hardware(gpu={"count": 4, "vendor": vendor.upper()}))
    assert profile is not None
    assert profile.has_gpu
    assert profile.gpu_max_watts == watts


def test_gpu_presence() -> None:
    cpu_only = node_power_profile(hardware(cpu={"totalCores": 8}))
    assert cpu_only is not None
    assert not cpu_only.has_gpu
    assert cpu_only.gpu_max_watts == 0.0
    present = node_power_profile(hardware(gpu={"present": True, "vendor": "amd"}))
    assert present is not None
    assert present.has_gpu
    assert present.gpu_max_watts == 400.0
    assert node_power_profile(None) is None


# --- marginal watts -----------------------------------------------------------------------------

NODE = NodePowerProfile(cores=96, cpu_max_watts=720.0, has_gpu=False, gpu_max_watts=0.0)
GPU_NODE = NodePowerProfile(cores=96, cpu_max_watts=720.0, has_gpu=True, gpu_max_watts=700.0)


def demand(
    cpu: float = 4.0, memory: float = 0.0, gpus: int = 0, performance: bool = False
) -> PodDemand:
    return PodDemand(cpu_cores=cpu, memory_gib=memory, gpus=gpus, performance=performance)


def test_cpu_only_estimate() -> None:
    assert marginal_watts(demand(4.0), NODE) == pytest.approx(720 * 0.7 * 4 / 96)


@pytest.mark.parametrize(("memory", "factor"), [(0.0, 1.0), (10.0, 1.1), (30.0, 1.3), (500.0, 1.3)])
def test_memory_factor(memory: float, factor: float) -> None:
    expected = 720 * 0.7 * 4 / 96 * factor
    assert marginal_watts(demand(4.0, memory), NODE) == pytest.approx(expected)


def test_gpu_estimate_by_class() -> None:
    cpu = 720 * 0.7 * 4 / 96
    standard = marginal_watts(demand(4.0, gpus=2), GPU_NODE)
    performance = marginal_watts(demand(4.0, gpus=2, performance=True), GPU_NODE)
    assert standard == pytest.approx(cpu + 2 * 700 * 0.65)
    assert performance == pytest.approx(cpu + 2 * 700 * 0.85)
    assert performance > standard


def test_gpu_pod_on_cpu_node_adds_cpu_only() -> None:
    assert marginal_watts(demand(4.0, gpus=2), NODE) == pytest.approx(720 * 0.7 * 4 / 96)


def test_share_is_capped_at_the_whole_node() -> None:
    assert marginal_watts(demand(500.0), NODE) == pytest.approx(720 * 0.7)
    unknown_size = NodePowerProfile(cores=0, cpu_max_watts=150.0, has_gpu=False, gpu_max_watts=0)
    assert marginal_watts(demand(0.25), unknown_size) == pytest.approx(150 * 0.7 * 0.25)
    assert marginal_watts(demand(2.0), unknown_size) == pytest.approx(150 * 0.7)


def test_no_hardware_adds_nothing() -> None:
    assert marginal_watts(demand(64.0, 100.0, 8, True), None) == 0.0


def test_same_pod_costs_a_larger_node_a_smaller_share() -> None:
    small = NodePowerProfile(cores=32, cpu_max_watts=300.0, has_gpu=False, gpu_max_watts=0.0)
    large = NodePowerProfile(cores=192, cpu_max_watts=720.0, has_gpu=False, gpu_max_watts=0.0)
    assert marginal_watts(demand(8.0), large) < marginal_watts(demand(8.0), small)


def test_coefficients_are_configurable_and_checked() -> None:
    half = MarginalCoefficients(cpu_util=0.35)
    assert marginal_watts(demand(4.0), NODE, half) == pytest.approx(720 * 0.35 * 4 / 96)
    with pytest.raises(ValueError, match="cpu_util"):
        MarginalCoefficients(cpu_util=1.5)


@given(
    a=st.floats(0, 512, allow_nan=False),
    b=st.floats(0, 512, allow_nan=False),
    memory=st.floats(0, 4096, allow_nan=False),
    gpus=st.integers(0, 16),
    performance=st.booleans(),
)
def test_marginal_watts_grows_with_cores(
    a: float, b: float, memory: float, gpus: int, performance: bool
) -> None:
    low, high = sorted((a, b))
    for node in (NODE, GPU_NODE):
        assert marginal_watts(demand(low, memory, gpus, performance), node) <= marginal_watts(
            demand(high, memory, gpus, performance), node
        )


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
_keys = st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "x"])
_quantity = st.one_of(_json, st.from_regex(r"\A[0-9.]{1,5}(m|Mi|Gi|e3|k)?\Z"))
_container = st.fixed_dictionaries(
    {},
    optional={
        "resources": st.fixed_dictionaries(
            {},
            optional={
                "requests": st.dictionaries(_keys, _quantity, max_size=3),
                "limits": st.dictionaries(_keys, _quantity, max_size=3),
            },
        ),
        "restartPolicy": st.sampled_from(["Always", "Never"]),
    },
)


@given(
    containers=st.lists(_container, max_size=3),
    init=st.lists(_container, max_size=2),
    performance=st.booleans(),
)
def test_any_pod_yields_a_usable_demand(
    containers: list[dict[str, Any]], init: list[dict[str, Any]], performance: bool
) -> None:
    raw = pod(*containers, init=init, workload_class="performance" if performance else None)
    result = pod_demand(raw)
    assert result.cpu_cores > 0
    assert result.memory_gib >= 0
    assert result.gpus >= 0
    assert result.performance is performance
    assert marginal_watts(result, GPU_NODE) >= 0


def test_a_status_without_a_core_count_takes_the_callers_allocatable_cpus() -> None:
    # A NodeHardware published for a simulated node names no cores: without the node's own
    # count every pod would hold a whole node's CPU share, and two pods of 48 and 144 cores on
    # a 192-CPU node would be estimated alike.
    status = NodeHardwareStatus.model_validate({"cpu": {"sockets": 2}})
    unknown = node_power_profile(status)
    known = node_power_profile(status, fallback_cores=192)
    assert unknown is not None
    assert known is not None
    assert unknown.cores == 0
    assert known.cores == 192
    small, large = (PodDemand(c, 0.0, 0, False) for c in (48.0, 144.0))
    assert marginal_watts(small, unknown) == marginal_watts(large, unknown)
    assert marginal_watts(large, known) == pytest.approx(3 * marginal_watts(small, known))
