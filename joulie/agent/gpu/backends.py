"""The GPU backends a node is read through, in order of precedence.

A node is described by one vendor: the first backend in :data:`BACKENDS` that finds boards
(NVIDIA, then AMD, then Intel). Boards another backend finds on the same node are named in a
warning and left alone. Adding a vendor is its backend module plus its line here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from joulie.agent.gpu.amdgpu import AmdgpuBackend
from joulie.agent.gpu.backend import GpuBackend
from joulie.agent.gpu.device import GpuDevice
from joulie.agent.gpu.errors import GpuNotSupported
from joulie.agent.gpu.intel import IntelBackend
from joulie.agent.gpu.nvidia import NvidiaBackend
from joulie.agent.gpu.nvml import NvmlAdapter
from joulie.agent.sysfs import Sysfs

__all__ = ["BACKENDS", "GpuBackends"]

BACKENDS: tuple[Callable[[Sysfs, NvmlAdapter | None], GpuBackend], ...] = (
    lambda sysfs, nvml: NvidiaBackend(nvml, sysfs),
    lambda sysfs, nvml: AmdgpuBackend(sysfs),
    lambda sysfs, nvml: IntelBackend(sysfs),
)
"""How each backend is made from the node's files and its NVML adapter, in precedence order."""


class GpuBackends:
    """One node's backends, in precedence order."""

    def __init__(self, backends: tuple[GpuBackend, ...]) -> None:
        self.backends = backends
        self._by_vendor = {b.vendor: b for b in backends}
        self._limit_settings = frozenset(b.limit_setting for b in backends if b.limit_setting)
        self._clock_settings = frozenset(b.clock_setting for b in backends if b.clock_setting)

    @classmethod
    def of(cls, sysfs: Sysfs, nvml: NvmlAdapter | None = None) -> GpuBackends:
        """Every registered backend on this node's files (``nvml``: an initialised adapter, or
        None where NVML could not be initialised)."""
        return cls(tuple(make(sysfs, nvml) for make in BACKENDS))

    def __iter__(self) -> Iterator[GpuBackend]:
        return iter(self.backends)

    def of_device(self, device: GpuDevice) -> GpuBackend:
        """The backend that found ``device``."""
        backend = self._by_vendor.get(device.vendor)
        if backend is None:
            raise GpuNotSupported(f"GPU {device.index}: no backend for {device.vendor} boards")
        return backend

    def limit_settings(self) -> frozenset[str]:
        """The baseline setting names of every backend's power limits."""
        return self._limit_settings

    def clock_settings(self) -> frozenset[str]:
        """The baseline setting names of every backend's clock settings."""
        return self._clock_settings

    def close(self) -> list[str]:
        """Close every backend; what went wrong, one line each (shutting down: nothing else to
        do about it)."""
        problems = []
        for backend in self.backends:
            try:
                backend.close()
            except Exception as exc:
                problems.append(f"{backend.vendor}: {exc}")
        return problems
