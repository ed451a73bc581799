"""The DaemonSet agent as a real process on a fake Intel node, against the real API server, with
the credentials a DaemonSet pod has (ServiceAccount joulie-agent, token bound to its pod on the
node, so the confinement policy applies).

It puts an eco NodeTwin in force on the tree's RAPL and cpufreq files, and every way out puts
every file back as it was: SIGTERM, the twin unreadable for SPEC_READ_TIMEOUT, the node leaving
the plan, and a restart within the same boot (the stored baseline is reused, not re-recorded).
SIMULATE_ONLY writes nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.cluster.runner import NAMESPACE, LocalCluster
from joulie.api import keys
from tests.support import builders
from tests.support.builders import nodetwin
from tests.support.processes import RoleProcess
from tests.support.sysfs_trees import intel_xeon_8260
from tests.support.tcp_proxy import BackgroundProxy
from tests.support.tokens import pod_bound_token
from tests.support.waiting import wait_until

pytestmark = pytest.mark.kube

TWINS = f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}"
HARDWARE = f"/apis/{keys.API_VERSION}/{keys.NODE_HARDWARE_PLURAL}"
LIMIT = "/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw"
CAP_W = 120
SPEC_READ_TIMEOUT_S = 6
BOOT_ID = "8a1c2e3f-0000-4000-8000-000000000001"


# --- the node: a fake tree, its files, its baseline ----------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    tree = intel_xeon_8260(tmp_path / "root")
    tree.put("/proc/sys/kernel/random/boot_id", BOOT_ID)
    return tree.root


def snapshot(root: Path) -> dict[str, str]:
    """Every regular file of the tree and its contents (energy counters excluded: nothing
    writes them, and they are what a real node would change under us)."""
    return {
        str(p.relative_to(root)): p.read_text().strip()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.name != "energy_uj"
    }


def read(root: Path, path: str) -> str:
    return (root / path.lstrip("/")).read_text().strip()


def changed(root: Path, before: dict[str, str]) -> dict[str, tuple[str, str]]:
    now = snapshot(root)
    return {k: (v, now[k]) for k, v in before.items() if now.get(k) != v}


# --- the cluster side: a node, its twin, a pod-bound token --------------------------------------


@pytest.fixture
def node(cluster: LocalCluster) -> Iterator[str]:
    name = f"dm-{uuid.uuid4().hex[:6]}"
    with cluster.api() as api:
        api.post("/api/v1/nodes", json=builders.node(name)).raise_for_status()
        cpu = {"packagePowerCapWatts": CAP_W, "governor": {"preset": "efficiency"}}
        api.post(TWINS, json=nodetwin(name, spec={"cpu": cpu})).raise_for_status()
    yield name
    with cluster.api() as api:
        api.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/agent-{name}")
        for path in (f"{TWINS}/{name}", f"{HARDWARE}/{name}", f"/api/v1/nodes/{name}"):
            api.delete(path)


@pytest.fixture
def token(cluster: LocalCluster, node: str) -> str:
    """A token of joulie-agent bound to an agent pod on ``node``, as the DaemonSet's pod has."""
    with cluster.api() as api:
        return pod_bound_token(api, f"agent-{node}", node)


