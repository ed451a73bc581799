"""`joulie` without a usable cluster, as a user meets it: a one-shot command ends soon with one
line naming the kubeconfig and the problem; a role keeps trying, says why, and is not ready."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from hack.cluster.runner import free_port
from joulie.manager.settings import ManagerSettings
from tests.support.waiting import wait_until

JOULIE = str(Path(sys.executable).parent / "joulie")
BOUND_S = 40.0
"""How long a one-shot command may take to give up, start-up of the interpreter included: far
below a command that keeps retrying (the 60 s timeout below), and loose enough for a loaded
runner, where a file-not-found answer once took 15.5 s to come back."""


def environment(**env: str) -> dict[str, str]:
    skip = {*ManagerSettings.model_fields, "KUBECONFIG", "KUBERNETES_SERVICE_HOST"}
    return {**{k: v for k, v in os.environ.items() if k not in skip}, **env}


def plan_live(kubeconfig: str, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = subprocess.run(
        [JOULIE, "plan", "--live", *args],
        env=environment(KUBECONFIG=kubeconfig),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result, time.monotonic() - started


def write_kubeconfig(path: Path, server: str) -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_plan_live_without_a_kubeconfig_is_a_configuration_error() -> None:
    result, took = plan_live("/nonexistent")
    assert result.returncode == 2
    assert one_line(result) == "joulie: kubeconfig /nonexistent: file not found"
    assert took < BOUND_S


def test_plan_live_against_a_closed_port(tmp_path: Path) -> None:
    server = f"https://127.0.0.1:{free_port()}"
    result, took = plan_live(write_kubeconfig(tmp_path / "config", server))
    assert result.returncode == 1
    assert one_line(result) == (
        f"joulie: kubeconfig {tmp_path / 'config'}: cannot reach the API server at {server}: "
        "connection refused"
    )
    assert took < BOUND_S


def test_plan_live_against_a_server_that_never_answers(tmp_path: Path) -> None:
    with socket.socket() as listener:  # accepts connections (the kernel does), answers nothing
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        server = f"https://127.0.0.1:{listener.getsockname()[1]}"
        path = write_kubeconfig(tmp_path / "config", server)
        result, took = plan_live(path, "--timeout", "2")
    assert result.returncode == 1
    assert one_line(result).endswith(f"the API server at {server} did not answer within 2 s")
    assert took < BOUND_S


@pytest.fixture
def unreachable(tmp_path: Path) -> tuple[str, str]:
    server = f"https://127.0.0.1:{free_port()}"
    return write_kubeconfig(tmp_path / "config", server), server


@pytest.fixture
def role_process(
    request: pytest.FixtureRequest, tmp_path: Path, unreachable: tuple[str, str]
) -> Iterator[tuple[subprocess.Popen[bytes], Path, int]]:
    port = free_port()
    log = tmp_path / "role.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [JOULIE, f"--role={request.param}"],
            env=environment(
                KUBECONFIG=unreachable[0],
                METRICS_ADDR=f"127.0.0.1:{port}",
                SIM_ADDR=f"127.0.0.1:{free_port()}",
                LOG_FORMAT="json",
            ),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield process, log, port
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=30)


@pytest.mark.parametrize(
    "role_process",
    ["manager", "simulator"],
    indirect=True,
)
def test_role_without_a_cluster_is_not_ready_and_says_why(
    role_process: tuple[subprocess.Popen[bytes], Path, int], unreachable: tuple[str, str]
) -> None:
    process, log, port = role_process
    kubeconfig, server = unreachable

    def complaints() -> list[dict[str, object]]:
        assert process.poll() is None, log.read_text()
        events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        return [e for e in events if e["event"] == "cannot connect to the cluster, retrying"]

    first = wait_until(complaints, 30, "the role to say why it cannot connect")[0]
    assert first["error"] == (
        f"kubeconfig {kubeconfig}: cannot reach the API server at {server}: connection refused"
    )
    readyz = wait_until(
        lambda: httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5), 30, "/readyz to answer"
    )
    assert readyz.status_code == 503
    assert f"not ready (not connected: {first['error']})" in readyz.text
    # It keeps trying (one line per attempt, no traceback) and stops cleanly on SIGTERM.
    wait_until(lambda: len(complaints()) >= 2, 30, "a second attempt")
    process.terminate()
    assert process.wait(timeout=30) == 0
    text = log.read_text()
    assert "Traceback" not in text
    assert all(len(line) < 400 for line in text.splitlines())
