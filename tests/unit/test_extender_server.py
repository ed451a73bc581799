"""The extender's HTTP server over a small placement, through real sockets: kube-scheduler's
filter and prioritize calls in both node forms, a reason for every refused body (400, 408, 413),
never a 5xx answer to kube-scheduler however the body or the placement misbehaves, the time limit,
the readiness probe, the debug view, HTTPS, and the settings that shape all of it."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import ssl
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from hack.cluster.pki import create_pki
from joulie.core.preemption_candidates import Candidate
from joulie.extender import intake, wire
from joulie.extender.server import Placement, TlsError, extender_app, serve, tls_context
from joulie.extender.settings import ExtenderSettings
from tests.support.host_priorities import above_lowest
from tests.support.waiting import eventually

DATA = Path(__file__).resolve().parent.parent / "data" / "extender"
NAMES_BODY = (DATA / "args-node-names.json").read_bytes()
NODES_BODY = (DATA / "args-nodes.json").read_bytes()
ALL = ["cpu-a-01", "gpu-h-07", "gpu-h-08"]


def fake_score(node: str) -> int:
    """The fake placement's score of a node: 7, 2 and 3 for ALL."""
    return sum(map(ord, node)) % 11


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@dataclass
class FakePlacement:
    """Refuses eco nodes (by label when it has labels, by a name list otherwise) and scores by
    name; ``fail`` makes every call raise, ``hook`` runs inside each call."""

    eco: frozenset[str] = frozenset({"gpu-h-08"})
    is_ready: bool = True
    fail: Exception | None = None
    answer: Any = None
    hook: Callable[[], None] = lambda: None
    calls: list[str] = field(default_factory=list)
    checked: list[tuple[Any, ...]] = field(default_factory=list)
    """The name lists names_distinct was asked about (not in ``calls``: a check, not a verb)."""
    distinct: Callable[[tuple[Any, ...]], bool] | None = None
    """names_distinct's answer (None: a set of the names decides, as a lookup would)."""

    def ready(self) -> bool:
        return self.is_ready

    def _call(self, verb: str) -> None:
        self.calls.append(verb)
        self.hook()
        if self.fail is not None:
            raise self.fail

    def filter(
        self,
        pod: Mapping[str, Any],
        nodes: Sequence[str],
        labels: Mapping[str, Mapping[str, str]] | None,
    ) -> list[str | None]:
        self._call("filter")
        if self.answer is not None:
            return self.answer  # type: ignore[no-any-return]

        def eco(n: str) -> bool:
            if labels is not None:
                return labels[n].get("joulie.io/power-profile") == "eco"
            return n in self.eco

        return ["node is eco" if eco(n) else None for n in nodes]

    def prioritize(self, pod: Mapping[str, Any], nodes: Sequence[str]) -> wire.Scores:
        self._call("prioritize")
        if self.answer is not None:
            return self.answer  # type: ignore[no-any-return]
        return [fake_score(n) for n in nodes]

    def names_distinct(self, nodes: tuple[Any, ...]) -> bool:
        self.checked.append(nodes)
        if self.distinct is not None:
            return self.distinct(nodes)
        try:
            unique = set(nodes)
        except TypeError:
            return False
        return all(type(n) is str and n for n in unique) and len(unique) == len(nodes)

    def preempt(
        self, pod: Mapping[str, Any], candidates: Sequence[Candidate]
    ) -> Sequence[Candidate]:
        self._call("preempt")
        if self.answer is not None:
            return self.answer  # type: ignore[no-any-return]
        return [c for c in candidates if c.node not in self.eco]

    def explain(self, pod: Mapping[str, Any], node: str) -> Mapping[str, Any]:
        self._call("explain")
        meta = pod["metadata"]
        return {"class": meta["annotations"]["joulie.io/workload-class"], "node": node, "pod": pod}


_checked: Placement = FakePlacement()  # the fake satisfies the protocol (mypy checks this line)


def extender_settings(**env: str) -> ExtenderSettings:
    loaded = ExtenderSettings.from_env(env)
    assert not loaded.problems
    return loaded.settings


@dataclass
class Served:
    client: TestClient[Any, Any]
    placement: FakePlacement
    clock: Clock

    async def post(self, path: str, data: Any) -> tuple[int, Any]:
        async with self.client.post(path, data=data) as response:
            text = await response.text()
            if response.content_type == "application/json":
                return response.status, json.loads(text)
            return response.status, text


async def start(
    placement: FakePlacement, clock: Callable[[], float] | None = None, **env: str
) -> TestClient[Any, Any]:
    app = (
        extender_app(placement, extender_settings(**env))
        if clock is None
        else extender_app(placement, extender_settings(**env), clock=clock)
    )
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest_asyncio.fixture
async def served() -> AsyncIterator[Served]:
    placement, clock = FakePlacement(), Clock()
    client = await start(placement, clock, EXTENDER_DEBUG="true")
    try:
        yield Served(client, placement, clock)
    finally:
        await client.close()


