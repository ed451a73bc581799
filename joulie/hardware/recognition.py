"""The one recognition of a node's hardware, used by the controller manager, the simulator and
`joulie plan`: models, family, GPU count and power range, sockets and physical cores.

The node's NodeHardware status (what its agent discovered) is preferred; without one, or for a
field the agent left out, the node's hardware labels and annotations stand in, resolved through
the hardware catalog. So a node is planned from the moment it joins, before any agent runs on it,
keeps the same family once the agent reports the same model, and the simulator models the very
hardware the manager plans for.

Pure: the catalog is passed in, nothing is read from the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from joulie.api import keys
from joulie.api.gpu import node_gpu_count
from joulie.api.nodehardware import NodeHardwareStatus
from joulie.hardware.catalog import Catalog
from joulie.hardware.family import hardware_family
from joulie.hardware.labels import (
    label_cpu_cores,
    label_cpu_model,
    label_cpu_sockets,
    label_gpu_model,
)

__all__ = ["HardwareView", "WattRange", "hardware_view"]

WattRange = tuple[float, float]
"""``(min_w, max_w)``; the same shape as ``joulie.core.intents.CapRange``."""


@dataclass(frozen=True)
class HardwareView:
    """What the roles need to know of one node's hardware."""

    cpu_model: str | None
    """Catalog key of the CPU model when recognised, else the raw reported name (so the model
    is recognised exactly when this is a key of the catalog it was resolved with)."""
    gpu_model: str | None
    """Catalog key of the GPU model when recognised, else the raw reported name."""
    gpu_count: int
    family: str
    """:func:`joulie.hardware.family.hardware_family` of the models above."""
    catalog_gpu_range: WattRange | None
    """``(min_w, max_w)`` of the recognised GPU model in the catalog."""
    cpu_max_w_per_socket: float | None = None
    """Maximum package power of one socket: the agent's cap range, else the catalog TDP."""
    sockets: int | None = None
    physical_cores: int | None = None
    """Physical CPU cores of the whole node (never logical CPUs): NodeHardware
    ``physicalCores``, else the cores label, else the catalog's cores per socket x sockets."""


def _first(*values: str | None) -> str | None:
    """The first non-blank value."""
    return next((v for v in values if v and v.strip()), None)


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
    ``gpu_product_label_keys`` are the labels searched, in order, for the GPU product when neither
    the agent nor Joulie's own GPU model label or annotation names it.
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
    per_socket = cpu.cap_range.max_watts_per_socket if cpu and cpu.cap_range else None
    if not per_socket and cpu_key is not None:
        per_socket = catalog.cpu(cpu_key).tdp_w
    sockets = (cpu.sockets if cpu else None) or label_cpu_sockets(labels)
    # NodeHardware's totalCores counts logical CPUs (SMT threads); density needs physical cores.
    cores = (cpu.physical_cores if cpu else None) or label_cpu_cores(labels)
    if not cores and sockets and cpu_key is not None:
        cores = catalog.cpu(cpu_key).cores * sockets

    if gpu is not None and gpu.count is not None:
        gpu_count = gpu.count if gpu.present is not False else 0
    else:
        gpu_count = node_gpu_count(labels, allocatable)

    gpu_model: str | None = None
    gpu_range: WattRange | None = None
    if gpu_count > 0:
        gpu_raw = _first(
            gpu.raw_model if gpu else None,
            gpu.model if gpu else None,
            label_gpu_model(labels, annotations, gpu_product_label_keys),
        )
        gpu_key = gpu.model if gpu and gpu.model in catalog.gpus else None
        gpu_key = gpu_key or catalog.match_gpu(gpu_raw).key
        gpu_model = gpu_key or gpu_raw
        if gpu_key is not None:
            spec = catalog.gpu(gpu_key)
            gpu_range = (spec.min_w, spec.max_w)

    cpu_model = cpu_key or cpu_raw
    return HardwareView(
        cpu_model=cpu_model,
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        family=hardware_family(cpu_model, gpu_model, gpu_count),
        catalog_gpu_range=gpu_range,
        cpu_max_w_per_socket=per_socket or None,
        sockets=sockets or None,
        physical_cores=cores or None,
    )
