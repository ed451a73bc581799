"""A thin asynchronous client for the Kubernetes API on raw JSON.

kubernetes-asyncio provides what is hard to get right (kubeconfig and in-cluster loading,
credentials and their refresh, TLS, one shared aiohttp session); this module adds what Joulie
needs on top: requests on plain paths returning decoded JSON (no generated models), a watch
stream, typed errors, and request metrics with verb, resource and status code.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import aiohttp

from joulie.kube import metrics
from joulie.kube.k8s_library import ApiClient, Configuration, k8s_config

JSON: Final = "application/json"
METADATA_LIST: Final = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
"""Accept header for a list of objects' metadata only (names, labels): a fraction of the bytes
and of the decoding of whole objects, for a watcher that reads nothing else."""
METADATA: Final = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
"""Accept header for a watch of objects' metadata only."""
MERGE_PATCH: Final = "application/merge-patch+json"
APPLY_PATCH: Final = "application/apply-patch+yaml"

Params = Mapping[str, str | int | bool] | Sequence[tuple[str, str]]


class ApiError(Exception):
    """The API server answered with an error status (or an ERROR event in a watch)."""

    def __init__(self, status: int, reason: str, message: str, body: Any = None) -> None:
        super().__init__(f"HTTP {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body

    @classmethod
    def from_status(cls, status_object: Mapping[str, Any], default_code: int = 500) -> ApiError:
        return cls(
            int(status_object.get("code") or default_code),
            str(status_object.get("reason") or ""),
            str(status_object.get("message") or ""),
            status_object,
        )

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        """The requested resourceVersion is too old (watch or continue token): relist."""
        return self.status == 410 or self.reason == "Expired"


@dataclass(frozen=True)
class RequestInfo:
    """What a request does, in the terms of the API server's own metrics."""

    verb: str
    resource: str

    @staticmethod
    def of(method: str, path: str, params: Mapping[str, Any], content_type: str) -> RequestInfo:
        parts = [p for p in path.split("?")[0].split("/") if p]
        # /api/v1/... or /apis/<group>/<version>/...
        rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
        if len(rest) >= 3 and rest[0] == "namespaces":
            rest = rest[2:]
        resource = rest[0] if rest else "-"
        has_name = len(rest) >= 2
        if len(rest) >= 3:
            resource = f"{resource}/{rest[2]}"
        if method == "GET":
            verb = "get" if has_name else ("watch" if params.get("watch") else "list")
        elif method == "PATCH":
            verb = "apply" if content_type == APPLY_PATCH else "patch"
        elif method == "DELETE" and not has_name:
            verb = "deletecollection"
        else:
            verb = {"POST": "create", "PUT": "update", "DELETE": "delete"}.get(method, method)
        return RequestInfo(verb, resource)


def user_agent() -> str:
    """``joulie/<version> (<host>; pid <pid>)``."""
    try:
        version = importlib.metadata.version("joulie")
    except importlib.metadata.PackageNotFoundError:
        version = "dev"
    return f"joulie/{version} ({socket.gethostname()}; pid {os.getpid()})"


class KubeClient:
    """Requests against one API server with one identity."""

    def __init__(self, api_client: ApiClient, source: str = "") -> None:
        self._api = api_client
        # Names this very process in the API server's audit log and request metrics.
        api_client.user_agent = user_agent()
        self.source = source or f"API server {self.host}"
        """Where the configuration came from (a kubeconfig path, in-cluster), for messages."""

    @classmethod
    async def from_kubeconfig(
        cls, path: str | None = None, context: str | None = None
    ) -> KubeClient:
        """Load a kubeconfig file (KUBECONFIG or ~/.kube/config when ``path`` is None)."""
        configuration = Configuration()
        await k8s_config.load_kube_config(
            config_file=path,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
        return cls(ApiClient(configuration=configuration), f"kubeconfig {path or 'default'}")

    @classmethod
    def in_cluster(cls) -> KubeClient:
        configuration = Configuration()
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return cls(ApiClient(configuration=configuration), "in-cluster config")

    @classmethod
    async def connect(cls, kubeconfig: str | None = None) -> KubeClient:
        """The given kubeconfig, else KUBECONFIG, else in-cluster credentials inside a pod, else
        ~/.kube/config. Sends nothing: a configuration that cannot be used raises
        ``joulie.kube.connection.ClusterError`` naming the file and the problem; see that module
        for connecting with a check of the server (and with retries)."""
        from joulie.kube.connection import load

        return await load(kubeconfig)

    @property
    def host(self) -> str:
        """The API server's URL."""
        return str(self._api.configuration.host)

    async def close(self) -> None:
        await self._api.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def _send(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any],
        body: Any,
        content_type: str,
        timeout: float | aiohttp.ClientTimeout | None,
        accept: str = JSON,
    ) -> aiohttp.ClientResponse:
        query = [(k, _param(v)) for k, v in params.items()]
        headers = {"Accept": accept, "Content-Type": content_type}
        # kubernetes-asyncio serialises the body itself for JSON content types (an apply patch
        # is sent as JSON too, which is valid YAML).
        response: aiohttp.ClientResponse = await self._api.call_api(
            path,
            method,
            query_params=query,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float = 30.0,
        accept: str = JSON,
    ) -> Any:
        """One request; the decoded JSON answer, or ApiError for an error status."""
        params = params or {}
        info = RequestInfo.of(method, path, params, content_type)
        started = time.perf_counter()
        code = "error"
        try:
            response = await self._send(method, path, params, body, content_type, timeout, accept)
            async with response:
                code = str(response.status)
                raw = await response.read()
            if response.status >= 300:
                raise _error(response.status, response.reason or "", raw)
            return json.loads(raw) if raw else None
        finally:
            metrics.observe_request(info.verb, info.resource, code, time.perf_counter() - started)

    async def watch(
        self,
        path: str,
        *,
        params: Mapping[str, Any],
        idle_timeout: float,
        on_open: Callable[[], None] | None = None,
        accept: str = JSON,
    ) -> AsyncIterator[dict[str, Any]]:
        """Events of one watch request, decoded, until the server ends the stream.

        ``idle_timeout`` bounds the silence between two lines, so a stream that died without
        being closed (a vanished server, a cut connection) is noticed. ``on_open`` is called once
        the server has accepted the watch (a quiet stream is still a sign of contact).
        """
        params = {**params, "watch": "true"}
        info = RequestInfo.of("GET", path, params, JSON)
        timeout = aiohttp.ClientTimeout(
            total=None, connect=15, sock_connect=15, sock_read=idle_timeout
        )
        started = time.perf_counter()
        code = "error"
        try:
            response = await self._send("GET", path, params, None, JSON, timeout, accept)
            async with response:
                code = str(response.status)
                if response.status >= 300:
                    raise _error(response.status, response.reason or "", await response.read())
                metrics.observe_request(
                    info.verb, info.resource, code, time.perf_counter() - started
                )
                code = ""
                if on_open is not None:
                    on_open()
                async for line in response.content:
                    if line.strip():
                        yield _decode_event(line)
        finally:
            if code:
                metrics.observe_request(
                    info.verb, info.resource, code, time.perf_counter() - started
                )


class MalformedEvent(ValueError):
    """A watch line that is not a JSON watch event; carries the raw text for the log."""

    def __init__(self, text: str) -> None:
        super().__init__(f"malformed watch event: {text[:200]!r}")
        self.text = text


def _decode_event(line: bytes) -> dict[str, Any]:
    try:
        event = json.loads(line)
    except ValueError:
        raise MalformedEvent(line.decode(errors="replace")) from None
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise MalformedEvent(line.decode(errors="replace"))
    return event


def _error(status: int, reason: str, raw: bytes) -> ApiError:
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status":
        return ApiError.from_status(body, status)
    return ApiError(status, reason, raw.decode(errors="replace")[:500], body)


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