def count(verb: str, outcome: str) -> float:
    value = REGISTRY.get_sample_value(
        "joulie_extender_requests_total", {"verb": verb, "outcome": outcome}
    )
    return value or 0.0


# --- kube-scheduler's calls --------------------------------------------------------------------


@pytest.mark.asyncio
async def test_filter_in_the_node_names_form(served: Served) -> None:
    before = count("filter", "ok")
    status, answer = await served.post("/filter", NAMES_BODY)
    assert status == 200
    assert answer == {
        "Nodes": None,
        "NodeNames": ["cpu-a-01", "gpu-h-07"],
        "FailedNodes": {"gpu-h-08": "node is eco"},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
    assert count("filter", "ok") == before + 1


@pytest.mark.asyncio
async def test_filter_in_the_nodes_form_reads_labels_and_echoes_the_survivors(
    served: Served,
) -> None:
    served.placement.eco = frozenset()  # only the labels can tell now
    status, answer = await served.post("/filter", NODES_BODY)
    assert status == 200
    sent = json.loads(NODES_BODY)["Nodes"]["items"]
    assert answer["Nodes"] == {"items": sent[:2]}
    assert answer["NodeNames"] is None
    assert answer["FailedNodes"] == {"gpu-h-08": "node is eco"}


@pytest.mark.asyncio
async def test_prioritize_answers_the_nodes_above_the_lowest_in_order(served: Served) -> None:
    for raw in (NAMES_BODY, NODES_BODY):
        status, answer = await served.post("/prioritize", raw)
        assert status == 200
        assert answer == above_lowest(ALL, [fake_score(n) for n in ALL])
        assert [e["Host"] for e in answer] == ["cpu-a-01", "gpu-h-08"]


@pytest.mark.asyncio
async def test_a_placement_that_keeps_every_node_passes_them_all(served: Served) -> None:
    served.placement.answer = [None] * len(ALL)
    status, answer = await served.post("/filter", NAMES_BODY)
    assert (status, answer["NodeNames"], answer["FailedNodes"]) == (200, ALL, {})
    status, answer = await served.post("/filter", NODES_BODY)
    assert (status, answer["Nodes"], answer["FailedNodes"]) == (
        200,
        {"items": json.loads(NODES_BODY)["Nodes"]["items"]},
        {},
    )


PERFORMANCE_POD = {"metadata": {"annotations": {"joulie.io/workload-class": "performance"}}}


def go_body(names: list[Any], pod: dict[str, Any] | None = None) -> str:
    """A NodeNames-form body as Go writes it (compact, NodeNames last); the pod {} by default."""
    args = {"Pod": pod or {}, "Nodes": None, "NodeNames": names}
    return json.dumps(args, separators=(",", ":"))


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("names", "reason"),
    [
        (["a", "b", "a"], "NodeNames lists node 'a' more than once"),
        (["a", ""], "NodeNames[1] is empty"),
        (["a", 1], "NodeNames[1] is a number, not a string"),
        (["a", ["b"]], "NodeNames[1] is an array, not a string"),
        (["a", None, None], "NodeNames[1] is null, not a string"),
    ],
)
@pytest.mark.parametrize("says", ["not distinct", "fails", "the set decides"])
@pytest.mark.parametrize("verb", ["prioritize", "filter"])
async def test_names_the_placement_looks_up_are_checked_whatever_it_says_of_them(
    served: Served, names: list[Any], reason: str, says: str, verb: str
) -> None:
    # Prioritize, and filter for a performance pod, ask the placement, which looks the names up
    # anyway, whether they are distinct; when it cannot tell (or fails), the names are checked
    # as a standard pod's filter checks them. Either way a list kube-scheduler could not have
    # sent is refused with its reason.
    served.placement.distinct = {
        "not distinct": lambda nodes: False,  # as a placement that cannot tell answers too
        "fails": lambda nodes: 1 / 0 > 0,
        "the set decides": None,
    }[says]
    padded = [*names, *(f"node-{i:04d}" for i in range(300))]  # long enough to be remembered
    body = go_body(padded, PERFORMANCE_POD)
    status, text = await served.post(f"/{verb}", body)
    assert (status, served.placement.calls) == (400, [])
    assert reason in text
    assert served.placement.checked  # asked (again when the body is read whole for the reason)
    # The same body is refused again (a refused list is never remembered as checked).
    status, text = await served.post(f"/{verb}", body)
    assert status == 400
    assert reason in text


