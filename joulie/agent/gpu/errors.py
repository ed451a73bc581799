"""Why a GPU operation failed, whichever vendor's interface it went through.

Every backend turns its interface's failures into these classes, so that callers tell apart
what the operator must know: a board whose limits cannot be changed at all (monitor-only), an
agent without the privilege to change them, a value the driver refused, a board that fell off
the bus, a node where the vendor interface itself is not there, and a board whose identity
cannot be confirmed (never written).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from joulie.agent.guarded_write import SettingFailed
from joulie.core.control import Failure

__all__ = [
    "IDENTITY_UNKNOWN",
    "BoardChanged",
    "BoardUnknown",
    "GpuError",
    "GpuInvalidArgument",
    "GpuLost",
    "GpuNoPermission",
    "GpuNotSupported",
    "GpuUnavailable",
    "gpu_failure",
    "needs_rediscovery",
    "translated",
]

_T = TypeVar("_T")


class GpuError(Exception):
    """A GPU operation failed. ``code`` is the vendor's status code when there is one."""

    def __init__(self, message: str, *, code: int | None = None, index: int | None = None):
        super().__init__(message)
        self.code = code
        self.index = index


class GpuNotSupported(GpuError):
    """The board does not offer this operation (GeForce/vGPU/MIG power limits, old boards):
    the agent monitors it and never retries the write."""


class GpuNoPermission(GpuError):
    """The agent may not change this setting (not root, or a container without the device)."""


class GpuInvalidArgument(GpuError):
    """The driver refused the value (out of range, a clock pair it does not support)."""


class GpuLost(GpuError):
    """The board stopped answering (fell off the bus, XID 79): mark it unhealthy."""


class GpuUnavailable(GpuError):
    """NVML (or the vendor library) is not usable on this node: no driver, no library, a
    driver too old for the call, or NVML not initialised."""


IDENTITY_UNKNOWN = "board identity unknown: not written, as its baseline could not be matched"


class BoardUnknown(GpuError):
    """An NVIDIA board's UUID could not be read, so nothing may be written to it: a baseline
    recorded under its index could later be taken for another board's, or its own cap for its
    baseline."""


class BoardChanged(GpuError):
    """The NVML index no longer holds the board discovery found there (boards renumbered after a
    hot-plug or a driver reload, or the board is gone): discover again before writing."""


def gpu_failure(exc: GpuError) -> SettingFailed:
    """A GPU interface's refusal as the guarded write counts it."""
    if isinstance(exc, GpuNotSupported):
        return SettingFailed(str(exc), failure=None)
    if isinstance(exc, GpuNoPermission):
        return SettingFailed(str(exc), Failure.PERMISSION)
    if isinstance(exc, GpuInvalidArgument):
        return SettingFailed(str(exc), Failure.REJECTED)
    return SettingFailed(str(exc), Failure.OTHER)  # lost, unavailable, anything else


def needs_rediscovery(exc: GpuError) -> bool:
    """Whether ``exc`` says the discovery in hand no longer describes the board."""
    return isinstance(exc, GpuLost | BoardChanged | BoardUnknown)


def translated(call: Callable[[], _T], noted: Callable[[GpuError], None]) -> _T:
    """``call``'s result; a GPU error it raises is told to ``noted`` (which watches for a board
    to discover again) and raised as the guarded write's :class:`SettingFailed`."""
    try:
        return call()
    except GpuError as exc:
        noted(exc)
        raise gpu_failure(exc) from None
