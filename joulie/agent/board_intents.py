"""The cap each GPU board of the node runs at under ``spec.gpu.classCaps``, with the reason.

A board held by one pod takes that pod's class intent and a board with no work the idle one,
both decided by :func:`joulie.core.caps.board_caps` (the simulator decides there too). A board
whose class cannot be told (several pods on it, a pod not in the cache yet, its UUID unreadable,
or work the kubelet's answer could not place, such as MIG slices) takes the node-level
``powerCap`` intent instead, and says why; when performance work is known to be on it, it never
goes below the performance intent, since that work must not run slower for sharing its board.

Pure: the caller passes the discovered boards and :class:`~joulie.agent.pod_devices.GpuWork`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from joulie.agent.gpu.device import GpuDevice
from joulie.agent.pod_devices import GpuWork
from joulie.api.enums import WorkloadClass
from joulie.api.nodetwin import NodeTwinSpec
from joulie.core.caps import EffectiveCap, board_caps, effective_cap

__all__ = ["NODE_LEVEL", "BoardIntent", "board_intents"]

NODE_LEVEL = "node-level cap"
"""How an outcome's detail starts for a board that took the node-level intent."""
_UNMATCHED = "the kubelet named GPU devices that are not boards found on this node"
_PERFORMANCE = WorkloadClass.PERFORMANCE.value


@dataclass(frozen=True)
class BoardIntent:
    """One board's cap and why it is that one (compared across passes: a change of any field
    is a change of intent)."""

    board: str
    workload_class: str | None
    """The class of the one pod on it; None for an idle board and one whose class is unknown."""
    cap: EffectiveCap | None
    """None: the board runs at its own limit (the baseline is put back)."""
    note: str
    """What the outcome's detail says of the choice (``standard work``, ``idle``,
    ``node-level cap: shared by several pods``)."""


def board_intents(
    spec: NodeTwinSpec, devices: Sequence[GpuDevice], work: GpuWork
) -> tuple[BoardIntent, ...]:
    """The cap of every board, in discovery order."""
    gpu = spec.gpu
    node_cap = gpu.power_cap if gpu is not None else None
    found = {d.board_id for d in devices if d.identity_known}
    # Work on a board the kubelet names but discovery did not find (another naming, a board
    # lost meanwhile) may be on any board named nowhere else: none of those is surely idle.
    rest = work.unknown or (_UNMATCHED if work.named - found else None)
    intents = []
    for device in devices:
        board = device.board_id
        why: str | None = None
        if not device.identity_known:
            why = "its UUID could not be read"
        elif board in work.classes:
            workload_class = work.classes[board]
            intents.append(
                BoardIntent(
                    board,
                    workload_class,
                    _class_cap(spec, device, workload_class),
                    f"{workload_class} work",
                )
            )
            continue
        else:
            why = work.unattributable.get(board, rest)
        if why is None:
            intents.append(BoardIntent(board, None, _class_cap(spec, device, None), "idle"))
            continue
        cap = effective_cap(
            node_cap.cap_watts_per_gpu if node_cap is not None else None,
            node_cap.cap_pct_of_max if node_cap is not None else None,
            device.max_watts,
            device.min_watts,
        )
        if board in work.performance:
            cap = _higher(cap, _class_cap(spec, device, _PERFORMANCE))
        intents.append(BoardIntent(board, None, cap, f"{NODE_LEVEL}: {why}"))
    return tuple(intents)


def _class_cap(
    spec: NodeTwinSpec, device: GpuDevice, workload_class: str | None
) -> EffectiveCap | None:
    (cap,) = board_caps(
        spec,
        [workload_class],
        gpu_max_watts_per_gpu=device.max_watts,
        gpu_min_watts_per_gpu=device.min_watts,
    )
    return cap


def _higher(a: EffectiveCap | None, b: EffectiveCap | None) -> EffectiveCap | None:
    """The less restrictive of two caps of one board (None, no cap, is the least)."""
    if a is None or b is None:
        return None
    if a.watts is not None and b.watts is not None:
        return a if a.watts >= b.watts else b
    if a.pct_of_max is not None and b.pct_of_max is not None:
        return a if a.pct_of_max >= b.pct_of_max else b
    return b  # not comparable (no range known): the class's own intent
