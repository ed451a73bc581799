"""Per-board GPU caps for the KWOK nodes the pool serves, under ``spec.gpu.classCaps``.

The simulator plays the kubelet for its nodes: the telemetry names each board
(``hardware.gpuIds``) and says which pod holds which boards (``podDevices``). From there the
pool decides each board's cap with exactly the DaemonSet agent's code
(:func:`joulie.agent.pod_devices.gpu_work` and :func:`joulie.agent.board_intents.board_intents`)
and sends the caps by board ID in the control request. Pure, apart from
:class:`ReportedPodDevices`, which answers :class:`~joulie.agent.pod_devices.PodDevices` from a
report already read.

The simulator's answer is as untrusted as a kubelet's: its lists were bounded when the report
was read (:mod:`joulie.api.telemetry`), and each device ID is checked by ``gpu_work``.
"""

from __future__ import annotations

from collections.abc import Sequence

from joulie.agent.board_intents import BoardIntent
from joulie.agent.gpu.device import GpuBackendKind, GpuDevice
from joulie.agent.gpu.settings import gpu_key
from joulie.agent.outcomes import ComponentOutcome, SettingOutcome
from joulie.agent.pod_devices import PodAllocations, PodDevicesUnavailable, PodKey
from joulie.api.enums import ControlResult
from joulie.api.telemetry import (
    BoardCap,
    ControlRequest,
    ControlResponse,
    HardwareSummary,
    Outcome,
    TelemetryReport,
)

__all__ = [
    "NO_POD_DEVICES",
    "ReportedPodDevices",
    "board_caps_request",
    "boards_outcome",
    "simulated_boards",
    "with_board_caps",
]

NO_POD_DEVICES = "the simulator does not say which pod holds which GPU"
LIMIT_SETTING = "power-limit"
"""How a board's cap is named in an outcome (as the DaemonSet names an NVML board's)."""


class ReportedPodDevices:
    """:class:`~joulie.agent.pod_devices.PodDevices` from a node's telemetry report."""

    def __init__(self, report: TelemetryReport) -> None:
        self._report = report

    async def allocations(self) -> PodAllocations:
        """The report's GPU devices per pod (simulated pods hold no exclusive CPUs)."""
        listed = self._report.pod_devices
        if listed is None:
            raise PodDevicesUnavailable(NO_POD_DEVICES)
        out: dict[PodKey, tuple[str, ...]] = {}
        for entry in listed:
            key = (entry.namespace, entry.name)
            out[key] = out.get(key, ()) + tuple(entry.devices)
        return PodAllocations(gpus=out)


def simulated_boards(hardware: HardwareSummary) -> tuple[GpuDevice, ...] | None:
    """The node's boards as discovery would give them, named by the report's IDs; None when the
    report names no boards, or not as many as the node has (per-board caps need every one)."""
    ids = hardware.gpu_ids
    if not ids or len(ids) != hardware.gpu_count or len(set(ids)) != len(ids):
        return None
    max_w = hardware.gpu_max_w_per_gpu or None
    return tuple(
        GpuDevice(
            index=index,
            vendor="simulated",
            backend=GpuBackendKind.NONE,
            raw_model=hardware.gpu_model,
            uuid=board,
            max_watts=max_w,
        )
        for index, board in enumerate(ids)
    )


def board_caps_request(intents: Sequence[BoardIntent]) -> list[BoardCap]:
    """Each board's cap in the contract's terms: watts when known, else the percentage, else
    none (the board runs uncapped)."""
    caps = []
    for intent in intents:
        cap = intent.cap
        if cap is None:
            caps.append(BoardCap(board=intent.board))
        elif cap.watts is not None:
            caps.append(BoardCap(board=intent.board, cap_watts=cap.watts))
        else:
            caps.append(BoardCap(board=intent.board, cap_pct_of_max=cap.pct_of_max))
    return caps


def with_board_caps(request: ControlRequest, caps: list[BoardCap]) -> ControlRequest:
    """``request`` with its GPU block carrying ``caps`` (an empty list removes per-board
    caps)."""
    if request.gpu is None:
        return request
    return request.model_copy(update={"gpu": request.gpu.model_copy(update={"board_caps": caps})})


def boards_outcome(response: ControlResponse, intents: Sequence[BoardIntent]) -> Outcome:
    """The GPU cap's outcome, board by board as the DaemonSet reports it: each board's result
    with what the backend said and why that cap (``standard work``, ``idle``, ...)."""
    said = {o.board: o for o in response.gpu_boards or ()}
    settings = []
    for intent in intents:
        answer = said.get(intent.board)
        if answer is None:
            result, message = ControlResult.ERROR, "the backend did not answer for this board"
        else:
            result, message = answer.result, answer.message
        settings.append(
            SettingOutcome(
                gpu_key(intent.board, LIMIT_SETTING),
                result,
                detail="; ".join(filter(None, (message, intent.note))),
            )
        )
    combined = ComponentOutcome.of(settings)
    if combined.result is None:
        return Outcome(result=ControlResult.UNSUPPORTED, message="no GPUs on this node")
    return Outcome(result=combined.result, message=combined.message)
