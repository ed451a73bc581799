"""The hardware of the node a DaemonSet agent runs on: what it is, the NodeTwin spec put in force
on it, and everything put back.

One :class:`HostNode` owns the node's :class:`~joulie.agent.baseline.Baseline` and the two
controllers that write through it (CPU through sysfs, GPUs through NVML or amdgpu's files), so
every write on the node is recorded first and restored by the same code, whichever exit path
asks: a spec without the field, a node that left the plan, a spec that cannot be read, SIGTERM.

Its calls block (sysfs reads and writes, NVML calls that can hang on a failing board); the role
runs them in a worker thread, one at a time, so no two passes interleave writes.

With ``spec.gpu.classCaps`` the GPU cap is set board by board
(:mod:`joulie.agent.board_intents`), from the work the caller says runs on each board; with
``spec.cpu.classCaps`` the cores a pod holds exclusively take its class's frequency ceiling
(:mod:`joulie.agent.core_ceilings`), written with the CPU preset.

Per component it reports one :class:`~joulie.agent.outcomes.ComponentOutcome`, keyed as in
NodeTwin ``controlStatus``. An intent already in force reads back ``equivalent`` on every later
pass; while the intent has not changed since the pass that wrote it, the outcome that pass
reported (``applied``; ``restored`` for a GPU board put back while others stay capped) stands,
so controlStatus does not flip, and cost a write, for nothing.
"""

from __future__ import annotations

import posixpath
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import structlog

from joulie.agent.baseline import Baseline
from joulie.agent.board_intents import board_intents
from joulie.agent.core_ceilings import CpuWork, core_ceilings
from joulie.agent.cpu_control import CPU_PREFIX, CpuControl
from joulie.agent.cpu_discovery import CpuDiscovery, discover_cpu, probe_cpu_locks
from joulie.agent.gpu.backends import GpuBackends
from joulie.agent.gpu.control import GpuControl
from joulie.agent.gpu.device import GpuDiscovery
from joulie.agent.gpu.discovery import discover_gpus
from joulie.agent.hardware_status import node_hardware_status
from joulie.agent.host_power import PowerReading, PowerSampler
from joulie.agent.outcomes import ComponentOutcome
from joulie.agent.pod_devices import GpuWork
from joulie.agent.sysfs import Sysfs
from joulie.api.enums import ControlResult
from joulie.api.nodetwin import NodeTwinSpec
from joulie.hardware.catalog import Catalog

__all__ = ["CPU_CAP", "CPU_GOVERNOR", "GPU_CAP", "GPU_GOVERNOR", "HostNode", "Outcomes"]

log = structlog.get_logger("joulie.agent.host")

CPU_CAP, CPU_GOVERNOR, GPU_CAP, GPU_GOVERNOR = "cpu", "cpuGovernor", "gpu", "gpuGovernor"
"""The controlStatus keys, one per component."""

Outcomes = dict[str, ComponentOutcome]

NO_WORK = "no pod-to-device answer"
"""Why boards take the node-level cap when the caller passed no :class:`GpuWork`."""

_IN_FORCE = (ControlResult.APPLIED, ControlResult.APPLIED_UNVERIFIED, ControlResult.RESTORED)
"""Results that stand while the intent is unchanged and later passes read ``equivalent`` (with
per-board caps a board can be restored while the others stay capped)."""


