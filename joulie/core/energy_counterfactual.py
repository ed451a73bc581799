"""What the work on a node would have drawn without Joulie's controls: for each pod, the power
model's energy for its work in the performance profile (no cap, no clock ceiling) over its
energy under the controls in force. ``core.energy_accounting`` scales each pod's measured
energy by this factor to state what it saved, so the saving rests on a measurement and the model
supplies only a ratio; an uncontrolled node saves nothing, exactly.

For one pod, under controls ``c``, from one steady state of the node's whole load
(:func:`joulie.core.power_model.steady_state`):

* its power is its share of the node's idle draw (by the share the attribution gives it), its
  share of the CPU's dynamic draw (by the cores it keeps busy) and the dynamic draw of the boards
  its GPUs run on (taken in pod order, as the simulator places them);
* its speed is the slowest of its boards' (a GPU pod), else the CPU's;
* the same work in the performance profile draws its power there for a shorter time, the
  interval times its speed now over its speed there. The factor is that energy over the energy
  now.

Assumptions, stated where a live cluster gives no measurement: the busy cores and board
utilisations the caller passes are estimates (the manager uses the extender's coefficients); a
GPU pod's CPU share does not set its speed; the controls are the ones the NodeTwin spec asks for
(a node whose agent could not apply one is judged as if it had).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from joulie.core.power_model import Controls, Load, NodePowerSpec, Steady, steady_state

__all__ = ["PodWork", "counterfactuals", "idle_power", "pod_power"]

_NO_CONTROLS = Controls()


@dataclass(frozen=True, slots=True)
class PodWork:
    """What one pod keeps busy on the node."""

    idle_share: float
    """Its share of the node's idle draw (the attribution's share of the node's resources)."""
    cpu_cores: float
    """Cores it keeps busy."""
    gpus: int = 0
    gpu_util: float = 0.0
    """Busy share of each of its boards."""


def _boards(spec: NodePowerSpec, pods: Sequence[PodWork]) -> list[tuple[int, int]]:
    """Each pod's boards as a (first, end) range, in pod order, as many as the node has."""
    count = spec.gpu_count
    ranges = []
    taken = 0
    for pod in pods:
        first = taken
        if pod.gpus > 0:
            taken = min(count, taken + pod.gpus)
        ranges.append((first, taken))
    return ranges


def _load(spec: NodePowerSpec, pods: Sequence[PodWork], node_cores: float) -> Load:
    utils = [0.0] * spec.gpu_count
    for pod, (first, end) in zip(pods, _boards(spec, pods), strict=True):
        for i in range(first, end):
            utils[i] = pod.gpu_util
    busy_cores = math.fsum(max(0.0, p.cpu_cores) for p in pods)
    return Load(
        cpu_util=busy_cores / node_cores if node_cores > 0 else 0.0,
        gpu_util=math.fsum(utils) / len(utils) if utils else 0.0,
        gpu_boards=tuple(utils),
    )


def pod_power(
    spec: NodePowerSpec, controls: Controls, pods: Sequence[PodWork], node_cores: float
) -> list[tuple[float, float]]:
    """(watts above the node's idle draw, speed) of each pod's work under ``controls``: its
    share of the CPU's dynamic draw by the cores it keeps busy, and the dynamic draw of its own
    boards; its speed is the slowest of its boards' (a GPU pod), else the CPU's. The watts add
    up to the node's steady draw above idle."""
    boards = _boards(spec, pods)
    busy = steady_state(spec, _load(spec, pods, node_cores), controls)
    idle = steady_state(spec, Load(), controls)
    cpu_dynamic = max(0.0, busy.cpu_w - idle.cpu_w)
    cores = math.fsum(max(0.0, p.cpu_cores) for p in pods)
    out = []
    for pod, (first, end) in zip(pods, boards, strict=True):
        watts = cpu_dynamic * max(0.0, pod.cpu_cores) / cores if cores > 0 else 0.0
        speed = busy.cpu_speed
        if end > first:
            watts += _boards_dynamic(busy, idle, first, end)
            speed = min(busy.gpu_board_speed[first:end])
        out.append((watts, speed))
    return out


def idle_power(spec: NodePowerSpec, controls: Controls) -> float:
    """What the node draws with nothing running, under ``controls``."""
    return steady_state(spec, Load(), controls).node_w


def _boards_dynamic(busy: Steady, idle: Steady, first: int, end: int) -> float:
    return math.fsum(max(0.0, busy.gpu_board_w[i] - idle.gpu_board_w[i]) for i in range(first, end))


def counterfactuals(
    spec: NodePowerSpec, controls: Controls, pods: Sequence[PodWork], node_cores: float
) -> list[float]:
    """For each pod, the energy of its work in the performance profile over its energy under
    ``controls`` (1.0: nothing saved; above 1: the controls save; below 1: they cost, as a cap
    below a board's energy-optimal point does). ``node_cores`` are the cores its busy cores are
    a share of."""
    if controls == _NO_CONTROLS or not pods:
        return [1.0] * len(pods)
    idle_now, idle_uncontrolled = idle_power(spec, controls), idle_power(spec, _NO_CONTROLS)
    now = pod_power(spec, controls, pods, node_cores)
    uncontrolled = pod_power(spec, _NO_CONTROLS, pods, node_cores)
    factors = []
    for pod, (now_w, now_speed), (perf_w, perf_speed) in zip(pods, now, uncontrolled, strict=True):
        now_w += idle_now * pod.idle_share
        perf_w += idle_uncontrolled * pod.idle_share
        if now_w <= 0.0 or perf_speed <= 0.0:
            factors.append(1.0)
            continue
        factors.append(perf_w * (now_speed / perf_speed) / now_w)
    return factors
