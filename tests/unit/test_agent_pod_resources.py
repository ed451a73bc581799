"""Which pod holds which GPU board: the kubelet's PodResources answer, read over its real gRPC
protocol from a fake kubelet on a unix socket, and placed board by board. Shared replicas, MIG
slices and IDs that do not look like device IDs are never taken for one pod's board; a kubelet
that hangs, answers too much or is not there gives a clear reason in bounded time, without
holding the event loop."""

from __future__ import annotations

import asyncio
import time

import pytest

from joulie.agent.pod_devices import (
    MAX_DEVICE_IDS,
    NO_CACHE,
    NO_SOURCE,
    GpuWork,
    PodAllocations,
    PodDevicesUnavailable,
    PodKey,
    gpu_work,
    pod_workload_class,
    read_gpu_work,
)
from joulie.agent.pod_resources import PodResourcesClient
from joulie.api import keys
from tests.support.fake_kubelet import fake_kubelet, gpu_pod, short_socket_dir

GPU0 = "GPU-6a1f2c3d-0000-4000-8000-000000000000"
GPU1 = "GPU-6a1f2c3d-0000-4000-8000-000000000001"
MIG = "MIG-0d3c2b1a-0000-4000-8000-000000000000"

CLASSES = {("work", "train"): "performance", ("work", "batch"): "standard"}


def classes(pod: PodKey) -> str | None:
    return CLASSES.get(pod)


# --- placing an answer -------------------------------------------------------------------------


def test_a_whole_board_takes_the_class_of_its_one_pod() -> None:
    work = gpu_work({("work", "train"): (GPU0,), ("work", "batch"): (GPU1,)}, classes)
    assert work.classes == {GPU0: "performance", GPU1: "standard"}
    assert work.unattributable == {}
    assert work.performance == {GPU0}
    assert work.unknown is None  # every GPU placed: a board named nowhere is idle


def test_replicas_of_one_board_held_by_several_pods_make_it_unattributable() -> None:
    work = gpu_work(
        {("work", "train"): (f"{GPU0}::0",), ("work", "batch"): (f"{GPU0}::1",)}, classes
    )
    assert work.classes == {}
    assert work.unattributable == {GPU0: "shared by several pods"}
    # Performance work is on it all the same: the board must not drop below that intent.
    assert work.performance == {GPU0}


def test_a_replica_held_alone_names_its_physical_board() -> None:
    work = gpu_work({("work", "batch"): (f"{GPU1}::3",)}, classes)
    assert work.classes == {GPU1: "standard"}


def test_mig_slices_and_bad_ids_leave_the_other_boards_unknown_not_idle() -> None:
    mig = gpu_work({("work", "batch"): (MIG,)}, classes)
    assert mig.named == frozenset()
    assert mig.unknown == "MIG devices do not name their board"
    hostile = ("x" * 129, "GPU-1; rm -rf /", "", "::7", "\x00GPU")
    bad = gpu_work({("work", "batch"): (*hostile, GPU1)}, classes)
    assert bad.classes == {GPU1: "standard"}
    assert bad.unknown == "invalid device IDs were ignored"
    assert "rm -rf" not in repr(bad)


def test_a_pod_the_cache_does_not_hold_leaves_its_board_unattributable() -> None:
    work = gpu_work({("work", "unknown"): (GPU0,)}, classes)
    assert work.unattributable == {GPU0: "its pod is not in the agent's pod cache yet"}


def test_too_many_ids_are_not_placed() -> None:
    many = tuple(f"{GPU0}::{i}" for i in range(MAX_DEVICE_IDS + 1))
    work = gpu_work({("work", "batch"): many}, classes)
    assert work == GpuWork.unavailable(f"more than {MAX_DEVICE_IDS} GPU device IDs")


def test_the_workload_class_reads_as_everywhere_in_joulie() -> None:
    annotation = keys.WORKLOAD_CLASS_ANNOTATION
    assert pod_workload_class({annotation: "performance"}) == "performance"
    assert pod_workload_class({annotation: "Performance"}) == "standard"
    assert pod_workload_class({}) == "standard"


# --- the client against a fake kubelet ---------------------------------------------------------


