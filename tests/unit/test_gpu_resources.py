"""How many GPUs a pod occupies, over every GPU resource kind."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from joulie.api.gpu import GpuResourceKind, gpu_resource_kind, pod_gpu_count
from tests.support import builders
from tests.support.builders import container


def pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    return builders.pod(containers=list(containers), spec={"initContainers": list(init)})


@pytest.mark.parametrize(
    ("resource", "kind"),
    [
        ("nvidia.com/gpu", GpuResourceKind.WHOLE),
        ("amd.com/gpu", GpuResourceKind.WHOLE),
        ("gpu.intel.com/i915", GpuResourceKind.WHOLE),
        ("gpu.intel.com/xe", GpuResourceKind.WHOLE),
        ("nvidia.com/mig-1g.10gb", GpuResourceKind.MIG),
        ("nvidia.com/mig-3g.40gb", GpuResourceKind.MIG),
        ("nvidia.com/mig-1g.12gb+me", GpuResourceKind.MIG),
        ("amd.com/cpx_nps4", GpuResourceKind.PARTITION),
        ("amd.com/spx_nps1", GpuResourceKind.PARTITION),
        ("nvidia.com/gpu.shared", GpuResourceKind.SHARED),
        ("cpu", None),
        ("memory", None),
        ("nvidia.com/gpumem", None),
        ("example.com/fpga", None),
    ],
)
def test_resource_kinds(resource: str, kind: GpuResourceKind | None) -> None:
    assert gpu_resource_kind(resource) is kind


def test_requests_else_limits_per_resource() -> None:
    assert pod_gpu_count(pod(container(requests={"nvidia.com/gpu": "2"}))) == 2
    assert pod_gpu_count(pod(container(limits={"nvidia.com/gpu": "4"}))) == 4
    # Requests win over limits when both are present.
    both = container(requests={"amd.com/gpu": 1}, limits={"amd.com/gpu": 2})
    assert pod_gpu_count(pod(both)) == 1


def test_every_kind_counts_and_containers_add_up() -> None:
    p = pod(
        container(requests={"nvidia.com/mig-1g.10gb": "1", "cpu": "4", "memory": "8Gi"}),
        container(limits={"nvidia.com/gpu.shared": "1"}),
        container(requests={"amd.com/cpx_nps4": "2"}),
    )
    assert pod_gpu_count(p) == 4


def test_init_containers_follow_kubernetes_effective_request() -> None:
    # One init container at a time: the larger of its peak and the app sum.
    assert (
        pod_gpu_count(
            pod(
                container(requests={"nvidia.com/gpu": 1}),
                init=(container(requests={"nvidia.com/gpu": 3}),),
            )
        )
        == 3
    )
    assert (
        pod_gpu_count(
            pod(
                container(requests={"nvidia.com/gpu": 2}),
                init=(container(requests={"nvidia.com/gpu": 1}),),
            )
        )
        == 2
    )
    # A sidecar (restartable init container) runs beside the app containers.
    sidecar = container(requests={"nvidia.com/gpu": 1}, restartPolicy="Always")
    assert pod_gpu_count(pod(container(requests={"nvidia.com/gpu": 2}), init=(sidecar,))) == 3


def test_pods_without_gpus_or_resources() -> None:
    assert pod_gpu_count({}) == 0
    assert pod_gpu_count({"spec": {"containers": [{"name": "c"}]}}) == 0
    assert pod_gpu_count(pod(container(requests={"cpu": "500m"}))) == 0


@given(st.lists(st.integers(min_value=0, max_value=8), max_size=6))
def test_count_is_the_sum_over_app_containers(counts: list[int]) -> None:
    p = pod(*(container(requests={"nvidia.com/gpu": str(n)}) for n in counts))
    assert pod_gpu_count(p) == sum(counts)
