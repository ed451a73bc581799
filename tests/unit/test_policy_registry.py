"""The policy registry is the one list every consumer reads: the manager's variables, the
simulator's run-spec params and its re-planning, `joulie plan`'s flags and the configuration
reference all follow what each policy declares."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from joulie.core.policies import (
    PARAMETERS,
    POLICIES,
    PolicyInputs,
    PolicyType,
    Reads,
    values_of,
)
from joulie.manager.settings import ManagerSettings
from joulie.sim.control_loop import ControlLoop
from joulie.sim.engine import Engine
from joulie.sim.run_spec import RunSpec
from joulie.sim.scenario import PARAMS, scenario_of


def test_every_policy_is_registered_once_with_its_own_parameters() -> None:
    assert set(POLICIES) == set(PolicyType)
    names = [p.name for p in PARAMETERS]
    assert len(names) == len(set(names))
    assert len({policy.provenance for policy in POLICIES.values()}) == len(POLICIES)
    for policy in POLICIES.values():
        assert (Reads.DEMAND in policy.reads) == (policy.demand is not None)


def test_every_parameter_is_a_manager_variable_a_run_spec_param_and_documented(
    repo_root: Path,
) -> None:
    reference = (repo_root / "docs/configuration.md").read_text()
    for parameter in PARAMETERS:
        field = ManagerSettings.model_fields[parameter.name]
        assert field.default == parameter.default
        assert field.description == parameter.doc
        variable = ManagerSettings.env_name(parameter.name)
        assert f"`{variable}`" in reference
        assert PARAMS[parameter.name] is parameter.type
        if parameter.minimum is not None:
            below = parameter.minimum - 1
            refused = ManagerSettings.from_env({variable: str(below)}).problems
            assert [p.variable for p in refused] == [variable]


def test_a_policy_rule_across_its_parameters_is_a_settings_problem() -> None:
    loaded = ManagerSettings.from_env({"QUEUE_HP_MIN": "5", "QUEUE_HP_MAX": "2"})
    assert [(p.variable, p.detail) for p in loaded.problems] == [
        ("QUEUE_HP_MAX", "is below QUEUE_HP_MIN=5")
    ]


def _settled_loop(policy: PolicyType) -> ControlLoop:
    """The simulator's manager for ``policy``, reconciled until the labels stopped moving
    (the downgrade guard moves them a few nodes per reconcile, and the plan reads them)."""
    scenario = scenario_of(RunSpec(inventory="exp02", baseline="B", hours=1.0))
    inputs = PolicyInputs(policy=policy.value, params=values_of({"queue_hp_base_frac": 0.1}))
    loop = Engine(dataclasses.replace(scenario, policy=inputs)).loop
    assert loop is not None
    for step in range(40):
        loop.reconcile(step * 60.0, 0)
    return loop


def _plans_after(loop: ControlLoop, perf_pods: list[int], start: int = 40) -> int:
    before = loop.plans
    for step, pods in enumerate(perf_pods, start=start):
        loop.reconcile(step * 60.0, pods)
    return loop.plans - before


def test_a_policy_that_reads_neither_demand_nor_clock_is_not_asked_again() -> None:
    loop = _settled_loop(PolicyType.STATIC_PARTITION)
    assert _plans_after(loop, [0, 50, 400, 0]) == 0


def test_a_policy_that_reads_the_demand_is_asked_again_when_its_answer_moves() -> None:
    loop = _settled_loop(PolicyType.QUEUE_AWARE_V1)
    # 5 pods come to the same node count as none (the base fraction is larger).
    assert _plans_after(loop, [5, 5]) == 0
    assert _plans_after(loop, [400], start=42) >= 1


def test_a_policy_that_reads_the_clock_is_asked_at_every_reconcile() -> None:
    loop = _settled_loop(PolicyType.RULE_SWAP_V1)
    # Three reconciles inside one phase: nothing else moved, the clock did.
    before = loop.plans
    for t in (2400.0, 2410.0, 2420.0):
        loop.reconcile(t, 0)
    assert loop.plans - before == 3
