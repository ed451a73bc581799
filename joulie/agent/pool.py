"""Pool mode: one agent process serving many KWOK nodes through the HTTP backend.

For each node of its shard the pool reads the node's telemetry, publishes its NodeHardware
(change-only, plus a heartbeat), and puts its NodeTwin spec in force through the backend:

* a spec the node is not yet running is sent (also after the backend lost its state, which the
  telemetry's applied controls show);
* a node the manager no longer plans (twin gone, or its status ``unmanaged``) gets its caps and
  presets cleared, reported ``restored``;
* with ``spec.gpu.classCaps`` each GPU board is capped by the class of the pod holding it: the
  simulator says which pod holds which board, the pool's pod cache gives each pod's class, and
  the DaemonSet agent's own code decides each board's cap (:mod:`joulie.agent.pool_boards`); the
  caps go out by board ID, and per-board caps are removed once the spec has none;
* the outcome goes to the twin's ``controlStatus`` under this agent's field manager, written
  only when an outcome changes.

A request goes out only when it (or the boards' reasons) differ from the last one sent, or the
backend no longer reports the controls it answered then: at steady state, no request and no
write.

One node's failure (the backend refuses, a write is refused) is logged and retried at the next
pass; it never stops the others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import structlog
from pydantic import BaseModel

from joulie.agent.board_intents import BoardIntent, board_intents
from joulie.agent.cache import NODETWINS, AgentCache
from joulie.agent.http_backend import HttpBackend
from joulie.agent.pod_devices import PodKey, read_gpu_work
from joulie.agent.pool_boards import (
    ReportedPodDevices,
    board_caps_request,
    boards_outcome,
    simulated_boards,
    with_board_caps,
)
from joulie.agent.publisher import publish_hardware
from joulie.agent.reports import control_status, feedback
from joulie.agent.sharding import shard_of
from joulie.api import keys
from joulie.api.enums import ControlResult
from joulie.api.nodetwin import NodeTwinSpec
from joulie.api.telemetry import (
    AppliedControls,
    ControlRequest,
    ControlResponse,
    CpuControl,
    GpuControl,
    HardwareSummary,
    TelemetryReport,
)
from joulie.core.enforcement import control_request
from joulie.hardware.catalog import Catalog
from joulie.hardware.simulated import simulated_hardware
from joulie.kube.writes import Writer

log = structlog.get_logger("joulie.agent")

BACKEND = "http"
GPU_STATUS_KEY = "gpu"


@dataclass(frozen=True)
class Sent:
    """What the pool last asked of a node and what the backend answered."""

    request: ControlRequest
    boards: tuple[BoardIntent, ...] | None
    """Each board's intent, when the GPU caps were sent board by board."""
    controls: AppliedControls
    """The controls the backend answered were in force (the rest of its answer went into the
    twin's status and is not needed again)."""


MAX_SHARED_FACTS = 1024
"""Distinct summaries whose facts are kept (a fleet has a few dozen models; past this bound, a
node's facts are built at each pass rather than held)."""


MAX_SHARED_VALUES = 1024
"""Distinct requests and answers kept once (past the bound, a node keeps its own)."""
_Model = TypeVar("_Model", bound=BaseModel)


def facts_key(hardware: HardwareSummary) -> tuple[Any, ...]:
    """What :func:`~joulie.hardware.simulated.simulated_hardware` reads of a summary: nodes equal
    in these have equal facts (the boards' IDs are not among them)."""
    return (
        hardware.cpu_model,
        hardware.sockets,
        hardware.cpu_max_w,
        hardware.gpu_model,
        hardware.gpu_count,
        hardware.gpu_max_w_per_gpu,
    )


def restore_request(hardware: HardwareSummary, *, governor_writes: bool) -> ControlRequest:
    """Everything back to the node's own settings: no caps, and no presets when this agent
    writes presets at all."""
    gpu = (
        GpuControl(clear_cap=True, clear_preset=governor_writes) if hardware.gpu_count > 0 else None
    )
    return ControlRequest(cpu=CpuControl(clear_cap=True, clear_preset=governor_writes), gpu=gpu)


def as_restored(response: ControlResponse) -> ControlResponse:
    """A clearing request's outcomes, said as what they are for the node: restored."""
    update: dict[str, Any] = {}
    for field in ("cpu_cap", "cpu_governor", "gpu_cap", "gpu_governor"):
        outcome = getattr(response, field)
        if outcome is not None and outcome.result is ControlResult.APPLIED:
            update[field] = outcome.model_copy(update={"result": ControlResult.RESTORED})
    return response.model_copy(update=update)


