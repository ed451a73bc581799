"""The garbage-collector policy: after a large list, the objects alive are frozen, so later full
collections no longer walk them; it runs once per list (coalesced), never per watch event; and
every collection's pause is timed into a metric."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from prometheus_client import REGISTRY

from joulie.kube.informer import Informer
from joulie.process.gc_policy import GcPolicy


class Node:
    """A container the collector tracks, holding a cycle back to itself."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def policy() -> Iterator[GcPolicy]:
    policy = GcPolicy(min_objects=10, settle_seconds=0.05)
    policy.install()
    yield policy
    policy.uninstall()
    gc.unfreeze()


def name_of(raw: Mapping[str, Any]) -> str:
    return str(raw["metadata"]["name"])


def informer() -> Informer[str]:
    return Informer(None, "/api/v1/things", name_of)  # type: ignore[arg-type]  # store only


def listed(n: int) -> dict[str, str]:
    return {f"o{i}": f"o{i}" for i in range(n)}


async def settled(policy: GcPolicy) -> None:
    """Return once any freeze scheduled before this call has run (or would have): a timer with
    the same settle delay, set now, is due no earlier, and the event loop runs due timers in
    deadline order before the task waiting on this one resumes. "No freeze" is checked this way
    against the policy's own timer, not a guessed sleep."""
    loop = asyncio.get_running_loop()
    due: asyncio.Future[None] = loop.create_future()
    loop.call_later(policy.settle_seconds, due.set_result, None)
    await due


def test_frozen_objects_are_left_out_of_full_collections(policy: GcPolicy) -> None:
    long_lived = [Node() for _ in range(1000)]
    garbage = Node()
    garbage_ref = weakref.ref(garbage)
    del garbage
    frozen_before = gc.get_freeze_count()

    policy.listed("pods", 5000)  # no event loop here: it freezes at once

    assert policy.freezes == 1
    assert gc.get_freeze_count() >= frozen_before + len(long_lived)
    # A full collection walks the generations, and the frozen objects are in none of them.
    tracked = {id(o) for o in gc.get_objects()}
    assert not any(id(o) in tracked for o in long_lived)
    # Cycles that were already garbage were collected first, not frozen for good.
    assert garbage_ref() is None
    # Frozen objects are still freed by reference counting when their owner drops them.
    probe = weakref.ref(long_lived[0])
    long_lived.clear()
    assert probe() is not None  # each Node keeps itself alive through its cycle...
    gc.unfreeze()
    gc.collect()
    assert probe() is None  # ...until the next list's unfreeze-collect-freeze reclaims it


@pytest.mark.asyncio
async def test_one_freeze_per_list_never_per_watch_event(policy: GcPolicy) -> None:
    things = informer()
    things._replace(listed(50))  # the first sync
    things._replace(listed(60))  # a second informer syncing right after: coalesced
    await settled(policy)
    assert policy.freezes == 1

    for i in range(100):
        things._apply(
            {"type": "MODIFIED", "object": {"metadata": {"name": f"o{i}", "resourceVersion": "9"}}}
        )
    await settled(policy)
    assert policy.freezes == 1, "watch events must not freeze"

    things._replace(listed(5))  # a small relist is not worth a full collection
    await settled(policy)
    assert policy.freezes == 1

    things._replace(listed(70))  # a relist after 410 Gone
    await settled(policy)
    assert policy.freezes == 2


def test_each_collection_is_timed_by_generation(policy: GcPolicy) -> None:
    def count(generation: str) -> float:
        sample = REGISTRY.get_sample_value(
            "joulie_gc_pause_seconds_count", {"generation": generation}
        )
        return sample or 0.0

    before = count("2")
    gc.collect()
    assert count("2") == before + 1


def test_uninstall_restores_the_thresholds() -> None:
    before = gc.get_threshold()
    policy = GcPolicy(young_threshold=12345)
    policy.install()
    assert gc.get_threshold()[0] == 12345
    policy.uninstall()
    assert gc.get_threshold() == before
