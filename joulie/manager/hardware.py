"""The controller manager's view of a node's hardware: family, GPU count and GPU power range.

The node's NodeHardware status (what its agent discovered) is preferred; without one, or for a
field the agent left out, the node's hardware labels and annotations stand in, resolved through
the hardware catalog. That way a node is planned from the moment it joins, before any agent runs
on it, and keeps the same family once the agent reports the same model.

Everything here is pure: the catalog is passed in, nothing is read from the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from joulie.api import keys
from joulie.api.gpu import node_gpu_count
from joulie.api.hardware_labels import (
    label_cpu_cores,
    label_cpu_model,
    label_cpu_sockets,
    label_gpu_model,
)
from joulie.api.nodehardware import NodeHardwareStatus
from joulie.core.family import hardware_family
from joulie.core.intents import CapRange
from joulie.sim.catalog import Catalog

__all__ = ["HardwareView", "hardware_view"]


@dataclass(frozen=True)
class HardwareView:
    """What the policy and the intents need to know of one node's hardware."""

    cpu_model: str | None
    """Catalog key of the CPU model when recognised, else the raw reported name."""
    gpu_model: str | None
    """Catalog key of the GPU model when recognised, else the raw reported name."""
    gpu_count: int
    family: str
    """:func:`joulie.core.family.hardware_family` of the models above."""
    catalog_gpu_range: CapRange | None
    """``(min_w, max_w)`` of the recognised GPU model in the catalog, for ``node_twin_spec``."""
    cpu_max_w_per_socket: float | None = None
    """Maximum package power of one socket: the agent's cap range, else the catalog TDP."""
    sockets: int | None = None
    total_cores: int | None = None


def _first(*values: str | None) -> str | None:
    """The first non-blank value."""
    return next((v for v in values if v and v.strip()), None)


def _resolve(match_key: str | None, raw: str | None) -> str | None:
    return match_key or _first(raw)


def hardware_view(
    hardware: NodeHardwareStatus | None,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    allocatable: Mapping[str, str],
    catalog: Catalog,
    gpu_product_label_keys: Iterable[str] = keys.DEFAULT_GPU_PRODUCT_LABEL_KEYS,
) -> HardwareView:
    """The hardware view of one node from its NodeHardware status (None without one), labels,
    annotations and allocatable resources.

    Model names are resolved through the catalog (the agent's catalog key when it gave one that
    the catalog knows, else a match of the raw name), so the same model forms one family whether
    it came from the agent or from labels; an unrecognised model keeps its raw name.
    """
    cpu = hardware.cpu if hardware is not None else None
    gpu = hardware.gpu if hardware is not None else None

    cpu_raw = _first(
        cpu.raw_model if cpu else None,
        cpu.model if cpu else None,
        label_cpu_model(labels, annotations),
    )
    cpu_key = cpu.model if cpu and cpu.model in catalog.cpus else None
    cpu_key = cpu_key or catalog.match_cpu(cpu_raw).key
    cpu_model = _resolve(cpu_key, cpu_raw)
    per_socket = cpu.cap_range.max_watts_per_socket if cpu and cpu.cap_range else None
    if not per_socket and cpu_key is not None:
        per_socket = catalog.cpu(cpu_key).tdp_w
    sockets = (cpu.sockets if cpu else None) or label_cpu_sockets(labels)
    cores = (cpu.total_cores if cpu else None) or label_cpu_cores(labels)
    if cores is None and sockets and cpu_key is not None:
        cores = catalog.cpu(cpu_key).cores * sockets

    if gpu is not None and gpu.count is not None:
        gpu_count = gpu.count if gpu.present is not False else 0
    else:
        gpu_count = node_gpu_count(labels, allocatable)

    gpu_model: str | None = None
    gpu_range: CapRange | None = None
    if gpu_count > 0:
        gpu_raw = _first(
            gpu.raw_model if gpu else None,
            gpu.model if gpu else None,
            label_gpu_model(labels, annotations, gpu_product_label_keys),
        )
        gpu_key = gpu.model if gpu and gpu.model in catalog.gpus else None
        gpu_key = gpu_key or catalog.match_gpu(gpu_raw).key
        gpu_model = _resolve(gpu_key, gpu_raw)
        if gpu_key is not None:
            spec = catalog.gpu(gpu_key)
            gpu_range = (spec.min_w, spec.max_w)

    return HardwareView(
        cpu_model=cpu_model,
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        family=hardware_family(cpu_model, gpu_model, gpu_count),
        catalog_gpu_range=gpu_range,
        cpu_max_w_per_socket=per_socket or None,
        sockets=sockets or None,
        total_cores=cores or None,
    )
