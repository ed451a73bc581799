"""Finding the cluster and checking it answers, with one-line reasons when it does not.

kubernetes-asyncio's own errors for a missing or broken kubeconfig are misleading (a file that
does not exist reads as "Expected key current-context"), and a server that is down surfaces as a
connector traceback. This module looks at the configuration first and asks the server for
``/version`` once, so every failure becomes a ``ClusterError`` whose text names the kubeconfig
(or the in-cluster configuration) and what is wrong with it.

Where the configuration comes from, in the order controller-runtime uses: an explicit path, the
``KUBECONFIG`` variable (a list of files, merged as kubectl merges them), the pod's service
account when running in a pod, then ``~/.kube/config``.

One-shot commands call ``connect`` and stop at the first error; long-running roles use
``ClusterConnector``, which retries with capped backoff and says why it is not connected yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import structlog
import yaml

from joulie.kube.client import ApiError, KubeClient
from joulie.kube.informer import Backoff, Informer
from joulie.kube.k8s_library import ApiClient, ConfigException, Configuration, k8s_config

log = structlog.get_logger("joulie.kube.connection")

DEFAULT_KUBECONFIG = "~/.kube/config"
IN_CLUSTER = "in-cluster config"
DEFAULT_TIMEOUT_S = 10.0
_POLL_S = 0.1
_T = TypeVar("_T")


class ClusterError(Exception):
    """The cluster cannot be used. ``str()`` is one line: where the configuration came from and
    what is wrong. ``config`` is True when the configuration itself is at fault (a person must
    fix the kubeconfig), False when the server could not be reached or refused us."""

    def __init__(self, source: str, problem: str, *, config: bool) -> None:
        super().__init__(f"{source}: {problem}")
        self.source = source
        self.problem = problem
        self.config = config


def _config_error(source: str, problem: str) -> ClusterError:
    return ClusterError(source, problem, config=True)


def kubeconfig_paths(kubeconfig: str | None, environ: Mapping[str, str]) -> list[str] | None:
    """The kubeconfig files to read, or None to use the pod's service account."""
    if kubeconfig:
        return _split(kubeconfig)
    if environ.get("KUBECONFIG"):
        return _split(environ["KUBECONFIG"])
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    return [os.path.expanduser(DEFAULT_KUBECONFIG)]


def _split(paths: str) -> list[str]:
    return [os.path.expanduser(p) for p in paths.split(os.pathsep) if p]


def _describe(paths: Sequence[str]) -> str:
    return f"kubeconfig {os.pathsep.join(paths)}"


def check_kubeconfig(paths: Sequence[str]) -> dict[str, Any]:
    """Read and merge the files as kubectl does (missing files in a list are skipped; the first
    file to name a context, cluster or user wins) and check that the current context resolves
    to a cluster with a server. Returns the merged configuration; raises ClusterError."""
    source = _describe(paths)
    merged: dict[str, Any] = {"clusters": {}, "contexts": {}, "users": {}}
    current: str | None = None
    found = 0
    for path in paths:
        document = _read(path, len(paths))
        if document is None:
            continue
        found += 1
        where = _describe([path])
        for section in ("clusters", "contexts", "users"):
            entries = document.get(section) or []
            if not isinstance(entries, list):
                raise _config_error(where, f"'{section}' must be a list")
            for entry in entries:
                if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                    raise _config_error(where, f"an entry of '{section}' has no name")
                merged[section].setdefault(entry["name"], entry.get(section[:-1]) or {})
        if current is None and document.get("current-context"):
            current = str(document["current-context"])
    if not found:
        missing = "file not found" if len(paths) == 1 else "none of these files exists"
        raise _config_error(source, missing)
    contexts = merged["contexts"]
    if current is None:
        hint = f" (it defines {_names(contexts)})" if contexts else " and defines no context"
        raise _config_error(source, f"no current-context is set{hint}")
    context = contexts.get(current)
    if context is None:
        known = f"; it defines {_names(contexts)}" if contexts else "; it defines no context"
        raise _config_error(source, f"current-context '{current}' is not defined{known}")
    cluster_name = context.get("cluster")
    cluster = merged["clusters"].get(cluster_name)
    if cluster is None:
        raise _config_error(
            source, f"context '{current}' names cluster '{cluster_name}', which is not defined"
        )
    if not cluster.get("server"):
        raise _config_error(source, f"cluster '{cluster_name}' has no server address")
    user = context.get("user")
    if user and user not in merged["users"]:
        raise _config_error(
            source, f"context '{current}' names user '{user}', which is not defined"
        )
    return merged


