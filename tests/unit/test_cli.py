"""The `joulie` command as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from joulie import __version__
from joulie.agent.settings import AgentSettings
from joulie.api.crd import ALL_CRDS, crd_manifest
from joulie.manager.settings import ManagerSettings
from joulie.process.settings import ProcessSettings

JOULIE = str(Path(sys.executable).parent / "joulie")


def joulie(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ManagerSettings.model_fields}
    return subprocess.run(
        [JOULIE, *args], env={**clean, **env}, capture_output=True, text=True, timeout=60
    )


def test_bad_value_exits_2_naming_the_variable() -> None:
    result = joulie("--role=manager", STATIC_HP_FRAC="abc")
    assert result.returncode == 2
    assert "STATIC_HP_FRAC='abc'" in result.stderr
    assert "a number >= 0 and <= 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_all_problems_of_all_roles_are_printed_at_once() -> None:
    result = joulie(
        "--role=manager,agent,extender",
        STATIC_HP_FRAC="2",
        POLICY_TYPE="fastest",
        EXTENDER_ADDR="nowhere",
        METRICS_ADDR="x:y",
        AGENT_MODE="daemonset",
    )
    assert result.returncode == 2
    assert "(5 problems)" in result.stderr
    for variable in ("STATIC_HP_FRAC", "POLICY_TYPE", "EXTENDER_ADDR", "METRICS_ADDR", "NODE_NAME"):
        assert f"  {variable}=" in result.stderr


def test_unknown_role_is_refused() -> None:
    result = joulie("--role=manager,scheduler")
    assert result.returncode == 2
    assert "unknown role 'scheduler'" in result.stderr


def test_config_lists_every_variable_with_its_source() -> None:
    result = joulie("config", "--role", "manager", STATIC_HP_FRAC="0.25")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    variables = {line.split()[1]: line for line in lines[1:]}
    for settings in (ProcessSettings, ManagerSettings):
        for name in settings.model_fields:
            assert settings.env_name(name) in variables
    assert variables["STATIC_HP_FRAC"].split()[2:] == ["0.25", "environment"]
    assert variables["QUEUE_HP_MIN"].split()[2:] == ["1", "default"]


def test_config_json_and_warnings() -> None:
    result = joulie(
        "config",
        "--role",
        "manager,agent",
        "--output",
        "json",
        GOVERNOR_CONTROL="sometimes",
        NODE_NAME="n1",
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    roles = {r["role"] for r in rows}
    assert roles == {"process", "manager", "agent"}
    assert len([r for r in rows if r["role"] == "agent"]) == len(AgentSettings.model_fields)
    governor = next(r for r in rows if r["variable"] == "GOVERNOR_CONTROL")
    assert governor["value"] == "off"
    assert governor["source"] == "default (invalid value ignored)"
    assert "warning: GOVERNOR_CONTROL='sometimes'" in result.stderr


def test_config_with_invalid_values_exits_2() -> None:
    result = joulie("config", "--role", "manager", QUEUE_HP_MAX="many")
    assert result.returncode == 2
    assert "QUEUE_HP_MAX='many'" in result.stderr


def test_crds_prints_both_definitions() -> None:
    result = joulie("crds")
    assert result.returncode == 0
    docs = list(yaml.safe_load_all(result.stdout))
    assert docs == [crd_manifest(info) for info in ALL_CRDS]


def test_version_and_help() -> None:
    assert joulie("--version").stdout.strip() == f"joulie {__version__}"
    bare = joulie()
    assert bare.returncode == 2
    assert "--role" in bare.stderr