@pytest.mark.asyncio
async def test_the_placement_checks_the_new_names_it_looks_up_anyway(served: Served) -> None:
    names = [f"node-{i:04d}" for i in range(300)]
    # A standard pod's filter looks no name up: a set checks them, the placement is not asked.
    status, answer = await served.post("/filter", go_body(names))
    assert (status, answer["NodeNames"], served.placement.checked) == (200, names, [])
    # A performance pod's filter looks each one up.
    listed = names[5:] + names[:5]
    status, answer = await served.post("/filter", go_body(listed, PERFORMANCE_POD))
    assert (status, served.placement.checked) == (200, [tuple(listed)])
    assert answer["NodeNames"] == [n for n in listed if n not in served.placement.eco]
    served.placement.checked.clear()
    for i in range(2):
        listed = names[i:] + names[:i]
        body = go_body(listed)
        status, answer = await served.post("/prioritize", body)
        assert status == 200
        assert answer == above_lowest(listed, [fake_score(n) for n in listed])
    # The first list came from the filter, already checked; the second is new.
    assert served.placement.checked == [tuple(names[1:] + names[:1])]
    # A placement that fails to check them: the server checks them and answers.
    served.placement.distinct = lambda nodes: 1 / 0 > 0
    listed = names[2:] + names[:2]
    body = go_body(listed)
    status, answer = await served.post("/prioritize", body)
    assert (status, answer) == (200, above_lowest(listed, [fake_score(n) for n in listed]))


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{", "body is not JSON"),
        (b'{"NodeNames": ["a"]}', "no Pod in the body"),
        (b'{"Pod": {}, "NodeNames": [1]}', "NodeNames[0] is a number, not a string"),
        (b'{"Pod": {}, "Nodes": {"items": [{}]}}', "Nodes.items[0] has no metadata"),
    ],
)
async def test_a_malformed_body_gets_400_with_its_reason(
    served: Served, raw: bytes, reason: str
) -> None:
    for verb in ("filter", "prioritize"):
        before = count(verb, "bad_request")
        status, text = await served.post(f"/{verb}", raw)
        assert status == 400
        assert reason in text
        assert count(verb, "bad_request") == before + 1
    assert served.placement.calls == []


def nested(depth: int) -> str:
    """An array nested ``depth`` levels, as JSON text (json.dumps itself would recurse)."""
    return "[" * depth + "]" * depth


@pytest.mark.asyncio
@pytest.mark.parametrize("verb", ["filter", "prioritize", "preempt"])
@pytest.mark.parametrize("where", ["Pod", "Node"])
async def test_a_body_nested_past_the_policy_gets_400_and_the_server_goes_on(
    served: Served, verb: str, where: str
) -> None:
    # A 2 KiB Nodes-form filter nested 990 levels deep was answered 500 after 2.3 s: echoing
    # the node back recursed past Python's limit, and so did the pass-all fallback.
    def body(pod_x: str, node_x: str) -> str:
        pod = f'{{"metadata":{{"name":"p"}},"x":{pod_x}}}'
        if verb == "preempt":
            victims = f'{{"cpu-a-01":{{"Pods":[],"x":{node_x}}}}}'
            return f'{{"Pod":{pod},"NodeNameToMetaVictims":{victims}}}'
        node = f'{{"metadata":{{"name":"cpu-a-01"}},"x":{node_x}}}'
        return f'{{"Pod":{pod},"Nodes":{{"items":[{node}]}}}}'

    deep = (nested(990), "1") if where == "Pod" else ("1", nested(990))
    status, text = await served.post(f"/{verb}", body(*deep))
    assert status == 400
    assert "nested deeper than 254 levels" in text
    assert served.placement.calls == []
    # As deep as the policy allows is read and answered.
    status, _ = await served.post(f"/{verb}", body(nested(200), nested(200)))
    assert status == 200


@pytest.mark.asyncio
async def test_a_list_longer_than_any_cluster_is_refused(served: Served) -> None:
    names = [f"n{i}" for i in range(wire.MAX_NODES + 1)]
    status, text = await served.post("/filter", json.dumps({"Pod": {}, "NodeNames": names}))
    assert status == 400
    assert f"NodeNames lists {wire.MAX_NODES + 1} nodes; at most {wire.MAX_NODES}" in text


@pytest.mark.asyncio
async def test_a_large_body_is_read_while_the_loop_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A million names were read on the event loop: /healthz went unanswered for 4 s.
    started, release = threading.Event(), threading.Event()
    released: list[bool] = []
    checked: list[wire.NamesCheck | None] = []
    real = wire.parse_args

    def slow_parse(
        body: bytes,
        lists: wire.NameLists | None = None,
        distinct: wire.NamesCheck | None = None,
        only_for: wire.PodTest | None = None,
    ) -> wire.ExtenderArgs:
        started.set()
        # A long reading, until the loop has shown it is free (on the loop itself, nothing
        # could release it: the wait would run out).
        released.append(release.wait(5))
        # The placement's state is the loop's: a body read on a thread goes unchecked by it.
        checked.append(distinct)
        return real(body, lists, distinct, only_for)

    monkeypatch.setattr(wire, "parse_args", slow_parse)
    client = await start(FakePlacement(eco=frozenset()))
    try:
        names = [f"node-{i:06}" for i in range(80_000)]  # 1.2 MB
        body = json.dumps({"Pod": {}, "Nodes": None, "NodeNames": names})
        big = asyncio.create_task(client.post("/filter", data=body))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        async with client.get("/readyz", timeout=aiohttp.ClientTimeout(total=3)) as response:
            assert response.status == 200
        release.set()
        async with await big as response:
            assert response.status == 200
            assert len((await response.json())["NodeNames"]) == 80_000
        assert released == [True]
        async with client.post("/prioritize", data=body) as response:
            assert response.status == 200
            answer = await response.json()
            assert answer == above_lowest(names, [fake_score(n) for n in names])
        assert checked == [None, None]
    finally:
        release.set()
        await client.close()


