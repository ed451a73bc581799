"""The extender's prioritize verb on new node-name lists, in process: no cluster, no sockets.

    python -m bench.prioritize [--nodes 5000] [--names N] [--requests 2000] [--warmup 100]
        [--seed 1] [--verb prioritize|filter] [--stages] [--profile N] [--json FILE]

The score table holds ``--nodes`` fresh twins, each made the way the extender's cache makes it
(``twin_view`` and ``hardware_view`` of a NodeTwin and a NodeHardware as the API server would
send them, then ``view_terms``): 20 % performance, 2 % draining, the rest eco, three hardware
kinds, powers and budgets drawn from a seeded generator, one node in four with a moving power
trend. The manager's Lease counts as current, so every answer is scored (never the neutral
shortcut).

Each request is a body as kube-scheduler writes it in the nodeCacheCapable form: the test
data's pending Job pod (4 CPUs, 16 GiB, a GPU), annotated standard for one case and performance
for the other, and ``NodeNames``: ``--names`` nodes (default every node) drawn at random and in
a random order, made just before the request. No list is sent twice, so nothing the extender
remembers of earlier lists (``wire.NameLists``, the score table's rows of the last lists) can
answer it; the pod is the same within a case, as pod after pod of one Job would be. The request
goes through the extender's own aiohttp handler for ``POST /prioritize`` (body intake, parsing,
the placement, the answer and the request metric), called directly with a request object: the
time is the server's work without the network. Every 97th answer is checked: HTTP 200, every
name in the order sent, and for a sample of names the priority of the scalar score
(``explain``).

``--verb filter`` sends the same bodies to ``POST /filter`` instead, with the nodes whose twin
says eco also labelled eco in the extender's own watch, as the manager labels them live (the
names-form fallback for nodes without a twin class then has 78 % of the nodes to consider);
every 97th answer is checked against the twins' classes. ``--stages`` is for prioritize only.

Figures: wall p50 / p99 / max per request, requests/s (one core, back to back) and the CPU time
of the thread per request (p50 / p99: on a shared machine the wall time also counts the time
other processes held the core), after ``--warmup`` requests. ``--stages`` times the steps of
500 more requests apart (reading the body, which looks the names up as it checks them; the
placement's scores; writing the answer); ``--profile N`` prints the N functions with the most
own time under cProfile. The garbage collector is set as the roles set it (young threshold
10,000, everything built so far frozen); the handler pauses it per request, as it does live.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import pstats
import random
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, cast

from aiohttp import StreamReader, web
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from bench.extender import go_json, pods
from joulie.core.score_table import ScoreTable
from joulie.extender import wire
from joulie.extender.cache import ExtenderCache, hardware_view, twin_view, view_terms
from joulie.extender.placement import CachePlacement
from joulie.extender.server import extender_app
from joulie.extender.settings import ExtenderSettings

GROUPS = (
    # name, logical CPUs, watts per socket, share of the nodes
    ("cpu-std", 128, 280.0, 0.6),
    ("cpu-dense", 384, 400.0, 0.3),
    ("gpu", 192, 350.0, 0.1),
)


class _Cache:
    """What CachePlacement reads of the extender's cache: the table and the manager's Lease."""

    def __init__(self) -> None:
        self.table = ScoreTable()
        self.eco_labelled: frozenset[str] = frozenset()
        """The nodes labelled eco (``--verb filter`` labels those whose twin says eco)."""
        self.groups = None
        self.synced = True

    def manager_alive(self, now: float) -> bool:
        return True


def twin(name: str, rng: random.Random, klass: str) -> dict[str, Any]:
    capped = rng.choice((900.0, 1400.0, 2600.0))
    measured = rng.uniform(0.1, 1.05) * capped
    trend = rng.uniform(-80.0, 80.0) if rng.random() < 0.25 else 0.0
    return {
        "metadata": {"name": name},
        "status": {
            "schedulableClass": klass,
            "predictedPowerHeadroomScore": (capped - measured) / capped * 100,
            "predictedCoolingStressScore": rng.uniform(5.0, 70.0),
            "powerMeasurement": {
                "source": "http",
                "measuredNodePowerW": measured,
                "nodeCappedPowerW": capped,
                "powerTrendWPerMin": trend,
            },
        },
    }


def hardware(name: str, cores: int, watts: float, gpus: bool) -> dict[str, Any]:
    status: dict[str, Any] = {
        "cpu": {"sockets": 2, "totalCores": cores, "capRange": {"maxWattsPerSocket": watts}}
    }
    if gpus:
        status["gpu"] = {"present": True, "count": 8, "capRangePerGpu": {"maxWatts": 700.0}}
    return {"metadata": {"name": name}, "status": status}


def nodes(count: int) -> list[tuple[str, int, float, bool]]:
    """``count`` nodes of the hardware groups by their shares: name, logical CPUs, CPU watts per
    socket, whether it has GPUs."""
    out: list[tuple[str, int, float, bool]] = []
    for g, (group, cores, watts, share) in enumerate(GROUPS):
        n = count - len(out) if g == len(GROUPS) - 1 else round(count * share)
        out += [(f"kwok-{group}-{i:05d}", cores, watts, group == "gpu") for i in range(n)]
    return out


def build_placement(count: int, seed: int) -> tuple[CachePlacement, list[str]]:
    """A placement over ``count`` fresh twins, set as the cache's informer handlers set them."""
    rng = random.Random(seed)
    cache = _Cache()
    for name, cores, watts, gpus in nodes(count):
        draw = rng.random()
        klass = "draining" if draw < 0.02 else "performance" if draw < 0.22 else "eco"
        twin_v = twin_view(twin(name, rng, klass))
        hardware_v = hardware_view(hardware(name, cores, watts, gpus))
        assert twin_v.problem is None, twin_v.problem
        assert hardware_v.problem is None, hardware_v.problem
        cache.table.set(twin_v.name, view_terms(twin_v, hardware_v))
    names = [name for name, *_ in nodes(count)]
    return CachePlacement(cast(ExtenderCache, cache)), names


