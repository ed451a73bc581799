"""What the controller manager asks of each node: caps, governor presets, the downgrade guard and
the AgentReporting condition (spec: "CRD and Policy Model", "Policy Algorithms")."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from joulie.api.enums import (
    ConditionStatus,
    CpuGovernorPreset,
    GovernorControl,
    GpuGovernorPreset,
    Profile,
    SchedulableClass,
)
from joulie.api.gpu import pod_gpu_count
from joulie.api.nodehardware import NodeHardwareStatus
from joulie.api.nodetwin import NodeTwinSpec
from joulie.core.intents import (
    AGENT_STALE_AFTER,
    NO_NODE_HARDWARE,
    NODE_HARDWARE_CURRENT,
    NODE_HARDWARE_STALE,
    UNNAMED,
    GpuModelGovernor,
    IntentConfig,
    NodeIntent,
    agent_reporting,
    downgrade_guard,
    gpu_cap_watts,
    is_active_performance_pod,
    max_running_pod_gpus,
    named,
    node_intent,
    spec_wire,
    transition_event,
)
from joulie.core.policies import ClassCaps

SPEC_DATA = Path(__file__).resolve().parent.parent / "data" / "spec"
NODE = "kwok-gpu-nvidia-0"
POLICY = "static-partition-v1"
ALL_GOVERNORS = IntentConfig(governor_control=GovernorControl.ALL)


def spec_status() -> dict[str, Any]:
    """status of the spec's NodeHardware example (8x H100 NVL, range 200-400 W), as a dict."""
    data = yaml.safe_load((SPEC_DATA / "nodehardware.yaml").read_text())
    return copy.deepcopy(data["status"])


def hardware(change: Callable[[dict[str, Any]], object] | None = None) -> NodeHardwareStatus:
    status = spec_status()
    if change is not None:
        change(status)
    return NodeHardwareStatus.model_validate(status)


SPEC_HW = hardware()


INTENT_DEFAULTS: dict[str, Any] = {
    "planned_profile": Profile.ECO,
    "active_perf_pods": 0,
    "gpu_count": 8,
    "hardware": SPEC_HW,
    "labels": {},
    "catalog_gpu_range": None,
    "running_pod_max_gpus": 0,
    "policy_name": POLICY,
}


def intent(**overrides: Any) -> NodeIntent:
    """The named intent of the spec's GPU node with defaults, checking it is a valid spec."""
    args: dict[str, Any] = {**INTENT_DEFAULTS, "config": IntentConfig()}
    args.update(overrides)
    result = named(node_intent(**args), NODE)
    wire = result.spec.to_wire()
    assert NodeTwinSpec.model_validate(wire) == result.spec
    return result


def cpu_only(**overrides: Any) -> NodeIntent:
    return intent(gpu_count=0, hardware=hardware(lambda s: s.pop("gpu")), **overrides)


def wire(result: NodeIntent) -> dict[str, Any]:
    return result.spec.to_wire()


# --- caps ---------------------------------------------------------------------------------------


def test_spec_example_gpu_node_in_eco() -> None:
    expected = yaml.safe_load((SPEC_DATA / "nodetwin.yaml").read_text())["spec"]
    result = intent()
    assert wire(result) == expected
    assert result.schedulable_class is SchedulableClass.ECO


@pytest.mark.parametrize(("profile", "pct"), [(Profile.PERFORMANCE, 100), (Profile.ECO, 60)])
def test_cpu_only_node_gets_the_percentage_of_its_profile(profile: Profile, pct: int) -> None:
    result = cpu_only(planned_profile=profile)
    assert wire(result)["cpu"] == {"packagePowerCapPctOfMax": pct}
    assert "gpu" not in wire(result)


def test_cpu_percentages_follow_configuration() -> None:
    config = IntentConfig(cpu_performance_cap_pct_of_max=90, cpu_eco_cap_pct_of_max=45)
    assert wire(cpu_only(planned_profile=Profile.ECO, config=config))["cpu"] == {
        "packagePowerCapPctOfMax": 45
    }
    assert wire(cpu_only(planned_profile=Profile.PERFORMANCE, config=config))["cpu"] == {
        "packagePowerCapPctOfMax": 90
    }


@pytest.mark.parametrize("profile", list(Profile))
@pytest.mark.parametrize("hw", [SPEC_HW, None], ids=["nodehardware", "no-nodehardware"])
def test_gpu_node_cpu_stays_at_performance_watts(
    profile: Profile, hw: NodeHardwareStatus | None
) -> None:
    config = IntentConfig(performance_cap_watts=4200)
    result = intent(planned_profile=profile, hardware=hw, config=config)
    assert wire(result)["cpu"] == {"packagePowerCapWatts": 4200}


def _uncappable(status: dict[str, Any]) -> None:
    status["gpu"]["controlAvailable"] = False
    status["gpu"].pop("capRangePerGpu")


