"""The digital twin: one node's measured power turned into the scores of NodeTwin.status.

Everything derives from the node's measured power and the budgets its hardware implies:

* TDPs: CPU = maximum watts per socket x sockets (one socket assumed when the count is unknown but
  the per-socket maximum is known: a zero would make the budget zero, which reads as unlimited
  headroom), GPU = maximum watts per board x boards, node = both.
* Capped budgets: each TDP times its cap percentage (100 when unset or not positive). The
  percentage is the cap in force on the device, resolved by :mod:`joulie.core.caps` (absolute watts
  win over the percentage; CPU watts are per package, so the CPU budget is sockets x watts).
* Headroom: the unused share of the capped budget, at most 100 but unbounded below (a node over
  its budget ranks below an idle one); 100 when the budget is 0 (unknown hardware stays neutral).
* Cooling stress: measured power against the uncapped TDP (cooling is sized for the installed
  hardware), scaled by an ambient multiplier, clamped to 0-100; 0 when the TDP is unknown. An
  ambient of 0 degC or below counts as unknown (multiplier 1).
* PSU stress: rack power (else cluster power) against a 50 kW supply, clamped to 0-100.
* Density: cores against a 192-core node, averaged with GPUs against an 8-GPU node when GPUs exist.
* PUE: cooling stress restated on a 1.05-1.40 scale.

Pure: no clock, no I/O. The power trend keeps its samples in :class:`PowerHistory`, with time
passed in by the caller.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, Protocol

from joulie.api.enums import SchedulableClass
from joulie.api.keys import AGENT_REPORTING_CONDITION
from joulie.api.nodehardware import NodeHardwareStatus
from joulie.api.nodetwin import NodeTwinSpec
from joulie.core.caps import spec_caps
from joulie.core.intents import CapRange, IntentConfig, gpu_cap_range, gpu_product_label

__all__ = [
    "DISPLAY_DIGITS",
    "PSU_CAPACITY_W",
    "REFERENCE_CORES",
    "REFERENCE_GPUS",
    "UNMANAGED_SOURCE",
    "PowerHistory",
    "RecognisedHardware",
    "TwinFigures",
    "TwinHardware",
    "TwinInput",
    "TwinOutput",
    "ambient_multiplier",
    "cap_percentages",
    "compute",
    "cooling_stress",
    "display_value",
    "estimated_pue",
    "hardware_density",
    "looks_like_energy",
    "measurement_failed",
    "power_headroom",
    "psu_stress",
    "retired_status",
    "status_fields",
    "status_figures",
    "twin_hardware",
    "twin_is_fresh",
]

PSU_CAPACITY_W: Final = 50_000.0
REFERENCE_CORES: Final = 192
REFERENCE_GPUS: Final = 8
PUE_FLOOR: Final = 1.05
PUE_SPAN: Final = 0.35


@dataclass(frozen=True)
class TwinHardware:
    """What the twin needs of a node's hardware; None where nothing says."""

    cpu_max_watts_per_socket: float | None = None
    sockets: int | None = None
    physical_cores: int | None = None
    """Physical cores of the whole node (density's reference counts physical cores, so a
    logical CPU count would double an SMT node's score)."""
    gpu_count: int = 0
    gpu_max_watts: float | None = None
    """Maximum power of one GPU board."""
    gpu_min_watts: float | None = None
    """Lowest power limit one GPU board accepts (a cap below it is enforced at it)."""
    cpu_min_watts_per_socket: float | None = None
    """Lowest package cap one socket accepts."""


class RecognisedHardware(Protocol):
    """What the roles recognised of a node's hardware (``joulie.hardware.recognition``'s
    HardwareView has these; core cannot import it)."""

    @property
    def cpu_max_w_per_socket(self) -> float | None: ...
    @property
    def sockets(self) -> int | None: ...
    @property
    def physical_cores(self) -> int | None: ...
    @property
    def gpu_count(self) -> int: ...
    @property
    def catalog_gpu_range(self) -> CapRange | None: ...


