"""What a NodeTwin spec puts in force on a node, as the control request of the telemetry
contract (``joulie.api.telemetry``): the agent's HTTP backend sends it to the simulator for KWOK
nodes, and the standalone simulator applies the very same request to its virtual nodes, so a
simulated cap is exactly the cap a KWOK cluster would get.

Caps go through the one cap resolution (:mod:`joulie.core.caps`), so the request carries exactly
the cap the twin budgets with. The units differ on the two sides: NodeTwin's CPU watts are per
package, the contract's ``cpu.capWatts`` is node-wide (all sockets), so the per-package cap is
multiplied by the node's sockets here, once.

A request may also cap GPU boards one by one, by board ID (``gpu.boardCaps``: the class of each
board's pod sets its cap). :func:`apply_control` puts those in ``Controls.gpu_board_caps_w`` in
board order, given the node's board IDs; a request without them leaves the per-board caps as
they are, so every caller that sends none behaves as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from joulie.api.enums import ControlResult
from joulie.api.nodetwin import NodeTwinSpec
from joulie.api.telemetry import (
    AppliedControls,
    BoardCap,
    BoardControl,
    BoardOutcome,
    ControlRequest,
    ControlResponse,
    CpuControl,
    GpuControl,
    HardwareSummary,
    Outcome,
)
from joulie.core.caps import EffectiveCap, spec_caps
from joulie.core.control import combine_results
from joulie.core.power_model import Controls, GpuPowerSpec, NodePowerSpec

__all__ = ["applied", "apply_control", "control_request", "controls_in_force"]


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


def apply_control(
    name: str,
    spec: NodePowerSpec,
    controls: Controls,
    request: ControlRequest,
    board_ids: Sequence[str] = (),
) -> tuple[Controls, ControlResponse]:
    """The controls of a node after ``request``, and the answer to it: caps clamped into the
    device range as the hardware would, presets set or cleared, GPU requests on a node without
    GPUs answered unsupported. ``board_ids``: the node's GPU boards' IDs in board order, which
    per-board caps name. The KWOK service and the standalone engine both apply control
    through here."""
    response = ControlResponse(node=name, controls=applied(controls, board_ids))
    cpu_max = spec.cpu.max_w * spec.cpu.sockets
    cpu_min = spec.cpu.min_cap_w * spec.cpu.sockets
    if request.cpu is not None:
        c = request.cpu
        watts = c.cap_watts
        if watts is None and c.cap_pct_of_max is not None:
            watts = cpu_max * c.cap_pct_of_max / 100
        if c.clear_cap:
            controls = replace(controls, cpu_cap_w=None)
            response.cpu_cap = Outcome(result=ControlResult.APPLIED, message="cap removed")
        elif watts is not None:
            capped = min(max(watts, cpu_min), cpu_max)
            controls = replace(controls, cpu_cap_w=capped)
            response.cpu_cap = Outcome(
                result=ControlResult.APPLIED,
                message=_clamp_note(watts, capped, "CPU package cap"),
            )
        if c.clear_preset:
            controls = replace(controls, cpu_preset=None)
            response.cpu_governor = Outcome(result=ControlResult.RESTORED)
        elif c.preset is not None:
            controls = replace(controls, cpu_preset=c.preset.value)
            response.cpu_governor = Outcome(
                result=ControlResult.APPLIED, message=f"preset {c.preset.value}"
            )
    if request.gpu is not None:
        gpu = spec.gpu
        g = request.gpu
        if gpu is None:
            note = "this node has no GPU"
            if (
                g.clear_cap
                or g.cap_watts_per_gpu is not None
                or g.cap_pct_of_max is not None
                or g.board_caps
            ):
                response.gpu_cap = Outcome(result=ControlResult.UNSUPPORTED, message=note)
            if g.clear_preset or g.preset is not None:
                response.gpu_governor = Outcome(result=ControlResult.UNSUPPORTED, message=note)
        else:
            watts = g.cap_watts_per_gpu
            if watts is None and g.cap_pct_of_max is not None:
                watts = gpu.max_w * g.cap_pct_of_max / 100
            if g.clear_cap:
                controls = replace(controls, gpu_cap_w=None)
                response.gpu_cap = Outcome(result=ControlResult.APPLIED, message="cap removed")
            elif watts is not None:
                capped = min(max(watts, gpu.min_cap_w), gpu.max_w)
                controls = replace(controls, gpu_cap_w=capped)
                response.gpu_cap = Outcome(
                    result=ControlResult.APPLIED, message=_clamp_note(watts, capped, "GPU cap")
                )
            if g.clear_preset:
                controls = replace(controls, gpu_preset=None, gpu_clock_ceiling_pct=None)
                response.gpu_governor = Outcome(result=ControlResult.RESTORED)
            elif g.preset is not None:
                controls = replace(
                    controls,
                    gpu_preset=g.preset.value,
                    gpu_clock_ceiling_pct=g.clock_ceiling_pct_of_max,
                )
                response.gpu_governor = Outcome(
                    result=ControlResult.APPLIED, message=f"preset {g.preset.value}"
                )
            if g.board_caps is not None:
                controls = _apply_board_caps(controls, gpu, g.board_caps, board_ids, response)
    response.controls = applied(controls, board_ids)
    return controls, response


def _apply_board_caps(
    controls: Controls,
    gpu: GpuPowerSpec,
    caps: Sequence[BoardCap],
    board_ids: Sequence[str],
    response: ControlResponse,
) -> Controls:
    """Per-board caps in board order, each clamped as the node-level cap is; a board the request
    does not name takes the node-level cap in force, a name that is no board of the node is
    answered not-applied. An empty list removes every per-board cap."""
    if not caps:
        response.gpu_boards = []
        response.gpu_cap = Outcome(result=ControlResult.APPLIED, message="per-board caps removed")
        return replace(controls, gpu_board_caps_w=())
    wanted = {cap.board: cap for cap in caps}
    per_board: list[float | None] = []
    outcomes: list[BoardOutcome] = []
    for index in range(gpu.count):
        board = board_ids[index] if index < len(board_ids) else None
        cap = wanted.pop(board, None) if board is not None else None
        if cap is None:
            per_board.append(controls.gpu_cap_w)
            continue
        watts = cap.cap_watts
        if watts is None and cap.cap_pct_of_max is not None:
            watts = gpu.max_w * cap.cap_pct_of_max / 100
        if watts is None:
            per_board.append(None)
            message = "uncapped"
        else:
            capped = min(max(watts, gpu.min_cap_w), gpu.max_w)
            per_board.append(capped)
            message = _clamp_note(watts, capped, "GPU cap")
        outcomes.append(
            BoardOutcome(board=cap.board, result=ControlResult.APPLIED, message=message)
        )
    for board in wanted:
        outcomes.append(
            BoardOutcome(
                board=board, result=ControlResult.NOT_APPLIED, message="no such board on this node"
            )
        )
    response.gpu_boards = outcomes
    result = combine_results(o.result for o in outcomes) or ControlResult.APPLIED
    response.gpu_cap = Outcome(result=result, message=f"caps on {len(caps)} boards by ID")
    return replace(controls, gpu_board_caps_w=tuple(per_board))


def applied(controls: Controls, board_ids: Sequence[str] = ()) -> AppliedControls:
    """The controls in the contract's terms; each per-board cap named by its board's ID (by its
    index where the ID is not known)."""
    boards = None
    if controls.gpu_board_caps_w:
        boards = [
            BoardControl(board=board_ids[i] if i < len(board_ids) else str(i), cap_watts=cap)
            for i, cap in enumerate(controls.gpu_board_caps_w)
        ]
    return AppliedControls(
        cpu_cap_watts=controls.cpu_cap_w,
        cpu_preset=controls.cpu_preset,
        gpu_cap_watts_per_gpu=controls.gpu_cap_w,
        gpu_preset=controls.gpu_preset,
        gpu_clock_ceiling_pct_of_max=controls.gpu_clock_ceiling_pct,
        gpu_boards=boards,
    )


def _clamp_note(asked: float, got: float, what: str) -> str:
    if abs(asked - got) < 1e-9:
        return f"{what} {got:.0f} W"
    return f"{what} {asked:.0f} W clamped to the device range: {got:.0f} W"


def controls_in_force(
    spec: NodeTwinSpec,
    power: NodePowerSpec,
    hardware: HardwareSummary,
    *,
    governor_writes: bool = True,
) -> Controls:
    """The controls a node of this power spec runs under once ``spec`` is in force (from an
    uncontrolled node): the request :func:`control_request` sends, applied as the hardware
    applies it."""
    request = control_request(spec, hardware, governor_writes=governor_writes)
    return apply_control("", power, Controls(), request)[0]