@pytest.mark.parametrize(("profile", "pct"), [(Profile.PERFORMANCE, 100), (Profile.ECO, 60)])
def test_uncappable_gpu_node_gets_cpu_caps_of_its_profile(profile: Profile, pct: int) -> None:
    config = IntentConfig(cpu_eco_cap_on_uncappable_gpu_nodes=True)
    result = intent(planned_profile=profile, hardware=hardware(_uncappable), config=config)
    assert wire(result)["cpu"] == {"packagePowerCapPctOfMax": pct}
    # The GPU intent is still written; the agent reports it cannot apply it.
    assert wire(result)["gpu"]["powerCap"]["capPctOfMax"] == pct


@pytest.mark.parametrize(
    ("flag", "hw"),
    [
        (False, hardware(_uncappable)),  # exception not enabled
        (True, None),  # no NodeHardware keeps the GPU-node rule
        (True, hardware(lambda s: s["gpu"].pop("controlAvailable"))),  # unknown is not false
        (True, SPEC_HW),  # GPUs with control
    ],
    ids=["flag-off", "no-nodehardware", "control-unknown", "control-available"],
)
def test_uncappable_exception_needs_flag_and_nodehardware_saying_no_control(
    flag: bool, hw: NodeHardwareStatus | None
) -> None:
    config = IntentConfig(cpu_eco_cap_on_uncappable_gpu_nodes=flag)
    assert wire(intent(hardware=hw, config=config))["cpu"] == {"packagePowerCapWatts": 5000}


def _range(low: float | None, high: float | None) -> Callable[[dict[str, Any]], None]:
    def change(status: dict[str, Any]) -> None:
        status["gpu"]["capRangePerGpu"] = {
            k: v for k, v in (("minWatts", low), ("maxWatts", high)) if v is not None
        }

    return change


LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-NVL"}
MODEL_CAPS = IntentConfig(gpu_model_caps={"NVIDIA-H100-NVL": (100.0, 300.0)})


@pytest.mark.parametrize(
    ("hw", "catalog", "labels", "watts"),
    [
        (SPEC_HW, (250.0, 350.0), LABELS, 240),  # NodeHardware range wins
        (None, (250.0, 350.0), LABELS, 250),  # catalog next: 60 % of 350 = 210 -> min 250
        (hardware(lambda s: s["gpu"].pop("capRangePerGpu")), None, LABELS, 180),  # model caps
        (None, None, {}, None),  # nothing known: percentage only
        (None, None, {"nvidia.com/gpu.product": "OTHER"}, None),  # no entry for this product
        (hardware(_range(300, 200)), (150.0, 350.0), {}, 210),  # inverted range skipped
        (hardware(_range(200, None)), None, LABELS, 180),  # range without a maximum skipped
        (hardware(_range(None, 500)), None, {}, 300),  # minimum unknown: no lower clamp
    ],
    ids=[
        "nodehardware",
        "catalog",
        "model-caps",
        "none",
        "unknown-product",
        "inverted-range",
        "no-max",
        "no-min",
    ],
)
def test_cap_watts_per_gpu_sources_in_precedence_order(
    hw: NodeHardwareStatus | None,
    catalog: tuple[float, float] | None,
    labels: dict[str, str],
    watts: int | None,
) -> None:
    result = intent(hardware=hw, catalog_gpu_range=catalog, labels=labels, config=MODEL_CAPS)
    cap = wire(result)["gpu"]["powerCap"]
    assert cap["scope"] == "perGpu"
    assert cap["capPctOfMax"] == 60
    assert cap.get("capWattsPerGpu") == watts


def test_model_caps_use_first_product_label_the_node_carries() -> None:
    config = IntentConfig(
        gpu_model_caps={"first": (100.0, 200.0), "second": (100.0, 300.0)},
        gpu_product_label_keys=("joulie.io/gpu.product", "nvidia.com/gpu.product", "x/product"),
    )
    labels = {"nvidia.com/gpu.product": "second", "x/product": "first"}
    assert (
        wire(intent(hardware=None, labels=labels, config=config))["gpu"]["powerCap"][
            "capWattsPerGpu"
        ]
        == 180
    )
    # A label carried with an empty value does not count as the product.
    labels = {"joulie.io/gpu.product": "", "nvidia.com/gpu.product": "first"}
    assert (
        wire(intent(hardware=None, labels=labels, config=config))["gpu"]["powerCap"][
            "capWattsPerGpu"
        ]
        == 120
    )


def test_model_caps_key_matches_ignoring_case_and_separators() -> None:
    config = IntentConfig(gpu_model_caps={"nvidia h100 nvl": (100.0, 300.0)})
    result = intent(hardware=None, labels=LABELS, config=config)
    assert wire(result)["gpu"]["powerCap"]["capWattsPerGpu"] == 180