def twin_hardware(
    view: RecognisedHardware,
    hardware: NodeHardwareStatus | None,
    labels: Mapping[str, str],
    config: IntentConfig,
) -> TwinHardware:
    """A node's twin hardware figures from its recognised hardware, its NodeHardware status and
    labels. The GPU range comes from the same source the GPU caps are resolved against
    (NodeHardware, else the catalog, else GPU_MODEL_CAPS_JSON), so the budget the twin computes is
    the one the caps were written against; the CPU minimum is the agent's cap range."""
    gpu_count = view.gpu_count
    gpu_min: float | None = None
    gpu_max: float | None = None
    if gpu_count > 0:
        product = gpu_product_label(labels, config.gpu_product_label_keys)
        found = gpu_cap_range(hardware, view.catalog_gpu_range, product, config.gpu_model_caps)
        if found is not None:
            gpu_min, gpu_max = found
    cpu_range = hardware.cpu.cap_range if hardware is not None and hardware.cpu else None
    return TwinHardware(
        cpu_max_watts_per_socket=view.cpu_max_w_per_socket,
        sockets=view.sockets,
        physical_cores=view.physical_cores,
        gpu_count=gpu_count,
        gpu_max_watts=gpu_max,
        gpu_min_watts=gpu_min,
        cpu_min_watts_per_socket=cpu_range.min_watts_per_socket if cpu_range else None,
    )


@dataclass(frozen=True)
class TwinInput:
    hardware: TwinHardware
    schedulable_class: SchedulableClass
    """From the downgrade guard (performance, eco, or draining while performance pods remain)."""
    cpu_cap_pct: float | None
    """CPU cap in percent of maximum (:func:`cap_percentages`); None means uncapped."""
    gpu_cap_pct: float | None
    measured_power_w: float
    source: str
    """Where the measurement came from (powerMeasurement.source)."""
    power_trend_w_per_min: float = 0.0
    ambient_c: float | None = None
    """Facility ambient temperature; None, 0 or below means unknown."""
    rack_power_w: float | None = None
    """Total power of the node's rack, when known."""
    cluster_power_w: float | None = None
    """Total IT power of the cluster, when known."""


@dataclass(frozen=True)
class TwinOutput:
    schedulable_class: SchedulableClass
    cpu_tdp_w: float
    gpu_tdp_w: float
    node_tdp_w: float
    cpu_capped_power_w: float
    gpu_capped_power_w: float
    node_capped_power_w: float
    cpu_cap_pct: float
    gpu_cap_pct: float
    measured_power_w: float
    source: str
    power_trend_w_per_min: float
    power_headroom: float
    cooling_stress: float
    psu_stress: float
    hardware_density: float
    estimated_pue: float


def _clamp(value: float, low: float = 0.0, high: float = 100.0) -> float:
    return min(max(value, low), high)


def _positive(value: float | None) -> float:
    """``value`` when it is a finite number above 0, else 0."""
    if value is None or not math.isfinite(value) or value <= 0:
        return 0.0
    return float(value)


def _pct(value: float | None) -> float:
    """A cap percentage as the formulas use it: 100 when unset or not positive."""
    return min(value, 100.0) if value is not None and math.isfinite(value) and value > 0 else 100.0


def cap_percentages(spec: NodeTwinSpec, hw: TwinHardware) -> tuple[float | None, float | None]:
    """The CPU and GPU caps of a NodeTwin.spec in percent of maximum, as they are in force
    (:func:`joulie.core.caps.spec_caps` against the per-socket and per-GPU ranges). None for a
    device class the intent leaves uncapped, or caps in watts alone against an unknown maximum."""
    caps = spec_caps(
        spec,
        cpu_max_watts_per_package=hw.cpu_max_watts_per_socket,
        gpu_max_watts_per_gpu=hw.gpu_max_watts,
        cpu_min_watts_per_package=hw.cpu_min_watts_per_socket,
        gpu_min_watts_per_gpu=hw.gpu_min_watts,
    )
    return (
        caps.cpu.pct_of_max if caps.cpu is not None else None,
        caps.gpu.pct_of_max if caps.gpu is not None else None,
    )


def ambient_multiplier(ambient_c: float | None) -> float:
    """How much the ambient temperature amplifies cooling stress: 1 at 20 degC, +2 % per degree
    above it, at most 2 (from 45 degC); 1 when the ambient is unknown (None, 0 or below)."""
    if ambient_c is None or not math.isfinite(ambient_c) or ambient_c <= 0:
        return 1.0
    return 1.0 / max(0.5, 1.0 - (ambient_c - 20.0) * 0.02)


def power_headroom(node_capped_w: float, measured_w: float) -> float:
    if node_capped_w <= 0:
        return 100.0
    return min(100.0, (node_capped_w - measured_w) / node_capped_w * 100.0)


def cooling_stress(node_tdp_w: float, measured_w: float, ambient_c: float | None) -> float:
    if node_tdp_w <= 0:
        return 0.0
    return _clamp(measured_w / node_tdp_w * ambient_multiplier(ambient_c) * 100.0)