class _Body:
    """A request's content as aiohttp hands it over, in one chunk."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    async def iter_any(self) -> AsyncIterator[bytes]:
        yield self._body


def mocked_request(app: web.Application, body: bytes, verb: str = "prioritize") -> web.Request:
    headers = CIMultiDict({"Content-Type": "application/json", "Content-Length": str(len(body))})
    payload = cast(StreamReader, _Body(body))
    return make_mocked_request("POST", f"/{verb}", headers=headers, payload=payload, app=app)


def check(
    answer: web.StreamResponse, names: list[str], placement: CachePlacement, pod: Mapping[str, Any]
) -> None:
    """HTTP 200, the names listed in the order sent, and for a sample of all names the priority
    of the scalar score (``explain``), not of the table's columns, less one amount for all (the
    answer leaves out the nodes at the lowest priority and takes it off the others)."""
    body = cast(web.Response, answer).body
    assert answer.status == 200, (answer.status, body)
    listed = {e["Host"]: e["Score"] for e in json.loads(cast(bytes, body))}
    assert list(listed) == [n for n in names if n in listed], "hosts not in the order sent"
    less = {
        placement.explain(pod, n)["priority"] - listed.get(n, 0)
        for n in names[:: max(1, len(names) // 25)]
    }
    assert len(less) == 1, less


KEPT_OFF = ("eco", "draining")


def check_filter(
    answer: web.StreamResponse, names: list[str], placement: CachePlacement, pod: Mapping[str, Any]
) -> None:
    """HTTP 200 and every node kept or refused as its twin's class says (eco and draining nodes
    refused for a performance pod, none for a standard pod), the kept ones in the order sent."""
    body = cast(web.Response, answer).body
    assert answer.status == 200, (answer.status, body)
    out = json.loads(cast(bytes, body))
    performance = pod["metadata"]["annotations"]["joulie.io/workload-class"] == "performance"
    table = placement.cache.table
    refused = {
        n
        for n in names
        if performance and str(getattr(table.terms(n), "schedulable_class", "")) in KEPT_OFF
    }
    assert out["NodeNames"] == [n for n in names if n not in refused]
    assert set(out["FailedNodes"]) == refused


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * len(ordered)) - 1)]
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(p99 * 1000, 3),
        "max_ms": round(ordered[-1] * 1000, 3),
        "requests_per_s": round(len(ordered) / sum(ordered), 1),
    }


async def run_case(
    app: web.Application,
    handler: Callable[[web.Request], Any],
    placement: CachePlacement,
    pod: Mapping[str, Any],
    names: list[str],
    rng: random.Random,
    sent: int,
    requests: int,
    warmup: int,
    profiler: cProfile.Profile | None = None,
    verb: str = "prioritize",
) -> dict[str, float]:
    times: list[float] = []
    cpu_times: list[float] = []
    checked = check_filter if verb == "filter" else check
    for i in range(warmup + requests):
        listed = rng.sample(names, sent)
        body = go_json({"Pod": pod, "Nodes": None, "NodeNames": listed})
        request = mocked_request(app, body, verb)
        if profiler is not None:
            profiler.enable()
        c0 = time.thread_time()
        t0 = time.perf_counter()
        answer = await handler(request)
        elapsed = time.perf_counter() - t0
        cpu = time.thread_time() - c0
        if profiler is not None:
            profiler.disable()
        if i >= warmup:
            times.append(elapsed)
            cpu_times.append(cpu)
        if i % 97 == 0:
            checked(answer, listed, placement, pod)
    on_cpu = summary(cpu_times)
    return summary(times) | {"cpu_p50_ms": on_cpu["p50_ms"], "cpu_p99_ms": on_cpu["p99_ms"]}


def stages(
    placement: CachePlacement,
    pod: Mapping[str, Any],
    names: list[str],
    rng: random.Random,
    sent: int,
    n: int,
) -> dict[str, float]:
    """The same work as the handler, step by step (p50 of each, ms)."""
    lists = wire.NameLists()
    steps: dict[str, list[float]] = {"read": [], "scores": [], "answer": []}
    for _ in range(n):
        body = go_json({"Pod": pod, "Nodes": None, "NodeNames": rng.sample(names, sent)})
        gc.disable()
        t0 = time.perf_counter()
        args = wire.parse_args(body, lists, placement.names_distinct)
        t1 = time.perf_counter()
        scores = placement.prioritize(args.pod, args.names)
        t2 = time.perf_counter()
        wire.prioritize_response(args.names, scores, args.plain)
        t3 = time.perf_counter()
        gc.enable()
        steps["read"].append(t1 - t0)
        steps["scores"].append(t2 - t1)
        steps["answer"].append(t3 - t2)
    return {f"{k}_p50_ms": round(statistics.median(v) * 1000, 3) for k, v in steps.items()}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    placement, names = build_placement(args.nodes, args.seed)
    if args.verb == "filter":
        table = placement.cache.table
        cast(_Cache, placement.cache).eco_labelled = frozenset(
            n for n in names if str(getattr(table.terms(n), "schedulable_class", "")) == "eco"
        )
    settings = ExtenderSettings()
    app = extender_app(placement, settings)
    handler = (await app.router.resolve(mocked_request(app, b"{}", args.verb))).handler
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    rng = random.Random(args.seed + 1)
    sent = min(args.names or len(names), len(names))
    figures: dict[str, Any] = {
        "nodes": args.nodes,
        "verb": args.verb,
        "names": sent,
        "requests": args.requests,
        "cases": {},
    }
    for kind, pod in pods().items():
        profiler = cProfile.Profile() if args.profile and kind == "standard" else None
        row = await run_case(
            app,
            handler,
            placement,
            pod,
            names,
            rng,
            sent,
            args.requests,
            args.warmup,
            profiler,
            args.verb,
        )
        if profiler is not None:
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(
                args.profile
            )
        if args.stages and args.verb == "prioritize":
            row |= stages(placement, pod, names, rng, sent, 500)
        figures["cases"][kind] = row
        print(f"  {kind:12} {row}", file=sys.stderr)
    await app.cleanup()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--names", type=int, default=0, help="names per request (0: every node)")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--verb", choices=("prioritize", "filter"), default="prioritize")
    parser.add_argument("--stages", action="store_true")
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    figures = asyncio.run(main_async(args))
    print(f"{figures['verb']}: {figures['nodes']} nodes, {figures['names']} new names per request")
    print(
        f"{'pod':12} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'requests/s':>11}"
        f" {'CPU p50 ms':>11} {'CPU p99 ms':>11}"
    )
    for kind, row in figures["cases"].items():
        print(
            f"{kind:12} {row['p50_ms']:8.3f} {row['p99_ms']:8.3f} {row['max_ms']:8.3f} "
            f"{row['requests_per_s']:11.1f} {row['cpu_p50_ms']:11.3f} {row['cpu_p99_ms']:11.3f}"
        )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