@pytest.mark.parametrize(
    ("pct", "cap_range", "watts"),
    [
        (60, (200, 400), 240),
        (10, (200, 400), 200),  # below the minimum: clamped up
        (100, (100, 350.4), 350),  # whole watts, still inside the range
        (33.3, (100, 400), 133),  # 133.2
        (50, (100, 301), 151),  # 150.5: half up, not to even
        (50, (100, 300.6), 150),  # 150.3
        (60, (200.6, 400), 240),
        (40, (200.6, 400), 201),  # 160 -> min 200.6 -> first whole watt inside
        (100, (200.2, 200.7), 200.7),  # no whole watt inside: exact value
        (1, (0, 50), 1),  # never below the API's 1 W floor
    ],
)
def test_gpu_cap_watts_clamps_and_rounds(
    pct: float, cap_range: tuple[float, float], watts: float
) -> None:
    assert gpu_cap_watts(pct, cap_range) == pytest.approx(watts)


def test_gpu_cap_follows_profile_percentages() -> None:
    config = IntentConfig(gpu_performance_cap_pct_of_max=95, gpu_eco_cap_pct_of_max=55)
    perf = wire(intent(planned_profile=Profile.PERFORMANCE, config=config))["gpu"]["powerCap"]
    eco = wire(intent(config=config))["gpu"]["powerCap"]
    assert (perf["capPctOfMax"], perf["capWattsPerGpu"]) == (95, 380)
    assert (eco["capPctOfMax"], eco["capWattsPerGpu"]) == (55, 220)


def test_policy_name_is_provenance_only() -> None:
    assert "policy" not in wire(intent(policy_name=None))
    assert wire(intent(policy_name="queue-aware-v1"))["policy"] == {"name": "queue-aware-v1"}


# --- downgrade guard ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("planned", "count", "cls", "control"),
    [
        (Profile.PERFORMANCE, 0, SchedulableClass.PERFORMANCE, Profile.PERFORMANCE),
        (Profile.PERFORMANCE, 3, SchedulableClass.PERFORMANCE, Profile.PERFORMANCE),
        (Profile.ECO, 1, SchedulableClass.DRAINING, Profile.PERFORMANCE),
        (Profile.ECO, 0, SchedulableClass.ECO, Profile.ECO),
    ],
)
def test_downgrade_guard(
    planned: Profile, count: int, cls: SchedulableClass, control: Profile
) -> None:
    decision = downgrade_guard(planned, count)
    assert decision.profile is planned
    assert decision.schedulable_class is cls
    assert decision.control_profile is control
    assert decision.deferred is (cls is SchedulableClass.DRAINING)


def test_downgrade_guard_rejects_negative_count() -> None:
    with pytest.raises(ValueError, match="active_perf_pods"):
        downgrade_guard(Profile.ECO, -1)


def test_draining_node_keeps_performance_caps_and_presets() -> None:
    # The same output for a node leaving performance and one already in eco: the guard depends
    # only on the plan and the running performance pods.
    for node in (intent, cpu_only):
        draining = node(active_perf_pods=2, config=ALL_GOVERNORS)
        performance = node(planned_profile=Profile.PERFORMANCE, config=ALL_GOVERNORS)
        assert draining.schedulable_class is SchedulableClass.DRAINING
        assert draining.deferred
        assert draining.spec.profile is Profile.ECO
        expected = wire(performance)
        expected["profile"] = "eco"
        assert wire(draining) == expected
    gpu = wire(intent(active_perf_pods=1, config=ALL_GOVERNORS))["gpu"]
    assert gpu["powerCap"] == {"scope": "perGpu", "capPctOfMax": 100, "capWattsPerGpu": 400}
    assert gpu["governor"] == {"preset": "auto"}


def test_eco_node_without_performance_pods_gets_eco_caps() -> None:
    result = cpu_only(active_perf_pods=0, config=ALL_GOVERNORS)
    assert result.schedulable_class is SchedulableClass.ECO
    assert not result.deferred
    assert wire(result)["cpu"] == {
        "packagePowerCapPctOfMax": 60,
        "governor": {"preset": "efficiency"},
    }


@pytest.mark.parametrize(
    ("phase", "deleting", "workload_class", "active"),
    [
        ("Running", False, "performance", True),
        ("Running", True, "performance", False),  # terminating
        ("Pending", False, "performance", False),
        ("Succeeded", False, "performance", False),
        ("Failed", False, "performance", False),
        ("Unknown", False, "performance", False),
        (None, False, "performance", False),
        ("Running", False, "standard", False),
        ("Running", False, None, False),
        ("Running", False, "Performance", False),  # the annotation value is exact
    ],
)
def test_active_performance_pod(
    phase: str | None, deleting: bool, workload_class: str | None, active: bool
) -> None:
    assert is_active_performance_pod(phase, deleting, workload_class) is active


