"""The controller manager's settings as the plain inputs of the pure core functions."""

from __future__ import annotations

from joulie.api.enums import CpuGovernorPreset, GpuGovernorPreset
from joulie.core.intents import CpuPresetChoice, GpuModelGovernor, GpuPresetChoice, IntentConfig
from joulie.core.policies import PolicyInputs
from joulie.manager.settings import ManagerSettings


def _cpu(preset: str) -> CpuPresetChoice:
    return CpuGovernorPreset(preset) if preset else ""


def _gpu(preset: str) -> GpuPresetChoice:
    return GpuGovernorPreset(preset) if preset else ""


def _gpu_entry(preset: str | None) -> GpuPresetChoice | None:
    """A model entry's preset: None when the entry does not set it."""
    return None if preset is None else _gpu(preset)


def intent_config(settings: ManagerSettings) -> IntentConfig:
    return IntentConfig(
        performance_cap_watts=settings.performance_cap_watts,
        cpu_performance_cap_pct_of_max=settings.cpu_performance_cap_pct_of_max,
        cpu_eco_cap_pct_of_max=settings.cpu_eco_cap_pct_of_max,
        gpu_performance_cap_pct_of_max=settings.gpu_performance_cap_pct_of_max,
        gpu_eco_cap_pct_of_max=settings.gpu_eco_cap_pct_of_max,
        cpu_eco_cap_on_uncappable_gpu_nodes=settings.cpu_eco_cap_on_uncappable_gpu_nodes,
        gpu_model_caps={
            key: (caps.min_cap_watts, caps.max_cap_watts)
            for key, caps in settings.gpu_model_caps_json.items()
        },
        gpu_product_label_keys=tuple(settings.gpu_product_label_keys),
        governor_control=settings.governor_control,
        cpu_performance_governor_preset=_cpu(settings.cpu_performance_governor_preset),
        cpu_eco_governor_preset=_cpu(settings.cpu_eco_governor_preset),
        gpu_performance_governor_preset=_gpu(settings.gpu_performance_governor_preset),
        gpu_eco_governor_preset=_gpu(settings.gpu_eco_governor_preset),
        gpu_clock_ceiling_pct_of_max=settings.gpu_eco_clock_ceiling_pct_of_max,
        gpu_model_governors={
            model: GpuModelGovernor(
                performance=_gpu_entry(entry.performance),
                eco=_gpu_entry(entry.eco),
                compute_clock_ceiling_pct_of_max=entry.compute_clock_ceiling_pct_of_max,
            )
            for model, entry in settings.gpu_governor_model_presets().items()
        },
        gpu_governor_sustained_only_multi_gpu=settings.gpu_governor_sustained_only_multi_gpu,
    )


def policy_inputs(settings: ManagerSettings) -> PolicyInputs:
    return PolicyInputs(
        policy=settings.policy_type.value,
        params=settings.policy_params(),
        reconcile_interval_s=settings.reconcile_interval,
    )