@pytest.mark.asyncio
async def test_bodies_held_at_once_are_bounded() -> None:
    # Four 100 MB bodies at once took RSS to 640 MiB: now one is read at a time; the next
    # waits its turn within the time limit (429 if none comes).
    placement = FakePlacement()
    client = await start(placement)
    writers = []
    try:
        for _ in range(intake.MAX_BODIES_AT_ONCE):
            _, writer = await asyncio.open_connection(client.server.host, client.server.port)
            writer.write(
                b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(NAMES_BODY) + NAMES_BODY[:100]
            )
            await writer.drain()
            writers.append(writer)
        third = asyncio.create_task(client.post("/filter", data=NAMES_BODY))
        # A sleep on purpose: what is under test is that nothing happens for the third call
        # while the holder keeps its turn (a window well inside the 2 s request limit).
        await asyncio.sleep(0.5)
        assert not third.done()  # its body is not read while the others are
        assert placement.calls == []
        writers[0].close()  # one holder gives up: the third goes on
        async with await asyncio.wait_for(third, 1.0) as response:
            assert response.status == 200
        assert placement.calls == ["filter"]
    finally:
        for writer in writers:
            writer.close()
        await client.close()


# --- the placement misbehaving -----------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_failing_placement_passes_every_node_and_scores_all_alike(
    served: Served,
) -> None:
    served.placement.fail = RuntimeError("cache exploded for pod ml-team/x")
    before = count("filter", "internal_error"), count("prioritize", "internal_error")
    with capture_logs() as logs:
        for _ in range(3):
            status, answer = await served.post("/filter", NAMES_BODY)
            assert (status, answer["NodeNames"], answer["Error"]) == (200, ALL, "")
            status, scores = await served.post("/prioritize", NODES_BODY)
            assert (status, scores) == (200, [])  # all alike: nothing to add
    assert count("filter", "internal_error") == before[0] + 3
    assert count("prioritize", "internal_error") == before[1] + 3
    # One line per distinct failure, not one per request.
    failures = [e for e in logs if e["event"].startswith("unexpected error")]
    assert [e["call"] for e in failures] == ["filter", "prioritize"]
    assert "cache exploded" in failures[0]["error"]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("verb", "answer"),
    [
        ("filter", [None, None]),
        ("filter", [None, "", None]),
        ("filter", [None, 3, None]),
        ("filter", [None, ["eco"], None]),
        ("filter", 7),
        ("prioritize", [1, 2]),
        ("prioritize", [1, 2, 11]),
        ("prioritize", [1, 2, "3"]),
        ("prioritize", np.array([1, 2, 11])),
        ("prioritize", np.array([1.0, 2.0, 3.0])),
    ],
)
async def test_an_answer_outside_the_contract_is_not_passed_on(
    served: Served, verb: str, answer: Any
) -> None:
    served.placement.answer = answer
    status, body = await served.post(f"/{verb}", NAMES_BODY)
    assert status == 200
    if verb == "filter":
        assert body["NodeNames"] == ALL
    else:
        assert body == []  # every node alike (neutral): nothing to add


@pytest.mark.asyncio
async def test_the_garbage_collector_is_back_on_after_every_kind_of_answer(
    served: Served,
) -> None:
    for verb in ("filter", "prioritize"):
        for raw in (NAMES_BODY, NODES_BODY, b"{"):
            served.placement.fail = None
            await served.post(f"/{verb}", raw)
            assert gc.isenabled()
            served.placement.fail = RuntimeError("broken")
            await served.post(f"/{verb}", raw)
            assert gc.isenabled()


