"""The agent's HTTP backends: telemetry and control of a node through the contract of
``joulie.api.telemetry`` (the simulator serves it for KWOK nodes), instead of sysfs and NVML.
The request a NodeTwin spec makes is :func:`joulie.core.enforcement.control_request`.

:class:`HttpBackend` sends and reads; every failure (no answer, an error status, a body outside
the contract) is a :class:`BackendError` naming the URL and what was wrong, never a crash.
"""

from __future__ import annotations

from typing import Any, TypeVar

import aiohttp
from pydantic import BaseModel, ValidationError

from joulie.api import json_body
from joulie.api.telemetry import (
    ControlRequest,
    ControlResponse,
    TelemetryReport,
)

__all__ = ["BackendError", "HttpBackend"]

_M = TypeVar("_M", bound=BaseModel)

MAX_ANSWER_BYTES = 1024**2
"""Largest answer read: a report or a control answer is about a kilobyte; a bigger one is refused
as it streams in, not held."""


class BackendError(Exception):
    """A backend could not be read or did not accept a request; the message says which URL and
    why."""


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
                raw = await json_body.read_capped(
                    response.content.iter_chunked(64 * 1024), MAX_ANSWER_BYTES, "the answer"
                )
                text = raw.decode("utf-8", "replace")
                if response.status >= 300:
                    raise BackendError(
                        f"{method} {url}: HTTP {response.status}: {_error_text(text)}"
                    )
        except BackendError:
            raise
        except json_body.JsonBodyError as exc:
            raise BackendError(f"{method} {url}: {exc.reason}") from None
        except TimeoutError:
            raise BackendError(
                f"{method} {url}: no answer within {self._timeout.total} s"
            ) from None
        except aiohttp.ClientError as exc:
            raise BackendError(f"{method} {url}: {exc}") from None
        try:
            json_body.loads(raw, max_bytes=MAX_ANSWER_BYTES, what="the answer")
            return model.model_validate_json(raw)
        except json_body.JsonBodyError as exc:
            raise BackendError(f"{method} {url}: {exc.reason}") from None
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
        decoded = json_body.loads(text, max_bytes=MAX_ANSWER_BYTES)
    except ValueError:  # JsonBodyError
        return text[:200]
    if isinstance(decoded, dict) and isinstance(decoded.get("error"), str):
        return str(decoded["error"])
    return text[:200]
