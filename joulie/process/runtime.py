"""One process, one event loop, any number of roles.

The runtime owns what every role shares: the uvloop event loop, signal handling with a graceful
shutdown in which each role gets ``SHUTDOWN_TIMEOUT`` to finish (the agent restores hardware
there), one HTTP endpoint serving /healthz, /readyz and /metrics, and the garbage-collector policy
that keeps full collections over the informers' caches out of the roles' work
(``joulie.process.gc_policy``).
"""

from __future__ import annotations

import asyncio
import resource
import signal
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import structlog
from aiohttp import web
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from joulie import __version__
from joulie.process.gc_policy import GcPolicy
from joulie.process.settings import ProcessSettings
from joulie.settings import IDLE_CONNECTION_TIMEOUT_S, split_address

log = structlog.get_logger("joulie.process.runtime")


class Role(Protocol):
    """What the runtime needs from a role."""

    name: str

    async def run(self, stopping: asyncio.Event) -> None:
        """Do the role's work until ``stopping`` is set, then clean up and return."""

    def is_ready(self) -> bool:
        """Whether the role can do its job now (caches synced, servers listening, ...)."""


class _RoleCollector(Collector):
    """Process metrics computed at scrape time from the roles' current state."""

    def __init__(self, roles: Sequence[Role], stopping: asyncio.Event) -> None:
        self._roles = roles
        self._stopping = stopping

    def collect(self) -> Iterable[GaugeMetricFamily | InfoMetricFamily]:
        info = InfoMetricFamily("joulie_build", "Joulie version running in this process")
        info.add_metric([], {"version": __version__})
        yield info
        ready = GaugeMetricFamily(
            "joulie_role_ready", "1 when the role reports ready, else 0", labels=["role"]
        )
        for role in self._roles:
            ready.add_metric([role.name], 1.0 if role.is_ready() else 0.0)
        yield ready
        yield GaugeMetricFamily(
            "joulie_shutting_down",
            "1 once a graceful shutdown has begun",
            value=1.0 if self._stopping.is_set() else 0.0,
        )


def health_app(
    roles: Sequence[Role], stopping: asyncio.Event, registry: CollectorRegistry
) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        # Answering at all shows the event loop is turning, which is what liveness asks.
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        lines = [f"{r.name}: {'ready' if r.is_ready() else 'not ready'}{_detail(r)}" for r in roles]
        ok = not stopping.is_set() and all(r.is_ready() for r in roles)
        if stopping.is_set():
            lines.append("process: shutting down")
        return web.Response(status=200 if ok else 503, text="\n".join(lines) + "\n")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", make_aiohttp_handler(registry))
    return app


def raise_file_limit() -> tuple[int, int]:
    """Raise the soft limit of open files to the hard one, as the Go runtime does at start, and
    return (before, after). Every connection is a file: at a soft limit of 256, 300 connections
    left open by one client made the process unreachable, its health probe included."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft >= hard:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        log.warning("cannot raise the open-file limit", soft=soft, hard=hard, error=str(exc))
        return soft, soft
    return soft, hard


def _detail(role: Role) -> str:
    """A role may say more than ready/not ready (the leader elector says who leads)."""
    status = getattr(role, "status", None)
    return f" ({status()})" if callable(status) else ""


async def serve(
    roles: Sequence[Role],
    settings: ProcessSettings,
    registry: CollectorRegistry = REGISTRY,
) -> int:
    """Run the roles until a signal or a role failure; return the process exit status."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    role_tasks: list[asyncio.Task[None]] = []

    def on_signal(signum: int) -> None:
        if stopping.is_set():
            log.warning("second signal, stopping now", signal=signal.Signals(signum).name)
            for task in role_tasks:
                task.cancel()
            return
        log.info("shutting down", signal=signal.Signals(signum).name)
        stopping.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)

    raise_file_limit()
    gc_policy = GcPolicy()
    gc_policy.install()
    collector = _RoleCollector(roles, stopping)
    registry.register(collector)
    runner = web.AppRunner(
        health_app(roles, stopping, registry),
        access_log=None,
        keepalive_timeout=IDLE_CONNECTION_TIMEOUT_S,
    )
    await runner.setup()
    host, port = split_address(settings.metrics_addr)
    site = web.TCPSite(runner, host or None, port)
    try:
        await site.start()
    except OSError as exc:
        log.error("cannot listen", address=settings.metrics_addr, error=str(exc))
        await runner.cleanup()
        registry.unregister(collector)
        gc_policy.uninstall()
        return 1
    log.info(
        "started",
        roles=[r.name for r in roles],
        metrics_addr=settings.metrics_addr,
        version=__version__,
    )

    status = 0
    try:
        role_tasks.extend(asyncio.create_task(r.run(stopping), name=r.name) for r in roles)
        stop_wait = asyncio.create_task(stopping.wait())
        await asyncio.wait([*role_tasks, stop_wait], return_when=asyncio.FIRST_COMPLETED)
        if not stopping.is_set():
            # A role ended on its own: that is a failure, and the others stop with it so the
            # process exits and Kubernetes restarts it.
            status = 1
            stopping.set()
        stop_wait.cancel()
        done, pending = await asyncio.wait(role_tasks, timeout=settings.shutdown_timeout)
        for task in pending:
            log.error(
                "role did not stop in time",
                role=task.get_name(),
                timeout_s=settings.shutdown_timeout,
            )
            task.cancel()
            status = 1
        await asyncio.gather(*pending, return_exceptions=True)
        status = max(status, _report(done))
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await runner.cleanup()
        registry.unregister(collector)
        gc_policy.uninstall()
    log.info("stopped", status=status)
    return status


def _report(done: Iterable[asyncio.Task[None]]) -> int:
    status = 0
    for task in done:
        if task.cancelled():
            status = 1
            log.error("role cancelled", role=task.get_name())
        elif (exc := task.exception()) is not None:
            status = 1
            log.error("role failed", role=task.get_name(), exc_info=exc)
    return status


def run(
    roles: Sequence[Role],
    settings: ProcessSettings,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> int:
    """Run ``serve`` on uvloop when it is available, else on the standard event loop."""
    with asyncio.Runner(loop_factory=loop_factory or event_loop_factory()) as runner:
        return runner.run(serve(roles, settings))


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop every role runs on: uvloop when it is installed (None: asyncio's own).
    Benchmarks run a role on the same one, or their figures are not the process's."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory
