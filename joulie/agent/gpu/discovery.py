"""What GPUs a node has, and whether the agent can cap them.

:func:`discover_gpus` asks each backend (:mod:`joulie.agent.gpu.backends`) once and returns a
frozen :class:`~joulie.agent.gpu.device.GpuDiscovery`: per board its identity, power-limit
range, current limit, whether its power can be measured and, when it cannot be capped, why. The
node-level figures NodeHardware reports are derived from the boards. :func:`gpu_hardware_status`
turns the result into the NodeHardware ``status.gpu`` block, recognising the model against the
catalog, with the clock governor block: the presets the boards can express
(:mod:`joulie.agent.gpu.settings`) and the per-board baseline the agent holds.

A node is described by one vendor: the first backend that finds boards. Boards of another
vendor on the same node are named in a warning and left alone.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from joulie.agent.baseline import Baseline, BaselineValue
from joulie.agent.gpu.backends import GpuBackends
from joulie.agent.gpu.device import (
    GpuDevice,
    GpuDiscovery,
    MonitorOnly,
    monitor_only_warnings,
    summarise,
)
from joulie.agent.gpu.settings import BoardClocks, governor_status
from joulie.api.nodehardware import GpuCapRange, GpuHardware
from joulie.hardware.catalog import Catalog

__all__ = ["discover_gpus", "gpu_hardware_status"]


def discover_gpus(backends: GpuBackends, *, refused: Collection[int] = ()) -> GpuDiscovery:
    """The node's GPUs. ``refused`` holds the indices of boards whose last cap write was
    refused for lack of permission (discovery is read-only, so only a write can reveal that)."""
    warnings: list[str] = []
    found: list[tuple[str, tuple[GpuDevice, ...]]] = []
    for backend in backends:
        boards = backend.discover(refused)
        warnings.extend(boards.warnings)
        found.append((backend.vendor, boards.devices))
    chosen = next(((vendor, devices) for vendor, devices in found if devices), None)
    if chosen is None:
        return summarise(None, (), warnings)
    vendor, devices = chosen
    for other, other_devices in found:
        if other != vendor and other_devices:
            warnings.append(
                f"{len(other_devices)} {other} GPU(s) besides the {vendor} GPUs: not managed"
            )
    warnings.extend(monitor_only_warnings(list(devices)))
    return summarise(vendor, devices, warnings)


def gpu_hardware_status(
    discovery: GpuDiscovery,
    catalog: Catalog,
    baseline: Baseline | Mapping[str, BaselineValue] | None = None,
) -> GpuHardware:
    """NodeHardware ``status.gpu`` for a discovery (the catalog key when the model is known).

    ``baseline`` is the agent's record (or its entries); its GPU entries are reported per board
    in ``governor.baseline``.
    """
    if not discovery.present:
        return GpuHardware(
            present=False,
            count=0,
            control_available=False,
            telemetry_available=False,
            warnings=list(discovery.warnings) or None,
        )
    governor, baseline_warnings = governor_status(
        [
            BoardClocks(
                index=d.index,
                uuid=d.uuid,
                clocks=d.clocks,
                writable=d.monitor_only not in _CLOCKS_BLOCKED,
                current=d.performance_level,
            )
            for d in discovery.devices
        ],
        baseline.entries() if isinstance(baseline, Baseline) else baseline or {},
    )
    warnings = [*discovery.warnings, *baseline_warnings] or None
    cap_range = None
    if discovery.min_watts is not None or discovery.max_watts is not None:
        cap_range = GpuCapRange(
            min_watts=discovery.min_watts,
            max_watts=discovery.max_watts,
            default_watts=discovery.default_watts,
        )
    return GpuHardware(
        present=True,
        raw_model=discovery.raw_model,
        model=catalog.match_gpu(discovery.raw_model).key,
        vendor=discovery.vendor,
        count=discovery.count,
        cap_range_per_gpu=cap_range,
        current_cap_watts=discovery.current_cap_watts,
        governor=governor,
        control_available=discovery.control_available,
        telemetry_available=discovery.telemetry_available,
        warnings=warnings,
    )


_CLOCKS_BLOCKED = (MonitorOnly.NO_PERMISSION, MonitorOnly.LOST, MonitorOnly.UNAVAILABLE)
"""Board states in which the agent cannot set clocks either (a cap refusal means no privilege)."""