class HostNode:
    """Discovery, enforcement and restore on the node under ``sysfs``'s root."""

    def __init__(
        self,
        sysfs: Sysfs,
        baseline: Baseline,
        catalog: Catalog,
        *,
        gpus: GpuBackends,
        dry_run: bool,
        governor_writes: bool,
        discovery_interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sysfs = sysfs
        self.baseline = baseline
        self.catalog = catalog
        self.gpus = gpus
        self.dry_run = dry_run
        self.governor_writes = governor_writes
        self.discovery_interval_s = discovery_interval_s
        self._clock = clock
        self.cpu_control = CpuControl(sysfs, baseline, dry_run=dry_run)
        self.gpu_control = GpuControl(gpus, baseline, dry_run=dry_run)
        self.power = PowerSampler(sysfs, gpus, clock)
        self.cpu: CpuDiscovery | None = None
        self.gpu: GpuDiscovery | None = None
        self._discovered_at: float | None = None
        self._rediscover = False
        self._last: dict[str, tuple[Any, ComponentOutcome]] = {}
        """Per component: the intent of the last pass and what it reported."""
        self._hardware = threading.RLock()
        """Held by every call that reads or writes the hardware or the baseline: a pass still
        running in its worker thread (a hung NVML call outliving a cancelled task) and the final
        restore never interleave."""

    # -- discovery ----------------------------------------------------------------------------

    def discover(self) -> None:
        """Read the node's hardware again (read-only, except the BIOS-lock probe of RAPL limits,
        which writes each limit's own value back; skipped in a dry run)."""
        with self._hardware:
            self._discover()

    def _discover(self) -> None:
        cpu = discover_cpu(self.sysfs)
        if not self.dry_run:
            cpu = probe_cpu_locks(self.sysfs, cpu)
        gpu = discover_gpus(self.gpus, refused=self.gpu_control.refused())
        if self.cpu is not None and (cpu.warnings, gpu.warnings) != (
            self.cpu.warnings,
            self.gpu.warnings if self.gpu else (),
        ):
            log.info("hardware.changed", cpu_warnings=cpu.warnings, gpu_warnings=gpu.warnings)
        self.cpu, self.gpu = cpu, gpu
        self._discovered_at = self._clock()
        self._rediscover = False

    def discover_if_due(self) -> None:
        due = self._discovered_at is None or (
            self._clock() - self._discovered_at >= self.discovery_interval_s
        )
        if due or self._rediscover:
            self._discover()

    def _discovered(self) -> tuple[CpuDiscovery, GpuDiscovery]:
        self.discover_if_due()
        assert self.cpu is not None
        assert self.gpu is not None
        return self.cpu, self.gpu

    # -- enforcement --------------------------------------------------------------------------

    def enforce(
        self,
        spec: NodeTwinSpec | None,
        *,
        reassert: bool = False,
        gpu_work: GpuWork | None = None,
        cpu_work: CpuWork | None = None,
    ) -> Outcomes:
        """Put ``spec`` in force; None (the node is not planned) restores everything.

        ``reassert``: write again settings another writer changed since the agent's write
        (otherwise reported ``contended`` and left alone). ``gpu_work``: which class of work
        runs on which board, read only when the spec has per-class GPU caps (without it every
        board then takes the node-level cap). ``cpu_work``: which class of work holds which
        cores exclusively, read only when the spec has per-class CPU ceilings (without it every
        core follows the preset).
        """
        if spec is None:
            return self.restore_all()
        with self._hardware:
            cpu, gpu = self._discovered()
            cpu_spec, gpu_spec = spec.cpu, spec.gpu
            watts = cpu_spec.package_power_cap_watts if cpu_spec else None
            pct = cpu_spec.package_power_cap_pct_of_max if cpu_spec else None
            cpu_gov = cpu_spec.governor if cpu_spec else None
            gpu_gov = gpu_spec.governor if gpu_spec else None
            preset = cpu_gov.preset if cpu_gov else None
            boost = cpu_gov.boost if cpu_gov else None
            gpu_preset = gpu_gov.preset if gpu_gov else None
            ceiling = gpu_gov.compute_clock_ceiling_pct_of_max if gpu_gov else None
            policies = [p.path for p in cpu.policies]
            ceilings = core_ceilings(spec, cpu.policies, cpu_work) if cpu_work else {}
            steps: dict[str, tuple[Any, Callable[[], ComponentOutcome]]] = {
                CPU_CAP: (
                    (watts, pct),
                    lambda: self.cpu_control.apply_package_cap(
                        cpu.powercap.zones, watts, pct, hsmp=cpu.powercap.hsmp, reassert=reassert
                    ),
                ),
                CPU_GOVERNOR: (
                    (preset, boost, self.governor_writes, tuple(sorted(ceilings.items()))),
                    lambda: self.cpu_control.apply_preset(
                        cpu.governor,
                        policies,
                        preset,
                        boost,
                        ceilings=ceilings,
                        enabled=self.governor_writes,
                        reassert=reassert,
                    ),
                ),
                GPU_CAP: self._gpu_cap_step(spec, gpu, gpu_work, reassert),
                GPU_GOVERNOR: (
                    (gpu_preset, ceiling, self.governor_writes),
                    lambda: self.gpu_control.apply_preset(
                        gpu, gpu_preset, ceiling, enabled=self.governor_writes, reassert=reassert
                    ),
                ),
            }
            outcomes = {
                key: self._steady(key, intent, _isolated(key, step))
                for key, (intent, step) in steps.items()
            }
            self._after(outcomes)
            return outcomes

    def _gpu_cap_step(
        self,
        spec: NodeTwinSpec,
        gpu: GpuDiscovery,
        work: GpuWork | None,
        reassert: bool,
    ) -> tuple[Any, Callable[[], ComponentOutcome]]:
        """The GPU cap's intent and step: one cap for every board, or with ``classCaps`` a cap
        per board by the class of its pod. The per-board intent holds each board's class, cap
        and reason, so a pod of another class on a board is one change, applied once."""
        cap = spec.gpu.power_cap if spec.gpu else None
        watts = cap.cap_watts_per_gpu if cap else None
        pct = cap.cap_pct_of_max if cap else None
        if spec.gpu is None or spec.gpu.class_caps is None:
            return (watts, pct), lambda: self.gpu_control.apply_cap(
                gpu, watts, pct, reassert=reassert
            )
        boards = board_intents(spec, gpu.devices, work or GpuWork.unavailable(NO_WORK))
        return boards, lambda: self.gpu_control.apply_caps(
            gpu, [b.cap for b in boards], notes=[b.note for b in boards], reassert=reassert
        )

    def restore_all(self) -> Outcomes:
        """Put every setting the agent changed back to its baseline: CPU caps, cpufreq, then the
        GPUs' limits and clocks. A failure on one setting never stops the others; what could
        not be restored stays in the baseline, to be tried again."""
        with self._hardware:
            cpu: tuple[ComponentOutcome, ComponentOutcome] | None = None
            try:
                cpu = self.cpu_control.restore_all()
            except Exception as exc:
                log.error("restore.failed", part="cpu", error=repr(exc))
            gpu_outcomes: tuple[ComponentOutcome, ComponentOutcome] | None = None
            try:
                gpu = self.gpu if self.gpu is not None else self._discovered()[1]
                gpu_outcomes = self.gpu_control.restore_all(gpu)
            except Exception as exc:
                log.error("restore.failed", part="gpu", error=repr(exc))
            failed = ComponentOutcome(ControlResult.ERROR, "restore failed; see the agent's log")
            outcomes = {
                CPU_CAP: cpu[0] if cpu else failed,
                CPU_GOVERNOR: cpu[1] if cpu else failed,
                GPU_CAP: gpu_outcomes[0] if gpu_outcomes else failed,
                GPU_GOVERNOR: gpu_outcomes[1] if gpu_outcomes else failed,
            }
            for key, outcome in outcomes.items():
                self._last[key] = (None, outcome)
            self._after(outcomes)
            return outcomes

    def _steady(self, key: str, intent: Any, outcome: ComponentOutcome) -> ComponentOutcome:
        last = self._last.get(key)
        if (
            outcome.result is ControlResult.EQUIVALENT
            and last is not None
            and last[0] == intent
            and last[1].result in _IN_FORCE
        ):
            outcome = replace(outcome, result=last[1].result, message=last[1].message)
        self._last[key] = (intent, outcome)
        return outcome

    def _after(self, outcomes: Mapping[str, ComponentOutcome]) -> None:
        cpu_error = any(outcomes[k].result is ControlResult.ERROR for k in (CPU_CAP, CPU_GOVERNOR))
        if cpu_error or self.gpu_control.needs_rediscovery():
            # A zone that vanished, a board that stopped answering or was renumbered: look
            # again before the next pass rather than at the next slow interval. (A baseline
            # whose board is gone for good is an error every pass, but no reason to look.)
            self._rediscover = True

    def sample_power(self) -> PowerReading:
        """The node's power since the previous sample (TELEMETRY_*_SOURCE=host)."""
        with self._hardware:
            return self.power.sample(*self._discovered())

    # -- what NodeHardware says ---------------------------------------------------------------

    def hardware_status(self) -> dict[str, Any]:
        """NodeHardware.status in wire form, without ``updatedAt``: the discovery, the result of
        the last attempt at the preset in force, and the baselines the agent would restore."""
        with self._hardware:
            cpu, gpu = self._discovered()
            status = node_hardware_status(cpu, gpu, self.catalog, self.baseline)
            entries = self.baseline.entries()
        governor = status.cpu.governor if status.cpu else None
        if status.cpu is not None and governor is not None:
            presets = governor.presets or []
            last = self._last.get(CPU_GOVERNOR)
            if last is not None and last[0] is not None and last[1].result is not None:
                in_force = last[0][0]
                presets = [
                    p.model_copy(update={"result": last[1].result.value})
                    if in_force is not None and p.preset == in_force.value
                    else p
                    for p in presets
                ]
            governor = governor.model_copy(
                update={
                    "baseline": cpu_governor_baseline(entries) or None,
                    "presets": presets or None,
                }
            )
            status = status.model_copy(
                update={"cpu": status.cpu.model_copy(update={"governor": governor})}
            )
        return status.to_wire()

    def close(self) -> None:
        with self._hardware:
            self._close()

    def _close(self) -> None:
        for problem in self.gpus.close():
            log.warning("gpu.close_failed", error=problem)


def _isolated(key: str, step: Callable[[], ComponentOutcome]) -> ComponentOutcome:
    """``step``'s outcome; an unexpected exception is this component's error, not the pass's:
    the other components are still brought in line."""
    try:
        return step()
    except Exception as exc:
        log.error("control.failed", component=key, error=repr(exc))
        return ComponentOutcome(ControlResult.ERROR, f"{type(exc).__name__}: {exc}")


def cpu_governor_baseline(entries: Mapping[str, str | int]) -> dict[str, str]:
    """The cpufreq part of the baseline, as NodeHardware shows it: one entry per setting when
    every policy held the same value (``scaling_governor: powersave``), else one per policy
    (``policy3/scaling_governor``)."""
    by_name: dict[str, dict[str, str]] = {}
    for key, value in entries.items():
        if not key.startswith(CPU_PREFIX):
            continue
        owner = posixpath.basename(posixpath.dirname(key))
        by_name.setdefault(posixpath.basename(key), {})[owner] = str(value)
    shown: dict[str, str] = {}
    for name, values in by_name.items():
        if len(set(values.values())) == 1:
            shown[name] = next(iter(values.values()))
        else:
            shown.update({f"{owner}/{name}": v for owner, v in sorted(values.items())})
    return shown