# --- limits ------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_time_spent_before_deciding_passes_every_node_without_asking(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    parse = wire.parse_args

    def slow_parse(
        body: bytes,
        lists: wire.NameLists | None = None,
        distinct: wire.NamesCheck | None = None,
        only_for: wire.PodTest | None = None,
    ) -> wire.ExtenderArgs:
        served.clock.t += 2.5  # past the 2s default
        return parse(body, lists, distinct, only_for)

    monkeypatch.setattr(wire, "parse_args", slow_parse)
    before = count("filter", "timeout"), count("prioritize", "timeout")
    _, answer = await served.post("/filter", NAMES_BODY)
    assert (answer["NodeNames"], answer["FailedNodes"]) == (ALL, {})
    _, scores = await served.post("/prioritize", NAMES_BODY)
    assert scores == []  # every node alike (neutral): nothing to add
    assert served.placement.calls == []
    assert (count("filter", "timeout"), count("prioritize", "timeout")) == (
        before[0] + 1,
        before[1] + 1,
    )


@pytest.mark.asyncio
async def test_a_slow_placement_still_answers_and_is_counted_late(served: Served) -> None:
    def slow() -> None:
        served.clock.t += 3.0

    served.placement.hook = slow
    before = count("filter", "late")
    with capture_logs() as logs:
        for _ in range(2):
            _, answer = await served.post("/filter", NAMES_BODY)
            # The decision is made already: better than stepping aside.
            assert answer["NodeNames"] == ["cpu-a-01", "gpu-h-07"]
    assert count("filter", "late") == before + 2
    assert len([e for e in logs if "after the request time limit" in e["event"]]) == 1


@pytest.mark.asyncio
async def test_a_body_that_does_not_arrive_in_time_gets_408() -> None:
    placement = FakePlacement()
    client = await start(placement, EXTENDER_REQUEST_TIMEOUT="200ms")
    never = asyncio.Event()

    async def trickle() -> AsyncIterator[bytes]:
        yield NAMES_BODY[:100]
        await never.wait()
        yield NAMES_BODY[100:]

    before = count("filter", "timeout")
    try:
        async with client.post("/filter", data=trickle()) as response:
            assert response.status == 408
            assert "EXTENDER_REQUEST_TIMEOUT=200ms" in await response.text()
    finally:
        never.set()
        await client.close()
    assert count("filter", "timeout") == before + 1
    assert placement.calls == []


@pytest.mark.asyncio
async def test_a_body_over_the_limit_gets_413() -> None:
    client = await start(FakePlacement(), EXTENDER_MAX_BODY_BYTES="64Ki")
    big = json.dumps({"Pod": {}, "NodeNames": [f"node-{i:06d}" for i in range(8000)]}).encode()
    assert len(big) > 64 * 1024

    async def chunked() -> AsyncIterator[bytes]:
        for i in range(0, len(big), 8192):
            yield big[i : i + 8192]

    before = count("filter", "too_large")
    try:
        for data in (big, chunked()):  # with a Content-Length, and without one
            async with client.post("/filter", data=data) as response:
                assert response.status == 413
                assert "EXTENDER_MAX_BODY_BYTES (65536 bytes)" in await response.text()
        # A body within the limit still goes through.
        async with client.post("/filter", data=NAMES_BODY) as response:
            assert response.status == 200
    finally:
        await client.close()
    assert count("filter", "too_large") == before + 2


@pytest.mark.asyncio
async def test_a_caller_gone_mid_body_is_counted_as_abandoned() -> None:
    class Watched(Clock):
        calls = 0

        def __call__(self) -> float:
            self.calls += 1
            return self.t

    clock = Watched()
    client = await start(FakePlacement(), clock)
    before = count("filter", "abandoned")
    try:
        _, writer = await asyncio.open_connection(client.server.host, client.server.port)
        writer.write(
            b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(NAMES_BODY) + NAMES_BODY[:200]
        )
        await writer.drain()
        await eventually(lambda: clock.calls > 0, 10, "the handler to start reading")
        writer.close()
        await writer.wait_closed()
        await eventually(
            lambda: count("filter", "abandoned") == before + 1, 10, "the cut-off request"
        )
        async with client.post("/filter", data=NAMES_BODY) as response:
            assert response.status == 200
    finally:
        await client.close()


# --- malformed bodies, fuzzed ------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def replaced(doc: Any, path: Sequence[Any], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        return {**doc, head: replaced(doc.get(head), rest, value)}
    if isinstance(doc, list) and isinstance(head, int) and doc:
        i = head % len(doc)
        return [*doc[:i], replaced(doc[i], rest, value), *doc[i + 1 :]]
    return value


NAMES_DOC, NODES_DOC = json.loads(NAMES_BODY), json.loads(NODES_BODY)
PATHS = [
    ["Pod"], ["pod"], ["NodeNames"], ["nodenames"], ["Nodes"], ["NodeNames", 1],
    ["Nodes", "items"], ["Nodes", "items", 2], ["Nodes", "items", 0, "metadata"],
    ["Nodes", "items", 1, "metadata", "name"], ["Nodes", "items", 1, "metadata", "labels"],
    ["Nodes", "items", 1, "metadata", "labels", "joulie.io/power-profile"],
]  # fmt: skip

