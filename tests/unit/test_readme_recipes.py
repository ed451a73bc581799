"""The README's copy-paste recipes use variables, ports and paths the code really has: a new user
pasting them on `make cluster-up` must not meet an unknown variable or a wrong port."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from hack.cluster import __main__ as cluster_cli
from hack.cluster.runner import LocalCluster
from joulie.settings import split_address
from joulie.sim.settings import SimulatorSettings

JOULIE = str(Path(sys.executable).parent / "joulie")


def recipe(repo_root: Path) -> str:
    readme = (repo_root / "README.md").read_text()
    after = readme.split("**Simulated power in the manager's twins, on `make cluster-up`**", 1)
    assert len(after) == 2, "the recipe's heading is gone from README.md"
    return after[1].split("```bash\n", 1)[1].split("```", 1)[0]


def joulie_commands(text: str) -> list[tuple[dict[str, str], str]]:
    """Each `.venv/bin/joulie --role=X` line: the variables set in front of it, and X."""
    found = []
    for command in text.replace("\\\n", " ").splitlines():
        words = shlex.split(command, comments=True)
        if ".venv/bin/joulie" not in words:
            continue
        at = words.index(".venv/bin/joulie")
        env = dict(w.split("=", 1) for w in words[:at])
        role = words[at + 1].removeprefix("--role=")
        found.append((env, role))
    return found


def config(role: str, env: dict[str, str]) -> dict[str, dict[str, str]]:
    result = subprocess.run(
        [JOULIE, "config", "--role", role, "--output", "json"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return {row["variable"]: row for row in json.loads(result.stdout)}


def test_the_simulated_power_recipe_configures_real_variables(repo_root: Path) -> None:
    commands = joulie_commands(recipe(repo_root))
    assert [role for _, role in commands] == ["simulator", "manager"]
    manager_env = commands[1][0]
    rows = config("manager", manager_env)
    for variable, value in manager_env.items():
        assert rows[variable]["source"] == "environment", variable
        assert rows[variable]["value"] == value
    assert manager_env["NODE_POWER_SOURCE"] == "http"


def test_the_recipe_reads_the_simulator_where_it_listens(repo_root: Path) -> None:
    commands = joulie_commands(recipe(repo_root))
    endpoint = urlsplit(commands[1][0]["NODE_POWER_HTTP_ENDPOINT"])
    _, sim_port = split_address(SimulatorSettings().sim_addr)
    assert endpoint.port == sim_port
    assert endpoint.path == "/telemetry/{node}"
    # The two processes' metrics ports differ (they share the machine).
    ports = {config(role, env)["METRICS_ADDR"]["value"] for env, role in commands}
    assert len(ports) == 2


def test_the_recipe_uses_the_clusters_kubeconfig_and_kubectl(
    repo_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = recipe(repo_root)
    monkeypatch.delenv("JOULIE_CLUSTER_DIR", raising=False)
    kubeconfig = LocalCluster(work_dir=cluster_cli._work_dir()).admin_kubeconfig
    assert f"export KUBECONFIG=$PWD/{kubeconfig.relative_to(repo_root)}\n" in text
    # `hack.cluster up` prints `kubectl: <bin dir>/kubectl`; the recipe finds the same directory.
    assert re.search(r'export PATH="\$\(hack/build-binaries\.sh --print-bin-dir\):\$PATH"', text)
    assert "kubectl get nodetwins" in text


def test_readme_runs_the_agent_with_its_node_name(repo_root: Path) -> None:
    # The README's commands, and the design notes the internals moved to.
    texts = [(repo_root / name).read_text() for name in ("README.md", "docs/design.md")]
    runs = [line for text in texts for line in text.splitlines() if "joulie --role=agent" in line]
    assert runs
    # The default mode (daemonset) refuses to start without NODE_NAME; pool mode needs none.
    assert all("NODE_NAME=" in line or "AGENT_MODE=pool" in line for line in runs)


def first_screen(repo_root: Path) -> str:
    """The README up to its table of contents: what a newcomer reads first."""
    readme = (repo_root / "README.md").read_text()
    assert "## Contents" in readme
    return readme.split("## Contents", 1)[0]


def test_the_first_screen_says_how_to_start(repo_root: Path) -> None:
    text = first_screen(repo_root)
    for needed in (
        "`make demo`",
        "`make test`",
        "`pip install .` then `joulie simulate`",
        "(docs/operator-guide.md)",
        "(docs/simulator-report.md)",
        "## Install on a cluster",
    ):
        assert needed in text, needed
    # The internals live in docs/design.md now.
    for internal in ("managedFields", "heartbeat", "fences"):
        assert internal not in text, internal


def test_the_first_screen_figures_are_the_reports(repo_root: Path) -> None:
    """The savings and the commands that reproduce them are those of the simulator report."""
    text = first_screen(repo_root)
    report = (repo_root / "docs" / "simulator-report.md").read_text()
    baseline_d = report.split("## Baseline D", 1)[1]
    commands = re.findall(r"^joulie simulate .*$", text, re.MULTILINE)
    assert len(commands) == 2
    for command in commands:
        assert re.search(rf"^\s*{re.escape(command)}( --output \S+)?$", baseline_d, re.MULTILINE)
    rows = [line for line in text.splitlines() if line.startswith("| `") and "%" in line]
    assert len(rows) == 2
    for row in rows:
        for figure in re.findall(r"\d+\.\d+ %|x \d\.\d\d", row):
            assert figure in baseline_d, (figure, row)
