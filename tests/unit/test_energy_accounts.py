"""The manager's energy accounts: measured node energy booked per namespace and workload class,
the rest as overhead, continued across a restart from the stored totals."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from joulie.api import keys
from joulie.core.pod_power import NodePowerProfile
from joulie.kube.client import ApiError, KubeClient
from joulie.kube.writes import Writer
from joulie.manager import energy_store
from joulie.manager.cache import ClusterCache
from joulie.manager.energy import EnergyAccountant, EnergyCounters, pod_uses
from joulie.manager.power import NodePower, PowerReading
from tests.support import builders

INTERVAL = 60.0
NAMESPACE = "joulie-system"


class StoringApi:
    """Keeps what is applied and answers reads of it, as the API server would."""

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}
        self.writes = 0

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if method == "GET":
            if path not in self.objects:
                raise ApiError(404, "NotFound", f"{path} not found")
            return self.objects[path]
        assert method == "PATCH", method
        self.writes += 1
        self.objects[path] = kwargs["body"]
        return kwargs["body"]


def cache_with(pods: list[tuple[str, str, dict[str, str], str | None]]) -> ClusterCache:
    """Node n1 (4 CPUs, 8 GiB) with ``pods``: (namespace, name, requests, workload class)."""
    cache = ClusterCache(cast(KubeClient, StoringApi()), "joulie-manager", lambda: None)
    node = builders.node("n1", rv=1, allocatable={"cpu": "4", "memory": "8Gi"})
    cache.nodes._apply({"type": "ADDED", "object": node})
    for rv, (namespace, name, requests, workload_class) in enumerate(pods, start=2):
        annotations = {keys.WORKLOAD_CLASS_ANNOTATION: workload_class} if workload_class else None
        pod = builders.pod(
            name,
            namespace=namespace,
            node_name="n1",
            phase="Running",
            rv=rv,
            uid=f"uid-{name}",
            annotations=annotations,
            containers=[builders.container(requests)],
        )
        cache.pods._apply({"type": "ADDED", "object": pod})
    return cache


def reading(at: float, watts: float | None) -> PowerReading:
    return PowerReading(at, {"n1": NodePower(watts, "http")})


class Accounts:
    def __init__(
        self, cache: ClusterCache, api: StoringApi | None = None, max_accounts: int = 500
    ) -> None:
        self.api = api or StoringApi()
        self.registry = CollectorRegistry()
        self.now = 0.0
        self.accountant = EnergyAccountant(
            cache,
            Writer(cast(KubeClient, self.api), "joulie-manager"),
            NAMESPACE,
            INTERVAL,
            max_accounts,
            EnergyCounters.registered(self.registry),
            clock=lambda: self.now,
        )
        self.accountant.new_term()

    def record(self, at: float, watts: float | None) -> None:
        asyncio.run(self.accountant.record(reading(at, watts)))

    def used(self, namespace: str, workload_class: str) -> float:
        value = self.registry.get_sample_value(
            "joulie_workload_energy_joules_total",
            {"namespace": namespace, "class": workload_class},
        )
        return value or 0.0

    @property
    def overhead(self) -> float:
        value = self.registry.get_sample_value("joulie_node_overhead_energy_joules_total")
        return value or 0.0


PODS = [
    ("a", "fast", {"cpu": "1", "memory": "2Gi"}, "performance"),  # a quarter of the node
    ("b", "plain", {"cpu": "2", "memory": "4Gi"}, None),  # half of it
    ("b", "odd", {"cpu": "500m", "memory": "1Gi"}, "bogus"),  # an eighth; not a class
]


def test_two_readings_book_the_trapezoid_to_the_pods_accounts_and_overhead() -> None:
    accounts = Accounts(cache_with(PODS))
    accounts.record(1000.0, 100.0)
    accounts.record(1000.0 + INTERVAL, 200.0)
    accounts.record(1000.0 + INTERVAL, 200.0)  # the reader's cached reading: counted once
    measured = (100.0 + 200.0) / 2 * INTERVAL
    # Idle draw: the lowest reading (100 W), split by the requests' shares; no NodeHardware, so
    # no modelled marginal power: the dynamic part is overhead.
    idle = 100.0 * INTERVAL
    assert accounts.used("a", "performance") == pytest.approx(idle / 4)
    assert accounts.used("b", "standard") == pytest.approx(idle / 2 + idle / 8)
    assert accounts.overhead == pytest.approx(measured - idle * 7 / 8)
    total = accounts.used("a", "performance") + accounts.used("b", "standard") + accounts.overhead
    assert total == pytest.approx(measured)
    stored = accounts.api.objects[energy_store.path(NAMESPACE)]["data"]
    assert json.loads(stored["accounts"]) == pytest.approx(
        {"a/performance": idle / 4, "b/standard": idle * 5 / 8}
    )
    assert float(stored["through"]) == 1000.0 + INTERVAL


def test_the_modelled_marginal_power_of_a_pod_comes_from_the_node_profile() -> None:
    profile = NodePowerProfile(cores=4, cpu_max_watts=200.0, has_gpu=False, gpu_max_watts=0.0)
    cache = cache_with(PODS)
    pods = [p for p in cache.workload_pods("n1") if p.node_name == "n1"]
    uses, has_gpus = pod_uses(cache.nodes.get("n1"), pods, profile)
    by_account = {u.account: u for u in uses if u.account == "a/performance"}
    assert not has_gpus
    assert by_account["a/performance"].cpu_share == pytest.approx(0.25)
    assert by_account["a/performance"].marginal_w > 0


def test_a_gap_past_three_intervals_is_not_counted() -> None:
    accounts = Accounts(cache_with(PODS))
    accounts.record(1000.0, 100.0)
    later = 1000.0 + 3 * INTERVAL + 1
    accounts.record(later, 100.0)
    assert accounts.overhead == 0.0
    assert accounts.used("b", "standard") == 0.0
    accounts.record(later + INTERVAL, 100.0)  # the reading after the gap starts afresh
    assert accounts.used("b", "standard") == pytest.approx(100.0 * INTERVAL * 5 / 8)
    # A failed read is spanned by the next good one while within the limit.
    accounts.record(later + 2 * INTERVAL, None)
    accounts.record(later + 3 * INTERVAL, 100.0)
    assert accounts.used("b", "standard") == pytest.approx(3 * 100.0 * INTERVAL * 5 / 8)


def test_past_the_cap_new_namespaces_fold_into_other() -> None:
    pods = [
        ("a", "p1", {"cpu": "1", "memory": "2Gi"}, None),
        ("b", "p2", {"cpu": "1", "memory": "2Gi"}, None),
        ("c", "p3", {"cpu": "1", "memory": "2Gi"}, "performance"),
    ]
    accounts = Accounts(cache_with(pods), max_accounts=2)
    accounts.record(1000.0, 100.0)
    accounts.record(1000.0 + INTERVAL, 100.0)
    share = 100.0 * INTERVAL / 4
    assert accounts.used("a", "standard") == pytest.approx(share)
    assert accounts.used("b", "standard") == pytest.approx(share)
    assert accounts.used("c", "performance") == 0.0
    assert accounts.used("other", "performance") == pytest.approx(share)


def test_a_restarted_accountant_continues_from_the_stored_totals() -> None:
    first = Accounts(cache_with(PODS))
    first.record(1000.0, 100.0)
    first.record(1000.0 + INTERVAL, 100.0)
    before = first.used("b", "standard")
    overhead = first.overhead
    assert before > 0
    assert first.api.writes == 1

    second = Accounts(cache_with(PODS), api=first.api)  # a new process: fresh counters
    second.record(1000.0 + INTERVAL, 100.0)  # counted by the first: not again
    assert second.used("b", "standard") == pytest.approx(before)
    assert second.overhead == pytest.approx(overhead)
    second.record(1000.0 + 2 * INTERVAL, 100.0)  # its own first reading: no interval yet
    second.record(1000.0 + 3 * INTERVAL, 100.0)
    assert second.used("b", "standard") == pytest.approx(2 * before)
    # Written at most once a minute: the clock has not moved since its first write.
    assert first.api.writes == 2
    second.now += 60.0
    second.record(1000.0 + 4 * INTERVAL, 100.0)
    assert first.api.writes == 3
    stored = energy_store.parse(first.api.objects[energy_store.path(NAMESPACE)]["data"])
    assert stored.accounts["b/standard"] == pytest.approx(3 * before)


def test_a_process_leading_again_does_not_count_its_own_figures_twice() -> None:
    accounts = Accounts(cache_with(PODS))
    accounts.record(1000.0, 100.0)
    accounts.record(1000.0 + INTERVAL, 100.0)
    before = accounts.used("b", "standard")
    accounts.accountant.new_term()
    accounts.record(1000.0 + 2 * INTERVAL, 100.0)  # a new term's first reading
    assert accounts.used("b", "standard") == pytest.approx(before)


def test_an_unusable_configmap_is_refused_with_the_reason() -> None:
    with pytest.raises(energy_store.UnusableStore, match="not a finite number"):
        energy_store.parse({"accounts": json.dumps({"a/standard": -1})})
    with pytest.raises(energy_store.UnusableStore, match="<namespace>/<class>"):
        energy_store.parse({"accounts": json.dumps({"nobody": 1})})
    assert energy_store.parse({}) == energy_store.StoredTotals()