malformed_bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.integers(0, len(NODES_BODY) - 1).map(lambda i: NODES_BODY[:i]),
    st.integers(0, len(NAMES_BODY) - 1).map(lambda i: NAMES_BODY[:i]),
    st.tuples(st.sampled_from([NAMES_DOC, NODES_DOC]), st.sampled_from(PATHS), json_values).map(
        lambda t: json.dumps(replaced(t[0], t[1], t[2])).encode()
    ),
)


@pytest.fixture
def loop_and_client() -> Iterator[tuple[asyncio.AbstractEventLoop, TestClient[Any, Any]]]:
    """A served app on a loop of its own, so that hypothesis can drive it from a plain test."""
    loop = asyncio.new_event_loop()
    client = loop.run_until_complete(start(FakePlacement()))
    try:
        yield loop, client
    finally:
        loop.run_until_complete(client.close())
        loop.close()


def test_no_body_gets_a_5xx_and_the_server_keeps_answering(
    loop_and_client: tuple[asyncio.AbstractEventLoop, TestClient[Any, Any]],
) -> None:
    loop, client = loop_and_client

    async def call(verb: str, raw: bytes) -> tuple[int, bytes]:
        async with client.post(f"/{verb}", data=raw) as response:
            return response.status, await response.read()

    @settings(
        max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(st.sampled_from(["filter", "prioritize"]), malformed_bodies)
    def probe(verb: str, raw: bytes) -> None:
        status, answer = loop.run_until_complete(call(verb, raw))
        assert status in (200, 400), (status, answer)
        if status == 200:  # it happened to be a usable request: a usable answer
            decoded = json.loads(answer)
            assert isinstance(decoded, dict if verb == "filter" else list)

    probe()
    status, answer = loop.run_until_complete(call("filter", NAMES_BODY))
    assert status == 200
    assert json.loads(answer)["NodeNames"] == ["cpu-a-01", "gpu-h-07"]


# --- readiness and the debug view --------------------------------------------------------------


@pytest.mark.asyncio
async def test_readyz_follows_the_placement(served: Served) -> None:
    async with served.client.get("/readyz") as response:
        assert (response.status, await response.text()) == (200, "ready\n")
    served.placement.is_ready = False
    async with served.client.get("/readyz") as response:
        assert (response.status, await response.text()) == (503, "not ready\n")


@pytest.mark.asyncio
async def test_the_debug_view_is_off_unless_enabled() -> None:
    # It answered anyone: every node's power, class and the Lease state, and which names exist.
    placement = FakePlacement()
    client = await start(placement)
    try:
        async with client.get("/debug/score?node=gpu-h-07") as response:
            assert response.status == 404
        async with client.post("/debug/score?node=gpu-h-07") as response:
            assert response.status in (404, 405)
        async with client.get("/readyz") as response:
            assert response.status == 200
    finally:
        await client.close()
    assert placement.calls == []


def test_the_extender_listens_on_loopback_unless_told_otherwise() -> None:
    # It listened on every interface (":9876"); the Deployment sets the address it needs.
    assert extender_settings().extender_addr == "127.0.0.1:9876"
    assert extender_settings(EXTENDER_ADDR=":9876").extender_addr == ":9876"


@pytest.mark.asyncio
async def test_debug_score_from_query_or_pod_body(served: Served) -> None:
    query = "/debug/score?node=gpu-h-07&class=performance&cpu=4&memory=16Gi&gpus=2"
    async with served.client.get(query) as response:
        assert response.status == 200
        shown = await response.json()
    assert shown["node"] == "gpu-h-07"
    assert shown["terms"]["class"] == "performance"
    resources = shown["terms"]["pod"]["spec"]["containers"][0]["resources"]
    assert resources == {
        "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"},
        "limits": {"nvidia.com/gpu": "2"},
    }
    pod = (DATA / "pod.json").read_bytes()
    for method in ("GET", "POST"):
        async with served.client.request(
            method, "/debug/score?node=cpu-a-01", data=pod
        ) as response:
            shown = await response.json()
        assert (shown["pod"], shown["terms"]["class"]) == (
            "ml-team/resnet-train-x7k2p",
            "performance",
        )


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("query", "body", "reason"),
    [
        ("", b"", "give the node as ?node=NAME"),
        ("?node=n&cpus=4", b"", "unknown query parameter(s) cpus"),
        ("?node=n&class=eco", b"", "expected performance or standard"),
        ("?node=n&memory=lots", b"", "expected a Kubernetes quantity"),
        ("?node=n&gpus=-1", b"", "expected a whole number of GPUs"),
        ("?node=n&class=standard", b'{"metadata": {}}', "as a JSON body or as query parameters"),
        ("?node=n", b"[1]", "the body is an array, not an object"),
    ],
)
async def test_debug_score_refusals(served: Served, query: str, body: bytes, reason: str) -> None:
    async with served.client.get(f"/debug/score{query}", data=body) as response:
        assert response.status == 400
        assert reason in await response.text()


