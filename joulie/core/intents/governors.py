"""The CPU and GPU governor presets of a node at a profile."""

from __future__ import annotations

from joulie.api.enums import (
    CpuGovernorPreset,
    GovernorControl,
    GpuGovernorPreset,
    Profile,
)
from joulie.api.nodehardware import NodeHardwareStatus, PresetSupport
from joulie.api.nodetwin import (
    CpuGovernorSpec,
    GpuGovernorSpec,
)
from joulie.core.intents.caps import lookup_model
from joulie.core.intents.config import (
    NO_PRESET,
    IntentConfig,
)
from joulie.core.intents.pods import uses_multi_gpu


def _listed(presets: list[PresetSupport] | None) -> frozenset[str]:
    return frozenset(p.preset for p in presets or ())


def cpu_governor(
    profile: Profile, hardware: NodeHardwareStatus | None, config: IntentConfig
) -> CpuGovernorSpec | None:
    """The CPU preset of a node running at ``profile``, or None.

    Written only with GOVERNOR_CONTROL cpu or all, and only when the node's agent lists the preset
    in ``status.cpu.governor.presets``; no other preset stands in for one it does not list.
    """
    if config.governor_control not in (GovernorControl.CPU, GovernorControl.ALL):
        return None
    wanted = (
        config.cpu_performance_governor_preset
        if profile == Profile.PERFORMANCE
        else config.cpu_eco_governor_preset
    )
    if wanted == NO_PRESET:
        return None
    cpu = hardware.cpu if hardware is not None else None
    if cpu is None or cpu.governor is None or wanted not in _listed(cpu.governor.presets):
        return None
    return CpuGovernorSpec(preset=CpuGovernorPreset(wanted))


def _gpu_model_names(
    hardware: NodeHardwareStatus | None, product_label: str | None
) -> list[str | None]:
    gpu = hardware.gpu if hardware is not None else None
    if gpu is None:
        return [product_label]
    return [product_label, gpu.model, gpu.raw_model]


def gpu_governor(
    profile: Profile,
    hardware: NodeHardwareStatus | None,
    product_label: str | None,
    running_pod_max_gpus: int,
    config: IntentConfig,
) -> GpuGovernorSpec | None:
    """The GPU preset of a GPU node running at ``profile``, or None.

    The preset is the model entry's (GPU_GOVERNOR_MODEL_PRESETS_JSON, matched against the product
    label and the model the agent reports) where it sets one, else the configured default; ``""``
    writes none. ``efficient`` carries the clock ceiling (the entry's, else the configured one).
    ``sustained`` under GPU_GOVERNOR_SUSTAINED_ONLY_MULTI_GPU needs a running pod with 2 or more
    GPUs. The preset is written only with GOVERNOR_CONTROL gpu or all and when the agent lists it,
    or when the node's gpu.governor block is a discovery gap (a baseline, no mechanism, no
    presets): dropping the preset then would make the agent restore and re-apply it.
    """
    if config.governor_control not in (GovernorControl.GPU, GovernorControl.ALL):
        return None
    entry = lookup_model(_gpu_model_names(hardware, product_label), config.gpu_model_governors)
    if profile == Profile.PERFORMANCE:
        chosen = entry.performance if entry is not None else None
        wanted = config.gpu_performance_governor_preset if chosen is None else chosen
    else:
        chosen = entry.eco if entry is not None else None
        wanted = config.gpu_eco_governor_preset if chosen is None else chosen
    if wanted == NO_PRESET:
        return None
    if (
        wanted == GpuGovernorPreset.SUSTAINED
        and config.gpu_governor_sustained_only_multi_gpu
        and not uses_multi_gpu(running_pod_max_gpus)
    ):
        return None
    gpu = hardware.gpu if hardware is not None else None
    governor = gpu.governor if gpu is not None else None
    if governor is None:
        return None
    listed = _listed(governor.presets)
    discovery_gap = bool(governor.baseline) and not governor.mechanism and not listed
    if not discovery_gap and wanted not in listed:
        return None
    preset = GpuGovernorPreset(wanted)
    ceiling = None
    if preset is GpuGovernorPreset.EFFICIENT:
        ceiling = (
            entry.compute_clock_ceiling_pct_of_max
            if entry is not None and entry.compute_clock_ceiling_pct_of_max is not None
            else config.gpu_clock_ceiling_pct_of_max
        )
    return GpuGovernorSpec(preset=preset, compute_clock_ceiling_pct_of_max=ceiling)