def test_transition_recorded_once_per_change() -> None:
    P, D, E = SchedulableClass.PERFORMANCE, SchedulableClass.DRAINING, SchedulableClass.ECO
    ticks = [P, P, D, D, D, E, E, D, E, P, P]
    events = [
        transition_event(prev, cur) for prev, cur in zip([None, *ticks[:-1]], ticks, strict=True)
    ]
    assert events == [
        None,  # first sighting at performance: nothing changed
        None,
        "deferred",  # leaving performance waits for performance pods
        None,  # still draining: not again
        None,
        "applied",  # the deferred move completes
        None,
        "deferred",  # an eco node runs a performance pod
        "applied",
        "applied",  # back to performance
        None,
    ]


@pytest.mark.parametrize(
    ("previous", "current", "event"),
    [
        (None, SchedulableClass.DRAINING, "deferred"),
        (None, SchedulableClass.ECO, None),
        (None, SchedulableClass.PERFORMANCE, None),
        (SchedulableClass.PERFORMANCE, SchedulableClass.ECO, "applied"),
        (SchedulableClass.DRAINING, SchedulableClass.PERFORMANCE, "applied"),
    ],
)
def test_transition_event(
    previous: SchedulableClass | None, current: SchedulableClass, event: str | None
) -> None:
    assert transition_event(previous, current) == event


# --- governors ----------------------------------------------------------------------------------


def governors(result: NodeIntent) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    data = wire(result)
    return data.get("cpu", {}).get("governor"), data.get("gpu", {}).get("governor")


EFFICIENT_80 = {"preset": "efficient", "computeClockCeilingPctOfMax": 80}


@pytest.mark.parametrize(
    ("control", "cpu", "gpu"),
    [
        (GovernorControl.OFF, None, None),
        (GovernorControl.CPU, {"preset": "efficiency"}, None),
        (GovernorControl.GPU, None, EFFICIENT_80),
        (GovernorControl.ALL, {"preset": "efficiency"}, EFFICIENT_80),
    ],
)
def test_governor_control_selects_components(
    control: GovernorControl, cpu: dict[str, Any] | None, gpu: dict[str, Any] | None
) -> None:
    assert governors(intent(config=IntentConfig(governor_control=control))) == (cpu, gpu)


def test_default_presets_per_profile() -> None:
    assert governors(intent(planned_profile=Profile.PERFORMANCE, config=ALL_GOVERNORS)) == (
        {"preset": "performance"},
        {"preset": "auto"},
    )
    assert governors(intent(config=ALL_GOVERNORS)) == ({"preset": "efficiency"}, EFFICIENT_80)


def test_configured_presets_and_ceiling() -> None:
    config = IntentConfig(
        governor_control=GovernorControl.ALL,
        cpu_eco_governor_preset=CpuGovernorPreset.BALANCED,
        gpu_clock_ceiling_pct_of_max=70,
    )
    assert governors(intent(config=config)) == (
        {"preset": "balanced"},
        {"preset": "efficient", "computeClockCeilingPctOfMax": 70},
    )


def test_empty_configured_preset_writes_none() -> None:
    config = IntentConfig(
        governor_control=GovernorControl.ALL, cpu_eco_governor_preset="", gpu_eco_governor_preset=""
    )
    assert governors(intent(config=config)) == (None, None)


def test_unlisted_preset_is_not_written_nor_replaced() -> None:
    def only_performance_presets(status: dict[str, Any]) -> None:
        status["cpu"]["governor"]["presets"] = [{"preset": "performance"}, {"preset": "balanced"}]
        status["gpu"]["governor"]["presets"] = [{"preset": "auto"}, {"preset": "peak"}]

    hw = hardware(only_performance_presets)
    assert governors(intent(hardware=hw, config=ALL_GOVERNORS)) == (None, None)
    assert governors(
        intent(planned_profile=Profile.PERFORMANCE, hardware=hw, config=ALL_GOVERNORS)
    ) == (
        {"preset": "performance"},
        {"preset": "auto"},
    )


@pytest.mark.parametrize(
    "change",
    [
        lambda s: (s["cpu"].pop("governor"), s["gpu"].pop("governor")),
        lambda s: (s["cpu"]["governor"].pop("presets"), s["gpu"]["governor"].pop("presets")),
        lambda s: (s.pop("cpu"), s.pop("gpu")),
    ],
    ids=["no-governor-block", "no-presets", "no-cpu-gpu"],
)
def test_node_without_governor_gets_no_preset(change: Callable[[dict[str, Any]], object]) -> None:
    assert governors(intent(hardware=hardware(change), config=ALL_GOVERNORS)) == (None, None)


def test_node_without_nodehardware_gets_no_preset() -> None:
    assert governors(intent(hardware=None, config=ALL_GOVERNORS)) == (None, None)


