"""The node's own power readings (TELEMETRY_*_SOURCE=host): package power from RAPL energy across
a counter wrap, no figure from a first reading or an untrustworthy pair, GPU power from NVML."""

from __future__ import annotations

from pathlib import Path

import pytest

from joulie.agent.cpu_discovery import discover_cpu
from joulie.agent.gpu.backends import GpuBackends
from joulie.agent.gpu.discovery import discover_gpus
from joulie.agent.host_power import PowerSampler
from tests.support import sysfs_trees as trees
from tests.support.fake_nvml import normal_node

PACKAGE0 = f"{trees.POWERCAP_DEVICES}/intel-rapl/intel-rapl:0/energy_uj"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_package_power_across_the_counter_wrap(tmp_path: Path) -> None:
    fake = trees.energy_near_wrap(tmp_path)
    clock = Clock()
    sampler = PowerSampler(fake, GpuBackends.of(fake, None), clock)
    cpu, gpu = discover_cpu(fake), discover_gpus(GpuBackends.of(fake, None))
    first = sampler.sample(cpu, gpu)
    assert first.cpu_package_watts == {}  # one reading is no power yet
    assert first.node_watts is None
    trees.wrap_counter(fake)
    clock.now += 0.5
    second = sampler.sample(cpu, gpu)
    # 329,850 uJ in half a second, across the wrap; package-1's counter did not move.
    assert second.cpu_package_watts["package-0"] == pytest.approx(0.6597)
    assert second.cpu_package_watts["package-1"] == 0
    assert second.node_watts == pytest.approx(0.6597)


def test_a_counter_reset_gives_no_figure(tmp_path: Path) -> None:
    fake = trees.intel_xeon_8260(tmp_path)
    clock = Clock()
    sampler = PowerSampler(fake, GpuBackends.of(fake, None), clock)
    cpu, gpu = discover_cpu(fake), discover_gpus(GpuBackends.of(fake, None))
    fake.put(PACKAGE0, 200_000_000_000)
    sampler.sample(cpu, gpu)
    # A driver reload resets the counter: read as a wrap it would be ~62 kJ in 20 s (3 kW).
    fake.put(PACKAGE0, 1_000_000)
    clock.now += 20
    assert "package-0" not in sampler.sample(cpu, gpu).cpu_package_watts


def test_gpu_power_comes_from_the_driver(tmp_path: Path) -> None:
    fake = trees.intel_xeon_8260(tmp_path)
    nvml = normal_node(2)
    sampler = PowerSampler(fake, GpuBackends.of(fake, nvml), Clock())
    reading = sampler.sample(discover_cpu(fake), discover_gpus(GpuBackends.of(fake, nvml)))
    assert reading.gpu_watts == {
        "0": nvml.gpus[0].usage_mw / 1000,
        "1": nvml.gpus[1].usage_mw / 1000,
    }
