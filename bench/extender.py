"""Scheduler-extender figures at 5,000 nodes: filter and prioritize latency over HTTP, sustained
requests/s on one core, and kube-scheduler's throughput with and without the extender.

    python -m bench.extender [--requests 2000] [--full-requests 200] [--seconds 15]
        [--concurrency 8] [--pods 2000] [--performance-every 4] [--rounds 1] [--json FILE]
        [--skip-scheduler | --only-scheduler] [--go-client] [--setups NAME,...]
        [--scheduler-env NAME=VALUE] [--scheduler-profile S]

Reuses the benchmark cluster of bench.informer (JOULIE_BENCH_CLUSTER_DIR; run that first). The
manager (static_partition, 20 % performance, NODE_POWER_SOURCE=static) and the extender run as
`joulie` processes with the admin kubeconfig, the extender pinned to CPU 0 and this process (the
load) to CPU 1. The manager keeps running throughout: without its Lease every score would be
neutral and the scoring skipped. Before anything is timed the extender must hold 5,000 twins and
its debug view must show fresh, non-neutral terms.

1. Latency: one keep-alive connection, one request at a time, ``--requests`` per case for 1,000
   and 5,000 node names, ``--full-requests`` per case for 5,000 whole Node objects (as the API
   server lists them, managedFields kept); a performance pod and a standard pod (the filter only
   looks at nodes for the former). Times are client-side round trips on loopback. Name lists
   come two ways: the same list every time (kube-scheduler listing every node; the extender
   remembers it) and a new list each time (64 rotations, more than it remembers). Each case
   also gives the extender's own mean and its share of calls over the 5 ms budget, against the
   client's share, so a tail outside the extender's work shows. With ``--go-client`` the
   node-name cases are timed a second time by ``bench/goclient`` (built with ``go build``), a
   Go net/http client as kube-scheduler's HTTPExtender is: until the answer is read, and until
   it is decoded into the extender API's types (kube-scheduler's own cost of an answer).
2. Throughput: prioritize with 5,000 names on ``--concurrency`` connections for ``--seconds``,
   the same list and new lists.
3. kube-scheduler (unless ``--skip-scheduler``): the bench nodes are made Ready (a Ready condition
   and no not-ready taint; both put back as they were at the end), ``--pods`` small pending pods
   are created in a fresh namespace with kube-scheduler stopped, then kube-scheduler is started
   and the bindings are watched; pods/s is counted from the first binding to the last. Once
   without the extender and once with each shipped configuration's entries (``example``: filter,
   prioritize and preempt; ``prioritize-only``: no filter, for class_caps, and with
   manifests/placement in force; ``performance-filter``: the filter for performance pods
   alone, with manifests/performance-filter in force), ``--rounds`` times.
   The ``-null`` setups point the same entry at ``bench/nullextender`` (Go's standard library,
   built with ``go build``), which reads each body and answers that every node passes and none
   scores: what the calls alone cost kube-scheduler on the machine, whatever the extender.
   Every process's CPU time per pod, kube-scheduler's own metrics and the extender's request
   histogram show where a pod's time goes. The extender is no longer pinned here: everything
   shares both cores, as a control-plane node's processes would.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench import heap
from bench.agent_pool import TICKS, cpu_seconds, metric, peak_rss_mib, wait
from bench.informer import bench_cluster, ensure_objects
from bench.manager import percentile
from hack.cluster.runner import (
    EXTENDER_CONFIG,
    FEATURE_GATES,
    PERFORMANCE_FILTER_CONFIG,
    PERFORMANCE_FILTER_POLICY,
    PLACEMENT_POLICY,
    PRIORITIZE_ONLY_CONFIG,
    LocalCluster,
    free_port,
    manifest_extenders,
)
from joulie.api import keys

JOULIE = str(Path(sys.executable).parent / "joulie")
POD = Path(__file__).resolve().parents[1] / "tests/data/extender/pod.json"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
EXTENDER_CPU = 0
LOAD_CPU = 1
ALL_CPUS = set(range(os.cpu_count() or 1))
WARMUP = 50
LISTS = 64
PREEMPT_CANDIDATES = 500
"""Distinct node lists per "new lists" case: more than the extender remembers."""


@dataclass(frozen=True)
class Setup:
    """One way kube-scheduler runs in the pods/s measurement."""

    name: str
    config: Path | None
    """The shipped configuration whose extender entry kube-scheduler gets; None: no extender."""
    policy: Path | None = None
    """An admission policy (kustomize directory) in force while the pods are created:
    manifests/placement (the performance pods carry the node affinity that keeps them off eco
    nodes) or manifests/performance-filter (they carry the resource the filter entry manages)."""
    null_extender: bool = False
    """The entry points at bench/nullextender instead of Joulie: what the same calls cost
    kube-scheduler when the extender decides nothing (the floor for any extender)."""


SETUPS = {
    s.name: s
    for s in (
        Setup("none", None),
        Setup("example", EXTENDER_CONFIG),
        Setup("prioritize-only", PRIORITIZE_ONLY_CONFIG),
        Setup("prioritize-only+placement", PRIORITIZE_ONLY_CONFIG, PLACEMENT_POLICY),
        Setup("performance-filter", PERFORMANCE_FILTER_CONFIG, PERFORMANCE_FILTER_POLICY),
        Setup("example-null", EXTENDER_CONFIG, null_extender=True),
        Setup("prioritize-only-null", PRIORITIZE_ONLY_CONFIG, null_extender=True),
        Setup(
            "prioritize-only+placement-null",
            PRIORITIZE_ONLY_CONFIG,
            PLACEMENT_POLICY,
            null_extender=True,
        ),
        Setup(
            "performance-filter-null",
            PERFORMANCE_FILTER_CONFIG,
            PERFORMANCE_FILTER_POLICY,
            null_extender=True,
        ),
    )
}


# --- processes -----------------------------------------------------------------------------


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` on ``cpus`` (sched_setaffinity sets one thread's; threads started
    later take their creator's)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that has ended meanwhile
            os.sched_setaffinity(int(task.name), cpus)


class Joulie:
    """``joulie --role=<role>`` with the admin kubeconfig, its health and metrics on a port."""

    def __init__(
        self,
        cluster: LocalCluster,
        role: str,
        env: Mapping[str, str],
        log: Path,
        cpu: int | None,
        trace: int = 0,
    ) -> None:
        self.role = role
        self.metrics_port = free_port()
        self.log = log
        self.heap_file = log.with_name(f"heap-{role}.txt")
        argv = [JOULIE, f"--role={role}"]
        if trace:
            argv = heap.command(self.heap_file, trace, argv[1:])
        if cpu is not None:
            argv = ["taskset", "-c", str(cpu), *argv]
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                argv,
                env={
                    **os.environ,
                    "KUBECONFIG": str(cluster.admin_kubeconfig),
                    "METRICS_ADDR": f"127.0.0.1:{self.metrics_port}",
                    "LOG_FORMAT": "json",
                    "LOG_LEVEL": "warning",
                    "POD_NAMESPACE": "joulie-system",
                    **env,
                },
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def readyz(self) -> str:
        if self.process.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise SystemExit(f"the {self.role} exited with {self.process.returncode}:\n{tail}")
        response = httpx.get(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=10)
        return response.text if response.status_code == 200 else ""

    def metric(self, name: str, **labels: str) -> float:
        return metric(self.metrics_port, name, **labels)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=60)


def manager(cluster: LocalCluster, log: Path) -> Joulie:
    return Joulie(
        cluster,
        "manager",
        {
            "RECONCILE_INTERVAL": "1h",
            "POLICY_TYPE": "static_partition",
            "STATIC_HP_FRAC": "0.2",
            "NODE_POWER_SOURCE": "static",
        },
        log,
        None,
    )


def extender(cluster: LocalCluster, port: int, log: Path, trace: int = 0) -> Joulie:
    return Joulie(
        cluster,
        "extender",
        {"EXTENDER_ADDR": f"127.0.0.1:{port}", "EXTENDER_DEBUG": "true"},
        log,
        cpu=EXTENDER_CPU,
        trace=trace,
    )


def check_scoring(url: str, nodes: list[str]) -> dict[str, Any]:
    """The extender's terms for a sample of nodes: every one known, fresh, the Lease current and
    no neutral reason, or the figures would measure the skipped scoring."""
    sample = random.Random(7).sample(nodes, 50)
    problems: list[str] = []
    classes: dict[str, int] = {}
    for node in sample:
        answer = httpx.get(f"{url}/debug/score", params={"node": node}, timeout=10)
        answer.raise_for_status()
        terms = answer.json()["terms"]
        if not (terms.get("managerLeaseCurrent") and terms.get("known") and terms.get("fresh")):
            problems.append(f"{node}: {terms}")
        elif terms.get("neutralBecause"):
            problems.append(f"{node}: neutral because {terms['neutralBecause']}")
        cls = str(terms.get("schedulableClass"))
        classes[cls] = classes.get(cls, 0) + 1
    return {"sampled": len(sample), "not_scored": problems, "classes": classes}


class OtherLoad:
    """CPU time the machine spends outside the processes measured here, from now on: the
    development VM is shared, and figures taken while another job ran are not comparable."""

    def __init__(self, pids: Iterable[int]) -> None:
        self._pids = [*pids, os.getpid()]
        self._started = time.monotonic()
        self._busy = busy_seconds()
        self._ours = self.ours()

    def ours(self) -> float:
        total = 0.0
        for pid in self._pids:
            with contextlib.suppress(OSError):  # gone already
                total += cpu_seconds(pid)
        return total

    def share(self) -> float:
        """Their CPU time as a share of all cores' time since the start."""
        other = busy_seconds() - self._busy - (self.ours() - self._ours)
        cores = os.cpu_count() or 1
        return round(max(other, 0.0) / ((time.monotonic() - self._started) * cores), 3)


