"""The cap a NodeTwin.spec puts on a node's CPU packages and on each of its GPUs.

A NodeTwin.spec may state a cap twice for one device class: in absolute watts and as a percentage
of the device's maximum. Absolute watts win whenever they are present; the percentage applies only
without them (CPU: ``packagePowerCapWatts``, else ``packagePowerCapPctOfMax``; GPU:
``capWattsPerGpu``, else ``capPctOfMax``). This module is that resolution, written once for every
reader of a NodeTwin.spec: the twin budgets with it today, and a node agent applying caps is meant
to resolve through it too, so that both see the same cap.

Units:

* CPU watts are **per package** (per socket): each CPU package is capped at
  ``packagePowerCapWatts``, so a node's CPU budget is sockets x that value. The spec calls it a
  package cap, the CPU cap range NodeHardware reports is per socket, and RAPL limits are set per
  package. The percentage is of one package's maximum, which is the same share of the node's.
* GPU watts are per GPU board, the percentage of one board's maximum power limit.

The effective cap is clamped into the device's range when it is known, since a device enforces
nothing outside it: never above the maximum, never below the minimum (a minimum above the maximum
is ignored).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from joulie.api.enums import WorkloadClass
from joulie.api.nodetwin import CpuCoreCeiling, GpuPowerCap, NodeTwinSpec

__all__ = [
    "EffectiveCap",
    "NodeCaps",
    "board_caps",
    "core_ceiling_khz",
    "effective_cap",
    "spec_caps",
]


@dataclass(frozen=True)
class EffectiveCap:
    """The cap in force on one device (a CPU package or a GPU board)."""

    watts: float | None
    """The cap in watts; None when only a percentage is known and the maximum is not."""
    pct_of_max: float | None
    """The cap in percent of the device's maximum (0-100]; None when only watts are known and the
    maximum is not."""


@dataclass(frozen=True)
class NodeCaps:
    cpu: EffectiveCap | None
    """The cap of each CPU package; None: uncapped."""
    gpu: EffectiveCap | None
    """The cap of each GPU; None: uncapped."""


def _usable(value: float | None) -> float | None:
    """``value`` when it is a finite number above 0 (an API value of 0 or less states no cap)."""
    if value is None or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def effective_cap(
    watts: float | None,
    pct_of_max: float | None,
    max_watts: float | None,
    min_watts: float | None = None,
) -> EffectiveCap | None:
    """The cap in force on one device from an intent's two fields and the device's range.

    ``watts`` wins when usable; ``pct_of_max`` applies only without it. With a known
    ``max_watts`` both figures are given, clamped to ``[min_watts, max_watts]``, the percentage
    derived from the watts. Without a maximum, watts stay as written (raised to a known minimum)
    and the percentage is the one the intent states alongside, if any: the manager writes both
    from the same range, so it describes the same cap. None when neither field is usable: the
    intent leaves the device uncapped.
    """
    w, pct, high = _usable(watts), _usable(pct_of_max), _usable(max_watts)
    low = _usable(min_watts)
    if low is not None and high is not None and low > high:
        low = None
    if pct is not None:
        pct = min(pct, 100.0)
    if w is None and pct is None:
        return None
    if high is None:
        if w is None:
            return EffectiveCap(watts=None, pct_of_max=pct)
        return EffectiveCap(watts=max(w, low) if low is not None else w, pct_of_max=pct)
    target = w if w is not None else high * (pct or 100.0) / 100.0
    clamped = min(max(target, low if low is not None else 0.0), high)
    return EffectiveCap(watts=clamped, pct_of_max=clamped / high * 100.0)


def spec_caps(
    spec: NodeTwinSpec,
    *,
    cpu_max_watts_per_package: float | None,
    gpu_max_watts_per_gpu: float | None,
    cpu_min_watts_per_package: float | None = None,
    gpu_min_watts_per_gpu: float | None = None,
) -> NodeCaps:
    """The CPU (per package) and GPU (per board) caps a NodeTwin.spec puts on a node whose
    devices have the given ranges (None where unknown)."""
    cpu = spec.cpu
    gpu_cap = spec.gpu.power_cap if spec.gpu is not None else None
    return NodeCaps(
        cpu=effective_cap(
            cpu.package_power_cap_watts if cpu is not None else None,
            cpu.package_power_cap_pct_of_max if cpu is not None else None,
            cpu_max_watts_per_package,
            cpu_min_watts_per_package,
        ),
        gpu=effective_cap(
            gpu_cap.cap_watts_per_gpu if gpu_cap is not None else None,
            gpu_cap.cap_pct_of_max if gpu_cap is not None else None,
            gpu_max_watts_per_gpu,
            gpu_min_watts_per_gpu,
        ),
    )


def board_caps(
    spec: NodeTwinSpec,
    board_classes: Sequence[str | None],
    *,
    gpu_max_watts_per_gpu: float | None,
    gpu_min_watts_per_gpu: float | None = None,
) -> list[EffectiveCap | None]:
    """The cap in force on each GPU board of a node, in board order, given the workload class of
    the pod running on each (None: no pod runs on it).

    With ``spec.gpu.classCaps`` a board takes its pod's class cap (``performance``; any other
    class value counts as ``standard``, as everywhere in Joulie) and an idle board the ``idle``
    one; a class the spec leaves out, and every board of a spec without classCaps, takes the
    node-level ``powerCap``. Each is resolved and clamped as :func:`effective_cap` does. The
    node agent and the simulator both decide a board's cap here.
    """
    gpu = spec.gpu
    node_cap = gpu.power_cap if gpu is not None else None
    by_class = gpu.class_caps if gpu is not None else None

    def resolve(cap: GpuPowerCap | None) -> EffectiveCap | None:
        return effective_cap(
            cap.cap_watts_per_gpu if cap is not None else None,
            cap.cap_pct_of_max if cap is not None else None,
            gpu_max_watts_per_gpu,
            gpu_min_watts_per_gpu,
        )

    if by_class is None:
        return [resolve(node_cap)] * len(board_classes)
    chosen = {
        None: by_class.idle,
        WorkloadClass.PERFORMANCE.value: by_class.performance,
        WorkloadClass.STANDARD.value: by_class.standard,
    }
    resolved = {key: resolve(cap if cap is not None else node_cap) for key, cap in chosen.items()}
    out = []
    for workload_class in board_classes:
        if workload_class is not None and workload_class != WorkloadClass.PERFORMANCE.value:
            workload_class = WorkloadClass.STANDARD.value
        out.append(resolved[workload_class])
    return out


def core_ceiling_khz(
    ceiling: CpuCoreCeiling | None,
    *,
    min_khz: int | None,
    max_khz: int | None,
    nominal_khz: int | None,
) -> int | None:
    """The frequency ceiling in kHz that ``ceiling`` puts on cores of the given landmarks, inside
    ``[min_khz, max_khz]``; None: no ceiling of its own (the cores follow the node-level preset).

    ``atNominal`` wins on cores that state a nominal frequency; otherwise the percentage of the
    maximum applies, and without a known maximum nothing can be resolved. A ceiling at or above
    the maximum is a ceiling at the maximum (the hardware's own), not None: the intent is then
    that those cores run unconstrained even where the preset would hold them lower.
    """
    if ceiling is None:
        return None
    high = max_khz if max_khz is not None and max_khz > 0 else None
    target: float | None = None
    if ceiling.at_nominal and nominal_khz is not None and nominal_khz > 0:
        target = nominal_khz
    elif high is not None:
        pct = _usable(ceiling.max_freq_pct_of_max)
        if pct is not None:
            target = high * min(pct, 100.0) / 100.0
    if target is None:
        return None
    if high is not None:
        target = min(target, high)
    if min_khz is not None and min_khz > 0 and (high is None or min_khz <= high):
        target = max(target, min_khz)
    return round(target)
