"""Settings come from the environment; every bad value is reported at once, naming the variable."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from joulie.agent.settings import AgentSettings
from joulie.api.enums import GovernorControl, NodePowerSource
from joulie.core.policies import PolicyType
from joulie.extender.settings import ExtenderSettings
from joulie.manager.settings import ManagerSettings
from joulie.process.settings import ProcessSettings
from joulie.settings import Source, format_duration, parse_duration


def test_defaults_follow_the_spec_and_upstream() -> None:
    loaded = ManagerSettings.from_env({})
    s = loaded.settings
    assert loaded.problems == []
    assert loaded.warnings == []
    assert s.policy_type is PolicyType.STATIC_PARTITION
    assert s.policy_params() == {
        "static_hp_frac": 0.5,
        "queue_hp_base_frac": 0.6,
        "queue_hp_min": 1,
        "queue_hp_max": 1_000_000,
        "queue_perf_per_hp_node": 10,
        "class_caps_performance_pct": 100.0,  # ours: performance work uncapped
        "class_caps_cpu_eco_when_standard": 0,  # ours: the node CPU stays at performance
    }
    assert s.reconcile_interval == 60.0
    assert s.performance_cap_watts == 5000
    assert s.governor_control is GovernorControl.OFF
    assert s.cpu_eco_governor_preset == "efficiency"
    assert s.gpu_eco_governor_preset == "efficient"
    assert s.gpu_eco_clock_ceiling_pct_of_max == 80
    assert s.node_power_source is NodePowerSource.STATIC
    assert s.enable_facility_metrics is False
    assert s.gpu_product_label_keys[0] == "joulie.io/gpu.product"
    assert set(loaded.sources.values()) == {Source.DEFAULT}


def test_environment_values_are_parsed_and_attributed() -> None:
    env = {
        "POLICY_TYPE": "queue_aware_v1",
        "RECONCILE_INTERVAL": " 1m30s ",
        "STATIC_HP_FRAC": "0.2",
        "CPU_ECO_CAP_ON_UNCAPPABLE_GPU_NODES": "true",
        "GPU_PRODUCT_LABEL_KEYS": "a/b, c/d",
        "GPU_MODEL_CAPS_JSON": '{"NVIDIA-H100": {"minCapWatts": 200, "maxCapWatts": 700}}',
        "UNRELATED": "x",
    }
    loaded = ManagerSettings.from_env(env)
    s = loaded.settings
    assert loaded.problems == []
    assert s.policy_type is PolicyType.QUEUE_AWARE_V1
    assert s.reconcile_interval == 90.0
    assert s.policy_params()["static_hp_frac"] == 0.2
    assert s.cpu_eco_cap_on_uncappable_gpu_nodes is True
    assert s.gpu_product_label_keys == ["a/b", "c/d"]
    assert s.gpu_model_caps_json["NVIDIA-H100"].max_cap_watts == 700
    assert loaded.sources["POLICY_TYPE"] == Source.ENVIRONMENT
    assert loaded.sources["QUEUE_HP_MIN"] == Source.DEFAULT
    assert s.display("reconcile_interval") == "1m30s"


def test_every_problem_is_reported_at_once() -> None:
    env = {
        "STATIC_HP_FRAC": "abc",
        "QUEUE_HP_MIN": "-1",
        "RECONCILE_INTERVAL": "soon",
        "POLICY_TYPE": "turbo",
        "NODE_SELECTOR": "a in (b",
        "GPU_MODEL_CAPS_JSON": "{not json",
    }
    loaded = ManagerSettings.from_env(env)
    by_var = {p.variable: p for p in loaded.problems}
    assert set(by_var) == set(env)
    assert by_var["STATIC_HP_FRAC"].value == "abc"
    assert "<= 1" in by_var["STATIC_HP_FRAC"].accepted
    assert "static_partition" in by_var["POLICY_TYPE"].accepted
    assert "the value is not JSON" in by_var["GPU_MODEL_CAPS_JSON"].detail
    assert "duration" in by_var["RECONCILE_INTERVAL"].accepted
    # The rest of the settings are still usable (and defaulted where invalid).
    assert loaded.settings.policy_params()["static_hp_frac"] == 0.5
    assert loaded.sources["STATIC_HP_FRAC"] == Source.DEFAULT_INVALID


def test_cross_variable_rules() -> None:
    problems = ManagerSettings.from_env({"QUEUE_HP_MIN": "5", "QUEUE_HP_MAX": "3"}).problems
    assert [p.variable for p in problems] == ["QUEUE_HP_MAX"]

    http = ManagerSettings.from_env({"NODE_POWER_SOURCE": "http"}).problems
    assert [p.variable for p in http] == ["NODE_POWER_HTTP_ENDPOINT"]
    no_placeholder = ManagerSettings.from_env(
        {"NODE_POWER_SOURCE": "http", "NODE_POWER_HTTP_ENDPOINT": "http://sim/telemetry"}
    ).problems
    assert "{node}" in no_placeholder[0].detail
    ok = ManagerSettings.from_env(
        {"NODE_POWER_SOURCE": "http", "NODE_POWER_HTTP_ENDPOINT": "http://sim/t/{node}"}
    )
    assert ok.problems == []

    prom = ManagerSettings.from_env({"NODE_POWER_SOURCE": "prometheus"}).problems
    assert {p.variable for p in prom} == {
        "NODE_POWER_PROMETHEUS_ADDRESS",
        "NODE_POWER_PROMETHEUS_QUERY",
    }


def test_reserved_power_sources_are_refused_clearly() -> None:
    for source in ("kepler", "utilization"):
        (problem,) = ManagerSettings.from_env({"NODE_POWER_SOURCE": source}).problems
        assert problem.variable == "NODE_POWER_SOURCE"
        assert "reserved" in problem.detail


def test_governor_settings_warn_and_fall_back_instead_of_failing() -> None:
    loaded = ManagerSettings.from_env(
        {
            "GOVERNOR_CONTROL": "yes-please",
            "GPU_ECO_GOVERNOR_PRESET": "sustained",
            "CPU_ECO_GOVERNOR_PRESET": "fast",
            "GPU_ECO_CLOCK_CEILING_PCT_OF_MAX": "150",
        }
    )
    assert loaded.problems == []
    assert len(loaded.warnings) == 4
    s = loaded.settings
    assert s.governor_control is GovernorControl.OFF
    assert s.gpu_eco_governor_preset == "efficient"
    assert s.cpu_eco_governor_preset == "efficiency"
    assert s.gpu_eco_clock_ceiling_pct_of_max == 80
    assert any("GPU_GOVERNOR_MODEL_PRESETS_JSON" in w for w in loaded.warnings)


def test_empty_gpu_preset_means_none() -> None:
    loaded = ManagerSettings.from_env({"GPU_ECO_GOVERNOR_PRESET": ""})
    assert loaded.settings.gpu_eco_governor_preset == ""
    assert loaded.sources["GPU_ECO_GOVERNOR_PRESET"] == Source.ENVIRONMENT
    # For ordinary variables an empty value counts as unset.
    assert (
        ManagerSettings.from_env({"STATIC_HP_FRAC": ""}).settings.policy_params()["static_hp_frac"]
        == 0.5
    )


def test_model_presets_keep_good_entries_and_warn_on_bad_ones() -> None:
    loaded = ManagerSettings.from_env(
        {
            "GPU_GOVERNOR_MODEL_PRESETS_JSON": (
                '{"NVIDIA H100 NVL": {"performance": "sustained", "eco": "efficient",'
                ' "computeClockCeilingPctOfMax": 70},'
                ' "L40S": {"eco": "turbo"}, "MI300X": {"eco": ""}, "A100": "efficient"}'
            )
        }
    )
    presets = loaded.settings.gpu_governor_model_presets()
    assert set(presets) == {"NVIDIA H100 NVL", "MI300X"}
    assert presets["NVIDIA H100 NVL"].performance == "sustained"
    assert presets["NVIDIA H100 NVL"].compute_clock_ceiling_pct_of_max == 70
    assert presets["MI300X"].eco == ""
    l40s, a100 = loaded.warnings
    assert "'L40S'" in l40s
    assert "turbo" in l40s
    assert "'A100'" in a100
    assert "JSON object" in a100


def test_a_bad_field_of_a_model_preset_is_dropped_alone() -> None:
    loaded = ManagerSettings.from_env(
        {
            "GPU_GOVERNOR_MODEL_PRESETS_JSON": (
                '{"L40S": {"performance": "peak", "eco": "turbo"},'
                ' "MI300X": {"eco": "", "computeClockCeilingPctOfMax": 150, "colour": "red"}}'
            )
        }
    )
    assert loaded.problems == []
    presets = loaded.settings.gpu_governor_model_presets()
    # The usable fields stay: L40S keeps performance=peak, MI300X keeps eco="".
    assert presets["L40S"].performance == "peak"
    assert presets["L40S"].eco is None
    assert presets["MI300X"].eco == ""
    assert presets["MI300X"].compute_clock_ceiling_pct_of_max is None
    assert len(loaded.warnings) == 3
    by_field = {w.split(" field ")[1].split()[0]: w for w in loaded.warnings}
    assert set(by_field) == {"eco", "computeClockCeilingPctOfMax", "colour"}
    # Each warning names the variable, the model, the field, the value and what is accepted.
    assert all(w.startswith("GPU_GOVERNOR_MODEL_PRESETS_JSON") for w in loaded.warnings)
    assert "'L40S'" in by_field["eco"]
    assert "'turbo'" in by_field["eco"]
    assert "auto, sustained, efficient, low, peak" in by_field["eco"]
    assert "'MI300X'" in by_field["computeClockCeilingPctOfMax"]
    assert "150" in by_field["computeClockCeilingPctOfMax"]
    assert "<= 100" in by_field["computeClockCeilingPctOfMax"]
    assert "performance, eco, computeClockCeilingPctOfMax" in by_field["colour"]


def test_model_caps_problems_name_the_model_field_and_value() -> None:
    (problem,) = ManagerSettings.from_env(
        {"GPU_MODEL_CAPS_JSON": '{"NVIDIA-H100": {"minCapWatts": 200, "maxCapWatts": "lots"}}'}
    ).problems
    assert problem.variable == "GPU_MODEL_CAPS_JSON"
    assert "'NVIDIA-H100'" in problem.detail
    assert "maxCapWatts" in problem.detail
    assert '"lots"' in problem.detail
    (ordered,) = ManagerSettings.from_env(
        {"GPU_MODEL_CAPS_JSON": '{"L4": {"minCapWatts": 80, "maxCapWatts": 72}, "T4": 70}'}
    ).problems
    # Every bad entry is named in the one problem of the variable.
    assert "entry 'L4': minCapWatts is above maxCapWatts" in ordered.detail
    assert "entry 'T4'" in ordered.detail


def test_an_empty_governor_control_warns_like_any_unknown_value() -> None:
    loaded = ManagerSettings.from_env({"GOVERNOR_CONTROL": ""})
    assert loaded.problems == []
    (warning,) = loaded.warnings
    assert warning.startswith("GOVERNOR_CONTROL=''")
    assert "off, cpu, gpu, all" in warning
    assert loaded.settings.governor_control is GovernorControl.OFF
    assert loaded.sources["GOVERNOR_CONTROL"] == Source.DEFAULT_INVALID
    (ceiling,) = ManagerSettings.from_env({"GPU_ECO_CLOCK_CEILING_PCT_OF_MAX": " "}).warnings
    assert ceiling.startswith("GPU_ECO_CLOCK_CEILING_PCT_OF_MAX=''")


def test_agent_rules() -> None:
    (problem,) = AgentSettings.from_env({}).problems
    assert problem.variable == "NODE_NAME"
    assert AgentSettings.from_env({"NODE_NAME": "n1"}).problems == []
    # The pool serves simulated nodes: every backend must be the simulator's.
    pool = AgentSettings.from_env({"AGENT_MODE": "pool"}).problems
    assert {p.variable for p in pool} == {
        "TELEMETRY_CPU_SOURCE",
        "TELEMETRY_CPU_CONTROL",
        "TELEMETRY_GPU_SOURCE",
        "TELEMETRY_GPU_CONTROL",
    }
    assert all("AGENT_MODE=pool" in p.detail for p in pool)
    problems = AgentSettings.from_env(
        {
            "AGENT_MODE": "pool",
            "TELEMETRY_CPU_SOURCE": "http",
            "TELEMETRY_CPU_CONTROL": "http",
            "TELEMETRY_GPU_SOURCE": "http",
            "TELEMETRY_GPU_CONTROL": "http",
            "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT": "http://sim/control/{node}",
            "TELEMETRY_GPU_HTTP_ENDPOINT": "http://sim/telemetry/{node}",
            "TELEMETRY_GPU_CONTROL_HTTP_ENDPOINT": "ftp://sim/{node}",
        }
    ).problems
    assert {p.variable for p in problems} == {
        "TELEMETRY_CPU_HTTP_ENDPOINT",
        "TELEMETRY_GPU_CONTROL_HTTP_ENDPOINT",
    }
    # A DaemonSet agent drives its own hardware; the simulator is the pool's.
    daemon = AgentSettings.from_env(
        {
            "NODE_NAME": "n1",
            "TELEMETRY_CPU_CONTROL": "http",
            "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT": "http://sim/control/{node}",
        }
    ).problems
    assert [p.variable for p in daemon] == ["TELEMETRY_CPU_CONTROL"]
    assert "AGENT_MODE=pool" in daemon[0].detail


def test_process_and_extender_settings() -> None:
    loaded = ProcessSettings.from_env({"METRICS_ADDR": "127.0.0.1:9100", "LOG_FORMAT": "xml"})
    assert loaded.settings.metrics_addr == "127.0.0.1:9100"
    assert [p.variable for p in loaded.problems] == ["LOG_FORMAT"]
    bad = ExtenderSettings.from_env({"EXTENDER_ADDR": "localhost:99999"}).problems
    assert [p.variable for p in bad] == ["EXTENDER_ADDR"]
    timeout = ProcessSettings.from_env({"SHUTDOWN_TIMEOUT": "10m"}).problems
    assert timeout[0].detail == "must be at most 5m"


@given(st.integers(min_value=1, max_value=10 * 24 * 3600))
def test_durations_round_trip_through_their_display_form(seconds: int) -> None:
    assert parse_duration(format_duration(float(seconds))) == seconds


def test_duration_forms() -> None:
    assert parse_duration("500ms") == 0.5
    assert parse_duration("2h") == 7200
    assert parse_duration("1h30m15s") == 5415
    assert parse_duration("0") == 0
    assert format_duration(0.25) == "250ms"


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        ("10", "'10' has no unit: write 10s"),
        ("0.0001", "'0.0001' has no unit"),
        ("0.1ms", "shorter than a millisecond"),
        ("inf", "not a duration"),
        ("1e400", "not a duration"),
        ("0.5s", "must be at least 1s"),
    ],
)
def test_a_reconcile_interval_needs_a_unit_and_a_sane_range(value: str, detail: str) -> None:
    (problem,) = ManagerSettings.from_env({"RECONCILE_INTERVAL": value}).problems
    assert problem.variable == "RECONCILE_INTERVAL"
    assert detail in problem.detail
    assert "with its unit" in problem.accepted


WEBHOOK = {"LIFECYCLE_MODE": "enforce", "LIFECYCLE_ACTUATOR": "webhook"}
NODE = {"NODE_NAME": "n"}


@pytest.mark.parametrize(
    ("settings_class", "env", "variable", "detail"),
    [
        # Each of these was accepted with exit 0.
        (ManagerSettings, {"RECONCILE_INTERVAL": "99999999999h"}, "RECONCILE_INTERVAL", "a year"),
        (
            ManagerSettings,
            {"RECONCILE_INTERVAL": "\u0661s"},
            "RECONCILE_INTERVAL",
            "not a duration",
        ),
        (ManagerSettings, {"RECONCILE_INTERVAL": "\u0661"}, "RECONCILE_INTERVAL", "not a duration"),
        (AgentSettings, {**NODE, "HOST_ROOT": "host"}, "HOST_ROOT", "not an absolute path"),
        (AgentSettings, {**NODE, "STATE_DIR": "state"}, "STATE_DIR", "not an absolute path"),
        (AgentSettings, {"NODE_NAME": "bad/name"}, "NODE_NAME", "not a Kubernetes node name"),
        (AgentSettings, {"NODE_NAME": "N" * 254}, "NODE_NAME", "not a Kubernetes node name"),
        (
            ManagerSettings,
            {**WEBHOOK, "LIFECYCLE_WEBHOOK_URL": "http://"},
            "LIFECYCLE_WEBHOOK_URL",
            "with a host",
        ),
        (
            ManagerSettings,
            {**WEBHOOK, "LIFECYCLE_WEBHOOK_URL": "http://a b/x"},
            "LIFECYCLE_WEBHOOK_URL",
            "no spaces",
        ),
        # A traceback (RecursionError) before.
        (
            ManagerSettings,
            {"GPU_MODEL_CAPS_JSON": "[" * 3000 + "]" * 3000},
            "GPU_MODEL_CAPS_JSON",
            "is not JSON",
        ),
        (
            ManagerSettings,
            {"GPU_MODEL_CAPS_JSON": "[" * 900 + "]" * 900},
            "GPU_MODEL_CAPS_JSON",
            "nested deeper than 254",
        ),
    ],
)
def test_a_bad_value_is_refused_with_its_reason(
    settings_class: type[ManagerSettings] | type[AgentSettings],
    env: dict[str, str],
    variable: str,
    detail: str,
) -> None:
    loaded = settings_class.from_env(env)
    by_var = {p.variable: p for p in loaded.problems}
    assert detail in by_var[variable].detail
    # One problem per variable, and the value quoted at most ~120 characters.
    assert [p.variable for p in loaded.problems].count(variable) == 1
    assert len(str(by_var[variable])) < 500
