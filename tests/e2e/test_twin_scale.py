"""The twin at 5,000 nodes, on a control plane of its own: with NODE_POWER_SOURCE=prometheus a
reconcile sends ONE query to a real Prometheus whatever the node count, and writes the status of
exactly the nodes whose figures changed.

The power figures come from a small exporter in this test (a scrape target serving one gauge per
node), so the test decides which nodes change; Prometheus, the API server and the manager process
are the real ones.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from hack.cluster.nodes import node_manifests
from hack.cluster.runner import LocalCluster, binaries_built
from joulie.api import keys
from joulie.api.inventory import load_inventory
from tests.support.processes import PrometheusServer, RoleProcess
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

INVENTORY = Path(__file__).resolve().parents[1] / "data/inventories/02-cluster-nodes-5k.yaml"
IDLE_W = 400.0
CHANGED = 25
INTERVAL_S = 10


class Exporter:
    """Serves ``test_node_power_watts{node=...}`` for every node, values set by the test."""

    def __init__(self, nodes: list[str]) -> None:
        self.watts = dict.fromkeys(nodes, IDLE_W)
        self._lock = threading.Lock()
        self._text = b""
        self._render()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with exporter._lock:
                    body = exporter._text
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _render(self) -> None:
        lines = ["# TYPE test_node_power_watts gauge"]
        lines += [f'test_node_power_watts{{node="{n}"}} {w}' for n, w in self.watts.items()]
        with self._lock:
            self._text = ("\n".join(lines) + "\n").encode()

    def set(self, changes: dict[str, float]) -> None:
        self.watts.update(changes)
        self._render()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def scale_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """etcd and an API server only: nothing else needs to run for 5,000 node objects."""
    if not binaries_built():
        pytest.skip("control-plane binaries are missing: run hack/build-binaries.sh")
    local = LocalCluster(
        work_dir=tmp_path_factory.mktemp("scale-cluster"),
        controller_manager=False,
        scheduler=False,
        kwok=False,
    )
    local.up()
    try:
        yield local
    finally:
        local.down()


def twins(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    with cluster.api() as api:
        token = ""
        while True:
            params = {"limit": "1000", **({"continue": token} if token else {})}
            page = api.get(f"/apis/{keys.API_VERSION}/{keys.NODE_TWIN_PLURAL}", params=params)
            page.raise_for_status()
            body = page.json()
            found.update((t["metadata"]["name"], t) for t in body["items"])
            token = body["metadata"].get("continue", "")
            if not token:
                return found


def power(twin: dict[str, Any]) -> dict[str, Any]:
    return dict((twin.get("status") or {}).get("powerMeasurement") or {})


def test_one_query_per_reconcile_and_writes_only_for_changed_nodes(
    scale_cluster: LocalCluster, tmp_path: Path
) -> None:
    nodes = node_manifests(load_inventory(INVENTORY))
    assert len(nodes) == 5000
    names = [n["metadata"]["name"] for n in nodes]
    started = time.monotonic()
    scale_cluster.create_nodes(nodes)
    print(f"[scale] 5,000 nodes created in {time.monotonic() - started:.1f}s")

    exporter = Exporter(names)
    prometheus = PrometheusServer(tmp_path, [exporter.address])
    manager: RoleProcess | None = None
    try:
        wait_until(
            lambda: len(prometheus.query("test_node_power_watts")) == 5000,
            60,
            "Prometheus to scrape 5,000 series",
        )
        manager = RoleProcess(
            scale_cluster,
            "manager",
            tmp_path / "manager.log",
            {
                "RECONCILE_INTERVAL": f"{INTERVAL_S}s",
                "POD_NAMESPACE": "joulie-system",
                "NODE_POWER_SOURCE": "prometheus",
                "NODE_POWER_PROMETHEUS_ADDRESS": prometheus.url,
                "NODE_POWER_PROMETHEUS_QUERY": "test_node_power_watts",
            },
        )
        started = time.monotonic()

        def converged() -> dict[str, dict[str, Any]] | None:
            manager.alive()
            current = twins(scale_cluster)
            if len(current) < 5000:
                return None
            done = all(power(t).get("measuredNodePowerW") == IDLE_W for t in current.values())
            return current if done else None

        wait_until(converged, 600, "5,000 twins measured", interval=2)
        print(f"[scale] first pass: all twins measured in {time.monotonic() - started:.1f}s")

        # A steady reconcile first: its counters are the baseline.
        def reconciles() -> float:
            return manager.metric("joulie_manager_reconcile_duration_seconds_count")

        def status_writes() -> float:
            return manager.metric("joulie_kube_requests_total", resource="nodetwins/status")

        base = reconciles()
        wait_until(lambda: reconciles() > base, 3 * INTERVAL_S, "a steady reconcile")
        before = twins(scale_cluster)
        base_reconciles, base_writes = reconciles(), status_writes()
        base_queries = prometheus.query_requests()
        base_reads = manager.metric("joulie_power_source_requests_total", source="prometheus")

        # Some nodes start drawing more; the rest stay exactly as they were.
        changed = dict.fromkeys(names[:: len(names) // CHANGED][:CHANGED], IDLE_W + 500)
        exporter.set(changed)

        def changed_written() -> dict[str, dict[str, Any]] | None:
            current = twins(scale_cluster)
            ok = all(power(current[n]).get("measuredNodePowerW") == w for n, w in changed.items())
            return current if ok else None

        after = wait_until(changed_written, 4 * INTERVAL_S, "the changed nodes' twins", interval=1)
        # Let one more reconcile finish so that no write is still in flight.
        mark = reconciles()
        wait_until(lambda: reconciles() > mark, 3 * INTERVAL_S, "one more reconcile")
        after = twins(scale_cluster)

        reconciles_delta = reconciles() - base_reconciles
        queries_delta = prometheus.query_requests() - base_queries
        reads_delta = (
            manager.metric("joulie_power_source_requests_total", source="prometheus") - base_reads
        )
        rewritten = {
            name
            for name, twin in after.items()
            if twin["metadata"]["resourceVersion"] != before[name]["metadata"]["resourceVersion"]
        }
        writes_delta = status_writes() - base_writes
        print(
            f"[scale] {reconciles_delta:.0f} reconciles, {queries_delta:.0f} Prometheus queries, "
            f"{writes_delta:.0f} status writes for {len(changed)} changed nodes"
        )
        # One query per reconcile (every reconcile here is a periodic one), never one per node.
        assert reconciles_delta >= 2
        assert reads_delta == reconciles_delta
        assert queries_delta == reads_delta
        # Only the changed nodes' twins were written (their power, then their trend).
        assert rewritten == set(changed)
        assert len(changed) <= writes_delta <= len(changed) * reconciles_delta
        manager.alive()
    finally:
        if manager is not None:
            assert manager.stop() == 0, manager.log.read_text()[-4000:]
        prometheus.stop()
        exporter.stop()
