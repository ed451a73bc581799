"""The runtime in a real process: health, readiness, metrics, signals and graceful shutdown."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import httpx
import pytest

from hack.cluster.runner import free_port
from tests.conftest import ROOT


def limit_open_files(soft: int) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class Proc:
    def __init__(
        self,
        mode: str,
        tmp_path: Path,
        timeout: str = "3s",
        ready_delay: float = 0.5,
        open_files: int | None = None,
    ) -> None:
        self.port = free_port()
        self.log = tmp_path / "roles.log"
        env = {
            **os.environ,
            "METRICS_ADDR": f"127.0.0.1:{self.port}",
            "SHUTDOWN_TIMEOUT": timeout,
            "LOG_FORMAT": "json",
            "DEMO_ROLE_LOG": str(self.log),
            "DEMO_READY_DELAY": str(ready_delay),
        }
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "tests.support.demo_roles", mode],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=None if open_files is None else lambda: limit_open_files(open_files),
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, timeout=2)

    def wait_until_serving(self) -> None:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            assert self.popen.poll() is None, self.output()
            try:
                self.get("/healthz")
                return
            except httpx.TransportError:
                time.sleep(0.05)
        raise AssertionError("health endpoint never came up")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 10
        while self.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, self.get("/readyz").text
            time.sleep(0.05)

    def output(self) -> str:
        if self.popen.poll() is None:
            return ""
        assert self.popen.stdout is not None
        return self.popen.stdout.read()

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()


class StartProc(Protocol):
    def __call__(self, mode: str, timeout: str = "3s", ready_delay: float = 0.5) -> Proc: ...


@pytest.fixture
def proc_factory(tmp_path: Path) -> Iterator[StartProc]:
    started: list[Proc] = []

    def start(mode: str, timeout: str = "3s", ready_delay: float = 0.5) -> Proc:
        p = Proc(mode, tmp_path, timeout, ready_delay)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()


def test_health_readiness_metrics_and_graceful_sigterm(proc_factory: StartProc) -> None:
    p = proc_factory("ok")
    p.wait_until_serving()
    assert p.get("/healthz").text == "ok\n"
    p.wait_ready()
    assert p.get("/readyz").text == "first: ready\nsecond: ready\n"
    metrics = p.get("/metrics").text
    assert 'joulie_role_ready{role="first"} 1.0' in metrics
    assert "joulie_build_info{version=" in metrics
    assert "joulie_shutting_down 0.0" in metrics

    p.popen.send_signal(signal.SIGTERM)
    assert p.popen.wait(timeout=10) == 0, p.output()
    assert p.log.read_text().splitlines()[-2:] in (
        ["first cleaned up", "second cleaned up"],
        ["second cleaned up", "first cleaned up"],
    )
    assert '"event": "stopped"' in p.output()


def test_not_ready_before_roles_are(proc_factory: StartProc) -> None:
    p = proc_factory("ok", ready_delay=5)
    p.wait_until_serving()
    first = p.get("/readyz")
    assert first.status_code == 503
    assert first.text == "first: not ready\nsecond: not ready\n"
    assert 'joulie_role_ready{role="first"} 0.0' in p.get("/metrics").text
    p.wait_ready()


def test_sigint_also_stops_gracefully(proc_factory: StartProc) -> None:
    p = proc_factory("ok")
    p.wait_until_serving()
    p.wait_ready()
    p.popen.send_signal(signal.SIGINT)
    assert p.popen.wait(timeout=10) == 0
    assert "second cleaned up" in p.log.read_text()


def test_role_that_ignores_stop_is_cancelled_after_timeout(proc_factory: StartProc) -> None:
    p = proc_factory("stuck", timeout="1s")
    p.wait_until_serving()
    p.wait_ready()
    started = time.monotonic()
    p.popen.send_signal(signal.SIGTERM)
    assert p.popen.wait(timeout=10) == 1
    assert time.monotonic() - started < 5
    out = p.output()
    assert "role did not stop in time" in out
    assert "first cleaned up" in p.log.read_text()


def test_failing_role_stops_the_process_with_an_error(proc_factory: StartProc) -> None:
    p = proc_factory("crash")
    assert p.popen.wait(timeout=15) == 1
    out = p.output()
    assert "role failed" in out
    assert "demo role failure" in out
    # The healthy role was still given its graceful stop.
    assert "first cleaned up" in p.log.read_text()


def test_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        env = {
            **os.environ,
            "METRICS_ADDR": f"127.0.0.1:{taken}",
            "DEMO_ROLE_LOG": "/dev/null",
            "LOG_FORMAT": "json",
        }
        result = subprocess.run(
            [sys.executable, "-m", "tests.support.demo_roles", "ok"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=20,
        )
    assert result.returncode == 1
    assert "cannot listen" in result.stdout + result.stderr


def test_connections_left_open_do_not_exhaust_a_low_open_file_limit(tmp_path: Path) -> None:
    # At a soft limit of 256 open files, 300 connections that sent half a request made the
    # health probe unreachable; the process now raises its soft limit to the hard one.
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 1024:
        pytest.skip("the hard open-file limit is too low to tell")
    p = Proc("ok", tmp_path, open_files=256)
    held: list[socket.socket] = []
    try:
        p.wait_until_serving()
        for _ in range(300):
            s = socket.create_connection(("127.0.0.1", p.port), timeout=5)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the rest
            held.append(s)
        assert p.get("/healthz").text == "ok\n"
    finally:
        for s in held:
            s.close()
        p.stop()
