"""The agent's HTTP backends: telemetry and control of a node through the contract of
``joulie.api.telemetry`` (the simulator serves it for KWOK nodes), instead of sysfs and NVML.

:func:`control_request` turns a NodeTwin spec into the contract's request. Caps go through the
one cap resolution (``joulie.core.caps``), so the agent asks for exactly the cap the twin budgets
with. The units differ on the two sides: NodeTwin's CPU watts are per package, the contract's
``cpu.capWatts`` is node-wide (all sockets), so the per-package cap is multiplied by the node's
sockets here, once.

:class:`HttpBackend` sends and reads; every failure (no answer, an error status, a body outside
the contract) is a :class:`BackendError` naming the URL and what was wrong, never a crash.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import aiohttp
from pydantic import BaseModel, ValidationError

from joulie.api.nodetwin import NodeTwinSpec
from joulie.api.telemetry import (
    ControlRequest,
    ControlResponse,
    CpuControl,
    GpuControl,
    HardwareSummary,
    TelemetryReport,
)
from joulie.core.caps import EffectiveCap, spec_caps

__all__ = ["BackendError", "HttpBackend", "control_request"]

_M = TypeVar("_M", bound=BaseModel)


class BackendError(Exception):
    """A backend could not be read or did not accept a request; the message says which URL and
    why."""


def control_request(
    spec: NodeTwinSpec, hardware: HardwareSummary, *, governor_writes: bool
) -> ControlRequest:
    """The control request that puts ``spec`` in force on a node described by ``hardware``.

    A cap the spec leaves out is cleared (the node goes back to uncapped); presets are sent only
    with ``governor_writes``, and a preset the spec leaves out is then cleared (the node's own
    setting comes back). The GPU block is sent whenever the spec or the node has GPUs, so that a
    GPU cap on a node without GPUs is answered (unsupported) rather than silently dropped.
    """
    sockets = max(hardware.sockets, 1)
    per_package_max = hardware.cpu_max_w / sockets if hardware.cpu_max_w > 0 else None
    caps = spec_caps(
        spec,
        cpu_max_watts_per_package=per_package_max,
        gpu_max_watts_per_gpu=hardware.gpu_max_w_per_gpu or None,
    )
    cpu_fields = _cap_fields(caps.cpu, "cap_watts", sockets)
    if governor_writes:
        governor = spec.cpu.governor if spec.cpu is not None else None
        cpu_fields |= _preset_fields(governor.preset if governor else None)
    gpu: GpuControl | None = None
    if spec.gpu is not None or hardware.gpu_count > 0:
        gpu_fields = _cap_fields(caps.gpu, "cap_watts_per_gpu", 1)
        if governor_writes:
            wanted = spec.gpu.governor if spec.gpu is not None else None
            gpu_fields |= _preset_fields(wanted.preset if wanted else None)
            if wanted is not None:
                gpu_fields["clock_ceiling_pct_of_max"] = wanted.compute_clock_ceiling_pct_of_max
        gpu = GpuControl(**gpu_fields)
    return ControlRequest(cpu=CpuControl(**cpu_fields), gpu=gpu)


def _cap_fields(cap: EffectiveCap | None, watts_field: str, scale: int) -> dict[str, Any]:
    """A cap in the contract's terms: cleared, in watts (times ``scale`` devices), or a
    percentage when no maximum was known to turn it into watts."""
    if cap is None:
        return {"clear_cap": True}
    if cap.watts is not None:
        return {watts_field: cap.watts * scale}
    return {"cap_pct_of_max": cap.pct_of_max}


def _preset_fields(preset: object | None) -> dict[str, Any]:
    return {"clear_preset": True} if preset is None else {"preset": preset}


class HttpBackend:
    """GETs telemetry from ``telemetry_url`` and POSTs control to ``control_url`` (each with
    ``{node}`` in it), one shared connection pool, ``timeout`` seconds per request."""

    def __init__(
        self,
        telemetry_url: str,
        control_url: str,
        timeout: float,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self._telemetry_url = telemetry_url
        self._control_url = control_url
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session = session
        self._owns_session = session is None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def telemetry(self, node: str) -> TelemetryReport:
        url = self._telemetry_url.format(node=node)
        return await self._call("GET", url, None, TelemetryReport)

    async def control(self, node: str, request: ControlRequest) -> ControlResponse:
        url = self._control_url.format(node=node)
        body = request.model_dump(mode="json", by_alias=True, exclude_none=True)
        return await self._call("POST", url, body, ControlResponse)

    async def _call(self, method: str, url: str, body: Any, model: type[_M]) -> _M:
        try:
            async with self._client().request(
                method, url, json=body, timeout=self._timeout
            ) as response:
                text = await response.text()
                if response.status >= 300:
                    raise BackendError(
                        f"{method} {url}: HTTP {response.status}: {_error_text(text)}"
                    )
        except BackendError:
            raise
        except TimeoutError:
            raise BackendError(
                f"{method} {url}: no answer within {self._timeout.total} s"
            ) from None
        except aiohttp.ClientError as exc:
            raise BackendError(f"{method} {url}: {exc}") from None
        try:
            return model.model_validate_json(text)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(map(str, first["loc"])) or "body"
            raise BackendError(
                f"{method} {url}: the answer is not a {model.__name__} "
                f"({exc.error_count()} problem(s); {where}: {first['msg']})"
            ) from None


def _error_text(text: str) -> str:
    """The ``error`` of a JSON error body, else the start of the text."""
    try:
        decoded = json.loads(text)
    except ValueError:
        return text[:200]
    if isinstance(decoded, dict) and isinstance(decoded.get("error"), str):
        return str(decoded["error"])
    return text[:200]