def kubeconfig(cluster: LocalCluster, token: str, path: Path, port: int | None = None) -> Path:
    server = cluster.server if port is None else f"https://127.0.0.1:{port}"
    config = yaml.safe_load(cluster.admin_kubeconfig.read_text())
    for entry in config["clusters"]:
        entry["cluster"]["server"] = server
    config["users"] = [{"name": "agent", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "agent"
    path.write_text(yaml.safe_dump(config))
    return path


def agent(
    cluster: LocalCluster, node: str, config: Path, root: Path, tmp: Path, **extra: str
) -> RoleProcess:
    return RoleProcess(
        cluster,
        "agent",
        tmp / "agent.log",
        {
            "KUBECONFIG": str(config),
            "NODE_NAME": node,
            "HOST_ROOT": str(root),
            "STATE_DIR": str(tmp / "state"),
            "GOVERNOR_WRITES": "true",
            "CONTROL_INTERVAL": "1s",
            "SPEC_READ_TIMEOUT": f"{SPEC_READ_TIMEOUT_S}s",
            "HEARTBEAT_INTERVAL": "10s",
            **extra,
        },
    )


def control(cluster: LocalCluster, node: str) -> dict[str, str]:
    """controlStatus of the node's twin: component -> result."""
    with cluster.api() as api:
        twin = api.get(f"{TWINS}/{node}").json()
    entries = (twin.get("status") or {}).get("controlStatus") or {}
    return {k: v.get("result") for k, v in entries.items()}


def applied(cluster: LocalCluster, node: str, root: Path) -> bool:
    results = control(cluster, node)
    return (
        read(root, LIMIT) == str(CAP_W * 1_000_000)
        and results.get("cpu") == "applied"
        and results.get("cpuGovernor") == "applied"
    )


def agent_writes(cluster: LocalCluster, pid: int) -> int:
    """Successful writes of process ``pid``, from the API server's audit log."""
    count = 0
    for entry in cluster.audit_entries():
        code = (entry.get("responseStatus") or {}).get("code", 0)
        if (
            entry.get("stage") == "ResponseComplete"
            and f"pid {pid})" in entry.get("userAgent", "")
            and entry.get("verb") in ("create", "update", "patch")
            and 200 <= code < 300
        ):
            count += 1
    return count


def set_source(cluster: LocalCluster, node: str, source: str | None) -> None:
    """What the manager writes of a node it plans (None) or no longer plans ("unmanaged")."""
    with cluster.api() as api:
        api.patch(
            f"{TWINS}/{node}/status",
            headers={"Content-Type": "application/merge-patch+json"},
            json={"status": {"powerMeasurement": {"source": source}}},
        ).raise_for_status()


def baseline_file(tmp: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp / "state" / "baseline.json").read_text())
    return data


# --- the tests -----------------------------------------------------------------------------------


def test_sigterm_puts_every_file_back(
    cluster: LocalCluster, node: str, token: str, root: Path, tmp_path: Path
) -> None:
    before = snapshot(root)
    original = read(root, LIMIT)
    process = agent(cluster, node, kubeconfig(cluster, token, tmp_path / "kc"), root, tmp_path)
    try:
        wait_until(lambda: applied(cluster, node, root), 30, "the eco spec in force")
        edits = changed(root, before)
        # Both packages capped, and the efficiency preset on every policy.
        assert sum(k.endswith("constraint_0_power_limit_uw") for k in edits) == 2, edits
        assert any(k.endswith("energy_performance_preference") for k in edits), edits
        recorded = baseline_file(tmp_path)
        assert recorded["bootId"] == BOOT_ID
        assert recorded["settings"][LIMIT] == original
        assert len(recorded["settings"]) >= len(edits)
        with cluster.api() as api:
            hardware = api.get(f"{HARDWARE}/{node}").json()["status"]
        assert hardware["cpu"]["sockets"] == 2
        assert hardware["cpu"]["capRange"]["maxWattsPerSocket"] > CAP_W
        assert hardware["cpu"]["governor"]["baseline"], hardware["cpu"]["governor"]
        # Steady passes read everything again and write nothing.
        assert process.process is not None
        passes = process.metric("joulie_agent_passes_total", result="ok")
        wait_until(
            lambda: process.metric("joulie_agent_passes_total", result="ok") >= passes + 1,
            10,
            "a steady pass",
        )
        writes = agent_writes(cluster, process.process.pid)
        assert writes >= 3  # NodeHardware, its status, the twin's controlStatus
        wait_until(
            lambda: process.metric("joulie_agent_passes_total", result="ok") >= passes + 4,
            10,
            "three more passes",
        )
        assert agent_writes(cluster, process.process.pid) == writes
        assert changed(root, before) == edits
        # Its own power readings, for a scraper (the fake counters stand still: 0 W).
        wait_until(
            lambda: f'joulie_agent_node_power_watts{{node="{node}"}}' in process.metrics(),
            10,
            "the node's power on the metrics endpoint",
        )
    finally:
        assert process.stop() == 0, process.log.read_text()[-4000:]
    assert changed(root, before) == {}
    assert not (tmp_path / "state" / "baseline.json").exists()
    assert control(cluster, node)["cpu"] == "restored"


def test_an_unreadable_spec_restores_the_node_until_it_can_be_read(
    cluster: LocalCluster, node: str, token: str, root: Path, tmp_path: Path
) -> None:
    before = snapshot(root)
    proxy = BackgroundProxy(cluster.ports["apiserver"])
    config = kubeconfig(cluster, token, tmp_path / "kc", proxy.port)
    process = agent(cluster, node, config, root, tmp_path)
    try:
        wait_until(lambda: applied(cluster, node, root), 30, "the eco spec in force")
        proxy.block()
        wait_until(
            lambda: changed(root, before) == {},
            SPEC_READ_TIMEOUT_S + 15,
            "the node's own settings back while the spec cannot be read",
        )
        assert process.metric("joulie_agent_restores_total", reason="stale-spec") == 1
        # Meanwhile the manager stops planning the node. When the agent can read again, it
        # goes by the twin as it is now, not by the spec it last saw.
        set_source(cluster, node, "unmanaged")
        proxy.unblock()
        passes = process.metric("joulie_agent_passes_total", result="ok")
        wait_until(
            lambda: process.metric("joulie_agent_passes_total", result="ok") >= passes + 3,
            30,
            "passes with the API server back",
        )
        assert changed(root, before) == {}
        set_source(cluster, node, None)
        wait_until(
            lambda: read(root, LIMIT) == str(CAP_W * 1_000_000),
            60,
            "the spec back in force once the node is planned again",
        )
    finally:
        code = process.stop()
        proxy.close()
    assert code == 0, process.log.read_text()[-4000:]
    assert changed(root, before) == {}


def test_a_node_leaving_the_plan_gets_its_own_settings_back(
    cluster: LocalCluster, node: str, token: str, root: Path, tmp_path: Path
) -> None:
    before = snapshot(root)
    process = agent(cluster, node, kubeconfig(cluster, token, tmp_path / "kc"), root, tmp_path)
    try:
        wait_until(lambda: applied(cluster, node, root), 30, "the eco spec in force")
        set_source(cluster, node, "unmanaged")
        wait_until(lambda: changed(root, before) == {}, 30, "the node's own settings back")
        wait_until(lambda: control(cluster, node).get("cpu") == "restored", 30, "restored reported")
        assert process.metric("joulie_agent_restores_total", reason="unplanned") >= 1
        # Nothing is written again while the node stays out of the plan.
        assert changed(root, before) == {}
    finally:
        assert process.stop() == 0, process.log.read_text()[-4000:]


def test_a_restart_in_the_same_boot_reuses_the_stored_baseline(
    cluster: LocalCluster, node: str, token: str, root: Path, tmp_path: Path
) -> None:
    before = snapshot(root)
    original = read(root, LIMIT)
    config = kubeconfig(cluster, token, tmp_path / "kc")
    first = agent(cluster, node, config, root, tmp_path)
    try:
        wait_until(lambda: applied(cluster, node, root), 30, "the eco spec in force")
        recorded = baseline_file(tmp_path)
    finally:
        assert first.process is not None
        first.process.kill()  # no chance to restore: the caps stay in force
        first.process.wait(10)
    assert read(root, LIMIT) == str(CAP_W * 1_000_000)
    second = agent(cluster, node, config, root, tmp_path)
    try:
        wait_until(second.ready, 30, "the restarted agent's first pass")
        # The agent's own values are in force, yet the baseline still holds the node's.
        assert baseline_file(tmp_path) == recorded
        assert recorded["settings"][LIMIT] == original
    finally:
        assert second.stop() == 0, second.log.read_text()[-4000:]
    assert changed(root, before) == {}


def test_simulate_only_writes_nothing(
    cluster: LocalCluster, node: str, token: str, root: Path, tmp_path: Path
) -> None:
    before = snapshot(root)
    config = kubeconfig(cluster, token, tmp_path / "kc")
    process = agent(cluster, node, config, root, tmp_path, SIMULATE_ONLY="true")
    try:
        wait_until(
            lambda: control(cluster, node).get("cpu") == "not-applied", 30, "the dry run's report"
        )
        assert changed(root, before) == {}
    finally:
        assert process.stop() == 0, process.log.read_text()[-4000:]
    assert changed(root, before) == {}
    assert not (tmp_path / "state" / "baseline.json").exists()
