"""Every manager setting reaches the core functions unchanged."""

from __future__ import annotations

from joulie.api.enums import GovernorControl, GpuGovernorPreset
from joulie.core.intents import IntentConfig
from joulie.manager.config import intent_config, policy_inputs
from joulie.manager.settings import ManagerSettings


def test_defaults_match_the_core_defaults() -> None:
    assert intent_config(ManagerSettings.from_env({}).settings) == IntentConfig()


def test_environment_values_arrive_in_the_core_config() -> None:
    settings = ManagerSettings.from_env(
        {
            "PERFORMANCE_CAP_WATTS": "4000",
            "CPU_ECO_CAP_PCT_OF_MAX": "55",
            "GPU_ECO_CAP_PCT_OF_MAX": "70",
            "CPU_ECO_CAP_ON_UNCAPPABLE_GPU_NODES": "true",
            "GPU_MODEL_CAPS_JSON": '{"NVIDIA-L40S": {"minCapWatts": 100, "maxCapWatts": 350}}',
            "GPU_PRODUCT_LABEL_KEYS": "a/b",
            "GOVERNOR_CONTROL": "all",
            "GPU_ECO_GOVERNOR_PRESET": "",
            "GPU_ECO_CLOCK_CEILING_PCT_OF_MAX": "70",
            "GPU_GOVERNOR_MODEL_PRESETS_JSON": '{"NVIDIA H100 NVL": {"performance": "sustained"}}',
            "GPU_GOVERNOR_SUSTAINED_ONLY_MULTI_GPU": "true",
            "POLICY_TYPE": "queue_aware_v1",
            "QUEUE_HP_MAX": "40",
            "RECONCILE_INTERVAL": "30s",
        }
    ).settings
    config = intent_config(settings)
    assert config.performance_cap_watts == 4000
    assert config.cpu_eco_cap_pct_of_max == 55
    assert config.gpu_eco_cap_pct_of_max == 70
    assert config.cpu_eco_cap_on_uncappable_gpu_nodes is True
    assert config.gpu_model_caps == {"NVIDIA-L40S": (100, 350)}
    assert config.gpu_product_label_keys == ("a/b",)
    assert config.governor_control is GovernorControl.ALL
    assert config.gpu_eco_governor_preset == ""
    assert config.gpu_clock_ceiling_pct_of_max == 70
    h100 = config.gpu_model_governors["NVIDIA H100 NVL"]
    assert h100.performance is GpuGovernorPreset.SUSTAINED
    assert h100.eco is None
    assert config.gpu_governor_sustained_only_multi_gpu is True
    inputs = policy_inputs(settings)
    assert (inputs.policy, inputs.params["queue_hp_max"], inputs.reconcile_interval_s) == (
        "queue_aware_v1",
        40,
        30.0,
    )
