"""The manager's energy accounts: measured node energy booked per namespace and workload class,
the rest as overhead, continued across a restart from the stored totals."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from joulie.api import keys
from joulie.core.energy_counterfactual import idle_power
from joulie.core.pod_power import NodePowerProfile
from joulie.core.power_model import Controls, NodePowerSpec
from joulie.hardware.catalog import Catalog
from joulie.hardware.power_spec import power_spec
from joulie.hardware.recognition import HardwareView
from joulie.kube.client import ApiError, KubeClient
from joulie.kube.writes import Writer
from joulie.manager import energy_store
from joulie.manager.cache import ClusterCache
from joulie.manager.energy import EnergyAccountant, EnergyCounters
from joulie.manager.energy_groups import GroupAccounts, GroupCounters
from joulie.manager.energy_plans import NodeModel, pod_uses
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


def cache_with(
    pods: list[tuple[str, str, dict[str, str], str | None]],
    allocatable: dict[str, str] | None = None,
    groups: dict[str, str] | None = None,
) -> ClusterCache:
    """Node n1 (4 CPUs, 8 GiB unless ``allocatable`` says otherwise) with ``pods``: (namespace,
    name, requests, workload class); ``groups`` names the PodGroup of a pod by its name."""
    cache = ClusterCache(cast(KubeClient, StoringApi()), "joulie-manager", lambda: None)
    offered = allocatable or {"cpu": "4", "memory": "8Gi"}
    node = builders.node("n1", rv=1, allocatable=offered)
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
            spec={"schedulingGroup": {"podGroupName": groups[name]}}
            if groups and name in groups
            else None,
        )
        cache.pods._apply({"type": "ADDED", "object": pod})
    return cache


def reading(at: float, watts: float | None) -> PowerReading:
    return PowerReading(at, {"n1": NodePower(watts, "http")})


class Accounts:
    def __init__(
        self,
        cache: ClusterCache,
        api: StoringApi | None = None,
        max_accounts: int = 500,
        models: Callable[[str], NodeModel | None] = lambda _: None,
        max_groups: int = 200,
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
            models=models,
            groups=GroupAccounts(max_groups, GroupCounters.registered(self.registry)),
        )
        self.accountant.new_term()

    def record(self, at: float, watts: float | None) -> None:
        asyncio.run(self.accountant.record(reading(at, watts)))

    def used(self, namespace: str, workload_class: str, kind: str = "") -> float:
        value = self.registry.get_sample_value(
            f"joulie_workload_energy_{kind}joules_total",
            {"namespace": namespace, "class": workload_class},
        )
        return value or 0.0

    def group(self, namespace: str, podgroup: str) -> float | None:
        return self.registry.get_sample_value(
            "joulie_podgroup_energy_joules_total", {"namespace": namespace, "podgroup": podgroup}
        )

    def saved(self, namespace: str, workload_class: str) -> float:
        return self.used(namespace, workload_class, "saved_")

    def lost(self, namespace: str, workload_class: str) -> float:
        return self.used(namespace, workload_class, "lost_")

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


# A performance pod: the extender's estimate has it keep its board 0.85 busy.
GPU_POD: list[tuple[str, str, dict[str, str], str | None]] = [
    ("ml", "train", {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}, "performance")
]
GPU_NODE = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "1"}


def one_a40() -> NodePowerSpec:
    view = HardwareView("AMD_EPYC_9654", "NVIDIA_A40", 1, "test", None, sockets=1)
    return power_spec(view, Catalog.load())[0]


def gpu_accounts(controls: Controls, api: StoringApi | None = None) -> Accounts:
    spec = one_a40()
    return Accounts(cache_with(GPU_POD, GPU_NODE), api=api, models=lambda _: (spec, controls))


def test_a_pod_on_a_board_capped_near_its_energy_optimal_point_is_credited_a_saving() -> None:
    # Zeus (NSDI '23): A40 training capped at 200 W of 300 W used 0.79 of the uncapped energy.
    # A board 0.85 busy gains less from the cap, and the pod's share of the node's idle draw is
    # held a little longer: a saving of a tenth or so of its energy, never all of it.
    accounts = gpu_accounts(Controls(gpu_cap_w=200.0))
    accounts.record(1000.0, 150.0)
    accounts.record(1000.0 + INTERVAL, 350.0)
    used = accounts.used("ml", "performance")
    assert used > 0
    assert 0.05 * used < accounts.saved("ml", "performance") < 0.4 * used
    assert accounts.lost("ml", "performance") == 0.0
    stored = accounts.api.objects[energy_store.path(NAMESPACE)]["data"]
    assert json.loads(stored["saved"]) == pytest.approx(
        {"ml/performance": accounts.saved("ml", "performance")}
    )


def test_a_cap_that_costs_energy_is_counted_as_lost_and_no_controls_save_nothing() -> None:
    deep = gpu_accounts(Controls(gpu_cap_w=100.0))  # Zeus: 1.59 x the energy at 100 W
    plain = gpu_accounts(Controls())
    for accounts in (deep, plain):
        accounts.record(1000.0, 150.0)
        accounts.record(1000.0 + INTERVAL, 350.0)
    assert deep.lost("ml", "performance") > 0.2 * deep.used("ml", "performance")
    assert deep.saved("ml", "performance") == 0.0
    assert plain.saved("ml", "performance") == plain.lost("ml", "performance") == 0.0


def test_the_saving_continues_from_the_stored_totals_after_a_restart() -> None:
    first = gpu_accounts(Controls(gpu_cap_w=200.0))
    first.record(1000.0, 150.0)
    first.record(1000.0 + INTERVAL, 350.0)
    saved = first.saved("ml", "performance")
    second = gpu_accounts(Controls(gpu_cap_w=200.0), api=first.api)
    second.record(1000.0 + INTERVAL, 350.0)  # counted by the first: not again
    assert second.saved("ml", "performance") == pytest.approx(saved)
    second.record(1000.0 + 2 * INTERVAL, 150.0)
    second.record(1000.0 + 3 * INTERVAL, 350.0)
    assert second.saved("ml", "performance") == pytest.approx(2 * saved)


GANG: list[tuple[str, str, dict[str, str], str | None]] = [
    ("ml", "w0", {"cpu": "1", "memory": "2Gi"}, None),
    ("ml", "w1", {"cpu": "1", "memory": "2Gi"}, None),
    ("ml", "solo", {"cpu": "1", "memory": "2Gi"}, None),
]


def test_the_pods_of_a_podgroup_are_booked_to_it_as_well_as_to_their_class() -> None:
    accounts = Accounts(cache_with(GANG, groups={"w0": "train", "w1": "train"}))
    accounts.record(1000.0, 100.0)
    accounts.record(1000.0 + INTERVAL, 100.0)
    quarter = 100.0 * INTERVAL / 4
    assert accounts.used("ml", "standard") == pytest.approx(3 * quarter)
    assert accounts.group("ml", "train") == pytest.approx(2 * quarter)
    stored = energy_store.parse(accounts.api.objects[energy_store.path(NAMESPACE)]["data"])
    ((name, (used, saved, lost)),) = stored.groups
    assert name == "ml/train"
    assert (used, saved, lost) == pytest.approx((2 * quarter, 0.0, 0.0))


def test_past_the_bound_the_group_booked_longest_ago_goes_with_its_series() -> None:
    cache = cache_with(GANG, groups={"w0": "old"})
    accounts = Accounts(cache, max_groups=1)
    accounts.record(1000.0, 100.0)
    accounts.record(1000.0 + INTERVAL, 100.0)
    assert accounts.group("ml", "old") is not None
    later = cache_with(GANG, groups={"w1": "new"})
    accounts.accountant._cache = later  # the old gang finished, a new one runs
    accounts.record(1000.0 + 2 * INTERVAL, 100.0)
    assert accounts.group("ml", "old") is None
    assert accounts.group("ml", "new") == pytest.approx(100.0 * INTERVAL / 4)


def test_podgroup_totals_continue_after_a_restart() -> None:
    first = Accounts(cache_with(GANG, groups={"w0": "train"}))
    first.record(1000.0, 100.0)
    first.record(1000.0 + INTERVAL, 100.0)
    before = first.group("ml", "train")
    second = Accounts(cache_with(GANG, groups={"w0": "train"}), api=first.api)
    second.record(1000.0 + 2 * INTERVAL, 100.0)
    second.record(1000.0 + 3 * INTERVAL, 100.0)
    assert second.group("ml", "train") == pytest.approx(2 * (before or 0.0))


def test_a_broken_podgroups_field_is_refused_with_the_reason() -> None:
    with pytest.raises(energy_store.UnusableStore, match="not \\[group, used, saved, lost\\]"):
        energy_store.parse({"podgroups": json.dumps([["ml/x", 1.0]])})
    with pytest.raises(energy_store.UnusableStore, match="<namespace>/<podgroup>"):
        energy_store.parse({"podgroups": json.dumps([["nogroup", 1.0, 0.0, 0.0]])})


def test_a_node_not_seen_empty_takes_its_modelled_idle_draw_not_its_busy_reading() -> None:
    # A new leader first sees the GPU node already busy at 350 W. Taking that as its idle draw
    # would book the pod its request share of all 350 W and nothing to the work itself; the
    # model's idle draw for the node (about 100 W) is what it draws with nothing running.
    spec = one_a40()
    share = (8 / 64 + 64 / 512 + 1.0) / 3
    busy = Accounts(cache_with(GPU_POD, GPU_NODE), models=lambda _: (spec, Controls()))
    blind = Accounts(cache_with(GPU_POD, GPU_NODE))  # no model: the lowest reading it saw
    for accounts in (busy, blind):
        accounts.record(1000.0, 350.0)
        accounts.record(1000.0 + INTERVAL, 350.0)
    idle_w = idle_power(spec, Controls())
    assert 50.0 < idle_w < 200.0
    assert busy.used("ml", "performance") == pytest.approx(idle_w * INTERVAL * share)
    assert blind.used("ml", "performance") == pytest.approx(350.0 * INTERVAL * share)


def test_an_idle_draw_measured_while_the_node_was_empty_wins_over_the_model() -> None:
    spec = one_a40()
    accounts = Accounts(cache_with([], GPU_NODE), models=lambda _: (spec, Controls()))
    accounts.record(1000.0, 120.0)  # empty: 120 W is what this node draws idle
    accounts.accountant._cache = cache_with(GPU_POD, GPU_NODE)
    accounts.record(1000.0 + INTERVAL, 350.0)
    # No NodeHardware, so no modelled marginal power: the pod gets its share of the measured
    # idle draw (8/64 CPUs, 64/512 GiB, 1/1 GPU), the rest is overhead.
    share = (8 / 64 + 64 / 512 + 1.0) / 3
    assert accounts.used("ml", "performance") == pytest.approx(120.0 * INTERVAL * share)