def psu_stress(rack_power_w: float | None, cluster_power_w: float | None) -> float:
    rack = _positive(rack_power_w)
    power = rack if rack > 0 else _positive(cluster_power_w)
    return _clamp(power / PSU_CAPACITY_W * 100.0)


def hardware_density(physical_cores: int | None, gpu_count: int) -> float:
    cpu_score = max(physical_cores or 0, 0) / REFERENCE_CORES * 100.0
    if gpu_count > 0:
        return _clamp((cpu_score + gpu_count / REFERENCE_GPUS * 100.0) / 2.0)
    return _clamp(cpu_score)


def estimated_pue(cooling: float) -> float:
    return PUE_FLOOR + cooling / 100.0 * PUE_SPAN


def compute(twin: TwinInput) -> TwinOutput:
    """The NodeTwin.status figures of one node (exact; :func:`status_fields` rounds them)."""
    hw = twin.hardware
    per_socket = _positive(hw.cpu_max_watts_per_socket)
    sockets = hw.sockets if hw.sockets is not None and hw.sockets > 0 else 1
    cpu_tdp = per_socket * sockets
    gpu_count = max(hw.gpu_count, 0)
    gpu_tdp = _positive(hw.gpu_max_watts) * gpu_count
    node_tdp = cpu_tdp + gpu_tdp
    cpu_pct, gpu_pct = _pct(twin.cpu_cap_pct), _pct(twin.gpu_cap_pct)
    cpu_capped = cpu_tdp * cpu_pct / 100.0
    gpu_capped = gpu_tdp * gpu_pct / 100.0
    node_capped = cpu_capped + gpu_capped
    measured = _positive(twin.measured_power_w)
    cooling = cooling_stress(node_tdp, measured, twin.ambient_c)
    trend = twin.power_trend_w_per_min
    return TwinOutput(
        schedulable_class=twin.schedulable_class,
        cpu_tdp_w=cpu_tdp,
        gpu_tdp_w=gpu_tdp,
        node_tdp_w=node_tdp,
        cpu_capped_power_w=cpu_capped,
        gpu_capped_power_w=gpu_capped,
        node_capped_power_w=node_capped,
        cpu_cap_pct=cpu_pct,
        gpu_cap_pct=gpu_pct,
        measured_power_w=measured,
        source=twin.source,
        power_trend_w_per_min=trend if math.isfinite(trend) else 0.0,
        power_headroom=power_headroom(node_capped, measured),
        cooling_stress=cooling,
        psu_stress=psu_stress(twin.rack_power_w, twin.cluster_power_w),
        hardware_density=hardware_density(hw.physical_cores, gpu_count),
        estimated_pue=estimated_pue(cooling),
    )


DISPLAY_DIGITS: Final[Mapping[str, int]] = {
    "watts": 0,
    "trend": 1,
    "score": 1,
    "pct": 1,
    "pue": 2,
}
"""Decimal places each kind of figure is written with. A status write happens only when a value
changes at this precision, so measurement noise below it costs no API write."""


def display_value(value: float, kind: str) -> float | int:
    """``value`` at the precision NodeTwin.status shows a figure of ``kind`` (a key of
    :data:`DISPLAY_DIGITS`): what every reader of the status sees."""
    digits = DISPLAY_DIGITS[kind]
    rounded = round(value, digits) + 0.0  # + 0.0 turns -0.0 into 0.0
    return int(rounded) if digits == 0 else rounded