GAP_BASELINE = [{"index": 0, "uuid": "GPU-0", "settings": {"lockedClocks": "none"}}]


@pytest.mark.parametrize("profile", list(Profile))
def test_discovery_gap_still_gets_configured_gpu_preset(profile: Profile) -> None:
    def gap(status: dict[str, Any]) -> None:
        status["gpu"]["governor"] = {"baseline": GAP_BASELINE}

    _, gpu = governors(
        intent(planned_profile=profile, hardware=hardware(gap), config=ALL_GOVERNORS)
    )
    assert gpu == ({"preset": "auto"} if profile is Profile.PERFORMANCE else EFFICIENT_80)


@pytest.mark.parametrize(
    "block",
    [
        {"mechanism": "nvml", "baseline": GAP_BASELINE},  # discovery answered: lists nothing
        {"mechanism": "nvml"},
        {},  # no baseline: not a gap
        {"baseline": []},
    ],
)
def test_not_a_discovery_gap_gets_no_preset(block: dict[str, Any]) -> None:
    def change(status: dict[str, Any]) -> None:
        status["gpu"]["governor"] = block

    assert governors(intent(hardware=hardware(change), config=ALL_GOVERNORS))[1] is None


def _list_gpu_presets(*names: str) -> Callable[[dict[str, Any]], None]:
    def change(status: dict[str, Any]) -> None:
        status["gpu"]["governor"]["presets"] = [{"preset": n} for n in names]

    return change


ALL_GPU = hardware(_list_gpu_presets(*(p.value for p in GpuGovernorPreset)))


def model_config(entries: dict[str, GpuModelGovernor], **extra: Any) -> IntentConfig:
    return IntentConfig(governor_control=GovernorControl.GPU, gpu_model_governors=entries, **extra)


@pytest.mark.parametrize(
    ("key", "labels"),
    [
        ("NVIDIA-H100-NVL", LABELS),  # product label value
        ("NVIDIA_H100_NVL", {}),  # catalog model the agent reports
        ("NVIDIA H100 NVL", {}),  # raw model the agent reports
        ("nvidia h100 nvl", {}),  # case and separators ignored
    ],
)
def test_model_presets_match_label_and_agent_model(key: str, labels: dict[str, str]) -> None:
    config = model_config(
        {key: GpuModelGovernor(eco=GpuGovernorPreset.LOW, performance=GpuGovernorPreset.PEAK)}
    )
    assert governors(intent(hardware=ALL_GPU, labels=labels, config=config))[1] == {"preset": "low"}
    perf = intent(
        planned_profile=Profile.PERFORMANCE, hardware=ALL_GPU, labels=labels, config=config
    )
    assert governors(perf)[1] == {"preset": "peak"}


def test_model_entry_for_product_label_wins_over_agent_model() -> None:
    config = model_config(
        {
            "NVIDIA-H100-NVL": GpuModelGovernor(eco=GpuGovernorPreset.LOW),
            "NVIDIA_H100_NVL": GpuModelGovernor(eco=GpuGovernorPreset.PEAK),
        }
    )
    assert governors(intent(hardware=ALL_GPU, labels=LABELS, config=config))[1] == {"preset": "low"}


def test_model_entry_is_the_way_to_sustained() -> None:
    config = model_config(
        {"NVIDIA_H100_NVL": GpuModelGovernor(performance=GpuGovernorPreset.SUSTAINED)}
    )
    result = intent(planned_profile=Profile.PERFORMANCE, hardware=ALL_GPU, config=config)
    assert governors(result)[1] == {"preset": "sustained"}
    # The entry leaves eco unset: the default applies there.
    assert governors(intent(hardware=ALL_GPU, config=config))[1] == EFFICIENT_80
    with pytest.raises(ValueError, match="sustained"):
        IntentConfig(gpu_performance_governor_preset=GpuGovernorPreset.SUSTAINED)


def test_model_entry_with_empty_preset_writes_none() -> None:
    config = model_config({"NVIDIA_H100_NVL": GpuModelGovernor(eco="")})
    assert governors(intent(hardware=ALL_GPU, config=config))[1] is None


def test_ceiling_only_with_efficient() -> None:
    entry = GpuModelGovernor(compute_clock_ceiling_pct_of_max=65)
    config = model_config({"NVIDIA_H100_NVL": entry})
    assert governors(intent(hardware=ALL_GPU, config=config))[1] == {
        "preset": "efficient",
        "computeClockCeilingPctOfMax": 65,
    }
    perf = intent(planned_profile=Profile.PERFORMANCE, hardware=ALL_GPU, config=config)
    assert governors(perf)[1] == {"preset": "auto"}
    # efficient as the performance preset carries the default ceiling.
    config = model_config(
        {"NVIDIA_H100_NVL": GpuModelGovernor(performance=GpuGovernorPreset.EFFICIENT)}
    )
    perf = intent(planned_profile=Profile.PERFORMANCE, hardware=ALL_GPU, config=config)
    assert governors(perf)[1] == EFFICIENT_80


