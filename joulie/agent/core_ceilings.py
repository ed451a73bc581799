"""Which cores a pod holds exclusively, and the frequency ceiling each cpufreq policy then takes
under ``spec.cpu.classCaps``.

With the kubelet's static CPU manager policy a pod in the Guaranteed QoS class with whole CPUs
gets cores no other container runs on, and the PodResources API lists them (``cpu_ids``). Those
cores can run at a ceiling chosen by the pod's class, as a GPU board does. A cpufreq policy
governs every CPU in its ``affected_cpus`` together, so it takes a class's ceiling only when
each of its CPUs is held exclusively by pods of that class; a policy with one core of the shared
pool, of another class, of several pods at once or of a pod the agent's cache does not hold yet
follows the node-level preset (with ``intel_pstate`` and ``amd-pstate`` every CPU has a policy of
its own, so this costs nothing there).

Pure: the caller passes the answer, the policies and the class of each pod.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from joulie.agent.cpu_control import CoreCeiling
from joulie.agent.cpufreq_discovery import CpufreqPolicy
from joulie.agent.pod_devices import MAX_CPU_ID, MAX_CPU_IDS, PodKey
from joulie.api.enums import WorkloadClass
from joulie.api.nodetwin import CpuCoreCeiling, NodeTwinSpec
from joulie.core.caps import core_ceiling_khz

__all__ = ["CpuWork", "core_ceilings", "cpu_work"]


@dataclass(frozen=True)
class CpuWork:
    """Which class of work holds each exclusively held CPU of the node."""

    classes: Mapping[int, str] = field(default_factory=dict)
    """CPUs held by exactly one pod the agent knows: that pod's workload class."""
    unknown: str | None = None
    """Why no CPU can be told apart (no answer); None when the answer was read."""

    @classmethod
    def unavailable(cls, why: str) -> CpuWork:
        return cls(unknown=why)


def cpu_work(
    cpus: Mapping[PodKey, Sequence[int]], pod_class: Callable[[PodKey], str | None]
) -> CpuWork:
    """The class of each CPU the answer lists; a CPU two pods claim, one of a pod the cache
    does not hold, and a number out of range are left out (their policies follow the node)."""
    holders: dict[int, set[PodKey]] = {}
    seen = 0
    for pod, ids in cpus.items():
        for cpu in ids:
            seen += 1
            if seen > MAX_CPU_IDS:
                return CpuWork.unavailable(f"more than {MAX_CPU_IDS} exclusive CPUs listed")
            if 0 <= cpu <= MAX_CPU_ID:
                holders.setdefault(cpu, set()).add(pod)
    classes: dict[int, str] = {}
    for cpu, pods in holders.items():
        if len(pods) != 1:
            continue
        workload_class = pod_class(next(iter(pods)))
        if workload_class is not None:
            classes[cpu] = workload_class
    return CpuWork(classes)


def core_ceilings(
    spec: NodeTwinSpec, policies: Sequence[CpufreqPolicy], work: CpuWork
) -> dict[str, CoreCeiling]:
    """Per policy path, the ceiling its cores take instead of the preset's: the class ceiling
    of the pods holding every one of its CPUs, where the spec sets one and it resolves on that
    policy's landmarks."""
    by_class = spec.cpu.class_caps if spec.cpu is not None else None
    if by_class is None or not work.classes:
        return {}
    chosen: dict[str, CpuCoreCeiling | None] = {
        WorkloadClass.PERFORMANCE.value: by_class.performance,
        WorkloadClass.STANDARD.value: by_class.standard,
    }
    out: dict[str, CoreCeiling] = {}
    for policy in policies:
        held = {work.classes.get(cpu) for cpu in policy.cpus}
        if not policy.cpus or len(held) != 1 or None in held:
            continue
        (workload_class,) = held
        assert workload_class is not None
        if workload_class != WorkloadClass.PERFORMANCE.value:
            workload_class = WorkloadClass.STANDARD.value  # any other value, as everywhere
        khz = core_ceiling_khz(
            chosen[workload_class],
            min_khz=policy.cpuinfo_min_khz,
            max_khz=policy.cpuinfo_max_khz,
            nominal_khz=policy.base_khz,
        )
        if khz is not None:
            out[policy.path] = CoreCeiling(khz, f"{workload_class} work's exclusive cores")
    return out