@pytest.mark.asyncio
async def test_the_client_lists_gpu_devices_and_exclusive_cpus_per_pod_over_the_socket() -> None:
    with fake_kubelet() as kubelet:
        kubelet.pods = [
            gpu_pod("train", GPU0, cpu_ids=[2, 3]),
            gpu_pod("batch", f"{GPU1}::0", resource="nvidia.com/gpu.shared"),
            gpu_pod("nic", "0000:3b:00.1", resource="example.com/sriov-nic", cpu_ids=[7]),
            gpu_pod("slice", MIG, resource="nvidia.com/mig-1g.10gb"),
        ]
        answer = await PodResourcesClient(str(kubelet.socket)).allocations()
    assert answer.gpus == {
        ("work", "train"): (GPU0,),
        ("work", "batch"): (f"{GPU1}::0",),
        ("work", "slice"): (MIG,),
    }
    assert answer.cpus == {("work", "train"): (2, 3), ("work", "nic"): (7,)}


async def ticking_while(call: asyncio.Future[object] | asyncio.Task[object]) -> int:
    """How often the loop ran a 10 ms ticker while ``call`` was pending."""
    ticks = 0
    while not call.done():
        await asyncio.sleep(0.01)  # the ticker itself: a blocked loop would not wake it
        ticks += 1
    return ticks


@pytest.mark.asyncio
async def test_a_hanging_kubelet_is_given_up_in_bounded_time_without_holding_the_loop() -> None:
    with fake_kubelet() as kubelet:
        kubelet.hang = True
        client = PodResourcesClient(str(kubelet.socket), timeout_s=0.5)
        started = time.monotonic()
        call = asyncio.ensure_future(client.allocations())
        ticks = await ticking_while(call)
        with pytest.raises(PodDevicesUnavailable) as raised:
            await call
        elapsed = time.monotonic() - started
    assert str(raised.value) == "the kubelet's PodResources API did not answer within 0.5 s"
    assert elapsed < 2.5
    assert ticks >= 20  # the loop kept running the whole time


@pytest.mark.asyncio
async def test_an_answer_larger_than_the_limit_is_refused_with_a_stable_reason() -> None:
    with fake_kubelet() as kubelet:
        client = PodResourcesClient(str(kubelet.socket), max_message_bytes=64 * 1024)
        reasons = set()
        for size in (100_000, 200_000):
            kubelet.padding = size
            with pytest.raises(PodDevicesUnavailable) as raised:
                await client.allocations()
            reasons.add(str(raised.value))
    # One text whatever the size: it reaches controlStatus, and must not change every pass.
    assert reasons == {"the kubelet's PodResources answer is larger than 65536 bytes; not read"}


@pytest.mark.asyncio
async def test_an_answer_that_is_no_protobuf_or_holds_bad_ids_is_not_trusted() -> None:
    with fake_kubelet() as kubelet:
        client = PodResourcesClient(str(kubelet.socket))
        kubelet.garbage = b"\xff" * 64
        with pytest.raises(PodDevicesUnavailable) as raised:
            await client.allocations()
        assert str(raised.value) == "the kubelet's PodResources List failed (INTERNAL)"
        kubelet.garbage = None
        kubelet.pods = [gpu_pod("batch", "GPU-x" * 100, "GPU-<script>", GPU1)]
        work = await read_gpu_work(client, classes)
    assert work.classes == {GPU1: "standard"}
    assert work.unknown == "invalid device IDs were ignored"


@pytest.mark.asyncio
async def test_a_missing_socket_or_a_dead_one_says_so() -> None:
    with short_socket_dir() as directory:
        socket = directory / "kubelet.sock"
        with pytest.raises(PodDevicesUnavailable, match="no kubelet PodResources socket"):
            await PodResourcesClient(str(socket)).allocations()
        socket.touch()  # a file where the socket was: the kubelet is gone
        with pytest.raises(PodDevicesUnavailable, match="does not answer"):
            await PodResourcesClient(str(socket), timeout_s=1).allocations()


# --- reading it for a pass: never raises -------------------------------------------------------


class Broken:
    async def allocations(self) -> PodAllocations:
        raise RuntimeError("a bug")


@pytest.mark.asyncio
async def test_reading_the_work_never_raises_and_says_why_it_is_unknown() -> None:
    assert (await read_gpu_work(None, classes)).unknown == NO_SOURCE
    with fake_kubelet() as kubelet:
        kubelet.pods = [gpu_pod("batch", GPU1)]
        client = PodResourcesClient(str(kubelet.socket))
        assert (await read_gpu_work(client, None)).unknown == NO_CACHE
        assert (await read_gpu_work(client, classes)).classes == {GPU1: "standard"}
    gone = await read_gpu_work(client, classes)
    assert gone.unknown is not None
    assert "socket" in gone.unknown
    assert (await read_gpu_work(Broken(), classes)).unknown == (
        "reading pod devices failed (RuntimeError)"
    )
