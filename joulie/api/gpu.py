"""GPU resource kinds and how many GPUs a pod asks for.

A GPU can reach a pod as a whole device, a MIG slice, a partition of a multi-die device, or a
shared (time-sliced) replica. Each of those counts as one GPU unit for Joulie's rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from joulie.api.keys import HW_GPU_COUNT_LABEL
from joulie.api.quantity import QuantityError, parse_quantity


class GpuResourceKind(StrEnum):
    WHOLE = "whole"
    MIG = "mig"
    PARTITION = "partition"
    SHARED = "shared"


_WHOLE = frozenset({"nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915", "gpu.intel.com/xe"})
_PATTERNS: tuple[tuple[re.Pattern[str], GpuResourceKind], ...] = (
    # NVIDIA MIG, mixed strategy: nvidia.com/mig-1g.10gb, nvidia.com/mig-3g.40gb+me ...
    (re.compile(r"^nvidia\.com/mig-\d+g\.\d+gb(\+\w+)?$"), GpuResourceKind.MIG),
    # AMD Instinct compute/memory partitions exposed by the device plugin: amd.com/cpx_nps4 ...
    (re.compile(r"^amd\.com/(spx|dpx|tpx|qpx|cpx)_nps\d+$"), GpuResourceKind.PARTITION),
    # Time-slicing / MPS replicas renamed by the device plugin: nvidia.com/gpu.shared ...
    (re.compile(r"^(nvidia\.com|amd\.com)/gpu\.shared$"), GpuResourceKind.SHARED),
)


def gpu_resource_kind(resource: str) -> GpuResourceKind | None:
    """Which kind of GPU unit a resource name stands for, or None for a non-GPU resource."""
    if resource in _WHOLE:
        return GpuResourceKind.WHOLE
    for pattern, kind in _PATTERNS:
        if pattern.match(resource):
            return kind
    return None


def _container_gpus(container: Mapping[str, Any]) -> int:
    resources = container.get("resources") or {}
    requests: Mapping[str, Any] = resources.get("requests") or {}
    limits: Mapping[str, Any] = resources.get("limits") or {}
    total = 0
    for name in set(requests) | set(limits):
        if gpu_resource_kind(name) is None:
            continue
        # Requests first; for extended resources Kubernetes copies limits into requests when
        # only limits are given, but a raw pod spec may carry just the limit.
        raw = requests.get(name, limits.get(name))
        try:
            value = parse_quantity(raw)
        except QuantityError:
            # The API server validates quantities, so only a hand-built object gets here.
            continue
        if value > 0:
            total += int(value)
    return total


def _containers(spec: Mapping[str, Any], key: str) -> Iterable[Mapping[str, Any]]:
    return spec.get(key) or ()


def pod_gpu_resource(pod: Mapping[str, Any]) -> str:
    """The GPU resource a pod asks for (``nvidia.com/gpu``, a MIG profile ...): the first by name
    of those its containers request; "" for a pod without GPUs. A pod asking for two kinds at
    once is rare enough that the first stands for it."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    names: set[str] = set()
    for key in ("containers", "initContainers"):
        for container in _containers(spec, key):
            resources = container.get("resources") or {}
            for part in ("requests", "limits"):
                names.update(
                    n for n in (resources.get(part) or {}) if gpu_resource_kind(n) is not None
                )
    return min(names, default="")


def pod_gpu_count(pod: Mapping[str, Any]) -> int:
    """GPU units a pod occupies: every GPU resource kind, requests else limits.

    The pod's effective value follows Kubernetes: the larger of the sum over app containers and the
    largest single init container (init containers run one at a time before the app containers).
    Restartable init containers (sidecars) run alongside and are added to the sum.
    """
    spec: Mapping[str, Any] = pod.get("spec") or {}
    app = sum(_container_gpus(c) for c in _containers(spec, "containers"))
    init_peak = 0
    sidecars = 0
    for c in _containers(spec, "initContainers"):
        gpus = _container_gpus(c)
        if c.get("restartPolicy") == "Always":
            sidecars += gpus
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + gpus)
    return max(app + sidecars, init_peak)


def node_gpu_count(labels: Mapping[str, str], allocatable: Mapping[str, str]) -> int:
    """GPU boards of a node without NodeHardware: the hw.gpu-count label, else whole-GPU
    allocatable resources. A node exposing only fractional GPU units (MIG, partitions, shared
    replicas) counts as one GPU: it has GPUs, but the units do not say how many boards."""
    try:
        labelled = int(labels.get(HW_GPU_COUNT_LABEL, ""))
    except ValueError:
        labelled = -1
    if labelled >= 0:
        return labelled
    whole = 0
    fractional = False
    for resource, value in allocatable.items():
        kind = gpu_resource_kind(resource)
        if kind is None:
            continue
        try:
            units = int(parse_quantity(value))
        except QuantityError:
            continue
        if kind is GpuResourceKind.WHOLE:
            whole += units
        elif units > 0:
            fractional = True
    return whole if whole or not fractional else 1
