"""What a NodeTwin spec puts in force on a node, as the control request of the telemetry
contract (``joulie.api.telemetry``): the agent's HTTP backend sends it to the simulator for KWOK
nodes, and the standalone simulator applies the very same request to its virtual nodes, so a
simulated cap is exactly the cap a KWOK cluster would get.

Caps go through the one cap resolution (:mod:`joulie.core.caps`), so the request carries exactly
the cap the twin budgets with. The units differ on the two sides: NodeTwin's CPU watts are per
package, the contract's ``cpu.capWatts`` is node-wide (all sockets), so the per-package cap is
multiplied by the node's sockets here, once.
"""

from __future__ import annotations

from typing import Any

from joulie.api.nodetwin import NodeTwinSpec
from joulie.api.telemetry import ControlRequest, CpuControl, GpuControl, HardwareSummary
from joulie.core.caps import EffectiveCap, spec_caps

__all__ = ["control_request"]


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