class PoolAgent:
    def __init__(
        self,
        cache: AgentCache,
        backend: HttpBackend,
        writer: Writer,
        catalog: Catalog,
        *,
        shard: int,
        shards: int,
        governor_writes: bool,
        heartbeat_s: float,
        pod_class: Callable[[PodKey], str | None] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._cache = cache
        self._backend = backend
        self._writer = writer
        self._catalog = catalog
        self._shard = shard
        self._shards = shards
        self._governor_writes = governor_writes
        self._heartbeat = timedelta(seconds=heartbeat_s)
        self._clock = clock
        self._pod_class = pod_class
        """The class of a running pod from the pool's pod cache (None: no cache, so every board
        under ``classCaps`` takes the node-level cap and says why)."""
        self._sent: dict[str, Sent] = {}
        """Per node: the last request sent and the backend's answer."""
        self._values: dict[tuple[type[BaseModel], str], BaseModel] = {}
        """Requests and answers shared between nodes (:meth:`_shared`)."""
        self._facts: dict[tuple[Any, ...], dict[str, Any]] = {}
        """The NodeHardware facts of each distinct summary (:func:`facts_key`), one read-only
        dict shared by every node of a model: a steady pass does not rebuild them, and a
        shard holds a handful. Kept per node with the summary they came from, they were 10.5
        MiB of a 2,500-node replica's traced heap (3.4 KB of facts and 1.3 KB of summary
        each)."""

    def _shared(self, value: _Model) -> _Model:
        """One copy of each distinct request and answer (read-only once stored): most nodes
        of a model are sent the same request and answer the same controls. Each node kept its
        own request and whole answer before, about 6 MiB of a 2,500-node replica's traced
        heap. Those naming boards are each one node's, and are not shared (they would only
        pile up)."""
        key = (type(value), value.model_dump_json())
        found = self._values.get(key)
        if found is not None:
            return found  # type: ignore[return-value]
        if len(self._values) < MAX_SHARED_VALUES:
            self._values[key] = value
        return value

    def mine(self, node: str) -> bool:
        return shard_of(node, self._shards) == self._shard

    def served(self) -> list[str]:
        """The nodes of this shard that KWOK fakes: a real node the selector also matches has an
        agent of its own (and admission would refuse this one its objects)."""
        return sorted(
            node.name
            for node in self._cache.nodes.values()
            if self.mine(node.name) and keys.kwok_node(node.annotations)
        )

    def forget_gone(self) -> None:
        existing = set(self._cache.nodes.keys())
        for name in [n for n in self._sent if n not in existing]:
            del self._sent[name]

    async def sync(self, node: str) -> None:
        """Bring one node in line; raises on failure (the caller retries it)."""
        described = self._cache.nodes.get(node)
        if not self.mine(node) or described is None or not keys.kwok_node(described.annotations):
            self._sent.pop(node, None)
            return
        report = await self._backend.telemetry(node)
        await self._publish(node, report.hardware)
        await self._enforce(node, report)

    async def _publish(self, node: str, hardware: HardwareSummary) -> None:
        key = facts_key(hardware)
        facts = self._facts.get(key)
        if facts is None:
            facts = simulated_hardware(hardware, self._catalog)
            if len(self._facts) < MAX_SHARED_FACTS:
                self._facts[key] = facts
        # Admission lets this agent write only NodeHardware labelled simulated, and the manager
        # believes such facts only for nodes KWOK fakes: a real node's own are out of reach.
        await publish_hardware(
            self._writer,
            node,
            self._cache.hardware.get(node),
            facts,
            now=self._clock(),
            heartbeat=self._heartbeat,
            labels={keys.SIMULATED_LABEL: "true"},
        )

    async def _enforce(self, node: str, report: TelemetryReport) -> None:
        twin = self._cache.twins.get(node)
        spec = twin.spec if twin is not None and twin.managed else None
        planned = spec is not None
        boards: tuple[BoardIntent, ...] | None = None
        if spec is not None:
            request = control_request(spec, report.hardware, governor_writes=self._governor_writes)
            boards = await self._board_intents(spec, report)
        else:
            request = restore_request(report.hardware, governor_writes=self._governor_writes)
        last = self._sent.get(node)
        if boards is not None:
            request = with_board_caps(request, board_caps_request(boards))
        elif report.controls.gpu_boards or (
            last is not None
            and last.request.gpu is not None
            and last.request.gpu.board_caps is not None
        ):
            # Caps were set board by board and the spec has none now: every board back to the
            # node-level cap (said again while the last request said so, so nothing flips).
            request = with_board_caps(request, [])
        if (
            last is not None
            and (last.request, last.boards) == (request, boards)
            and last.controls == report.controls
        ):
            return  # in force already, and the backend still says so
        response = await self._backend.control(node, request)
        if not planned:
            response = as_restored(response)
        named_boards = request.gpu is not None and bool(request.gpu.board_caps)
        self._sent[node] = Sent(
            request if named_boards else self._shared(request),
            boards,
            response.controls if response.controls.gpu_boards else self._shared(response.controls),
        )
        if twin is None:
            return  # nowhere to report: the twin is gone
        stored = twin.stored_control
        now = self._clock()
        status = control_status(response, stored, BACKEND, now)
        if boards is not None:
            outcome = boards_outcome(response, boards)
            status[GPU_STATUS_KEY] = feedback(
                outcome.result, outcome.message, BACKEND, stored.get(GPU_STATUS_KEY), now
            )
        await self._writer.apply(
            f"{NODETWINS}/{node}/status",
            {
                "apiVersion": keys.API_VERSION,
                "kind": keys.NODE_TWIN_KIND,
                "metadata": {"name": node},
                "status": {"controlStatus": status},
            },
            observed=twin.control,
        )

    async def _board_intents(
        self, spec: NodeTwinSpec, report: TelemetryReport
    ) -> tuple[BoardIntent, ...] | None:
        """Each GPU board's cap under ``classCaps``; None without them, or when the backend does
        not name the node's boards (the node-level cap then goes to every board)."""
        if spec.gpu is None or spec.gpu.class_caps is None:
            return None
        devices = simulated_boards(report.hardware)
        if devices is None:
            return None
        work = await read_gpu_work(ReportedPodDevices(report), self._pod_class)
        return board_intents(spec, devices, work)
