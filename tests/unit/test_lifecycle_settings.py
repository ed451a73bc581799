"""The LIFECYCLE_* variables: dry-run by default, and every configuration that could not work is
refused at start-up with the variable, the value and what is accepted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from joulie.api.lifecycle import default_matrix
from joulie.manager.lifecycle.actuators import ACTUATORS
from joulie.manager.lifecycle.settings import LifecycleMode, parse_windows
from joulie.manager.settings import ManagerSettings

JOULIE = str(Path(sys.executable).parent / "joulie")


def problems(**env: str) -> dict[str, str]:
    return {p.variable: str(p) for p in ManagerSettings.from_env(env).problems}


def test_the_default_is_dry_run_with_the_spec_matrix_and_no_problem() -> None:
    loaded = ManagerSettings.from_env({})
    assert loaded.problems == []
    settings = loaded.settings
    assert settings.lifecycle_mode is LifecycleMode.DRY_RUN
    config = settings.lifecycle_config()
    assert config.billing_period_s == 0  # always open: power saving on premises
    assert (config.boot_grace_s, config.idle_grace_s) == (1200, 600)


def test_enforce_needs_an_actuator() -> None:
    found = problems(LIFECYCLE_MODE="enforce")
    assert "is required with LIFECYCLE_MODE=enforce" in found["LIFECYCLE_ACTUATOR"]
    assert problems(LIFECYCLE_MODE="enforce", LIFECYCLE_ACTUATOR="kwok") == {}


def test_a_webhook_needs_a_url_and_a_readable_signing_key(tmp_path: Path) -> None:
    found = problems(LIFECYCLE_MODE="enforce", LIFECYCLE_ACTUATOR="webhook")
    assert set(found) == {"LIFECYCLE_WEBHOOK_URL", "LIFECYCLE_WEBHOOK_SECRET_FILE"}
    missing = problems(
        LIFECYCLE_MODE="enforce",
        LIFECYCLE_ACTUATOR="webhook",
        LIFECYCLE_WEBHOOK_URL="https://power.example/off",
        LIFECYCLE_WEBHOOK_SECRET_FILE=str(tmp_path / "absent"),
    )
    assert "cannot be read" in missing["LIFECYCLE_WEBHOOK_SECRET_FILE"]
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    assert (
        problems(
            LIFECYCLE_MODE="enforce",
            LIFECYCLE_ACTUATOR="webhook",
            LIFECYCLE_WEBHOOK_URL="https://power.example/off",
            LIFECYCLE_WEBHOOK_SECRET_FILE=str(key),
        )
        == {}
    )


def test_a_matrix_file_missing_a_tuple_names_it(tmp_path: Path) -> None:
    document = default_matrix().to_document()
    document["entries"] = document["entries"][1:]  # drop the first row
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(document))
    found = problems(LIFECYCLE_MATRIX_FILE=str(path))
    assert (
        "tuple (busy, closed, boot exceeded, idle exceeded): missing"
        in found["LIFECYCLE_MATRIX_FILE"]
    )
    # With the lifecycle off, nothing reads the file.
    assert problems(LIFECYCLE_MATRIX_FILE=str(path), LIFECYCLE_MODE="off") == {}


def test_shutdown_windows_within_the_billing_period() -> None:
    assert parse_windows("54m-60m, 1h54m-2h") == ((3240.0, 3600.0), (6840.0, 7200.0))
    found = problems(LIFECYCLE_BILLING_PERIOD="1h", LIFECYCLE_SHUTDOWN_WINDOWS="54m-61m")
    assert "not within the billing period" in found["LIFECYCLE_SHUTDOWN_WINDOWS"]
    assert "at least one" in problems(LIFECYCLE_BILLING_PERIOD="1h")["LIFECYCLE_SHUTDOWN_WINDOWS"]
    assert "not a span" in problems(LIFECYCLE_SHUTDOWN_WINDOWS="54m")["LIFECYCLE_SHUTDOWN_WINDOWS"]
    settings = ManagerSettings.from_env(
        {"LIFECYCLE_BILLING_PERIOD": "1h", "LIFECYCLE_SHUTDOWN_WINDOWS": "54m-60m"}
    ).settings
    assert settings.lifecycle_config().shutdown_windows == ((3240.0, 3600.0),)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LIFECYCLE_MODE", "on"),
        ("LIFECYCLE_ACTUATOR", "ipmi"),
        ("LIFECYCLE_BUDGET_PCT", "120"),
        ("LIFECYCLE_MIN_NODES", "-1"),
        ("LIFECYCLE_IDLE_GRACE", "0s"),
    ],
)
def test_a_bad_value_is_named(variable: str, value: str) -> None:
    assert variable in problems(**{variable: value})


def test_the_manager_refuses_to_start_with_an_invalid_matrix(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text("version: 1\nentries:\n  - [busy, open, boot wait, not idle, REBOOT]\n")
    clean = {k: v for k, v in os.environ.items() if k not in ManagerSettings.model_fields}
    result = subprocess.run(
        [JOULIE, "--role=manager"],
        env={**clean, "LIFECYCLE_MATRIX_FILE": str(path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "LIFECYCLE_MATRIX_FILE" in result.stderr
    assert "action 'REBOOT' is unknown" in result.stderr
    assert "Traceback" not in result.stderr


def test_every_registered_actuator_is_accepted_checked_and_documented() -> None:
    # The names were kept in sync by hand in four places (an enum, a tuple, two texts).
    guide = (Path(__file__).resolve().parents[2] / "docs" / "lifecycle.md").read_text()
    for registered in ACTUATORS:
        loaded = ManagerSettings.from_env(
            {"LIFECYCLE_MODE": "enforce", "LIFECYCLE_ACTUATOR": registered.name}
        )
        assert loaded.settings.lifecycle_actuator == registered.name
        assert "LIFECYCLE_ACTUATOR" not in {p.variable for p in loaded.problems}
        assert f"| `{registered.name}` |" in guide
    refused = problems(LIFECYCLE_MODE="enforce", LIFECYCLE_ACTUATOR="ipmi")
    assert ", ".join(r.name for r in ACTUATORS) in refused["LIFECYCLE_ACTUATOR"]