def pod(phase: str, resources: dict[str, Any], deleting: bool = False) -> tuple[str, bool, int]:
    spec = {"containers": [{"name": "c", "resources": resources}]}
    return (phase, deleting, pod_gpu_count({"spec": spec}))


def req(name: str, count: int) -> dict[str, Any]:
    return {"requests": {name: str(count)}, "limits": {name: str(count)}}


@pytest.mark.parametrize(
    ("pods", "sustained"),
    [
        ([], False),
        ([pod("Running", req("nvidia.com/gpu", 2))], True),
        (
            [pod("Running", req("nvidia.com/gpu", 1)), pod("Running", req("nvidia.com/gpu", 1))],
            False,
        ),
        ([pod("Pending", req("nvidia.com/gpu", 4))], False),
        ([pod("Succeeded", req("nvidia.com/gpu", 4))], False),
        ([pod("Failed", req("nvidia.com/gpu", 4))], False),
        ([pod("Running", req("nvidia.com/gpu", 4), deleting=True)], False),
        ([pod("Running", req("nvidia.com/mig-1g.10gb", 2))], True),
        ([pod("Running", req("nvidia.com/gpu.shared", 2))], True),
        ([pod("Running", req("amd.com/cpx_nps4", 3))], True),
        ([pod("Running", {"limits": {"nvidia.com/gpu": "2"}})], True),  # limits only
        ([pod("Running", req("nvidia.com/gpu", 1)), pod("Running", req("amd.com/gpu", 8))], True),
    ],
    ids=[
        "no-pods",
        "two-gpus",
        "two-single-gpu-pods",
        "pending",
        "succeeded",
        "failed",
        "terminating",
        "mig",
        "shared",
        "partition",
        "limits-only",
        "max-over-pods",
    ],
)
def test_sustained_only_while_a_running_pod_uses_two_gpus(
    pods: list[tuple[str, bool, int]], sustained: bool
) -> None:
    config = model_config(
        {
            "NVIDIA_H100_NVL": GpuModelGovernor(
                performance=GpuGovernorPreset.SUSTAINED, eco=GpuGovernorPreset.SUSTAINED
            )
        },
        gpu_governor_sustained_only_multi_gpu=True,
    )
    max_gpus = max_running_pod_gpus(pods)
    for profile in Profile:
        result = intent(
            planned_profile=profile, hardware=ALL_GPU, running_pod_max_gpus=max_gpus, config=config
        )
        assert governors(result)[1] == ({"preset": "sustained"} if sustained else None)


def test_sustained_without_multi_gpu_rule_needs_no_pod() -> None:
    config = model_config({"NVIDIA_H100_NVL": GpuModelGovernor(eco=GpuGovernorPreset.SUSTAINED)})
    assert governors(intent(hardware=ALL_GPU, config=config))[1] == {"preset": "sustained"}


def test_multi_gpu_rule_leaves_other_presets_alone() -> None:
    config = model_config({}, gpu_governor_sustained_only_multi_gpu=True)
    assert governors(intent(hardware=ALL_GPU, config=config))[1] == EFFICIENT_80


def test_sustained_must_be_listed_by_the_node() -> None:
    config = model_config({"NVIDIA_H100_NVL": GpuModelGovernor(eco=GpuGovernorPreset.SUSTAINED)})
    assert governors(intent(config=config))[1] is None  # the spec's node lists auto, efficient


def test_cpu_only_node_gets_no_gpu_intent() -> None:
    assert cpu_only(config=ALL_GOVERNORS).spec.gpu is None


