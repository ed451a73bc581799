"""Leadership fences the manager's writes, checked against the API server's audit log.

Two managers run against nodes whose power changes every reconcile, so the leader writes without
pause. When the leader is told to stop (a rolling update) or is cut off from the API server past
its renew deadline, no write of it may be accepted after the first write of its successor; the
audit log says, for every accepted write, which process sent it (the user agent names the pid) and
when it was answered.
"""

from __future__ import annotations

import json
import random
import signal
import threading
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.cluster.runner import LocalCluster
from joulie.api.inventory import load_inventory
from tests.e2e.test_manager import INVENTORY
from tests.e2e.test_manager_handover import E2E_LABEL, HandoverManager
from tests.support.builders import kwok_node
from tests.support.tcp_proxy import BackgroundProxy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

VALUE = "fencing"
NODES = 120


class _Noisy(BaseHTTPRequestHandler):
    """A telemetry endpoint whose every answer differs: each reconcile has writes to make.

    ``read`` is set each time a whole reconcile's reading (one request per node) has been
    answered: the manager is then just starting to write, which is when a test strikes."""

    read = threading.Event()
    _answered = 0
    _lock = threading.Lock()

    def do_GET(self) -> None:
        with _Noisy._lock:
            _Noisy._answered += 1
            if _Noisy._answered % NODES == 0:
                _Noisy.read.set()
        body = json.dumps({"packagePowerWatts": random.uniform(100, 900)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture(scope="module")
def telemetry() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Noisy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/nodes/{{node}}"
    server.shutdown()


@pytest.fixture(scope="module")
def nodes(cluster: LocalCluster) -> Iterator[set[str]]:
    groups = load_inventory(INVENTORY).nodes
    manifests = [
        kwok_node(f"fen-{i}", groups[i % len(groups)], labels={E2E_LABEL: VALUE})
        for i in range(NODES)
    ]
    cluster.create_ready_nodes(manifests)
    names = {n["metadata"]["name"] for n in manifests}
    yield names
    with cluster.api() as api:
        for name in names:
            api.delete(f"/api/v1/nodes/{name}")


def accepted_writes(
    cluster: LocalCluster, pid: int, resources: tuple[str, ...] = ("nodetwins", "nodes")
) -> list[datetime]:
    """When the API server answered each successful write of process ``pid`` to a NodeTwin or a
    Node (its label), or to ``resources``, from the audit log."""
    found = []
    for entry in cluster.audit_entries():
        ref = entry.get("objectRef") or {}
        code = (entry.get("responseStatus") or {}).get("code", 0)
        if (
            entry.get("stage") == "ResponseComplete"
            and f"pid {pid})" in entry.get("userAgent", "")
            and ref.get("resource") in resources
            and 200 <= code < 300
        ):
            found.append(datetime.fromisoformat(entry["stageTimestamp"]))
    return sorted(found)


def start_pair(
    cluster: LocalCluster, tmp: Path, telemetry: str, **leader_env: str
) -> tuple[HandoverManager, HandoverManager]:
    """The first manager leads and writes steadily before the second one starts to follow."""
    settings = {
        "NODE_SELECTOR": f"{E2E_LABEL}={VALUE}",
        "RECONCILE_INTERVAL": "1s",
        "NODE_POWER_SOURCE": "http",
        "NODE_POWER_HTTP_ENDPOINT": telemetry,
        "POLICY_TYPE": "static_partition",
    }
    leader = HandoverManager(cluster, tmp, "leader", **settings, **leader_env)
    wait_until(leader.is_leader, 30, "the first manager to lead")
    follower = HandoverManager(cluster, tmp, "follower", **settings)
    wait_until(lambda: follower.followed_leader() is not None, 30, "the second to follow")
    written = wait_until(lambda: accepted_writes(cluster, leader.process.pid), 30, "writes")
    wait_until(
        lambda: len(accepted_writes(cluster, leader.process.pid)) > len(written) + NODES,
        30,
        "a steady stream of writes",
    )
    return leader, follower


def mid_reconcile(
    cluster: LocalCluster, leader: HandoverManager, sig: signal.Signals | None
) -> None:
    """Return (after sending ``sig``, if any) once the leader has its reading and its first
    writes reach the audit log (a few entries: a Lease renewal alone is one)."""
    _Noisy.read.clear()
    assert _Noisy.read.wait(30), "no reconcile read the telemetry"
    size = cluster.audit_log.stat().st_size
    wait_until(lambda: cluster.audit_log.stat().st_size > size + 4096, 30, "writes", interval=0.005)
    if sig is not None:
        leader.process.send_signal(sig)


def test_sigterm_stops_the_writes_before_the_successor_starts(
    cluster: LocalCluster, nodes: set[str], telemetry: str, tmp_path: Path
) -> None:
    leader, follower = start_pair(cluster, tmp_path, telemetry)
    try:
        before = len(accepted_writes(cluster, leader.process.pid))
        mid_reconcile(cluster, leader, signal.SIGTERM)
        assert leader.process.wait(timeout=30) == 0, leader.log.read_text()[-4000:]
        wait_until(follower.is_leader, 20, "the follower to take over")
        theirs = wait_until(
            lambda: accepted_writes(cluster, follower.process.pid), 30, "the successor's writes"
        )
        ours = accepted_writes(cluster, leader.process.pid)
        released = accepted_writes(cluster, leader.process.pid, ("leases",))[-1]
        print(
            f"\nold leader: {len(ours) - before} writes after the count before SIGTERM; "
            f"last at {ours[-1].isoformat()}, Lease released at {released.isoformat()}, "
            f"successor's first write at {theirs[0].isoformat()}"
        )
        # Its work stopped before it handed the Lease back, and so before the successor began.
        assert ours[-1] < released < theirs[0]
        log = leader.log.read_text()
        assert "released lease" in log
        assert "Unclosed" not in log
    finally:
        leader.stop_quietly()
        follower.stop_quietly()


def through(proxy: BackgroundProxy, kubeconfig: Path, tmp: Path) -> Path:
    """A copy of ``kubeconfig`` that reaches the API server through ``proxy``."""
    config = yaml.safe_load(kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    path = tmp / "kubeconfig-proxied"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_leader_cut_off_stops_writing_before_its_lease_expires(
    cluster: LocalCluster, nodes: set[str], telemetry: str, tmp_path: Path
) -> None:
    """The leader reaches the API server through a relay, which is cut mid-reconcile: past its
    renew deadline it gives up leadership, before its Lease expires and the follower takes
    over; when the relay comes back it writes nothing."""
    proxy = BackgroundProxy(cluster.ports["apiserver"])
    kubeconfig = through(proxy, cluster.role_kubeconfig("manager"), tmp_path)
    leader, follower = start_pair(cluster, tmp_path, telemetry, KUBECONFIG=str(kubeconfig))
    try:
        mid_reconcile(cluster, leader, None)
        proxy.block()
        wait_until(follower.is_leader, 40, "the follower to take over from a cut-off leader")
        theirs = wait_until(
            lambda: accepted_writes(cluster, follower.process.pid), 30, "the successor's writes"
        )
        log = leader.log.read_text()
        # It stepped down on its own deadline, not because it saw a new holder.
        assert "renew deadline exceeded" in log, log[-4000:]
        proxy.unblock()
        wait_until(lambda: leader.followed_leader() is not None, 30, "the old leader to follow")
        follower.wait_reconciles(3)
        late = [t for t in accepted_writes(cluster, leader.process.pid) if t >= theirs[0]]
        assert late == [], f"{len(late)} writes of the old leader after its successor's first"
        leader.stop()
        assert leader.process.returncode == 0, leader.log.read_text()[-4000:]
    finally:
        proxy.unblock()
        leader.stop_quietly()
        follower.stop_quietly()
        proxy.close()