# --- serving, TLS and settings -----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def serve_once(settings_: ExtenderSettings, ssl_context: ssl.SSLContext | None) -> str:
    stopping, listening = asyncio.Event(), asyncio.Event()
    app = extender_app(FakePlacement(), settings_)
    task = asyncio.create_task(
        serve(app, settings_, stopping, on_listening=lambda _: listening.set())
    )
    await asyncio.wait_for(listening.wait(), 10)
    scheme = "https" if ssl_context else "http"
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{scheme}://{settings_.extender_addr}/filter",
                data=NAMES_BODY,
                ssl=ssl_context or True,
            ) as response,
        ):
            names: list[str] = (await response.json())["NodeNames"]
            return ",".join(names)
    finally:
        stopping.set()
        await asyncio.wait_for(task, 10)


@pytest.mark.asyncio
async def test_serve_plain_http_until_stopping() -> None:
    addr = f"127.0.0.1:{free_port()}"
    assert await serve_once(extender_settings(EXTENDER_ADDR=addr), None) == "cpu-a-01,gpu-h-07"


@pytest.mark.asyncio
async def test_a_connection_that_sends_no_whole_request_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Connections that sent nothing, or half their headers, were held for about an hour.
    monkeypatch.setattr("joulie.extender.server.IDLE_CONNECTION_TIMEOUT_S", 0.5)
    settings_ = extender_settings(EXTENDER_ADDR=f"127.0.0.1:{free_port()}")
    stopping, listening = asyncio.Event(), asyncio.Event()
    app = extender_app(FakePlacement(), settings_)
    task = asyncio.create_task(
        serve(app, settings_, stopping, on_listening=lambda _: listening.set())
    )
    await asyncio.wait_for(listening.wait(), 10)
    host, port = settings_.extender_addr.split(":")
    try:
        for start in (b"", b"POST /filter HTTP/1.1\r\nHost: x\r\n"):
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(start)
            await writer.drain()
            # The server hangs up: the read ends without an answer, well before a minute.
            assert await asyncio.wait_for(reader.read(), 10) == b""
            writer.close()
        assert await serve_filter(settings_.extender_addr) == "cpu-a-01,gpu-h-07"
    finally:
        stopping.set()
        await asyncio.wait_for(task, 10)


async def serve_filter(addr: str) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://{addr}/filter", data=NAMES_BODY) as response,
    ):
        return ",".join((await response.json())["NodeNames"])


@pytest.mark.asyncio
async def test_serve_https_with_the_configured_certificate(tmp_path: Path) -> None:
    pki = create_pki(tmp_path)
    settings_ = extender_settings(
        EXTENDER_ADDR=f"127.0.0.1:{free_port()}",
        EXTENDER_TLS_CERT_FILE=str(pki.serving_cert),
        EXTENDER_TLS_KEY_FILE=str(pki.serving_key),
    )
    assert tls_context(settings_) is not None
    client_side = ssl.create_default_context(cafile=str(pki.ca_cert))
    assert await serve_once(settings_, client_side) == "cpu-a-01,gpu-h-07"


def test_tls_files_that_cannot_be_used_name_the_variables(tmp_path: Path) -> None:
    missing = extender_settings(
        EXTENDER_TLS_CERT_FILE=str(tmp_path / "tls.crt"),
        EXTENDER_TLS_KEY_FILE=str(tmp_path / "tls.key"),
    )
    with pytest.raises(TlsError, match=r"EXTENDER_TLS_CERT_FILE=.*EXTENDER_TLS_KEY_FILE="):
        tls_context(missing)
    assert tls_context(extender_settings()) is None


def test_extender_settings() -> None:
    default = ExtenderSettings.from_env({})
    assert default.settings.extender_max_body_bytes == 128 * 2**20
    assert default.settings.extender_request_timeout == 2.0
    assert default.problems == []
    assert default.warnings == []

    loaded = ExtenderSettings.from_env(
        {"EXTENDER_MAX_BODY_BYTES": "256Mi", "EXTENDER_REQUEST_TIMEOUT": "5s"}
    )
    assert loaded.settings.extender_max_body_bytes == 256 * 2**20
    assert "EXTENDER_REQUEST_TIMEOUT=5s is not below" in loaded.warnings[0]

    bad = ExtenderSettings.from_env(
        {"EXTENDER_MAX_BODY_BYTES": "1.5", "EXTENDER_REQUEST_TIMEOUT": "0s"}
    ).problems
    assert [p.variable for p in bad] == ["EXTENDER_MAX_BODY_BYTES", "EXTENDER_REQUEST_TIMEOUT"]
    assert "whole number of bytes" in bad[0].detail
    assert [
        p.variable for p in ExtenderSettings.from_env({"EXTENDER_MAX_BODY_BYTES": "1Ki"}).problems
    ] == ["EXTENDER_MAX_BODY_BYTES"]

    namespace = ExtenderSettings.from_env({"POD_NAMESPACE": "Joulie_System"}).problems
    assert [p.variable for p in namespace] == ["POD_NAMESPACE"]

    for only in ("EXTENDER_TLS_CERT_FILE", "EXTENDER_TLS_KEY_FILE"):
        problems = ExtenderSettings.from_env({only: "/etc/tls/x.pem"}).problems
        assert [p.variable for p in problems] == [only]
        assert "is set without" in problems[0].detail


