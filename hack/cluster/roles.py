"""Joulie roles as real processes on the local cluster, each with the credentials of its own
ServiceAccount (``joulie-<role>``), and the settings that wire them together on KWOK nodes: the
simulator stands in for the nodes' hardware, the pool agent drives it, the manager reads its
power, and the extender serves kube-scheduler. The demo and the e2e tests start the same stack.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from hack.cluster.runner import LocalCluster, free_port

JOULIE = str(Path(sys.executable).parent / "joulie")


class RoleDied(RuntimeError):
    """The role's process exited; the message ends with its log's tail."""


class RoleProcess:
    """``joulie --role=<role>`` with the credentials of ServiceAccount joulie-<account> (the
    role's own unless ``account`` says otherwise: the pool agent has an account of its own, since
    joulie-agent is confined to one node by admission), JSON logs in ``log``, and its health and
    metrics endpoint on a free port.

    ``own_session`` puts it in a session of its own, so a Ctrl-C at the terminal reaches only
    the parent, which then stops the roles in order instead of all at once."""

    def __init__(
        self,
        cluster: LocalCluster,
        role: str,
        log: Path,
        settings: dict[str, str],
        *,
        account: str | None = None,
        own_session: bool = False,
    ) -> None:
        self.role = role
        self.log = log
        self.metrics_port = free_port()
        self.own_session = own_session
        self.env = {
            **os.environ,
            "KUBECONFIG": str(cluster.role_kubeconfig(account or role)),
            "METRICS_ADDR": f"127.0.0.1:{self.metrics_port}",
            "LOG_FORMAT": "json",
            **settings,
        }
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with self.log.open("a") as out:
            self.process = subprocess.Popen(
                [JOULIE, f"--role={self.role}"],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=self.own_session,
            )

    def alive(self) -> None:
        """RoleDied when the process has exited."""
        if self.process is None or self.process.poll() is not None:
            raise RoleDied(f"{self.role} exited:\n{self.log.read_text()[-4000:]}")

    def ready(self) -> bool:
        self.alive()
        response = httpx.get(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=5)
        return response.status_code == 200

    def metrics(self) -> str:
        self.alive()
        response = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5)
        response.raise_for_status()
        return response.text

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples called ``name`` whose labels include ``labels``."""
        return sum_samples(self.metrics(), name, labels)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (a graceful stop: the roles restore and hand back what they hold), then wait;
        SIGKILL only if it has not finished within ``timeout``. The exit status."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)


def sum_samples(text: str, name: str, labels: dict[str, str]) -> float:
    """The sum of the samples called ``name`` in a Prometheus text exposition whose labels
    include ``labels``."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                total += sample.value
    return total


# --- the settings that wire the stack together -------------------------------------------------


def simulator_settings(addr: str, selector: str, *, time_scale: float = 1.0) -> dict[str, str]:
    return {
        "SIM_ADDR": addr,
        "SIM_NODE_SELECTOR": selector,
        "SIM_TIME_SCALE": f"{time_scale:g}",
        # Power follows a change of load within a few simulated seconds, so a short run shows it.
        "SIM_POWER_SETTLE": "2s",
    }


POOL_AGENT_ACCOUNT = "agent-pool"


def pool_agent_settings(
    selector: str, simulator_url: str, *, control_interval: str = "2s"
) -> dict[str, str]:
    """The agent in pool mode for the simulator's nodes: telemetry and control over HTTP (run it
    with ``account=POOL_AGENT_ACCOUNT``)."""
    return {
        "AGENT_MODE": "pool",
        "POOL_NODE_SELECTOR": selector,
        "GOVERNOR_WRITES": "true",
        "CONTROL_INTERVAL": control_interval,
        **simulator_telemetry_settings(simulator_url),
    }


def simulator_telemetry_settings(simulator_url: str) -> dict[str, str]:
    """The agent's CPU and GPU telemetry and control, both over HTTP to the simulator."""
    settings: dict[str, str] = {}
    for part in ("CPU", "GPU"):
        settings |= {
            f"TELEMETRY_{part}_SOURCE": "http",
            f"TELEMETRY_{part}_CONTROL": "http",
            f"TELEMETRY_{part}_HTTP_ENDPOINT": f"{simulator_url}/telemetry/{{node}}",
            f"TELEMETRY_{part}_CONTROL_HTTP_ENDPOINT": f"{simulator_url}/control/{{node}}",
        }
    return settings


def manager_settings(
    selector: str,
    simulator_url: str,
    *,
    namespace: str = "joulie-system",
    reconcile_interval: str = "2s",
    policy: dict[str, str] | None = None,
) -> dict[str, str]:
    """The manager reading each node's power from the simulator (NODE_POWER_SOURCE=http)."""
    return {
        "RECONCILE_INTERVAL": reconcile_interval,
        "NODE_SELECTOR": selector,
        "POD_NAMESPACE": namespace,
        "NODE_POWER_SOURCE": "http",
        "NODE_POWER_HTTP_ENDPOINT": f"{simulator_url}/telemetry/{{node}}",
        **(policy or {"POLICY_TYPE": "static_partition", "STATIC_HP_FRAC": "0.5"}),
    }


def extender_settings(addr: str, *, namespace: str = "joulie-system") -> dict[str, str]:
    return {"EXTENDER_ADDR": addr, "POD_NAMESPACE": namespace}