def test_invalid_config_is_refused() -> None:
    with pytest.raises(ValueError, match="cpu_eco_cap_pct_of_max"):
        IntentConfig(cpu_eco_cap_pct_of_max=0)
    with pytest.raises(ValueError, match="gpu_model_caps"):
        IntentConfig(gpu_model_caps={"x": (300.0, 200.0)})
    with pytest.raises(ValueError, match="gpu_eco_governor_preset"):
        IntentConfig(gpu_eco_governor_preset="turbo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="eco"):
        GpuModelGovernor(eco="efficiency")  # type: ignore[arg-type]


# --- properties ---------------------------------------------------------------------------------

HARDWARE_CHOICES = [
    None,
    SPEC_HW,
    ALL_GPU,
    hardware(_uncappable),
    hardware(lambda s: s["gpu"].update(governor={"baseline": GAP_BASELINE})),
    hardware(lambda s: s.pop("gpu")),
]


@settings(max_examples=150, deadline=None)
@given(
    planned=st.sampled_from(list(Profile)),
    count=st.integers(0, 3),
    gpu_count=st.sampled_from([0, 1, 8]),
    hw=st.sampled_from(HARDWARE_CHOICES),
    control=st.sampled_from(list(GovernorControl)),
    uncappable_rule=st.booleans(),
    max_gpus=st.integers(0, 4),
    sustained=st.booleans(),
)
def test_every_output_is_a_valid_spec_consistent_with_the_guard(
    planned: Profile,
    count: int,
    gpu_count: int,
    hw: NodeHardwareStatus | None,
    control: GovernorControl,
    uncappable_rule: bool,
    max_gpus: int,
    sustained: bool,
) -> None:
    config = IntentConfig(
        governor_control=control,
        cpu_eco_cap_on_uncappable_gpu_nodes=uncappable_rule,
        gpu_model_governors={
            "NVIDIA_H100_NVL": GpuModelGovernor(performance=GpuGovernorPreset.SUSTAINED)
        },
        gpu_governor_sustained_only_multi_gpu=sustained,
    )
    result = intent(
        planned_profile=planned,
        active_perf_pods=count,
        gpu_count=gpu_count,
        hardware=hw,
        running_pod_max_gpus=max_gpus,
        config=config,
    )
    assert result.spec.profile is planned
    assert result.deferred is (planned is Profile.ECO and count > 0)
    assert (result.spec.gpu is not None) is (gpu_count > 0)
    # A written preset is one the node lists (or its GPU block is a discovery gap).
    cpu_gov, gpu_gov = governors(result)
    if cpu_gov is not None:
        assert hw is not None
        assert hw.cpu is not None
        assert hw.cpu.governor is not None
        assert cpu_gov["preset"] in {p.preset for p in hw.cpu.governor.presets or ()}
    if gpu_gov is not None:
        assert hw is not None
        assert hw.gpu is not None
        assert hw.gpu.governor is not None
        listed = {p.preset for p in hw.gpu.governor.presets or ()}
        assert gpu_gov["preset"] in listed or (not listed and hw.gpu.governor.baseline)


# --- AgentReporting -----------------------------------------------------------------------------

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("age", "status", "reason"),
    [
        (timedelta(0), ConditionStatus.TRUE, NODE_HARDWARE_CURRENT),
        (timedelta(minutes=14, seconds=59), ConditionStatus.TRUE, NODE_HARDWARE_CURRENT),
        (timedelta(minutes=15), ConditionStatus.TRUE, NODE_HARDWARE_CURRENT),
        (timedelta(minutes=15, seconds=1), ConditionStatus.FALSE, NODE_HARDWARE_STALE),
        (timedelta(hours=3), ConditionStatus.FALSE, NODE_HARDWARE_STALE),
        (timedelta(minutes=-2), ConditionStatus.TRUE, NODE_HARDWARE_CURRENT),  # clock skew
        # No status write time known (no managedFields entry for the status subresource): the
        # usable status is all the evidence there is.
        (None, ConditionStatus.TRUE, NODE_HARDWARE_CURRENT),
    ],
)
def test_agent_reporting_follows_the_last_status_write(
    age: timedelta | None, status: ConditionStatus, reason: str
) -> None:
    last = None if age is None else NOW - age
    result = agent_reporting(
        hardware_present=True, status_usable=True, last_agent_write=last, now=NOW
    )
    assert (result.status, result.reason) == (status, reason)
    assert result.message


@pytest.mark.parametrize("last", [None, NOW, NOW - timedelta(hours=3)])
def test_no_nodehardware_or_no_usable_status_is_no_nodehardware(last: datetime | None) -> None:
    none = agent_reporting(False, False, last, NOW)
    unusable = agent_reporting(True, False, last, NOW)
    assert (none.status, none.reason) == (ConditionStatus.FALSE, NO_NODE_HARDWARE)
    assert (unusable.status, unusable.reason) == (ConditionStatus.FALSE, NO_NODE_HARDWARE)
    # The message tells "nothing published" from "published, but nothing usable in it".
    assert "No agent has published" in none.message
    assert "no usable status" in unusable.message
    assert none.message != unusable.message


def test_agent_reporting_naive_times_are_utc() -> None:
    naive = (NOW - AGENT_STALE_AFTER - timedelta(seconds=1)).replace(tzinfo=None)
    assert agent_reporting(True, True, naive, NOW).reason == NODE_HARDWARE_STALE
    assert agent_reporting(True, True, NOW, NOW.replace(tzinfo=None)).reason == (
        NODE_HARDWARE_CURRENT
    )


def test_a_stale_condition_stays_the_same_while_the_agent_stays_away() -> None:
    # The condition is written only when it changes: its message must not count the minutes.
    last = NOW - timedelta(minutes=20)
    first = agent_reporting(True, True, last, NOW)
    later = agent_reporting(True, True, last, NOW + timedelta(hours=2))
    assert first == later
    assert "2025-06-01T11:40:00Z" in first.message