class TwinFigures(NamedTuple):
    """The twin's part of NodeTwin.status at display precision, flat (:meth:`wire` gives the
    status fields). What the manager keeps per node between reconciles: the three dicts of the
    wire form cost about 1 KiB a node, 4.9 MiB at 5,000 nodes with their numbers, and a flat
    tuple of the same numbers shares whole between nodes whose figures are alike (tracemalloc,
    bench.manager)."""

    schedulable_class: str
    power_headroom: float | int
    cooling_stress: float | int
    psu_stress: float | int
    hardware_density: float | int
    estimated_pue: float | int
    cpu_pct: float | int
    gpu_pct: float | int
    source: str
    measured_power_w: float | int
    cpu_capped_power_w: float | int
    gpu_capped_power_w: float | int
    node_capped_power_w: float | int
    cpu_tdp_w: float | int
    gpu_tdp_w: float | int
    node_tdp_w: float | int
    power_trend_w_per_min: float | int

    def wire(self) -> dict[str, Any]:
        """The twin's part of NodeTwin.status in wire form (a new dict each call)."""
        return {
            "schedulableClass": self.schedulable_class,
            "predictedPowerHeadroomScore": self.power_headroom,
            "predictedCoolingStressScore": self.cooling_stress,
            "predictedPsuStressScore": self.psu_stress,
            "hardwareDensityScore": self.hardware_density,
            "estimatedPUE": self.estimated_pue,
            "effectiveCapState": {"cpuPct": self.cpu_pct, "gpuPct": self.gpu_pct},
            "powerMeasurement": {
                "source": self.source,
                "measuredNodePowerW": self.measured_power_w,
                "cpuCappedPowerW": self.cpu_capped_power_w,
                "gpuCappedPowerW": self.gpu_capped_power_w,
                "nodeCappedPowerW": self.node_capped_power_w,
                "cpuTdpW": self.cpu_tdp_w,
                "gpuTdpW": self.gpu_tdp_w,
                "nodeTdpW": self.node_tdp_w,
                "powerTrendWPerMin": self.power_trend_w_per_min,
            },
        }


def status_figures(out: TwinOutput) -> TwinFigures:
    """The twin's part of NodeTwin.status, rounded to display precision."""
    return TwinFigures(
        str(out.schedulable_class),
        display_value(out.power_headroom, "score"),
        display_value(out.cooling_stress, "score"),
        display_value(out.psu_stress, "score"),
        display_value(out.hardware_density, "score"),
        display_value(out.estimated_pue, "pue"),
        display_value(out.cpu_cap_pct, "pct"),
        display_value(out.gpu_cap_pct, "pct"),
        out.source,
        display_value(out.measured_power_w, "watts"),
        display_value(out.cpu_capped_power_w, "watts"),
        display_value(out.gpu_capped_power_w, "watts"),
        display_value(out.node_capped_power_w, "watts"),
        display_value(out.cpu_tdp_w, "watts"),
        display_value(out.gpu_tdp_w, "watts"),
        display_value(out.node_tdp_w, "watts"),
        display_value(out.power_trend_w_per_min, "trend"),
    )


def status_fields(out: TwinOutput) -> dict[str, Any]:
    """The twin's part of NodeTwin.status in wire form, rounded to display precision."""
    return status_figures(out).wire()


# --- measurement state and freshness --------------------------------------------------------

FAILED_SUFFIXES: Final = ("-error", "-no-data")
"""powerMeasurement.source ends in one of these when the last read of the node failed: ``-error``
when the source could not be read at all (or gave an unusable answer), ``-no-data`` when it
answered without a value for this node. The figures then are the last good ones."""


def looks_like_energy(measured_w: float, node_tdp_w: float) -> bool:
    """A reading above twice the node's TDP: most likely a cumulative joules counter read as
    watts (worth one warning per node; the reading is still used as given)."""
    return node_tdp_w > 0 and measured_w > 2 * node_tdp_w


UNMANAGED_SOURCE: Final = "unmanaged"
"""powerMeasurement.source of a twin whose node the manager no longer plans (it left the node
selector or was reserved): its figures were removed, and nothing keeps them current."""


_FIGURES: Final = (
    "predictedPowerHeadroomScore",
    "predictedCoolingStressScore",
    "predictedPsuStressScore",
    "hardwareDensityScore",
    "estimatedPUE",
    "effectiveCapState",
)


def retired_status(observed: Mapping[str, Any]) -> dict[str, Any] | None:
    """The status to apply (as the manager's field manager) to the twin of a node that is no
    longer planned: no figures, no AgentReporting condition, source ``unmanaged``, and the
    schedulable class kept (the spec, and so the caps, stay as they were). None when ``observed``
    already is that, so a retired twin costs one write, not one per reconcile."""
    desired: dict[str, Any] = {"powerMeasurement": {"source": UNMANAGED_SOURCE}}
    if observed.get("schedulableClass"):
        desired["schedulableClass"] = observed["schedulableClass"]
    condition = any(
        c.get("type") == AGENT_REPORTING_CONDITION for c in observed.get("conditions") or ()
    )
    if (
        observed.get("powerMeasurement") == desired["powerMeasurement"]
        and not condition
        and not any(key in observed for key in _FIGURES)
    ):
        return None
    return desired


def measurement_failed(source: str | None) -> bool:
    """Whether ``source`` says the twin's figures are not a current reading."""
    return source is None or source == UNMANAGED_SOURCE or source.endswith(FAILED_SUFFIXES)


