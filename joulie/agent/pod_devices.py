"""Which pod holds which GPU board of the node, from the device IDs the kubelet reports per pod.

The kubelet's PodResources API (:mod:`joulie.agent.pod_resources`; the pool agent will answer
from the simulator) says, per pod, which device IDs of each extended resource it was given.
:class:`PodDevices` is that source as the agent uses it, already restricted to GPU resources;
this module turns its answer into what can be told about each physical board (pure, no I/O):

* a whole-board ID (an NVIDIA ``GPU-<uuid>``, an AMD board's PCI address) names the board;
* a time-slicing or MPS replica ``<uuid>::<n>`` names its physical board: several pods on one
  board (the usual case for replicas) make it not attributable to one class;
* a MIG device (``MIG-<uuid>``) does not say which board it is a slice of, and an ID that is too
  long or holds unexpected characters is dropped: either way some GPU work cannot be placed, so
  no board named nowhere else may be taken for idle (its class is not known).

IDs come from a device plugin through the kubelet, so they are bounded and checked before use,
and never echoed into a status message.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from joulie.api import keys
from joulie.api.enums import WorkloadClass
from joulie.api.gpu import gpu_resource_kind

__all__ = [
    "MAX_CPU_ID",
    "MAX_CPU_IDS",
    "MAX_DEVICE_IDS",
    "MAX_DEVICE_ID_CHARS",
    "NO_CACHE",
    "NO_SOURCE",
    "GpuWork",
    "PodAllocations",
    "PodDevices",
    "PodDevicesUnavailable",
    "PodKey",
    "gpu_work",
    "is_gpu_resource",
    "pod_workload_class",
    "read_allocations",
    "read_gpu_work",
]

log = structlog.get_logger("joulie.agent.pod_devices")

PodKey = tuple[str, str]
"""(namespace, name): how PodResources names a pod (it carries no UID)."""

MAX_DEVICE_ID_CHARS = 128
"""Longest device ID accepted (an NVIDIA UUID is 40 characters, a replica a few more)."""
MAX_DEVICE_IDS = 4096
"""Most GPU device IDs one answer may hold; a node has at most a few dozen boards, and even
time-sliced into many replicas, this is far beyond any real one."""
MAX_CPU_ID = 65_535
"""Largest CPU number believed (Linux builds for the largest servers allow 8,192 CPUs)."""
MAX_CPU_IDS = 16_384
"""Most exclusive CPU numbers one answer may hold, all pods together."""
_DEVICE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]*")
_REPLICA = "::"
NO_SOURCE = "the agent has no source of pod devices"
NO_CACHE = "the agent's pod cache has not synced yet"
_MIG_PREFIX = "MIG-"


class PodDevicesUnavailable(Exception):
    """No answer to trust (no socket, no reply in time, a reply too large or malformed). The
    message is stable for a given cause, since it ends up in controlStatus: a different text
    at every pass would be a status write at every pass."""


@dataclass(frozen=True)
class PodAllocations:
    """What the pods of the node were given, every container of a pod together; pods given
    none are left out."""

    gpus: Mapping[PodKey, tuple[str, ...]] = field(default_factory=dict)
    """GPU device IDs (GPU resources only)."""
    cpus: Mapping[PodKey, tuple[int, ...]] = field(default_factory=dict)
    """CPUs held exclusively (the kubelet's static CPU manager policy)."""


class PodDevices(Protocol):
    """Where the agent learns which GPU devices and exclusive CPUs each pod on its node holds."""

    async def allocations(self) -> PodAllocations:
        """One answer for every pod of the node. Raises :class:`PodDevicesUnavailable`; never
        blocks the loop."""
        ...


def is_gpu_resource(resource: str) -> bool:
    """Whether an extended resource is a GPU unit (whole, MIG, partition, shared replica)."""
    return gpu_resource_kind(resource) is not None


def pod_workload_class(annotations: Mapping[str, str]) -> str:
    """A pod's workload class as every part of Joulie reads it: ``performance`` only when the
    annotation says so, anything else (absent, a typo) is ``standard``."""
    if annotations.get(keys.WORKLOAD_CLASS_ANNOTATION) == WorkloadClass.PERFORMANCE.value:
        return WorkloadClass.PERFORMANCE.value
    return WorkloadClass.STANDARD.value


@dataclass(frozen=True)
class GpuWork:
    """What runs on the node's GPU boards, by board ID (NVIDIA UUID, AMD PCI address)."""

    classes: Mapping[str, str] = field(default_factory=dict)
    """Boards held by exactly one pod: that pod's workload class."""
    unattributable: Mapping[str, str] = field(default_factory=dict)
    """Boards with work on them whose class cannot be told: why."""
    performance: frozenset[str] = frozenset()
    """Boards carrying performance work, attributable or not (a shared board with a
    performance pod on it must not be capped below that class's intent)."""
    unknown: str | None = None
    """Why a board named above in neither map cannot be taken for idle (no answer, MIG
    devices, dropped IDs); None: such a board is idle."""

    @property
    def named(self) -> frozenset[str]:
        """Every board ID the answer named."""
        return frozenset(self.classes) | frozenset(self.unattributable)

    @classmethod
    def unavailable(cls, why: str) -> GpuWork:
        return cls(unknown=why)


def _physical(device_id: str) -> tuple[str | None, str | None]:
    """(board ID, None) for an ID naming a board or a replica of one; (None, why) otherwise."""
    if len(device_id) > MAX_DEVICE_ID_CHARS or not _DEVICE_ID.fullmatch(device_id):
        return None, "invalid device IDs were ignored"
    if device_id.startswith(_MIG_PREFIX):
        return None, "MIG devices do not name their board"
    board = device_id.split(_REPLICA, 1)[0]
    if not board:
        return None, "invalid device IDs were ignored"
    return board, None


def gpu_work(
    devices: Mapping[PodKey, Sequence[str]],
    pod_class: Callable[[PodKey], str | None],
) -> GpuWork:
    """What :class:`PodDevices` answered, board by board. ``pod_class`` gives a pod's workload
    class from the agent's own pod cache, None for a pod the cache does not hold (yet)."""
    holders: dict[str, set[PodKey]] = {}
    problems: set[str] = set()
    seen = 0
    for pod, ids in devices.items():
        for device_id in ids:
            seen += 1
            if seen > MAX_DEVICE_IDS:
                return GpuWork.unavailable(f"more than {MAX_DEVICE_IDS} GPU device IDs")
            board, problem = _physical(device_id)
            if board is None:
                problems.add(problem or "")
                continue
            holders.setdefault(board, set()).add(pod)
    classes: dict[str, str] = {}
    unattributable: dict[str, str] = {}
    performance: set[str] = set()
    for board, pods in holders.items():
        known = {pod: pod_class(pod) for pod in pods}
        if any(c == WorkloadClass.PERFORMANCE.value for c in known.values()):
            performance.add(board)
        if len(pods) > 1:
            # Not how many: pods come and go on a time-sliced board, and each count would be
            # another controlStatus message to write.
            unattributable[board] = "shared by several pods"
        elif None in known.values():
            unattributable[board] = "its pod is not in the agent's pod cache yet"
        else:
            (workload_class,) = known.values()
            assert workload_class is not None
            classes[board] = workload_class
    unknown = "; ".join(sorted(problems)) or None
    return GpuWork(classes, unattributable, frozenset(performance), unknown)


async def read_allocations(
    source: PodDevices | None, pod_class: Callable[[PodKey], str | None] | None
) -> PodAllocations | str:
    """``source``'s answer, or why there is none to use (``pod_class`` None while the pod cache
    has not synced). Never raises."""
    if source is None:
        return NO_SOURCE
    if pod_class is None:
        return NO_CACHE
    try:
        return await source.allocations()
    except PodDevicesUnavailable as exc:
        return str(exc)
    except Exception as exc:  # a bug or a library surprise must not stop the pass
        log.error("pod_devices.failed", error=repr(exc))
        return f"reading pod devices failed ({type(exc).__name__})"


async def read_gpu_work(
    source: PodDevices | None, pod_class: Callable[[PodKey], str | None] | None
) -> GpuWork:
    """Ask ``source`` and place its answer (:func:`gpu_work`). Never raises: without an
    answer, :attr:`GpuWork.unknown` says why."""
    answer = await read_allocations(source, pod_class)
    if isinstance(answer, str):
        return GpuWork.unavailable(answer)
    assert pod_class is not None
    return gpu_work(answer.gpus, pod_class)
