"""NVIDIA GPUs through NVML, behind an adapter the rest of the agent depends on.

The agent never calls ``pynvml`` (the ``nvidia-ml-py`` package) directly: discovery and control
talk to :class:`NvmlAdapter`, which tests satisfy with a fake and nodes with
:class:`PynvmlAdapter`. The adapter keeps NVML's native units (milliwatts, millijoules, MHz) so
that a value written is compared with the value read back in the unit the driver stores; the
callers convert to watts at their edge.

Every NVML failure becomes one of the vendor-neutral :mod:`joulie.agent.gpu.errors`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol, TypeVar, runtime_checkable

from joulie.agent.gpu.errors import (
    GpuError,
    GpuInvalidArgument,
    GpuLost,
    GpuNoPermission,
    GpuNotSupported,
    GpuUnavailable,
)

__all__ = [
    "ClockInfo",
    "LockedClocksReader",
    "NvmlAdapter",
    "PynvmlAdapter",
    "error_for_nvml_code",
]


# NVML status codes (nvml.h); the ones the agent acts on, by name.
_UNINITIALIZED = 1
_INVALID_ARGUMENT = 2
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15

_ERROR_CLASSES: dict[int, type[GpuError]] = {
    _INVALID_ARGUMENT: GpuInvalidArgument,
    _NOT_SUPPORTED: GpuNotSupported,
    _NO_PERMISSION: GpuNoPermission,
    _GPU_IS_LOST: GpuLost,
    _UNINITIALIZED: GpuUnavailable,
    _DRIVER_NOT_LOADED: GpuUnavailable,
    _LIBRARY_NOT_FOUND: GpuUnavailable,
    _FUNCTION_NOT_FOUND: GpuUnavailable,
}


def error_for_nvml_code(
    code: int | None, what: str, index: int | None = None, detail: str = ""
) -> GpuError:
    """The :class:`GpuError` for an NVML status code (a plain GpuError for codes the agent
    has no special handling for, such as UNKNOWN)."""
    cls = _ERROR_CLASSES.get(code, GpuError) if code is not None else GpuError
    where = f"GPU {index}: " if index is not None else ""
    reason = detail or f"NVML error {code}"
    return cls(f"{where}{what}: {reason}", code=code, index=index)


# --- the adapter -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClockInfo:
    """Graphics and memory clocks of one board, in MHz."""

    graphics_mhz: int
    memory_mhz: int


@runtime_checkable
class NvmlAdapter(Protocol):
    """What the agent asks of NVML. Devices are addressed by NVML index; every method may
    raise a :class:`GpuError`. Power in mW, energy in mJ, clocks in MHz."""

    def init(self) -> None:
        """Start a session; GpuUnavailable when there is no driver or library."""

    def shutdown(self) -> None: ...

    def device_count(self) -> int: ...

    def name(self, index: int) -> str: ...

    def uuid(self, index: int) -> str: ...

    def power_limit_constraints_mw(self, index: int) -> tuple[int, int]:
        """(minimum, maximum) power limit the board accepts; GpuNotSupported: monitor-only."""

    def default_power_limit_mw(self, index: int) -> int: ...

    def power_limit_mw(self, index: int) -> int:
        """The power management limit currently set (what a set changes)."""

    def enforced_power_limit_mw(self, index: int) -> int:
        """The limit in force: the lowest of every limiter, out-of-band (BMC) ones included."""

    def power_usage_mw(self, index: int) -> int: ...

    def total_energy_mj(self, index: int) -> int:
        """Energy since the driver loaded; GpuNotSupported before Volta."""

    def clocks_mhz(self, index: int) -> ClockInfo:
        """Current graphics and memory clocks."""

    def max_clocks_mhz(self, index: int) -> ClockInfo: ...

    def supported_memory_clocks_mhz(self, index: int) -> list[int]: ...

    def supported_graphics_clocks_mhz(self, index: int, memory_mhz: int) -> list[int]: ...

    def set_power_limit_mw(self, index: int, milliwatts: int) -> None:
        """Set the power management limit (NVML's v1 setter, root only, lost on reboot)."""

    def set_locked_gpu_clocks(self, index: int, min_mhz: int, max_mhz: int) -> None: ...

    def reset_locked_gpu_clocks(self, index: int) -> None: ...


@runtime_checkable
class LockedClocksReader(Protocol):
    """An adapter that can also read the locked graphics clocks back. NVML offers no such
    query on most drivers (:class:`PynvmlAdapter` does not implement it), so control code
    treats a lock as written but unverifiable unless the adapter has this method."""

    def locked_gpu_clocks(self, index: int) -> tuple[int, int] | None:
        """(min, max) MHz of the lock in force; None when the clocks are not locked."""


_T = TypeVar("_T")


class PynvmlAdapter:
    """:class:`NvmlAdapter` over ``pynvml`` (nvidia-ml-py).

    ``pynvml`` is imported by :meth:`init`, so this module (and every test) imports without it;
    ``module`` lets a test hand in a stand-in for the binding. Power limits are set with
    ``nvmlDeviceSetPowerManagementLimit``, never the ``_v2`` variant: the Python wrapper of the
    latter (nvidia-ml-py 13.x) discards the C status, so a refused write would look applied.
    """

    def __init__(self, module: ModuleType | None = None) -> None:
        self._module = module
        self._nvml: Any = None

    # -- lifecycle -------------------------------------------------------------------------

    def init(self) -> None:
        module = self._module
        if module is None:
            try:
                import pynvml  # optional: imported only where NVML is wanted
            except ImportError as exc:
                raise GpuUnavailable(f"nvidia-ml-py is not installed: {exc}") from None
            module = pynvml
        try:
            module.nvmlInit()
        except module.NVMLError as exc:
            raise self._translate(module, exc, "initialise NVML", None) from None
        except OSError as exc:  # a broken libnvidia-ml.so (wrong architecture, truncated)
            raise GpuUnavailable(f"initialise NVML: {exc}") from None
        self._nvml = module

    def shutdown(self) -> None:
        nvml, self._nvml = self._nvml, None
        if nvml is None:
            return
        with contextlib.suppress(nvml.NVMLError):  # shutting down: nothing left to do
            nvml.nvmlShutdown()

    # -- reads -----------------------------------------------------------------------------

    def device_count(self) -> int:
        return int(self._call("count devices", None, lambda n: n.nvmlDeviceGetCount()))

    def name(self, index: int) -> str:
        return _text(self._device_call("read the name", index, "nvmlDeviceGetName"))

    def uuid(self, index: int) -> str:
        return _text(self._device_call("read the UUID", index, "nvmlDeviceGetUUID"))

    def power_limit_constraints_mw(self, index: int) -> tuple[int, int]:
        low, high = self._device_call(
            "read the power limit range", index, "nvmlDeviceGetPowerManagementLimitConstraints"
        )
        return int(low), int(high)

    def default_power_limit_mw(self, index: int) -> int:
        return int(
            self._device_call(
                "read the default power limit", index, "nvmlDeviceGetPowerManagementDefaultLimit"
            )
        )

    def power_limit_mw(self, index: int) -> int:
        return int(
            self._device_call("read the power limit", index, "nvmlDeviceGetPowerManagementLimit")
        )

    def enforced_power_limit_mw(self, index: int) -> int:
        return int(
            self._device_call(
                "read the enforced power limit", index, "nvmlDeviceGetEnforcedPowerLimit"
            )
        )

    def power_usage_mw(self, index: int) -> int:
        return int(self._device_call("read the power draw", index, "nvmlDeviceGetPowerUsage"))

    def total_energy_mj(self, index: int) -> int:
        return int(
            self._device_call(
                "read the energy counter", index, "nvmlDeviceGetTotalEnergyConsumption"
            )
        )

    def clocks_mhz(self, index: int) -> ClockInfo:
        return self._clocks("read the clocks", index, "nvmlDeviceGetClockInfo")

    def max_clocks_mhz(self, index: int) -> ClockInfo:
        return self._clocks("read the maximum clocks", index, "nvmlDeviceGetMaxClockInfo")

    def supported_memory_clocks_mhz(self, index: int) -> list[int]:
        clocks = self._device_call(
            "read the supported memory clocks", index, "nvmlDeviceGetSupportedMemoryClocks"
        )
        return [int(c) for c in clocks]

    def supported_graphics_clocks_mhz(self, index: int, memory_mhz: int) -> list[int]:
        clocks = self._device_call(
            "read the supported graphics clocks",
            index,
            "nvmlDeviceGetSupportedGraphicsClocks",
            memory_mhz,
        )
        return [int(c) for c in clocks]

    # -- writes ----------------------------------------------------------------------------

    def set_power_limit_mw(self, index: int, milliwatts: int) -> None:
        self._device_call(
            "set the power limit", index, "nvmlDeviceSetPowerManagementLimit", int(milliwatts)
        )

    def set_locked_gpu_clocks(self, index: int, min_mhz: int, max_mhz: int) -> None:
        self._device_call(
            "lock the graphics clocks",
            index,
            "nvmlDeviceSetGpuLockedClocks",
            int(min_mhz),
            int(max_mhz),
        )

    def reset_locked_gpu_clocks(self, index: int) -> None:
        self._device_call("reset the graphics clocks", index, "nvmlDeviceResetGpuLockedClocks")

    # -- plumbing --------------------------------------------------------------------------

    def _clocks(self, what: str, index: int, function: str) -> ClockInfo:
        def read(nvml: Any) -> ClockInfo:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            get = getattr(nvml, function)
            return ClockInfo(
                graphics_mhz=int(get(handle, nvml.NVML_CLOCK_GRAPHICS)),
                memory_mhz=int(get(handle, nvml.NVML_CLOCK_MEM)),
            )

        return self._call(what, index, read)

    def _device_call(self, what: str, index: int, function: str, *args: int) -> Any:
        def call(nvml: Any) -> Any:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            return getattr(nvml, function)(handle, *args)

        return self._call(what, index, call)

    def _call(self, what: str, index: int | None, call: Callable[[Any], _T]) -> _T:
        nvml = self._nvml
        if nvml is None:
            raise GpuUnavailable(f"{what}: NVML is not initialised")
        try:
            return call(nvml)
        except nvml.NVMLError as exc:
            raise self._translate(nvml, exc, what, index) from None

    @staticmethod
    def _translate(nvml: Any, exc: Exception, what: str, index: int | None) -> GpuError:
        code = getattr(exc, "value", None)
        return error_for_nvml_code(code if isinstance(code, int) else None, what, index, str(exc))


def _text(value: str | bytes) -> str:
    # Older bindings return bytes, current ones str.
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
