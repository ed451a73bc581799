"""The CPU part of NodeHardware.status, built from what discovery found and the hardware catalog.

Pure: no I/O. Quality follows the spec: the model recognised in the catalog is ``exact``, a raw
model the catalog does not know is ``heuristic``, no model at all is ``unavailable``.
"""

from __future__ import annotations

from dataclasses import dataclass

from joulie.agent.cpu_discovery import CpuDiscovery
from joulie.api.enums import DiscoveryQuality
from joulie.api.nodehardware import (
    CpuCapRange,
    CpuGovernorStatus,
    CpuHardware,
    CpuLandmarks,
    PresetSupport,
)
from joulie.hardware.catalog import Catalog

__all__ = ["CpuStatus", "cpu_hardware_status"]


@dataclass(frozen=True)
class CpuStatus:
    """The CPU block of NodeHardware.status and its contribution to ``status.quality``."""

    cpu: CpuHardware
    quality: DiscoveryQuality
    quality_warnings: tuple[str, ...]
    """Why the quality is not exact (empty when it is)."""


def _mhz(khz: int | None) -> float | None:
    return None if khz is None else khz / 1000


def _watts(uw: int | None) -> float | None:
    return None if uw is None else uw / 1e6


def cpu_hardware_status(discovery: CpuDiscovery, catalog: Catalog) -> CpuStatus:
    """NodeHardware ``status.cpu`` for ``discovery``; ``model`` is the catalog key when the raw
    model is recognised. Cap watts are per package (socket)."""
    topo = discovery.topology
    match = catalog.match_cpu(topo.raw_model)
    quality_warnings: tuple[str, ...] = ()
    if match.quality is DiscoveryQuality.HEURISTIC:
        quality_warnings = (f"CPU model {topo.raw_model!r} is not in the hardware catalog",)
    elif match.quality is DiscoveryQuality.UNAVAILABLE:
        quality_warnings = ("no CPU model found",)

    cap_range = None
    span = discovery.cap_range_uw
    if span is not None:
        cap_range = CpuCapRange(
            type=discovery.cap_mechanism,
            min_watts_per_socket=_watts(span[0]),
            max_watts_per_socket=_watts(span[1]),
        )

    lm = discovery.landmarks
    landmarks = None
    if any(v is not None for v in (lm.min_khz, lm.nominal_khz, lm.max_khz)):
        landmarks = CpuLandmarks(
            min_freq_m_hz=_mhz(lm.min_khz),
            nominal_freq_m_hz=_mhz(lm.nominal_khz),
            max_boost_m_hz=_mhz(lm.max_khz),
            lowest_nonlinear_freq_m_hz=_mhz(lm.lowest_nonlinear_khz),
        )

    gov = discovery.governor
    governor = None
    if gov is not None:
        governor = CpuGovernorStatus(
            driver=gov.driver,
            current=gov.current_native,
            presets=[PresetSupport(preset=p.preset.value, native=p.native) for p in gov.presets],
            writable=gov.writable,
        )

    sockets = topo.sockets
    logical = topo.logical_cpus
    cpu = CpuHardware(
        raw_model=topo.raw_model,
        model=match.key,
        vendor=topo.vendor,
        sockets=sockets,
        total_cores=logical,
        cores_per_socket=logical // sockets if logical and sockets else None,
        physical_cores=topo.physical_cores,
        driver_family=gov.family if gov is not None else None,
        cap_range=cap_range,
        landmarks=landmarks,
        governor=governor,
        control_available=discovery.control_available,
        telemetry_available=discovery.telemetry_available,
        warnings=list(discovery.warnings) or None,
    )
    return CpuStatus(cpu=cpu, quality=match.quality, quality_warnings=quality_warnings)