def _names(entries: Mapping[str, Any]) -> str:
    return ", ".join(repr(n) for n in sorted(entries))


def _read(path: str, count: int) -> dict[str, Any] | None:
    """One kubeconfig file as a mapping; None when it does not exist and is one of several."""
    where = _describe([path])
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        if count > 1:
            return None
        raise _config_error(where, "file not found") from None
    except IsADirectoryError:
        raise _config_error(where, "is a directory, not a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise _config_error(where, f"cannot read the file: {reason}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise _config_error(where, f"not valid YAML{at}: {problem}") from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise _config_error(where, "not a kubeconfig (expected a YAML mapping)")
    return document


async def load(kubeconfig: str | None = None) -> KubeClient:
    """A client from the configuration (no request sent yet; ``source`` says where it came
    from); raises ClusterError for a configuration that cannot be used."""
    paths = kubeconfig_paths(kubeconfig, os.environ)
    configuration = Configuration()
    if paths is None:
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except ConfigException as exc:
            raise _config_error(IN_CLUSTER, _in_cluster_problem(str(exc))) from None
        return KubeClient(ApiClient(configuration=configuration), IN_CLUSTER)
    check_kubeconfig(paths)
    source = _describe(paths)
    try:
        await k8s_config.load_kube_config(
            config_file=os.pathsep.join(paths),
            client_configuration=configuration,
            persist_config=False,
        )
    except Exception as exc:  # credentials plugins and certificate files fail in many ways
        text = str(exc).strip().splitlines()
        raise _config_error(source, text[0] if text else type(exc).__name__) from None
    return KubeClient(ApiClient(configuration=configuration), source)


def _in_cluster_problem(text: str) -> str:
    if "token" in text.lower():
        return "the service account token file is missing (is automountServiceAccountToken off?)"
    if "cert" in text.lower():
        return "the service account CA certificate file is missing"
    return f"KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not usable ({text})"


async def check(client: KubeClient, source: str, timeout: float = DEFAULT_TIMEOUT_S) -> None:
    """Ask the server for /version once; raise ClusterError saying why it did not answer."""
    try:
        async with asyncio.timeout(timeout):
            await client.request("GET", "/version", timeout=timeout)
    except (TimeoutError, ApiError, aiohttp.ClientError, OSError, ValueError) as exc:
        problem = failure(client.host, exc, timeout)
        raise ClusterError(source, problem, config=False) from None


def failure(server: str, exc: BaseException, timeout: float | None = None) -> str:
    """What a failed request to ``server`` means, in words (after the source, in one line)."""
    if isinstance(exc, TimeoutError):
        within = f" within {timeout:g} s" if timeout is not None else " in time"
        return f"the API server at {server} did not answer{within}"
    if isinstance(exc, ApiError):
        return _refusal(server, exc)
    if isinstance(
        exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError | ssl.SSLError
    ):
        return f"TLS error talking to {server}: {_tls_reason(exc)}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot reach the API server at {server}: {_os_reason(exc.os_error).lower()}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return f"the API server at {server} closed the connection"
    return f"request to the API server at {server} failed: {exc or type(exc).__name__}"


def permanent(exc: BaseException) -> bool:
    """A refusal that retrying will not change: bad credentials, no permission, no such
    resource (a CustomResourceDefinition not installed)."""
    return isinstance(exc, ApiError) and exc.status in (401, 403, 404)


def _os_reason(error: OSError) -> str:
    if isinstance(error, socket.gaierror):
        return f"cannot resolve the host name ({error.strerror})"
    # asyncio words a refusal as "Connect call failed (...)"; the errno says it plainly.
    if error.errno and error.errno > 0:
        return os.strerror(error.errno)
    return str(error) or type(error).__name__


def _refusal(server: str, exc: ApiError) -> str:
    if exc.status == 401:
        return f"the API server at {server} rejected the credentials (401 Unauthorized)"
    if exc.status == 403:
        return f"the API server at {server} denied access (403 Forbidden): {exc.message}"
    if exc.status == 404:
        return f"the API server at {server} does not serve it (404 Not Found): {exc.message}"
    return f"the API server at {server} answered {exc}"


def _tls_reason(exc: Exception) -> str:
    certificate_error = getattr(exc, "certificate_error", None)
    if certificate_error is not None:
        return str(getattr(certificate_error, "verify_message", None) or certificate_error)
    return str(exc)


async def connect(kubeconfig: str | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> KubeClient:
    """A client whose server has answered once; ClusterError otherwise (the client is closed)."""
    client = await load(kubeconfig)
    try:
        await check(client, client.source, timeout)
    except BaseException:
        await client.close()
        raise
    return client


class ClusterConnector:
    """Connects for a long-running role: retries with capped backoff until the server answers
    or the process stops, logging one line per failed attempt. ``problem`` says why it is not
    connected yet (for /readyz)."""

    def __init__(
        self,
        kubeconfig: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        backoff: Backoff | None = None,
    ) -> None:
        self._kubeconfig = kubeconfig
        self._timeout = timeout
        self._backoff = backoff or Backoff(initial=1.0, maximum=30.0, jitter=0.2)
        self.problem: str | None = None
        self.attempts = 0
        self.connected = False

    def status(self) -> str:
        """For /readyz: ``not connected: <why>``, ``connecting`` or ``connected``."""
        if self.connected:
            return "connected"
        return f"not connected: {self.problem}" if self.problem else "connecting"

    async def connect(self, stopping: asyncio.Event) -> KubeClient | None:
        """The connected client, or None when ``stopping`` was set first."""
        while not stopping.is_set():
            self.attempts += 1
            try:
                client = await _until(stopping, connect(self._kubeconfig, self._timeout))
            except ClusterError as exc:
                self.problem = str(exc)
                delay = self._backoff.next_delay()
                log.error(
                    "cannot connect to the cluster, retrying",
                    error=self.problem,
                    retry_in_s=round(delay, 1),
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), delay)
                continue
            if client is None:
                break
            if self.problem is not None:
                log.info("connected to the cluster", server=client.host)
            self.problem = None
            self.connected = True
            self._backoff.reset()
            return client
        return None


class RoleConnection:
    """A long-running role's client: the one it was handed (a test's, left open) or one it
    connects itself, retrying until the server answers, and closes when the role ends."""

    def __init__(self, given: KubeClient | None = None) -> None:
        self._given = given
        self._connector = ClusterConnector()
        self._opened: KubeClient | None = None

    @property
    def problem(self) -> str | None:
        """Why it is not connected yet (None while it is, or was handed a client)."""
        return self._connector.problem

    def status(self) -> str:
        """For /readyz before the role has anything of its own to say."""
        return self._connector.status() if self._given is None else "starting"

    async def open(self, stopping: asyncio.Event) -> KubeClient | None:
        """The client; None when ``stopping`` was set before the cluster answered."""
        if self._given is not None:
            return self._given
        self._opened = await self._connector.connect(stopping)
        return self._opened

    async def close(self) -> None:
        """Close the client if this connected it (a handed one is its owner's to close)."""
        opened, self._opened = self._opened, None
        if opened is not None:
            await opened.close()


async def _until(stopping: asyncio.Event, work: Any) -> KubeClient | None:
    """``work``'s client, or None (the attempt abandoned) when ``stopping`` is set first."""
    task: asyncio.Task[KubeClient] = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait([task, stop], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return None


async def wait_synced(
    syncing: Awaitable[_T],
    informers: Callable[[], Iterable[Informer[Any]]],
    source: str,
    server: str,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> _T:
    """Await ``syncing`` (work that ends once ``informers`` have synced) for a one-shot command:
    instead of retrying for ever, raise ClusterError as soon as an informer's list is refused
    for good (401, 403, 404) or has kept failing for ``timeout`` seconds. No limit while lists
    succeed: a large cluster may take longer than ``timeout`` to list."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(syncing)
    failing_since: dict[int, float] = {}
    try:
        while True:
            done, _ = await asyncio.wait([task], timeout=_POLL_S)
            if done:
                return task.result()
            now = loop.time()
            for informer in informers():
                error = informer.last_error
                if error is None:
                    failing_since.pop(id(informer), None)
                    continue
                since = failing_since.setdefault(id(informer), now)
                if permanent(error) or now - since >= timeout:
                    problem = f"cannot list {informer.resource}: {failure(server, error)}"
                    raise ClusterError(source, problem, config=False)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