# --- preempt -----------------------------------------------------------------------------------

PREEMPT_BODY = json.dumps(
    {
        "Pod": {"metadata": {"name": "train", "namespace": "ml"}},
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {
            "cpu-a-01": {"Pods": [{"UID": "u1"}], "NumPDBViolations": 0},
            "gpu-h-08": {"Pods": [{"UID": "u2"}, {"UID": "u3"}], "NumPDBViolations": 1},
        },
    }
).encode()


@pytest.mark.asyncio
async def test_preempt_answers_the_candidates_the_placement_keeps(served: Served) -> None:
    before = count("preempt", "ok")
    status, answer = await served.post("/preempt", PREEMPT_BODY)
    assert status == 200
    assert answer == {
        "NodeNameToMetaVictims": {"cpu-a-01": {"Pods": [{"UID": "u1"}], "NumPDBViolations": 0}}
    }
    assert count("preempt", "ok") == before + 1


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "answer",
    [RuntimeError("broken"), [Candidate("elsewhere", ("u9",))], [Candidate("cpu-a-01", ("u9",))]],
)
async def test_a_preempt_without_a_decision_leaves_kube_schedulers_choice(
    served: Served, answer: Any
) -> None:
    if isinstance(answer, Exception):
        served.placement.fail = answer
    else:
        served.placement.answer = answer
    status, body = await served.post("/preempt", PREEMPT_BODY)
    assert status == 200
    assert body == {"NodeNameToMetaVictims": json.loads(PREEMPT_BODY)["NodeNameToMetaVictims"]}


@pytest.mark.asyncio
async def test_a_malformed_preempt_body_gets_400(served: Served) -> None:
    status, text = await served.post("/preempt", b'{"Pod":{},"NodeNameToMetaVictims":[]}')
    assert status == 400
    assert "NodeNameToMetaVictims is an array" in text
    assert served.placement.calls == []


def many_nodes_body(count: int) -> bytes:
    """NODES_BODY with ``count`` Node items, copies of its first under new names."""
    args = json.loads(NODES_BODY)
    first = args["Nodes"]["items"][0]
    items = []
    for i in range(count):
        item = json.loads(json.dumps(first))
        item["metadata"]["name"] = f"node-{i:05d}"
        items.append(item)
    args["Nodes"]["items"] = items
    return json.dumps(args).encode()


def many_candidates_body(count: int) -> bytes:
    """A preempt body with ``count`` candidate nodes, three victims each."""
    victims = {
        f"node-{i:05d}": {"Pods": [{"UID": f"u{i}-{v}"} for v in range(3)], "NumPDBViolations": 0}
        for i in range(count)
    }
    pod = json.loads(PREEMPT_BODY)["Pod"]
    return json.dumps({"Pod": pod, "NodeNameToMetaVictims": victims}).encode()


def containers(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(map(containers, value.values()))
    if isinstance(value, list):
        return 1 + sum(map(containers, value))
    return 0


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("verb", "body"),
    [
        ("filter", many_nodes_body(2000)),  # past intake.OFF_LOOP_BYTES: read on a thread
        ("prioritize", many_nodes_body(2000)),
        ("preempt", many_candidates_body(2000)),  # read on the loop
    ],
    ids=["filter", "prioritize", "preempt"],
)
async def test_a_request_is_freed_before_the_collector_is_back(
    served: Served, verb: str, body: bytes
) -> None:
    """The collector is paused while a request is decided; the request's decoded body must be
    gone when it comes back. Were it still alive, the next collection would walk all of it as
    new objects: each 5,000-Node body had cost an 80 ms young collection (bench.extender)."""
    decoded = containers(json.loads(body))
    young_at_collection: list[int] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            young_at_collection.append(len(gc.get_objects(generation=0)))

    threshold = gc.get_threshold()
    gc.set_threshold(1, *threshold[1:])  # any allocation after the pause collects
    gc.callbacks.append(on_gc)
    try:
        async with served.client.post(f"/{verb}", data=body) as response:
            status = response.status
            await response.read()  # not decoded here: that would be young objects too
    finally:
        gc.callbacks.remove(on_gc)
        gc.set_threshold(*threshold)
    assert status == 200
    assert young_at_collection
    assert max(young_at_collection) < decoded // 10, (decoded, max(young_at_collection))