def twin_is_fresh(
    source: str | None,
    lease_renewed_at: float | None,
    lease_duration_s: float | None,
    now: float,
) -> bool:
    """Whether a NodeTwin's status can be trusted as current: the freshness rule for whatever
    ranks nodes by their twins (a stale twin should score neutral).

    The manager writes a twin's status only when a figure changes, so a status timestamp would say
    nothing. Instead freshness comes from what is written anyway:

    * the manager's Lease is renewed within its duration: the manager that maintains every twin
      is alive (a stopped or partitioned manager stops renewing, and all twins go stale together);
    * the twin's own ``powerMeasurement.source`` is not a failure marker: the last read of this
      node succeeded (a failed read is written as ``<source>-error`` or ``<source>-no-data``), and
      the node is still planned (``unmanaged`` otherwise).

    Times are seconds on one clock (for example epoch seconds of the Lease's renewTime).
    """
    return lease_is_current(lease_renewed_at, lease_duration_s, now) and not measurement_failed(
        source
    )


def lease_is_current(renewed_at: float | None, duration_s: float | None, now: float) -> bool:
    """The manager's half of :func:`twin_is_fresh`, the same for every twin: its Lease was
    renewed within its duration. (A reader checks it once per request and the twin's own half
    when the twin changes.)"""
    if renewed_at is None or duration_s is None:
        return False
    return now - renewed_at <= duration_s


# --- trend ---------------------------------------------------------------------------------


@dataclass
class PowerHistory:
    """Recent readings per node, for the power trend in W/min.

    The trend is the least-squares slope of the readings within ``window_s`` of the newest: with
    two readings it is their difference over the time between them, and with more a single noisy
    reading moves it less than an end-to-end difference would.
    """

    window_s: float
    min_span_s: float = 6.0
    """Readings closer together than this give no trend (a burst of reads is not a rate)."""
    _samples: dict[str, array[float]] = field(default_factory=dict)
    """Per node, its readings as flat doubles ``t0, w0, t1, w1, ...``, oldest first. A deque of
    (time, watts) tuples cost about 1.9 KiB per node with 8 readings in the window (the
    deque's 64-slot block, a tuple and two floats per reading): 9.6 MiB at 5,000 nodes by
    tracemalloc; raw doubles are 16 bytes a reading."""
    _trends: dict[str, float] = field(default_factory=dict)
    """The trend per node since its last reading (reconciles between readings reuse it)."""

    def record(self, node: str, at: float, watts: float) -> None:
        samples = self._samples.get(node)
        if samples is None:
            samples = self._samples[node] = array("d")
        if samples and at <= samples[-2]:
            return  # time did not move: keep the first reading of that instant
        samples.append(at)
        samples.append(watts)
        old = 0
        while old < len(samples) and samples[old] < at - self.window_s:
            old += 2
        if old:
            del samples[:old]
        self._trends.pop(node, None)

    def known(self, node: str) -> bool:
        """Whether the node has readings spanning enough time to give a trend."""
        samples = self._samples.get(node)
        if not samples:
            return False
        return samples[-2] - samples[0] >= self.min_span_s

    def trend(self, node: str) -> float:
        """W/min over the window; 0 until :meth:`known`."""
        cached = self._trends.get(node)
        if cached is not None:
            return cached
        trend = _slope(self._samples[node]) * 60.0 if self.known(node) else 0.0
        self._trends[node] = trend
        return trend

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the history of every node not in ``keep`` (nodes that disappeared)."""
        kept = set(keep)
        for node in [n for n in self._samples if n not in kept]:
            del self._samples[node]
            self._trends.pop(node, None)

    def __len__(self) -> int:
        return len(self._samples)


def _slope(samples: array[float]) -> float:
    """Least-squares slope in W/s of flat ``t, w`` pairs. Times are taken relative to the first
    sample, so that epoch seconds squared do not swamp the differences."""
    t0, w0 = samples[0], samples[1]
    times, watts = samples[0::2], samples[1::2]
    if watts.count(w0) == len(watts):
        return 0.0  # the steady case, and the common one
    n = len(times)
    sum_t = sum_w = sum_tt = sum_tw = 0.0
    for t, w in zip(times, watts, strict=True):
        dt = t - t0
        sum_t += dt
        sum_w += w
        sum_tt += dt * dt
        sum_tw += dt * w
    var = sum_tt - sum_t * sum_t / n
    if var <= 0:
        return 0.0
    return (sum_tw - sum_t * sum_w / n) / var
