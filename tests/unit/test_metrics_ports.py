"""Each role's default metrics port: two roles started side by side on one machine must not both
try :8080, and the README's Ports table must say what the code does."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from joulie.process.roles import ROLES

JOULIE = str(Path(sys.executable).parent / "joulie")


def metrics_addr(roles: str, **env: str) -> tuple[str, str]:
    """METRICS_ADDR's value and source as `joulie config --role ROLES` shows them."""
    clean = {k: v for k, v in os.environ.items() if k != "METRICS_ADDR"}
    result = subprocess.run(
        [JOULIE, "config", "--role", roles, "--output", "json"],
        env={**clean, "NODE_NAME": "n1", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    row = next(r for r in json.loads(result.stdout) if r["variable"] == "METRICS_ADDR")
    return row["value"], row["source"]


def test_every_role_has_its_own_default_port() -> None:
    shown = {role: metrics_addr(role) for role in ROLES}
    assert shown == {
        "manager": (":8080", "default"),
        "agent": (":8081", "default"),
        "extender": (":8082", "default"),
        "simulator": (":8083", "default"),
    }


def test_a_comma_list_serves_on_its_first_roles_port() -> None:
    assert metrics_addr("simulator,manager") == (":8083", "default")
    assert metrics_addr("manager,simulator") == (":8080", "default")


def test_a_metrics_addr_that_is_set_wins() -> None:
    assert metrics_addr("simulator", METRICS_ADDR="127.0.0.1:9100") == (
        "127.0.0.1:9100",
        "environment",
    )


def test_no_default_port_collides_with_a_roles_own_server() -> None:
    from joulie.extender.settings import ExtenderSettings
    from joulie.sim.settings import SimulatorSettings

    servers = {
        int(ExtenderSettings().extender_addr.rpartition(":")[2]),
        int(SimulatorSettings().sim_addr.rpartition(":")[2]),
    }
    metrics = [spec.metrics_port for spec in ROLES.values()]
    assert len(set(metrics)) == len(metrics)
    assert not servers & set(metrics)


def test_readme_ports_table_matches_the_code(repo_root: Path) -> None:
    readme = (repo_root / "README.md").read_text()
    section = readme.split("### Ports", 1)[1].split("###", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| `:(\d+)` \|", section, re.MULTILINE))
    assert rows == {name: str(spec.metrics_port) for name, spec in ROLES.items()}