# --- per-device caps by class (class_caps) ------------------------------------------------------


def test_class_caps_give_standard_and_idle_boards_the_energy_optimal_cap() -> None:
    result = intent(
        planned_profile=Profile.PERFORMANCE,
        class_caps=ClassCaps(performance_pct_of_max=100.0),
        gpu_optimal_cap_w=247.0,
    )
    assert wire(result)["gpu"]["classCaps"] == {
        "performance": {"scope": "perGpu", "capPctOfMax": 100.0},
        "standard": {"scope": "perGpu", "capWattsPerGpu": 247.0},
        "idle": {"scope": "perGpu", "capWattsPerGpu": 247.0},
    }
    # The node-level cap stays the performance one: no node is eco because of the policy.
    assert wire(result)["profile"] == "performance"


def test_class_caps_without_a_known_board_leave_standard_work_at_the_node_level_cap() -> None:
    result = intent(
        planned_profile=Profile.PERFORMANCE,
        class_caps=ClassCaps(performance_pct_of_max=90.0),
        gpu_optimal_cap_w=None,
    )
    assert wire(result)["gpu"]["classCaps"] == {
        "performance": {"scope": "perGpu", "capPctOfMax": 90.0}
    }


def test_no_class_caps_on_a_cpu_node_or_under_another_policy() -> None:
    rule = ClassCaps(performance_pct_of_max=100.0)
    assert "gpu" not in wire(cpu_only(class_caps=rule, gpu_optimal_cap_w=None))
    assert "classCaps" not in wire(intent())["gpu"]


def test_class_caps_hold_standard_work_s_exclusive_cores_at_nominal_and_leave_the_node_cpu() -> (
    None
):
    rule = ClassCaps(performance_pct_of_max=100.0)
    for node in (cpu_only, intent):
        idle = wire(node(planned_profile=Profile.PERFORMANCE, class_caps=rule))
        assert idle["cpu"]["classCaps"] == {"standard": {"atNominal": True}}
    # The node-level CPU cap stays the performance one, performance pods or not.
    assert wire(cpu_only(planned_profile=Profile.PERFORMANCE, class_caps=rule))["cpu"] == {
        "packagePowerCapPctOfMax": 100,
        "classCaps": {"standard": {"atNominal": True}},
    }
    assert "classCaps" not in wire(cpu_only(planned_profile=Profile.PERFORMANCE))["cpu"]


def test_class_caps_may_cap_the_node_cpu_while_every_pod_on_it_is_standard() -> None:
    rule = ClassCaps(performance_pct_of_max=100.0, cpu_eco_when_standard=True)
    standard_only = cpu_only(planned_profile=Profile.PERFORMANCE, class_caps=rule)
    assert wire(standard_only)["cpu"]["packagePowerCapPctOfMax"] == 60
    assert wire(standard_only)["profile"] == "performance"  # the node is not eco
    with_performance = cpu_only(
        planned_profile=Profile.PERFORMANCE, class_caps=rule, active_perf_pods=1
    )
    assert wire(with_performance)["cpu"]["packagePowerCapPctOfMax"] == 100


def test_alike_nodes_share_their_spec_parts_and_keep_their_own_names() -> None:
    config = IntentConfig()
    a = intent(config=config)
    b = named(node_intent(**{**INTENT_DEFAULTS, "config": config}), "other-node")
    assert a.spec.cpu is b.spec.cpu
    assert a.spec.gpu is b.spec.gpu
    assert a.spec.policy is b.spec.policy
    assert (a.spec.node_name, b.spec.node_name) == (NODE, "other-node")
    # Other inputs, other parts; and equal hardware from another report gives equal values.
    performance = intent(config=config, planned_profile=Profile.PERFORMANCE)
    assert performance.spec.gpu != a.spec.gpu
    again = intent(config=config, hardware=hardware())
    assert again.spec == a.spec


def test_an_unnamed_intent_is_shared_and_written_with_the_nodes_name() -> None:
    config = IntentConfig()
    args: dict[str, Any] = {**INTENT_DEFAULTS, "config": config}
    shared = node_intent(**args)
    assert node_intent(**args) is shared
    assert shared.spec.node_name == UNNAMED
    for_node = named(shared, NODE)
    assert spec_wire(shared, NODE) == for_node.spec.to_wire()
    assert for_node.spec.node_name == NODE
    assert for_node.schedulable_class is shared.schedulable_class
    # A decision that differs is another instance.
    performance = node_intent(**{**args, "planned_profile": Profile.PERFORMANCE})
    assert performance is not shared
    assert spec_wire(performance, NODE) == wire(intent(planned_profile=Profile.PERFORMANCE))
