"""DaemonSet mode: one agent per node, putting that node's NodeTwin spec in force on its own
hardware.

A pass runs when the twin's intent changes and once every CONTROL_INTERVAL (which also notices
another writer's change, and drift): discovery when due, the spec (or, for a node out of the
plan, the baseline) put in force, NodeHardware published and controlStatus reported, each write
only when something changed. The hardware calls run in a worker thread, one pass at a time.
For a spec with per-class GPU caps, each pass also asks which pod holds which GPU (the kubelet's
PodResources API) and reads each pod's class from the pods bound to the node; a pod arriving,
leaving or changing class wakes a pass.

The spec is trusted only while it can be read: when the API server has not confirmed the twin
watch for SPEC_READ_TIMEOUT (a cut network, an API server down, revoked credentials), the node's
own settings are restored, since the manager may have withdrawn the spec meanwhile; the spec is
put back in force when contact returns. On SIGTERM everything is restored before the process
ends, and controlStatus says so where the API server can still be reached.

A pass that fails (an unexpected exception from a backend, a refused write) is logged once per
distinct failure and tried again at the next pass; the loop never stops on one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import structlog

from joulie.agent import metrics
from joulie.agent.cache import NODETWINS, OwnNodeCache
from joulie.agent.core_ceilings import CpuWork, cpu_work
from joulie.agent.host_node import HostNode, Outcomes
from joulie.agent.pod_devices import GpuWork, PodDevices, gpu_work, read_allocations
from joulie.agent.publisher import publish_hardware
from joulie.agent.reports import host_control_status
from joulie.api import keys
from joulie.api.enums import ControlResult
from joulie.api.nodetwin import NodeTwinSpec
from joulie.kube.writes import Writer

log = structlog.get_logger("joulie.agent")

BACKEND = "host"
REASSERT_S = 900.0
"""How long a setting another writer changed is left alone (``contended``) before the agent
writes its value again."""
STALE_CHECK_S = 1.0
"""While the spec cannot be read: how often the agent looks whether it can again."""
STOP_REPORT_S = 3.0
"""At SIGTERM, how long the agent tries to report ``restored`` after restoring (the restore
itself is not bounded by this)."""


class DaemonAgent:
    def __init__(
        self,
        node: str,
        cache: OwnNodeCache,
        host: HostNode,
        writer: Writer,
        *,
        control_interval_s: float,
        spec_read_timeout_s: float,
        heartbeat_s: float,
        started: float | None = None,
        pod_devices: PodDevices | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node = node
        self.cache = cache
        self.host = host
        self.writer = writer
        self.control_interval_s = control_interval_s
        self.spec_read_timeout_s = spec_read_timeout_s
        self.heartbeat = timedelta(seconds=heartbeat_s)
        self.pod_devices = pod_devices
        """Which pod holds which GPU (the kubelet's PodResources API); None: not known, every
        board then takes the node-level cap."""
        self._devices_problem: str | None = None
        self._clock = clock
        self._monotonic = monotonic
        self._started = monotonic() if started is None else started
        """When the agent started: the spec's age counts from here until the first contact."""
        self._last_reassert = monotonic()
        self._lock = asyncio.Lock()
        """One pass (and the final restore) at a time: hardware writes never interleave."""
        self.wake = asyncio.Event()
        self.passes = 0
        self.stale = False
        """The spec cannot be read and the node's own settings were restored."""
        self._failure: str | None = None

    # -- the spec's freshness -----------------------------------------------------------------

    def spec_age(self) -> float:
        """Seconds since the API server last confirmed the twin watch (since start, before)."""
        contact = self.cache.twins.last_contact
        return self._monotonic() - (contact if contact is not None else self._started)

    def next_wake(self) -> float:
        """Seconds until the next pass is due: the control interval, or the moment the spec
        turns stale, whichever comes first; while stale, soon (a pass then only checks whether
        the API server answers again, and retries a restore that did not complete)."""
        if self.stale:
            return min(self.control_interval_s, STALE_CHECK_S)
        return max(0.1, min(self.control_interval_s, self.spec_read_timeout_s - self.spec_age()))

    # -- one pass -----------------------------------------------------------------------------

    async def run_pass(self) -> None:
        """Bring the node in line with its twin. Each step is tried even when an earlier one
        failed (the hardware first, then what is reported); the first failure is raised at the
        end, for the caller to log."""
        async with self._lock:
            if self.spec_age() > self.spec_read_timeout_s:
                await self._on_stale()
                return
            if not self.cache.twins.has_synced:
                return
            twin = self.cache.twin
            if self.stale:
                # The watch is back, but its replay of what changed meanwhile may not have
                # arrived: read the twin itself before putting anything in force again.
                twin = await self.cache.read_twin()
                log.info("NodeTwin readable again: putting its spec back in force", node=self.node)
                self.stale = False
            spec = twin.spec if twin is not None and twin.managed else None
            now = self._monotonic()
            reassert = now - self._last_reassert >= REASSERT_S
            if reassert:
                self._last_reassert = now
            work = await self._pod_work(spec)
            outcomes = await asyncio.to_thread(
                self.host.enforce, spec, reassert=reassert, gpu_work=work.gpu, cpu_work=work.cpu
            )
            if spec is None and _restored(outcomes):
                metrics.RESTORES.labels("unplanned").inc()
            metrics.observe_outcomes(outcomes)
            failures: list[BaseException] = []
            for step in (self._sample, self._publish, lambda: self._report(outcomes)):
                try:
                    await step()
                except Exception as exc:
                    failures.append(exc)
            if failures:
                raise failures[0]
            self.passes += 1

    async def _pod_work(self, spec: NodeTwinSpec | None) -> PodWork:
        """Which class of work runs on which GPU board and holds which cores exclusively, asked
        (one kubelet call) only for a spec with per-class caps; a board whose class cannot be
        told takes the node-level cap, and cores follow the node-level preset (logged once per
        reason, and said in the outcome)."""
        wants_gpu = spec is not None and spec.gpu is not None and spec.gpu.class_caps is not None
        wants_cpu = spec is not None and spec.cpu is not None and spec.cpu.class_caps is not None
        if not (wants_gpu or wants_cpu):
            return PodWork(None, None)
        pod_class = self.cache.pod_class if self.cache.pods.has_synced else None
        answer = await read_allocations(self.pod_devices, pod_class)
        if isinstance(answer, str):
            gpu, cpu = GpuWork.unavailable(answer), CpuWork.unavailable(answer)
        else:
            assert pod_class is not None
            gpu, cpu = gpu_work(answer.gpus, pod_class), cpu_work(answer.cpus, pod_class)
        problem = gpu.unknown if wants_gpu else cpu.unknown
        if problem != self._devices_problem:
            if problem is not None:
                log.warning(
                    "work whose pods cannot be told takes the node-level intent",
                    node=self.node,
                    reason=problem,
                )
            else:
                log.info("the pods on every GPU board and exclusive core can be told again")
            self._devices_problem = problem
        return PodWork(gpu if wants_gpu else None, cpu if wants_cpu else None)

    async def _sample(self) -> None:
        metrics.observe_power(await asyncio.to_thread(self.host.sample_power), self.node)

    async def _publish(self) -> None:
        if not self.cache.hardware.has_synced:
            return  # not compared with what is stored yet: it would be written every pass
        facts = await asyncio.to_thread(self.host.hardware_status)
        await publish_hardware(
            self.writer,
            self.node,
            self.cache.hardware.get(self.node),
            facts,
            now=self._clock(),
            heartbeat=self.heartbeat,
            # Real hardware: the label keeps the pool's account (confined to simulated nodes by
            # admission) away from this object.
            labels={keys.SIMULATED_LABEL: "false"},
        )

    async def _on_stale(self) -> None:
        """Restore the node's own settings; again at every pass while something recorded is not
        back yet (a busy driver, a refused write), until the spec can be read again."""
        if not self.stale:
            self.stale = True
            log.warning(
                "NodeTwin unreadable for longer than SPEC_READ_TIMEOUT: restoring the node's "
                "own settings until it can be read again",
                node=self.node,
                unreadable_s=round(self.spec_age(), 1),
                error=str(self.cache.twins.last_error or "") or None,
            )
            metrics.RESTORES.labels("stale-spec").inc()
        elif len(self.host.baseline) == 0:
            return
        outcomes = await asyncio.to_thread(self.host.restore_all)
        metrics.observe_outcomes(outcomes)

    async def _report(self, outcomes: Outcomes) -> None:
        twin = self.cache.twin
        if twin is None:
            return  # nowhere to report: the twin is gone
        status = host_control_status(outcomes, twin.stored_control, BACKEND, self._clock())
        await self.writer.apply(
            f"{NODETWINS}/{self.node}/status",
            {
                "apiVersion": keys.API_VERSION,
                "kind": keys.NODE_TWIN_KIND,
                "metadata": {"name": self.node},
                "status": {"controlStatus": status},
            },
            observed=twin.control,
        )

    # -- the loop -----------------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        """Passes until ``stopping``; then everything restored."""
        try:
            while not stopping.is_set():
                self.wake.clear()
                await self._guarded_pass()
                wake = asyncio.create_task(self.wake.wait())
                stop = asyncio.create_task(stopping.wait())
                await asyncio.wait(
                    {wake, stop}, timeout=self.next_wake(), return_when="FIRST_COMPLETED"
                )
                wake.cancel()
                stop.cancel()
        finally:
            await self.shutdown()

    async def _guarded_pass(self) -> None:
        try:
            await self.run_pass()
        except Exception as exc:
            metrics.PASSES.labels("failed").inc()
            message = f"{type(exc).__name__}: {exc}"
            if message != self._failure:
                log.warning("pass failed; trying again", node=self.node, error=message)
            self._failure = message
        else:
            metrics.PASSES.labels("ok").inc()
            if self._failure is not None:
                log.info("pass succeeded again", node=self.node)
            self._failure = None

    async def shutdown(self) -> None:
        """Restore the node's own settings (always, even when the pass before failed), then
        report it if the API server answers within STOP_REPORT_S."""
        async with self._lock:
            outcomes = await asyncio.to_thread(self.host.restore_all)
        metrics.RESTORES.labels("stop").inc()
        left = len(self.host.baseline)
        log.info(
            "restored the node's own settings",
            node=self.node,
            results={k: o.result.value for k, o in outcomes.items() if o.result is not None},
            not_restored=left or None,
        )
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._report(outcomes), STOP_REPORT_S)
        await asyncio.to_thread(self.host.close)


class PodWork(NamedTuple):
    """What the pass needs to know of the pods' devices and cores (None: not asked)."""

    gpu: GpuWork | None
    cpu: CpuWork | None


def _restored(outcomes: Outcomes) -> bool:
    return any(o.result is ControlResult.RESTORED for o in outcomes.values())
