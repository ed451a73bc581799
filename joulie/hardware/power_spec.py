"""What a node draws, from what it is made of: the power model's spec (``joulie.core.power_model``)
of a recognised node, built from the catalog's figures for its CPU and GPU models. The simulator
runs its virtual nodes on it, and the controller manager judges with it what its controls save
(the only module of this package that knows the power model).
"""

from __future__ import annotations

import structlog

from joulie.api.telemetry import HardwareSummary
from joulie.core.power_model import (
    CpuPowerSpec,
    GpuPowerSpec,
    NodePowerSpec,
    Throughput,
    energy_optimal_cap_w,
)
from joulie.hardware.catalog import Catalog, GpuSpec
from joulie.hardware.recognition import HardwareView

__all__ = [
    "CPU_MIN_CAP_FRACTION",
    "GENERIC_CPU_IDLE_W",
    "GENERIC_CPU_MAX_W",
    "GENERIC_GPU",
    "PACKAGE_IDLE_SHARE_OF_TDP",
    "REFERENCE_CPU_GHZ",
    "REFERENCE_GPU_MEMORY_GBS",
    "REFERENCE_GPU_TFLOPS",
    "cpu_part",
    "gpu_power_spec",
    "optimal_gpu_cap_w",
    "power_spec",
]

log = structlog.get_logger("joulie.hardware")

# Nodes whose CPU or GPU the catalog does not know get generic parts, so they still draw
# plausible power instead of none (which would make them look like the emptiest nodes); they do
# work at the reference parts' speed.
GENERIC_CPU_IDLE_W = 50.0
GENERIC_CPU_MAX_W = 250.0
GENERIC_GPU = (30.0, 300.0, 100.0)  # idle, max, min cap (W per GPU); the default cap law
# Package caps below half of TDP are rarely accepted by firmware; use that as the floor.
CPU_MIN_CAP_FRACTION = 0.5
PACKAGE_IDLE_SHARE_OF_TDP = 0.1
"""Package power of an idle socket as a share of its TDP (a modelling assumption: deep C-states
leave the uncore and I/O die powered); the rest of a socket's measured idle is platform power
(memory, fans, power-supply losses), which no package cap touches."""

REFERENCE_GPU_TFLOPS = 312.0
REFERENCE_GPU_MEMORY_GBS = 2039.0
"""The reference board a workload's run time is given on: NVIDIA A100 SXM4 80GB (dense
FP16/BF16 tensor TFLOPS and memory bandwidth, NVIDIA A100 datasheet). Another board does
compute-bound work at the ratio of its dense tensor TFLOPS and memory-bound work at the ratio of
its memory bandwidth: peak ratios, an assumption that overstates the gap between generations
somewhat (real kernels reach a smaller share of a faster part's peak)."""
REFERENCE_CPU_GHZ = 3.0
"""The reference core: one running at 3.0 GHz with every core busy (a modelling assumption, a
typical all-core clock of current server parts). Another core does CPU-bound work at the ratio
of its all-core clock; IPC differences between generations are not modelled."""


def cpu_part(
    sockets: int,
    tdp_w: float,
    idle_w: float,
    curve: tuple[tuple[float, float], ...] = (),
    **clocks: float,
) -> CpuPowerSpec:
    """A socket's power spec from its TDP, its measured idle (wall share) and curve: the package
    idles at PACKAGE_IDLE_SHARE_OF_TDP x TDP, the rest of idle is platform power, and the package
    cap range reaches the uncapped package draw at full load (at least TDP)."""
    platform = max(0.0, idle_w - PACKAGE_IDLE_SHARE_OF_TDP * tdp_w)
    top = curve[-1][1] if curve else tdp_w + platform
    peak = max(tdp_w, top - platform)
    return CpuPowerSpec(
        sockets=sockets,
        idle_w=idle_w,
        max_w=peak,
        min_cap_w=peak * CPU_MIN_CAP_FRACTION,
        curve=curve,
        platform_w=platform,
        **clocks,
    )


def gpu_power_spec(g: GpuSpec, count: int) -> GpuPowerSpec:
    """The power model of ``count`` boards of a catalog GPU model (ValueError where the power
    model refuses the entry)."""
    return GpuPowerSpec(
        count=count,
        idle_w=g.idle_w,
        max_w=g.max_w,
        min_cap_w=g.min_w,
        knee_w=g.cap_knee_w,
        floor_w=g.cap_floor_w,
        cap_exponent=g.cap_exponent,
    )


def power_spec(view: HardwareView, catalog: Catalog) -> tuple[NodePowerSpec, HardwareSummary]:
    """The power model of a node the roles recognised as ``view`` (its CPU and GPU models
    resolved against ``catalog``), and the summary of it the telemetry contract carries. A model
    the catalog does not know, or an entry the power model refuses, gets generic parts."""
    sockets = view.sockets or 1
    cpu_key = view.cpu_model if view.cpu_model in catalog.cpus else None
    cpu: CpuPowerSpec | None = None
    cpu_speed = 1.0
    if cpu_key is not None:
        c = catalog.cpu(cpu_key)
        try:
            cpu = cpu_part(
                sockets,
                c.tdp_w,
                c.idle_w,
                c.curve,
                nominal_ghz=c.base_ghz,
                boost_ghz=c.boost_ghz,
                all_core_ghz=c.all_core_ghz,
            )
            cpu_speed = c.all_core_ghz / REFERENCE_CPU_GHZ
        except ValueError as exc:
            _unusable(cpu_key, exc)
    if cpu is None:
        cpu = cpu_part(sockets, GENERIC_CPU_MAX_W, GENERIC_CPU_IDLE_W)
    gpu_count = view.gpu_count
    gpu: GpuPowerSpec | None = None
    compute = memory = 1.0
    if gpu_count > 0:
        gpu_key = view.gpu_model if view.gpu_model in catalog.gpus else None
        if gpu_key is not None:
            g = catalog.gpu(gpu_key)
            try:
                gpu = gpu_power_spec(g, gpu_count)
                compute = g.dense_tensor_tflops / REFERENCE_GPU_TFLOPS
                memory = g.memory_bandwidth_gbs / REFERENCE_GPU_MEMORY_GBS
            except ValueError as exc:
                _unusable(gpu_key, exc)
        if gpu is None:
            idle, peak, floor = GENERIC_GPU
            gpu = GpuPowerSpec(count=gpu_count, idle_w=idle, max_w=peak, min_cap_w=floor)
    summary = HardwareSummary(
        cpu_model=view.cpu_model,
        sockets=sockets,
        gpu_model=view.gpu_model,
        gpu_count=gpu_count,
        cpu_max_w=cpu.max_w * sockets,
        gpu_max_w_per_gpu=gpu.max_w if gpu else 0.0,
    )
    throughput = Throughput(cpu=cpu_speed, gpu_compute=compute, gpu_memory=memory)
    return NodePowerSpec(cpu=cpu, gpu=gpu, throughput=throughput), summary


_reported: set[str] = set()


def _unusable(model: str, exc: ValueError) -> None:
    """A catalog entry the power model rejects (a hand-made catalog file): say so once, and
    simulate generic parts instead of failing the node."""
    if model not in _reported:
        _reported.add(model)
        log.warning("catalog entry unusable, simulating generic parts", model=model, error=str(exc))


def optimal_gpu_cap_w(view: HardwareView, catalog: Catalog) -> float | None:
    """The energy-optimal cap of the node's GPU boards (``core.power_model``), in whole watts;
    None for a node without GPUs or with a GPU the catalog does not know (generic parts' watts
    could be far off the real board's range: such a board is not capped by a guess)."""
    model = view.gpu_model
    if view.gpu_count <= 0 or model is None or model not in catalog.gpus:
        return None
    try:
        board = gpu_power_spec(catalog.gpu(model), 1)
    except ValueError:  # an entry the power model refuses (a hand-made catalog)
        return None
    # Whole watts: a board's limit is set in milliwatts, and a cap that moves by a fraction of a
    # watt between releases of the catalog must not rewrite every NodeTwin.
    return float(round(energy_optimal_cap_w(board)))
