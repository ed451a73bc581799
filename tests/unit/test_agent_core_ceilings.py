"""Frequency ceilings on the cores a pod holds exclusively, on a DaemonSet agent's node: the fake
two-socket Xeon tree (8 CPUs, a cpufreq policy each, 1.0-3.9 GHz, nominal 2.4 GHz) and a fake
kubelet answering PodResources, with ``cpu_ids``, over its real gRPC protocol.

Under ``spec.cpu.classCaps`` the cores of a standard pod run no faster than nominal while a
performance pod's cores and the shared pool follow the node-level preset; a pod that goes puts
its cores back; a pod re-created with another class moves its cores, once; and every core is
put back when the agent stops."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from joulie.agent.core_ceilings import CpuWork, core_ceilings, cpu_work
from joulie.agent.cpufreq_discovery import CpufreqPolicy
from joulie.agent.host_node import CPU_GOVERNOR, HostNode, Outcomes
from joulie.agent.pod_devices import MAX_CPU_IDS, read_allocations
from joulie.agent.pod_resources import PodResourcesClient
from joulie.api.enums import ControlResult
from joulie.api.nodetwin import CpuCoreCeiling, NodeTwinSpec
from joulie.core.caps import core_ceiling_khz
from tests.support.builders import nodetwin
from tests.support.fake_kubelet import FakeKubelet, NodePods, fake_kubelet
from tests.support.fake_sysfs import FakeSysfs
from tests.support.host_nodes import host_node, host_tree

R = ControlResult
CPUFREQ = "/sys/devices/system/cpu/cpufreq"
MAX_KHZ, NOMINAL_KHZ, MIN_KHZ = 3_900_000, 2_400_000, 1_000_000


def spec(*, preset: str | None = None, performance_pct: float | None = None) -> NodeTwinSpec:
    """A node's spec as the class_caps policy writes it: standard work's cores at nominal."""
    caps: dict[str, Any] = {"standard": {"atNominal": True}}
    if performance_pct is not None:
        caps["performance"] = {"maxFreqPctOfMax": performance_pct}
    cpu: dict[str, Any] = {"classCaps": caps}
    if preset is not None:
        cpu["governor"] = {"preset": preset}
    return NodeTwinSpec.model_validate(nodetwin("n1", "performance", spec={"cpu": cpu})["spec"])


class Node:
    """The agent's side of one node: the CPU tree, the kubelet's socket, the pod cache."""

    def __init__(self, tmp_path: Path, kubelet: FakeKubelet) -> None:
        self.tree: FakeSysfs = host_tree(tmp_path)
        self.host: HostNode = host_node(self.tree, tmp_path / "state")
        self.kubelet = kubelet
        self.pods = NodePods(kubelet)
        self.client = PodResourcesClient(str(kubelet.socket), timeout_s=0.5)

    def run(self, name: str, workload_class: str, *cpus: int) -> None:
        self.pods.run(name, workload_class, cpu_ids=cpus)

    def stop(self, name: str) -> None:
        self.pods.stop(name)

    async def pass_(self, twin: NodeTwinSpec) -> Outcomes:
        """One pass as the daemon runs it."""
        answer = await read_allocations(self.client, self.pods.classes.get)
        assert not isinstance(answer, str), answer
        work = cpu_work(answer.cpus, self.pods.classes.get)
        return await asyncio.to_thread(self.host.enforce, twin, cpu_work=work)

    def ceilings(self) -> list[int]:
        return [int(self.tree.read(f"{CPUFREQ}/policy{n}/scaling_max_freq")) for n in range(8)]

    def governors(self) -> list[str]:
        return [self.tree.read(f"{CPUFREQ}/policy{n}/scaling_governor") for n in range(8)]


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    with fake_kubelet() as fake:
        yield fake


@pytest.fixture
def node(tmp_path: Path, kubelet: FakeKubelet) -> Node:
    return Node(tmp_path, kubelet)


@pytest.mark.asyncio
async def test_standard_work_s_cores_run_at_nominal_others_at_their_maximum_and_go_back(
    node: Node,
) -> None:
    node.run("batch", "standard", 2, 3)
    node.run("train", "performance", 4, 5)
    first = await node.pass_(spec())
    assert first[CPU_GOVERNOR].result is R.APPLIED, first[CPU_GOVERNOR].message
    assert "standard work's exclusive cores" in first[CPU_GOVERNOR].message
    assert node.ceilings() == [MAX_KHZ] * 2 + [NOMINAL_KHZ] * 2 + [MAX_KHZ] * 4
    # Steady: nothing written again, and the same outcome (no controlStatus churn).
    writes = len(node.tree.writes)
    again = await node.pass_(spec())
    assert (again[CPU_GOVERNOR].result, again[CPU_GOVERNOR].message) == (
        R.APPLIED,
        first[CPU_GOVERNOR].message,
    )
    assert len(node.tree.writes) == writes

    node.stop("batch")
    freed = await node.pass_(spec())
    assert freed[CPU_GOVERNOR].result is R.RESTORED
    assert node.ceilings() == [MAX_KHZ] * 8
    assert node.host.baseline.entries() == {}


@pytest.mark.asyncio
async def test_a_pod_re_created_with_another_class_moves_its_cores_once(node: Node) -> None:
    node.run("batch", "standard", 6, 7)
    await node.pass_(spec(performance_pct=90))
    assert node.ceilings()[6:] == [NOMINAL_KHZ] * 2
    node.run("batch", "performance", 6, 7)  # deleted and created again, same name
    moved = await node.pass_(spec(performance_pct=90))
    assert moved[CPU_GOVERNOR].result is R.APPLIED
    assert node.ceilings()[6:] == [MAX_KHZ * 90 // 100] * 2
    writes = len(node.tree.writes)
    await node.pass_(spec(performance_pct=90))
    assert len(node.tree.writes) == writes


@pytest.mark.asyncio
async def test_the_preset_governs_every_core_and_the_class_ceiling_replaces_only_its_limit(
    node: Node,
) -> None:
    node.run("batch", "standard", 0, 1)
    outcome = await node.pass_(spec(preset="performance"))
    assert outcome[CPU_GOVERNOR].result is R.APPLIED, outcome[CPU_GOVERNOR].message
    assert node.governors() == ["performance"] * 8
    assert node.ceilings() == [NOMINAL_KHZ] * 2 + [MAX_KHZ] * 6


@pytest.mark.asyncio
async def test_the_agent_stopping_puts_every_core_back(node: Node) -> None:
    node.run("batch", "standard", 0, 1, 2, 3)
    await node.pass_(spec())
    assert node.ceilings()[:4] == [NOMINAL_KHZ] * 4
    await asyncio.to_thread(node.host.restore_all)
    assert node.ceilings() == [MAX_KHZ] * 8
    assert node.host.baseline.entries() == {}


@pytest.mark.asyncio
async def test_without_an_answer_every_core_follows_the_node(
    node: Node, kubelet: FakeKubelet
) -> None:
    node.run("batch", "standard", 2, 3)
    await node.pass_(spec())
    kubelet.pods = []
    node.client = PodResourcesClient(str(node.tree.root / "no-socket"), timeout_s=0.5)
    answer = await read_allocations(node.client, node.pods.classes.get)
    assert isinstance(answer, str)
    assert "socket" in answer
    outcome = await asyncio.to_thread(
        node.host.enforce, spec(), cpu_work=CpuWork.unavailable(answer)
    )
    assert outcome[CPU_GOVERNOR].result is R.RESTORED
    assert node.ceilings() == [MAX_KHZ] * 8


# --- the decision, pure ------------------------------------------------------------------------


def policy(n: int, *cpus: int, base: int | None = NOMINAL_KHZ) -> CpufreqPolicy:
    return CpufreqPolicy(
        path=f"{CPUFREQ}/policy{n}",
        cpus=cpus or (n,),
        driver="acpi-cpufreq",
        governor="schedutil",
        available_governors=("schedutil",),
        epp=None,
        available_epp=(),
        cpuinfo_min_khz=MIN_KHZ,
        cpuinfo_max_khz=MAX_KHZ,
        scaling_min_khz=MIN_KHZ,
        scaling_max_khz=MAX_KHZ,
        base_khz=base,
        lowest_nonlinear_khz=None,
        boost=None,
    )


def test_a_policy_takes_a_class_ceiling_only_when_every_core_it_governs_is_of_that_class() -> None:
    classes = {("w", "s1"): "standard", ("w", "s2"): "standard", ("w", "p"): "performance"}
    work = cpu_work(
        {("w", "s1"): (0, 1), ("w", "s2"): (2,), ("w", "p"): (3,), ("w", "new"): (4, 5)},
        classes.get,
    )
    policies = [
        policy(0, 0, 1),  # one standard pod
        policy(1, 2, 6),  # a standard pod's core and one of the shared pool
        policy(2, 1, 2),  # two standard pods: still standard work only
        policy(3, 2, 3),  # standard and performance
        policy(4, 4, 5),  # a pod the cache does not hold yet
        policy(5, 0, base=None),  # no nominal stated
    ]
    chosen = core_ceilings(spec(), policies, work)
    assert {path.rsplit("/", 1)[1]: c.khz for path, c in chosen.items()} == {
        "policy0": NOMINAL_KHZ,
        "policy2": NOMINAL_KHZ,
    }
    doubled = cpu_work({("w", "s1"): (0,), ("w", "s2"): (0,)}, classes.get)
    assert doubled.classes == {}  # a CPU two pods claim is nobody's


def test_hostile_cpu_lists_are_bounded() -> None:
    too_many = cpu_work({("w", "p"): tuple(range(MAX_CPU_IDS + 1))}, lambda _: "standard")
    assert too_many.unknown is not None
    assert too_many.classes == {}
    odd = cpu_work({("w", "p"): (-1, 1 << 40, 3)}, lambda _: "standard")
    assert odd.classes == {3: "standard"}


def test_a_ceiling_resolves_inside_the_core_s_range() -> None:
    def khz(**fields: Any) -> int | None:
        return core_ceiling_khz(
            CpuCoreCeiling(**fields), min_khz=MIN_KHZ, max_khz=MAX_KHZ, nominal_khz=NOMINAL_KHZ
        )

    assert khz(at_nominal=True) == NOMINAL_KHZ
    assert khz(at_nominal=True, max_freq_pct_of_max=50) == NOMINAL_KHZ  # nominal wins
    assert khz(max_freq_pct_of_max=50) == MAX_KHZ // 2
    assert khz(max_freq_pct_of_max=10) == MIN_KHZ  # never below the core's minimum
    assert khz(max_freq_pct_of_max=100) == MAX_KHZ
    assert khz() is None
    unknown_nominal = core_ceiling_khz(
        CpuCoreCeiling(at_nominal=True), min_khz=MIN_KHZ, max_khz=MAX_KHZ, nominal_khz=None
    )
    assert unknown_nominal is None
    assert core_ceiling_khz(None, min_khz=None, max_khz=None, nominal_khz=None) is None


@given(
    st.lists(st.sampled_from(["standard", "performance", None]), min_size=8, max_size=8),
    st.floats(min_value=1, max_value=100),
)
def test_a_performance_pod_s_cores_never_get_the_standard_ceiling(
    owners: list[str | None], performance_pct: float
) -> None:
    """Whatever mix of pods holds the cores, a policy with a core of performance work never takes
    a ceiling other than the performance class's own."""
    held = {("w", f"pod{n}"): (n,) for n, owner in enumerate(owners) if owner is not None}
    classes = {("w", f"pod{n}"): owner for n, owner in enumerate(owners) if owner is not None}
    work = cpu_work(held, classes.get)
    policies = [policy(n, n, (n + 1) % 8) for n in range(8)]
    twin = spec(performance_pct=performance_pct)
    performance_khz = core_ceiling_khz(
        CpuCoreCeiling(max_freq_pct_of_max=performance_pct),
        min_khz=MIN_KHZ,
        max_khz=MAX_KHZ,
        nominal_khz=NOMINAL_KHZ,
    )
    for path, ceiling in core_ceilings(twin, policies, work).items():
        n = int(path.rsplit("policy", 1)[1])
        if "performance" in (owners[n], owners[(n + 1) % 8]):
            assert ceiling.khz == performance_khz
