"""Real processes for e2e tests: a Joulie role with its own ServiceAccount (hack.cluster.roles,
which the demo shares), and a real Prometheus server (Debian's package) scraping local targets."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from hack.cluster.roles import JOULIE, RoleDied, RoleProcess, sum_samples
from hack.cluster.runner import free_port

__all__ = ["JOULIE", "PrometheusServer", "RoleDied", "RoleProcess", "prometheus_binary"]


def prometheus_binary() -> str:
    """The prometheus binary. Missing, the test fails under `make test` and in CI, which promise
    to run every test, and skips in a plain local pytest run."""
    binary = shutil.which("prometheus")
    if binary is None:
        message = (
            "prometheus is not installed: run `make prometheus` (installs Debian's package as "
            "root) or `sudo apt-get install --no-install-recommends prometheus`"
        )
        if os.environ.get("CI") or os.environ.get("JOULIE_REQUIRE_PROMETHEUS"):
            pytest.fail(message)
        pytest.skip(message)
    return binary


class PrometheusServer:
    """A Prometheus scraping ``targets`` every second. It can be stopped and started again on the
    same port and storage, as a real outage would look to its clients."""

    def __init__(self, tmp: Path, targets: list[str]) -> None:
        self.binary = prometheus_binary()
        self.tmp = tmp
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "joulie", "static_configs": [{"targets": targets}]}],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with (self.tmp / "prometheus.log").open("a") as log:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.tmp / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.tmp / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The series of an instant query; [] while the server is still starting."""
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5)
        if response.status_code != 200:
            return []
        return list(response.json()["data"]["result"])

    def query_requests(self) -> float:
        """Instant queries this server has answered (its own request counter)."""
        text = httpx.get(f"{self.url}/metrics", timeout=5).text
        return sum_samples(text, "prometheus_http_requests_total", {"handler": "/api/v1/query"})

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