def busy_seconds() -> float:
    """CPU time all cores have spent not idle since boot."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / TICKS


def reference_ms(names: list[str]) -> float:
    """The machine's speed now, on the extender's core: the median time of a fixed piece of
    pure Python (decode a 5,000-name body, encode 5,000 HostPriority dicts with json). The VM is
    shared and its speed drifts by tens of percent over hours; compare runs by this too."""
    body = names_body({}, names)
    os.sched_setaffinity(0, {EXTENDER_CPU})
    times = []
    for _ in range(200):
        t0 = time.perf_counter()
        decoded = json.loads(body)["NodeNames"]
        json.dumps([{"Host": n, "Score": 5} for n in decoded], separators=(",", ":"))
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1000, 2)


# --- request bodies ------------------------------------------------------------------------


def pods() -> dict[str, dict[str, Any]]:
    """The test data's pending Job pod, as kube-scheduler sends it, in both workload classes."""
    performance = json.loads(POD.read_text())
    standard = json.loads(POD.read_text())
    standard["metadata"]["annotations"][keys.WORKLOAD_CLASS_ANNOTATION] = "standard"
    return {"performance": performance, "standard": standard}


def go_json(value: Any) -> bytes:
    """Compact JSON with the HTML escapes Go's encoder writes."""
    text = json.dumps(value, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


def names_body(pod: Mapping[str, Any], names: list[str]) -> bytes:
    return go_json({"Pod": pod, "Nodes": None, "NodeNames": names})


def nodes_body(pod: Mapping[str, Any], items: list[dict[str, Any]]) -> bytes:
    return go_json({"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None})


def preempt_body(pod: Mapping[str, Any], nodes: list[str], uids: list[str]) -> bytes:
    per_node = {
        node: {"Pods": [{"UID": uid} for uid in uids[3 * i : 3 * i + 3]], "NumPDBViolations": 0}
        for i, node in enumerate(nodes)
    }
    return go_json({"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": per_node})


def pod_uids(cluster: LocalCluster, count: int) -> list[str]:
    """UIDs of pods the cluster holds (the extender's pod cache knows them)."""
    with cluster.api() as api:
        page = api.get("/api/v1/pods", params={"limit": count}, timeout=120)
        page.raise_for_status()
        return [p["metadata"]["uid"] for p in page.json()["items"]]


def list_nodes(cluster: LocalCluster) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 1000}
    with cluster.api() as api:
        while True:
            page = api.get("/api/v1/nodes", params=params, timeout=120)
            page.raise_for_status()
            body = page.json()
            items += body["items"]
            token = body["metadata"].get("continue")
            if not token:
                return items
            params = {"limit": 1000, "continue": token}


# --- 1. latency ----------------------------------------------------------------------------


def summary(latencies: list[float]) -> dict[str, Any]:
    return {
        "requests": len(latencies),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "max_ms": round(max(latencies) * 1000, 2),
    }


def check_answer(verb: str, pod: str, sent: int, body: bytes) -> dict[str, Any]:
    """What the extender decided, in brief, so a run that measured pass-all or neutral answers
    shows it."""
    answer = json.loads(body)
    if verb == "preempt":
        kept = answer["NodeNameToMetaVictims"]
        return {"candidates_kept": len(kept)}
    if verb == "prioritize":
        # Only nodes above the lowest score are listed, each by how much (wire.prioritize_response).
        scores: dict[int, int] = {}
        for entry in answer:
            scores[entry["Score"]] = scores.get(entry["Score"], 0) + 1
        assert len(answer) <= sent, (len(answer), sent)
        return {"listed": len(answer), "scores_above_lowest": dict(sorted(scores.items()))}
    passing = answer["NodeNames"] if answer["NodeNames"] is not None else answer["Nodes"]["items"]
    assert len(passing) + len(answer["FailedNodes"]) == sent, pod
    return {"passing": len(passing), "failed": len(answer["FailedNodes"])}


def server_side(metrics_port: int) -> dict[str, dict[str, float]]:
    """The extender's own request and GC-pause histograms (sum and count per label set)."""
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    return histograms(text, ("joulie_extender_request_duration_seconds", "joulie_gc_pause_seconds"))


def gc_pauses(hist: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    return {
        key.removeprefix("joulie_gc_pause_seconds"): {
            "collections": v.get("count", 0.0),
            "total_ms": round(v.get("sum", 0.0) * 1000, 1),
        }
        for key, v in sorted(hist.items())
        if key.startswith("joulie_gc_pause_seconds") and v.get("count")
    }


async def latency_case(
    session: aiohttp.ClientSession, verb: str, bodies: list[bytes], count: int, metrics_port: int
) -> tuple[list[float], bytes, dict[str, float]]:
    """Client round trips of ``count`` requests after a warm-up (the bodies in turn), the last
    answer, and what the extender itself measured for them (from reading the body to the answer
    built): the mean, and the share over the 5 ms budget, to tell a tail of the server's own
    work from one of the round trip around it."""
    latencies: list[float] = []
    last = b""
    before: dict[str, dict[str, float]] = {}
    for i in range(WARMUP + count):
        if i == WARMUP:
            before = server_side(metrics_port)
        t0 = time.perf_counter()
        async with session.post(f"/{verb}", data=bodies[i % len(bodies)]) as response:
            last = await response.read()
            if response.status != 200:
                raise SystemExit(f"{verb}: HTTP {response.status}: {last[:300]!r}")
        if i >= WARMUP:
            latencies.append(time.perf_counter() - t0)
    key = f"joulie_extender_request_duration_seconds{{verb={verb}}}"
    served = delta(server_side(metrics_port), before)[key]
    return (
        latencies,
        last,
        {
            "server_mean_ms": round(served["sum"] / served["count"] * 1000, 2),
            "server_over_5ms": round(1 - served[BUDGET_BUCKET] / served["count"], 4),
            "client_over_5ms": round(sum(t > 0.005 for t in latencies) / len(latencies), 4),
        },
    )


async def measure_latency(
    url: str,
    metrics_port: int,
    cases: list[tuple[str, str, str, list[bytes], int, int]],
    go_client: GoClient | None = None,
) -> list[dict[str, Any]]:
    out = []
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=1)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(
        base_url=url, connector=connector, headers=headers, timeout=timeout
    ) as session:
        for form, pod, verb, bodies, sent, count in cases:
            latencies, last, served = await latency_case(session, verb, bodies, count, metrics_port)
            row = {"form": form, "pod": pod, "verb": verb, "body_bytes": len(bodies[0])}
            row |= summary(latencies) | served
            row |= check_answer(verb, pod, sent, last)
            if go_client is not None and "names" in form and verb != "preempt":
                row |= go_client.time(f"{url}/{verb}", verb, bodies, count)
            print(f"  {form:24} {pod:12} {verb:10} {row}", file=sys.stderr)
            out.append(row)
    return out


GO_CLIENT = Path(__file__).resolve().parent / "goclient"
NULL_EXTENDER = Path(__file__).resolve().parent / "nullextender"


def go_build(source: Path, binary: Path, needed_by: str) -> None:
    """``go build`` of the standard-library-only Go program in ``source`` into ``binary``."""
    env = os.environ | {"CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    try:
        subprocess.run(
            ["go", "build", "-o", str(binary), "."],
            cwd=source,
            env=env,
            check=True,
            capture_output=True,
        )
    except FileNotFoundError:
        raise SystemExit(f"{needed_by} needs the go command (hack/ builds with it)") from None
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"go build {source}: {exc.stderr.decode()[-2000:]}") from None


class NullExtender:
    """bench/nullextender, built into ``work`` and serving on a free loopback port."""

    def __init__(self, work: Path) -> None:
        binary = work / "nullextender"
        go_build(NULL_EXTENDER, binary, "the -null setups")
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [str(binary), "-addr", f"127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        wait(self._healthy, 30, "bench/nullextender to serve")

    def _healthy(self) -> bool:
        if self.process.poll() is not None:
            raise SystemExit(f"bench/nullextender exited with {self.process.returncode}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


class GoClient:
    """bench/goclient, built into ``work``: calls timed by Go's net/http client and decoded
    into the extender API's types, as kube-scheduler's HTTPExtender does."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.binary = work / "goclient"
        go_build(GO_CLIENT, self.binary, "--go-client")

    def time(self, url: str, verb: str, bodies: list[bytes], count: int) -> dict[str, Any]:
        folder = self.work / "goclient-bodies"
        folder.mkdir(exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        files = []
        for i, body in enumerate(bodies):
            files.append(folder / f"{i:03d}.json")
            files[-1].write_bytes(body)
        argv = [str(self.binary), "-url", url, "-verb", verb, "-n", str(count)]
        argv += ["-warmup", str(WARMUP), *map(str, files)]
        done = subprocess.run(argv, check=True, capture_output=True)
        timed = json.loads(done.stdout)
        answered, decoded = summary(timed["answered"]), summary(timed["decoded"])
        return {
            "go_p50_ms": answered["p50_ms"],
            "go_p99_ms": answered["p99_ms"],
            "go_decoded_p50_ms": decoded["p50_ms"],
            "go_decoded_p99_ms": decoded["p99_ms"],
        }


# --- 2. throughput -------------------------------------------------------------------------


async def measure_throughput(
    url: str, bodies: list[bytes], seconds: float, concurrency: int
) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    sent = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(base_url=url, connector=connector, headers=headers) as client:

        async def worker(deadline: float) -> None:
            nonlocal errors, sent
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                body = bodies[sent % len(bodies)]
                sent += 1
                async with client.post("/prioritize", data=body) as response:
                    await response.read()
                    if response.status != 200:
                        errors += 1
                latencies.append(time.perf_counter() - t0)

        # Every connection opened and warm before the clock starts.
        await asyncio.gather(*(worker(time.perf_counter() + 1.0) for _ in range(concurrency)))
        latencies.clear()
        started = time.perf_counter()
        await asyncio.gather(*(worker(started + seconds) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return {
        "concurrency": concurrency,
        "seconds": round(elapsed, 2),
        "errors": errors,
        "requests_per_second": round(len(latencies) / elapsed, 1),
    } | summary(latencies)


# --- 3. kube-scheduler ---------------------------------------------------------------------


def parallel(
    work: Callable[[httpx.Client, Any], None], items: Iterable[Any], cluster: LocalCluster
) -> None:
    """``work(client, item)`` for every item on 8 threads, each with a connection of its own."""
    local = threading.local()
    opened: list[httpx.Client] = []

    def run(item: Any) -> None:
        api = getattr(local, "api", None)
        if api is None:
            api = local.api = cluster.api()
            opened.append(api)
        work(api, item)

    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(run, items))
    finally:
        for api in opened:
            api.close()


def _patch(api: httpx.Client, path: str, body: Any, kind: str) -> None:
    response = api.patch(path, content=json.dumps(body), headers={"Content-Type": kind})
    response.raise_for_status()


SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


class NodeReadiness:
    """Makes the bench nodes schedulable the way a kubelet and the node lifecycle controller
    would (a Ready condition, no not-ready taint), remembering what each node had to put it
    back: the cached cluster stays as other benchmarks expect it."""

    def __init__(self, cluster: LocalCluster, nodes: list[dict[str, Any]]) -> None:
        self.cluster = cluster
        self.before: dict[str, tuple[dict[str, Any] | None, list[dict[str, Any]] | None]] = {}
        for node in nodes:
            conditions = (node.get("status") or {}).get("conditions") or []
            ready = next((c for c in conditions if c.get("type") == "Ready"), None)
            taints = (node.get("spec") or {}).get("taints")
            is_ready = ready is not None and ready.get("status") == "True"
            tainted = any(t.get("key") == NOT_READY_TAINT for t in taints or ())
            if not is_ready or tainted:
                self.before[node["metadata"]["name"]] = (ready, taints)

    def make_ready(self) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "set by bench.extender for the scheduling measurement",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }

        def ready(api: httpx.Client, name: str) -> None:
            _, taints = self.before[name]
            path = f"/api/v1/nodes/{name}"
            _patch(api, f"{path}/status", {"status": {"conditions": [condition]}}, SMP)
            kept = [t for t in taints or () if t.get("key") != NOT_READY_TAINT]
            if kept != (taints or []):
                _patch(api, path, {"spec": {"taints": kept or None}}, MERGE)

        parallel(ready, self.before, self.cluster)

    def restore(self) -> None:
        def restore(api: httpx.Client, name: str) -> None:
            condition, taints = self.before[name]
            path = f"/api/v1/nodes/{name}"
            if condition is None:
                condition = {"type": "Ready", "$patch": "delete"}
            _patch(api, f"{path}/status", {"status": {"conditions": [condition]}}, SMP)
            _patch(api, path, {"spec": {"taints": taints}}, MERGE)

        parallel(restore, self.before, self.cluster)


def small_pod(i: int, performance_every: int) -> dict[str, Any]:
    """Pod ``i``: 10m CPU and 16Mi, every ``performance_every``-th one (none for 0) annotated
    performance, the rest standard."""
    performance = performance_every > 0 and i % performance_every == 0
    workload = "performance" if performance else "standard"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"small-{i:05d}",
            "annotations": {keys.WORKLOAD_CLASS_ANNOTATION: workload},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example.com/small:1",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


class Scheduler:
    """kube-scheduler against the bench cluster, with the local cluster's flags and
    configuration (plus its metrics open to read without credentials)."""

    def __init__(
        self,
        cluster: LocalCluster,
        work: Path,
        extender_url: str,
        setup: Setup,
        cpus: set[int] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        config = cluster.scheduler_config()
        if setup.config is not None:
            config["extenders"] = manifest_extenders(extender_url, setup.config)
        name = setup.name
        path = work / f"scheduler-{name}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.log = work / f"scheduler-{name}.log"
        assert cluster.binaries is not None
        argv = [
            str(cluster.binaries / "kube-scheduler"),
            f"--config={path}",
            f"--authentication-kubeconfig={cluster.admin_kubeconfig}",
            f"--authorization-kubeconfig={cluster.admin_kubeconfig}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics,/debug/pprof/*",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={work / 'scheduler-certs'}",
            f"--feature-gates={FEATURE_GATES}",
        ]
        if cpus is not None:
            argv = ["taskset", "-c", ",".join(map(str, sorted(cpus))), *argv]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
            )

    def metrics(self) -> str:
        response = httpx.get(f"https://127.0.0.1:{self.port}/metrics", verify=False, timeout=30)
        response.raise_for_status()
        return response.text

    def profile(self, seconds: float, path: Path) -> threading.Thread:
        """Go's CPU profile of the next ``seconds`` (``go tool pprof -top`` reads it), written to
        ``path`` by a thread the caller joins."""

        def fetch() -> None:
            response = httpx.get(
                f"https://127.0.0.1:{self.port}/debug/pprof/profile",
                params={"seconds": str(max(1, round(seconds)))},
                verify=False,
                timeout=seconds + 60,
            )
            response.raise_for_status()
            path.write_bytes(response.content)

        thread = threading.Thread(target=fetch, daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=60)


BUDGET_BUCKET = "le=0.005"
"""The request-duration bucket of the 5 ms latency budget, kept apart from the sums and counts."""


def histograms(text: str, names: Iterable[str]) -> dict[str, dict[str, float]]:
    """``name{labels}`` -> {"sum", "count", BUDGET_BUCKET} for the histograms named (the
    bucket where the histogram has it)."""
    wanted = set(names)
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in wanted:
            continue
        for sample in family.samples:
            part = sample.name.removeprefix(family.name).lstrip("_")
            labels_of = dict(sample.labels)
            if part == "bucket" and labels_of.pop("le", None) == BUDGET_BUCKET[3:]:
                part = BUDGET_BUCKET
            elif part not in ("sum", "count"):
                continue
            labels = ",".join(f"{k}={v}" for k, v in sorted(labels_of.items()))
            key = f"{family.name}{{{labels}}}"
            out.setdefault(key, {})[part] = sample.value
    return out


SCHEDULER_HISTOGRAMS = (
    "scheduler_scheduling_attempt_duration_seconds",
    "scheduler_scheduling_algorithm_duration_seconds",
    "scheduler_framework_extension_point_duration_seconds",
    "scheduler_pod_scheduling_sli_duration_seconds",
)
EXTENDER_HISTOGRAMS = (
    "joulie_extender_request_duration_seconds",
    "joulie_extender_nodes_per_request",
)


def short_name(key: str) -> str:
    """``scheduler_framework_extension_point_duration_seconds{extension_point=Filter,...}`` as
    ``Filter``, ``scheduler_scheduling_algorithm_duration_seconds{}`` as
    ``scheduling_algorithm``, ``joulie_extender_request_duration_seconds{verb=filter}`` as
    ``filter``."""
    name, _, labels = key.partition("{")
    found = dict(part.split("=", 1) for part in labels.rstrip("}").split(",") if "=" in part)
    for label in ("extension_point", "verb"):
        if label in found:
            status = found.get("status", "Success")
            return found[label] if status == "Success" else f"{found[label]} ({status})"
    name = name.removeprefix("scheduler_").removesuffix("_duration_seconds")
    extra = {k: v for k, v in found.items() if k != "profile"}
    return f"{name} {extra}" if extra else name


def means(hist: Mapping[str, Mapping[str, float]], scale: float = 1000.0) -> dict[str, float]:
    """Mean per observation of each histogram (in ms with the default scale)."""
    return {
        short_name(key): round(v["sum"] / v["count"] * scale, 3)
        for key, v in sorted(hist.items())
        if v.get("count")
    }


def delta(
    after: Mapping[str, Mapping[str, float]], before: Mapping[str, Mapping[str, float]]
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for key, values in after.items():
        old = before.get(key, {})
        out[key] = {part: value - old.get(part, 0.0) for part, value in values.items()}
    return out


def watch_bindings(
    cluster: LocalCluster,
    namespace: str,
    count: int,
    since: str,
    timeout: float,
    on_first: Callable[[], None],
) -> dict[str, float]:
    """Pod name -> when its binding was seen (perf_counter), until ``count`` pods are bound;
    ``on_first`` is called at the first binding."""
    bound: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    rv = since
    with cluster.api() as api:
        while len(bound) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SystemExit(f"only {len(bound)} of {count} pods bound after {timeout:.0f} s")
            params = {
                "watch": "1",
                "resourceVersion": rv,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(max(1, int(left))),
            }
            path = f"/api/v1/namespaces/{namespace}/pods"
            with api.stream("GET", path, params=params, timeout=None) as response:
                response.raise_for_status()
                for line in response.iter_lines():
                    if not line:
                        continue
                    event = json.loads(line)
                    obj = event["object"]
                    rv = obj["metadata"].get("resourceVersion", rv)
                    if event["type"] in ("ADDED", "MODIFIED") and obj["spec"].get("nodeName"):
                        if not bound:
                            on_first()
                        bound.setdefault(obj["metadata"]["name"], time.perf_counter())
                        if len(bound) >= count:
                            break
    return bound


def namespace_up(cluster: LocalCluster, name: str) -> None:
    # No controller manager: the namespace's default ServiceAccount, which admission wants, is
    # created here.
    with cluster.api() as api:
        api.post("/api/v1/namespaces", json={"metadata": {"name": name}}).raise_for_status()
        api.post(
            f"/api/v1/namespaces/{name}/serviceaccounts", json={"metadata": {"name": "default"}}
        ).raise_for_status()


def namespace_down(cluster: LocalCluster, name: str) -> None:
    """Delete the namespace's pods at once (no kubelet would confirm a graceful deletion) and
    the namespace, finalized here (no namespace controller runs)."""
    with cluster.api() as api:
        api.request("DELETE", f"/api/v1/namespaces/{name}/pods", params={"gracePeriodSeconds": "0"})
        response = api.delete(f"/api/v1/namespaces/{name}")
        if response.status_code == 404:
            return
        response.raise_for_status()
        got = api.get(f"/api/v1/namespaces/{name}")
        if got.status_code == 404:
            return
        namespace = got.json()
        namespace["spec"]["finalizers"] = []
        api.put(f"/api/v1/namespaces/{name}/finalize", json=namespace).raise_for_status()


def leftovers(cluster: LocalCluster) -> None:
    """Namespaces an interrupted run left behind, and no other pod waiting for a scheduler."""
    with cluster.api() as api:
        for ns in api.get("/api/v1/namespaces").json()["items"]:
            if ns["metadata"]["name"].startswith("bench-extender-"):
                namespace_down(cluster, ns["metadata"]["name"])
        pending = api.get(
            "/api/v1/pods", params={"fieldSelector": "spec.nodeName=", "limit": 1}
        ).json()
        if pending["items"]:
            item = pending["items"][0]["metadata"]
            raise SystemExit(
                f"unscheduled pods in the cluster (e.g. {item['namespace']}/{item['name']}): "
                "kube-scheduler would schedule them too"
            )


def schedule_once(
    cluster: LocalCluster,
    work: Path,
    count: int,
    performance_every: int,
    setup: Setup,
    extender_url: str,
    ext: Joulie,
    pids: Mapping[str, int],
    profile_s: float = 0.0,
    scheduler_cpus: set[int] | None = None,
    scheduler_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One measurement: ``count`` pods created with kube-scheduler stopped, then kube-scheduler
    started as ``setup`` says (its extender entry pointed at ``extender_url``) until all are
    bound. ``pids``: processes whose CPU time over the binding window is reported
    (kube-scheduler's is added). ``profile_s``: take kube-scheduler's CPU profile for that long
    from the first binding. ``scheduler_env``: added to kube-scheduler's environment (Go's
    GOGC, GODEBUG=gctrace=1)."""
    namespace = f"bench-extender-{uuid.uuid4().hex[:6]}"
    namespace_up(cluster, namespace)
    scheduler: Scheduler | None = None
    try:
        t0 = time.monotonic()
        with (
            cluster.policy_in_force(setup.policy, namespace, small_pod(0, 1))
            if setup.policy is not None
            else contextlib.nullcontext()
        ):
            cluster.create_objects(
                f"/api/v1/namespaces/{namespace}/pods",
                [small_pod(i, performance_every) for i in range(count)],
                workers=8,
            )
        created_s = time.monotonic() - t0
        with cluster.api() as api:
            listed = api.get(f"/api/v1/namespaces/{namespace}/pods", params={"limit": 1}).json()
        since = listed["metadata"]["resourceVersion"]
        before_ext = histograms(ext_metrics(ext), EXTENDER_HISTOGRAMS)
        started = time.perf_counter()
        scheduler = Scheduler(cluster, work, extender_url, setup, scheduler_cpus, scheduler_env)
        watched = {**pids, "kube-scheduler": scheduler.process.pid}
        cpu0: dict[str, float] = {}
        others: list[OtherLoad] = []
        profiles: list[threading.Thread] = []

        def first() -> None:
            cpu0.update({name: cpu_seconds(pid) for name, pid in watched.items()})
            others.append(OtherLoad(watched.values()))
            if profile_s and scheduler is not None:
                profiles.append(scheduler.profile(profile_s, work / f"pprof-{setup.name}.pb.gz"))

        bound = watch_bindings(cluster, namespace, count, since, 900, first)
        cpu = {name: cpu_seconds(pid) - cpu0[name] for name, pid in watched.items()}
        for thread in profiles:
            thread.join()
        times = sorted(bound.values())
        window = times[-1] - times[0]
        joulie_called = setup.config is not None and not setup.null_extender
        result: dict[str, Any] = {
            "extender": setup.config is not None,
            "configuration": setup.name,
            "pods": count,
            "create_seconds": round(created_s, 1),
            "start_to_first_binding_s": round(times[0] - started, 2),
            "first_to_last_binding_s": round(window, 2),
            "pods_per_second": round((len(times) - 1) / window, 1),
            # CPU time per pod bound, from the first binding to the last (2 cores in all).
            "cpu_ms_per_pod": {k: round(v / count * 1000, 2) for k, v in cpu.items()},
            "cpu_share_of_2_cores": round(sum(cpu.values()) / (2 * window), 2),
            "other_cpu_share": others[0].share(),
        }
        sched = histograms(scheduler.metrics(), SCHEDULER_HISTOGRAMS)
        result["scheduler_mean_ms"] = means(sched)
        if joulie_called:
            served = delta(histograms(ext_metrics(ext), EXTENDER_HISTOGRAMS), before_ext)
            durations = {k: v for k, v in served.items() if "duration" in k}
            result["extender_server_mean_ms"] = means(durations)
            nodes = {k: v for k, v in served.items() if "nodes_per_request" in k}
            result["extender_nodes_per_request"] = means(nodes, scale=1.0)
        print(f"  {json.dumps(result)}", file=sys.stderr)
        return result
    finally:
        if scheduler is not None:
            scheduler.stop()
        namespace_down(cluster, namespace)


def ext_metrics(ext: Joulie | None) -> str:
    assert ext is not None
    return httpx.get(f"http://127.0.0.1:{ext.metrics_port}/metrics", timeout=10).text


# --- the run -------------------------------------------------------------------------------


def wait_extender(ext: Joulie, url: str, node_count: int) -> float:
    started = time.monotonic()

    def ready() -> bool:
        text = ext.readyz()
        return f"{node_count} nodes with twins" in text

    wait(ready, 600, f"the extender to hold {node_count} twins")
    wait(lambda: httpx.get(f"{url}/readyz").status_code == 200, 60, "the extender's /readyz")
    return time.monotonic() - started


def run(args: argparse.Namespace, cluster: LocalCluster, work: Path) -> dict[str, Any]:
    figures: dict[str, Any] = {"setup": ensure_objects(cluster, 5000, 100_000)}
    nodes = list_nodes(cluster)
    names = [n["metadata"]["name"] for n in nodes]
    figures["nodes"] = len(names)
    mgr = manager(cluster, work / "manager.log")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    ext: Joulie | None = None
    try:
        t0 = time.monotonic()
        wait(lambda: "ready (leader)" in mgr.readyz(), 900, "the manager to sync and lead")
        wait(
            lambda: mgr.metric("joulie_manager_reconcile_duration_seconds_count") >= 1,
            900,
            "the manager's first reconcile",
        )
        figures["manager_ready_s"] = round(time.monotonic() - t0, 1)
        ext = extender(cluster, port, work / "extender.log", args.tracemalloc)
        figures["extender_synced_s"] = round(wait_extender(ext, url, len(names)), 1)
        if args.tracemalloc:
            figures["heap_after_sync"] = heap.dump(ext.process, ext.heap_file)
        figures["scoring_check"] = check_scoring(url, names)
        if figures["scoring_check"]["not_scored"]:
            raise SystemExit(f"the extender is not scoring: {figures['scoring_check']}")

        if not args.only_scheduler:
            measure_requests(args, cluster, work, nodes, url, ext, mgr, figures)
        if not args.skip_scheduler:
            figures["scheduler"] = measure_scheduler(args, cluster, work, nodes, url, ext, mgr)
        figures["extender_peak_rss_mib"] = round(peak_rss_mib(ext.process.pid), 1)
        if args.tracemalloc:
            figures["heap_at_end"] = heap.dump(ext.process, ext.heap_file)
    finally:
        if ext is not None:
            ext.stop()
        mgr.stop()
    return figures


def measure_requests(
    args: argparse.Namespace,
    cluster: LocalCluster,
    work: Path,
    nodes: list[dict[str, Any]],
    url: str,
    ext: Joulie,
    mgr: Joulie,
    figures: dict[str, Any],
) -> None:
    """Latency per case and prioritize throughput, the extender pinned to CPU 0 (into
    ``figures``)."""
    names = [n["metadata"]["name"] for n in nodes]
    rng = random.Random(1)
    sample = rng.sample(names, 1000)
    shuffled = rng.sample(names, len(names))
    figures["reference_ms"] = reference_ms(shuffled)
    # The load runs on the other core from here on.
    os.sched_setaffinity(0, {LOAD_CPU})
    items = rng.sample(nodes, len(nodes))
    victim_uids = pod_uids(cluster, PREEMPT_CANDIDATES * 3)
    # "same list": every request names the same nodes, as kube-scheduler does when it lists
    # every node (and in a prioritize after a filter); "new lists": each request a list the
    # extender has not seen lately (rotations of the same nodes), so nothing is remembered.
    windows = [rng.randrange(len(names)) for _ in range(LISTS)]
    new_1k = [sample[k % 1000 :] + sample[: k % 1000] for k in windows]
    new_5k = [shuffled[k:] + shuffled[:k] for k in windows]
    cases = []
    n = args.requests
    # The node-name cases (the shipped form) first, for both pods: a Node-object body leaves
    # the extender's heap spread over 250 MiB, which a names-form extender never sees. (In one
    # run the standard pod's name cases, then after the performance pod's Node objects, took a
    # third longer on the server; with this order both pods took the same, so the machine's
    # speed within the run explains at least part of that.)
    for form, name_lists, sent, count in (
        ("1,000 names, same list", [sample], 1000, n),
        ("1,000 names, new lists", new_1k, 1000, n),
        ("5,000 names, same list", [shuffled], 5000, n),
        ("5,000 names, new lists", new_5k, 5000, n),
    ):
        for pod_name, pod in pods().items():
            bodies = [names_body(pod, x) for x in name_lists]
            for verb in ("filter", "prioritize"):
                cases.append((form, pod_name, verb, bodies, sent, count))
    for pod_name, pod in pods().items():
        bodies = [nodes_body(pod, items)]
        for verb in ("filter", "prioritize"):
            cases.append(("5,000 Node objects", pod_name, verb, bodies, 5000, args.full_requests))
        # What kube-scheduler's default preemption sends at 5,000 nodes: 10 % of the
        # nodes as candidates (minCandidateNodesPercentage), three victims on each.
        preempt = preempt_body(pod, rng.sample(names, PREEMPT_CANDIDATES), victim_uids)
        cases.append(("500 candidates", pod_name, "preempt", [preempt], 0, n))
    ours = [c.pid for c in cluster.components.values() if c.pid is not None]
    ours += [mgr.process.pid, ext.process.pid]
    other = OtherLoad(ours)
    cpu0 = cpu_seconds(ext.process.pid)
    before = server_side(ext.metrics_port)
    go_client = GoClient(work) if args.go_client else None
    figures["latency"] = asyncio.run(measure_latency(url, ext.metrics_port, cases, go_client))
    figures["latency_other_cpu_share"] = other.share()
    figures["latency_gc"] = gc_pauses(delta(server_side(ext.metrics_port), before))
    figures["latency_extender_cpu_s"] = round(cpu_seconds(ext.process.pid) - cpu0, 1)

    standard = pods()["standard"]
    figures["throughput"] = []
    for lists, bodies in (
        ("same list", [names_body(standard, shuffled)]),
        ("new lists", [names_body(standard, n) for n in new_5k]),
    ):
        other = OtherLoad(ours)
        cpu0 = cpu_seconds(ext.process.pid)
        before = server_side(ext.metrics_port)
        throughput = asyncio.run(measure_throughput(url, bodies, args.seconds, args.concurrency))
        throughput["lists"] = lists
        throughput["other_cpu_share"] = other.share()
        served = delta(server_side(ext.metrics_port), before)
        handled = served["joulie_extender_request_duration_seconds{verb=prioritize}"]
        throughput["server_mean_ms"] = round(handled["sum"] / handled["count"] * 1000, 2)
        throughput["gc"] = gc_pauses(served)
        throughput["extender_cpu_share"] = round(
            (cpu_seconds(ext.process.pid) - cpu0) / (throughput["seconds"] + 1.0), 2
        )
        figures["throughput"].append(throughput)
    os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))


def measure_scheduler(
    args: argparse.Namespace,
    cluster: LocalCluster,
    work: Path,
    nodes: list[dict[str, Any]],
    url: str,
    ext: Joulie,
    mgr: Joulie,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    leftovers(cluster)
    setups = [SETUPS[name] for name in args.setups]
    null: NullExtender | None = None
    pids: dict[str, int] = {}
    readiness = NodeReadiness(cluster, nodes)
    out["nodes_made_ready"] = len(readiness.before)
    try:
        if any(s.null_extender for s in setups):
            null = NullExtender(work)
        t0 = time.monotonic()
        readiness.make_ready()
        out["make_ready_s"] = round(time.monotonic() - t0, 1)
        pids = {name: c.pid for name, c in cluster.components.items() if c.pid is not None}
        pids |= {"manager": mgr.process.pid, "extender": ext.process.pid}
        if null is not None:
            pids["null-extender"] = null.process.pid
        scheduler_cpus: set[int] | None = None
        if args.extender_own_core:
            # The extender on a core of its own, as in a cluster where it runs on a node other
            # than the control plane's: kube-scheduler, the API server, etcd, the manager (and
            # this bench's watch) share the other, with and without the extender alike, so the
            # ratio shows what the calls cost kube-scheduler's cycle, not the extender's CPU.
            scheduler_cpus = {LOAD_CPU}
            for name, pid in pids.items():
                extender = name in ("extender", "null-extender")
                pin(pid, {EXTENDER_CPU} if extender else scheduler_cpus)
            os.sched_setaffinity(0, scheduler_cpus)
        else:
            # kube-scheduler, the API server, etcd, the manager and the extender share both
            # cores, as they would share a control-plane node: the extender is no longer pinned.
            pin(ext.process.pid, ALL_CPUS)
            if null is not None:
                pin(null.process.pid, ALL_CPUS)
        out["extender_own_core"] = bool(args.extender_own_core)
        runs = []
        for _ in range(args.rounds):
            for setup in setups:
                runs.append(
                    schedule_once(
                        cluster,
                        work,
                        args.pods,
                        args.performance_every,
                        setup,
                        null.url if null is not None and setup.null_extender else url,
                        ext,
                        pids,
                        args.scheduler_profile,
                        scheduler_cpus,
                        dict(args.scheduler_env),
                    )
                )
        out["runs"] = runs
        without = statistics.median(r["pods_per_second"] for r in runs if not r["extender"])
        out["pods_per_second_without"] = without
        for setup in setups:
            if setup.config is None:
                continue
            with_ = [r["pods_per_second"] for r in runs if r["configuration"] == setup.name]
            out[f"pods_per_second_with {setup.name}"] = statistics.median(with_)
            out[f"with_over_without {setup.name}"] = round(statistics.median(with_) / without, 3)
    finally:
        if args.extender_own_core:
            for pid in pids.values():
                pin(pid, ALL_CPUS)
            os.sched_setaffinity(0, ALL_CPUS)
        if null is not None:
            null.stop()
        t0 = time.monotonic()
        readiness.restore()
        out["restore_s"] = round(time.monotonic() - t0, 1)
    return out


def report(figures: Mapping[str, Any]) -> None:
    print(f"nodes {figures['nodes']}, twins checked: {figures['scoring_check']}")
    if "latency" in figures:
        print(f"machine speed reference (smaller is faster): {figures['reference_ms']} ms")
        print(
            f"{'case':56} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'server':>7} "
            f"{'>5 ms':>13} {'n':>5}  answer"
        )
        for row in figures["latency"]:
            case = f"{row['verb']} {row['pod']}, {row['form']}"
            shown = ("scores", "passing", "failed", "candidates_kept")
            answer = {k: v for k, v in row.items() if k in shown}
            over = f"{row['server_over_5ms']:.1%}/{row['client_over_5ms']:.1%}"
            print(
                f"{case:56} {row['p50_ms']:>7} {row['p99_ms']:>7} {row['max_ms']:>7} "
                f"{row['server_mean_ms']:>7} {over:>13} {row['requests']:>5}  {answer}"
            )
            if "go_p50_ms" in row:
                print(
                    f"{'  Go client: answered / decoded':56} {row['go_p50_ms']:>7} "
                    f"{row['go_p99_ms']:>7}  /  {row['go_decoded_p50_ms']} "
                    f"{row['go_decoded_p99_ms']}"
                )
        print(
            "(server: the extender's own mean, from reading the body to the answer built; "
            ">5 ms: share of calls over the budget, in the extender / at the client)"
        )
        print(f"extender GC during the latency cases: {figures['latency_gc']}")
        print(
            "other processes' share of the cores meanwhile (a shared machine): "
            f"{figures['latency_other_cpu_share']}"
        )
        for t in figures["throughput"]:
            print(
                f"prioritize, 5,000 names, {t['lists']}, {t['concurrency']} connections, extender "
                f"on one core: {t['requests_per_second']} requests/s (p50 {t['p50_ms']} / p99 "
                f"{t['p99_ms']} ms, server mean {t['server_mean_ms']} ms, {t['errors']} errors, "
                f"extender CPU {t['extender_cpu_share']} of a core, GC {t['gc']}, other processes "
                f"{t['other_cpu_share']} of the cores)"
            )
    print(f"extender peak RSS {figures['extender_peak_rss_mib']} MiB")
    for moment in ("after_sync", "at_end"):
        if f"heap_{moment}" in figures:
            print(f"extender heap, {moment.replace('_', ' ')}: {figures[f'heap_{moment}']}")
    sched = figures.get("scheduler")
    if sched:
        for r in sched["runs"]:
            label = f"with {r['configuration']}" if r["extender"] else "without extender"
            print(
                f"kube-scheduler {label}: {r['pods_per_second']} pods/s "
                f"({r['pods']} pods bound in {r['first_to_last_binding_s']} s from the first "
                f"binding; start to first binding {r['start_to_first_binding_s']} s)"
            )
            print(f"    kube-scheduler, mean ms per pod: {r['scheduler_mean_ms']}")
            print(
                f"    CPU ms per pod: {r['cpu_ms_per_pod']} "
                f"({r['cpu_share_of_2_cores']} of both cores busy with these, "
                f"{r['other_cpu_share']} with other processes)"
            )
            if "extender_server_mean_ms" in r:  # Joulie's extender was called (not a -null setup)
                print(f"    extender, mean ms per call: {r['extender_server_mean_ms']}")
                print(f"    extender, nodes per call: {r['extender_nodes_per_request']}")
        for key, value in sched.items():
            if key.startswith("with_over_without"):
                print(f"{key.replace('_', ' ')}: {value}")
        print(f"({sched['nodes_made_ready']} nodes made Ready for it, restored after)")


def setup_names(text: str) -> list[str]:
    """``--setups``: names of SETUPS, comma-separated (a name may come twice)."""
    names = text.split(",")
    unknown = [name for name in names if name not in SETUPS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown setup {unknown[0]!r} (known: {', '.join(SETUPS)})"
        )
    return names


def env_entry(text: str) -> tuple[str, str]:
    """``--scheduler-env``: NAME=VALUE."""
    name, equals, value = text.partition("=")
    if not (name and equals):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000, help="per case, node-name bodies")
    parser.add_argument("--full-requests", type=int, default=200, help="per Node-object case")
    parser.add_argument("--seconds", type=float, default=15, help="throughput measurement")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--pods", type=int, default=2000, help="pods kube-scheduler places")
    parser.add_argument("--rounds", type=int, default=1, help="without/with pairs")
    parser.add_argument(
        "--performance-every",
        type=int,
        default=4,
        metavar="N",
        help="every N-th pod kube-scheduler places is a performance pod (0: none)",
    )
    parser.add_argument("--skip-scheduler", action="store_true")
    parser.add_argument(
        "--extender-own-core",
        action="store_true",
        help="kube-scheduler's pods/s with the extender on one core and the control plane "
        "(kube-scheduler, API server, etcd, manager) on the other, in every setup",
    )
    parser.add_argument(
        "--setups",
        type=setup_names,
        default=list(SETUPS),
        help=f"kube-scheduler's setups, in order, comma-separated ({','.join(SETUPS)}; "
        "'none' is needed for the ratios)",
    )
    parser.add_argument(
        "--only-scheduler",
        action="store_true",
        help="leave out the latency and throughput cases (kube-scheduler's pods/s alone)",
    )
    parser.add_argument(
        "--scheduler-profile",
        type=float,
        default=0.0,
        metavar="S",
        help="take kube-scheduler's CPU profile for S seconds from each run's first binding "
        "(pprof-*.pb.gz in the bench cluster's bench-extender folder; go tool pprof -top)",
    )
    parser.add_argument(
        "--scheduler-env",
        type=env_entry,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="add to kube-scheduler's environment in every setup (e.g. GOGC=400, "
        "GODEBUG=gctrace=1: its log then has a line per collection); repeatable",
    )
    parser.add_argument(
        "--go-client",
        action="store_true",
        help="time the node-name cases with bench/goclient too (Go's net/http, as "
        "kube-scheduler calls; needs the go command)",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--tracemalloc",
        type=int,
        default=0,
        metavar="N",
        help="trace the extender (bench.heap; timings then mean nothing) and print its top N "
        "allocation sites after sync and at the end",
    )
    args = parser.parse_args()
    cluster = bench_cluster()
    cluster.up()
    try:
        # Logs and kube-scheduler's configuration stay for a look after the run.
        work = cluster.work_dir / "bench-extender"
        work.mkdir(exist_ok=True)
        figures = run(args, cluster, work)
    finally:
        cluster.down()
    # Written first: a figure the report cannot print must not lose the run's figures.
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    report(figures)


if __name__ == "__main__":
    main()
