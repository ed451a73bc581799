"""The node's power as its own interfaces measure it (TELEMETRY_*_SOURCE=host): CPU packages from
their RAPL (or HSMP) energy counters, GPUs from the driver's power reading.

A RAPL counter gives energy, not power: the mean power over a pass is the energy used since the
previous reading over the time between them, across one wrap of the counter at most. A pair that
cannot be trusted (the first reading, a counter reset by a driver reload, an interval long enough
for two wraps at the package's maximum) gives no figure rather than a wrong one. GPU power is the
board's own instantaneous reading.

The figures go to the agent's metrics endpoint, where the manager's Prometheus power source (or
any other scraper) reads them; a node whose CPU power cannot be read exports no CPU figure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from joulie.agent.cpu_discovery import CpuDiscovery
from joulie.agent.gpu.backends import GpuBackends
from joulie.agent.gpu.device import GpuDiscovery
from joulie.agent.gpu.errors import GpuError
from joulie.agent.powercap_discovery import average_power_watts
from joulie.agent.sysfs import Sysfs

__all__ = ["PowerReading", "PowerSampler"]


@dataclass(frozen=True)
class PowerReading:
    cpu_package_watts: dict[str, float] = field(default_factory=dict)
    """Per package zone (``package-0``): mean power since the previous reading."""
    gpu_watts: dict[str, float] = field(default_factory=dict)
    """Per board index: the driver's power reading."""

    @property
    def node_watts(self) -> float | None:
        """CPU packages plus GPUs; None when no CPU figure exists (a partial sum would read as
        a node drawing less than it does)."""
        if not self.cpu_package_watts:
            return None
        return sum(self.cpu_package_watts.values()) + sum(self.gpu_watts.values())


class PowerSampler:
    def __init__(self, sysfs: Sysfs, gpus: GpuBackends, clock: Callable[[], float]) -> None:
        self.sysfs = sysfs
        self.gpus = gpus
        self._clock = clock
        self._previous: dict[str, tuple[int, float]] = {}
        """Per energy file: the last reading and when it was taken."""

    def sample(self, cpu: CpuDiscovery, gpu: GpuDiscovery) -> PowerReading:
        return PowerReading(self._cpu(cpu), self._gpu(gpu))

    def _cpu(self, cpu: CpuDiscovery) -> dict[str, float]:
        watts: dict[str, float] = {}
        for zone in cpu.powercap.zones:
            if not zone.energy_readable or not zone.energy_path or not zone.max_energy_range_uj:
                continue
            reading = self.sysfs.try_read_int(zone.energy_path)
            now = self._clock()
            if reading is None:
                self._previous.pop(zone.energy_path, None)
                continue
            previous = self._previous.get(zone.energy_path)
            self._previous[zone.energy_path] = (reading, now)
            if previous is None:
                continue
            lt = zone.long_term
            plausible = lt.max_power_uw / 1e6 * 2 if lt is not None and lt.max_power_uw else None
            power = average_power_watts(
                previous[0], reading, now - previous[1], zone.max_energy_range_uj, plausible
            )
            if power is not None:
                watts[zone.name] = watts.get(zone.name, 0.0) + power
        return watts

    def _gpu(self, gpu: GpuDiscovery) -> dict[str, float]:
        watts: dict[str, float] = {}
        for device in gpu.devices:
            if not device.telemetry:
                continue
            try:
                power = self.gpus.of_device(device).power_watts(device)
            except GpuError:
                continue
            if power is not None:
                watts[str(device.index)] = power
        return watts
