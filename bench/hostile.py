"""The extender under hostile calls: what a sender on its port can do to it, as figures.

    python -m bench.hostile [--fuzz 5000] [--json FILE]

A real API server and etcd (the benchmarks' cluster of bench.informer, JOULIE_BENCH_CLUSTER_DIR,
with or without its 5,000 nodes) and a real ``joulie --role=extender`` process. While each kind
of hostile call below is sent, /healthz on the process's metrics port is asked every 50 ms; the
figures are the requests sent, the answers by status (no 5xx may come), the worst /healthz time,
the extender's RSS before, at its peak and after, and the longest line it logged.

1. bodies nested 990 levels (Nodes form and pod), which had come back as 500 after 2.3 s;
2. prioritize calls whose CPU request is ``1e10000000``, which had blocked the process 6 s each;
3. a million node names per call, four calls at a time (4 s of the loop each before);
4. four 100 MB bodies at once (RSS to 640 MiB before);
5. 300 connections that send half a request and wait (they had been held for an hour);
6. bodies trickling in a byte every 200 ms (408 at the request limit);
7. ``--fuzz`` malformed bodies (truncated, retyped, random bytes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from bench.extender import Joulie
from bench.informer import bench_cluster
from hack.cluster.runner import free_port

DEEP = b"[" * 990 + b"]" * 990


def rss_mib(pid: int, key: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Probe:
    """/healthz every 50 ms; the worst time and the failures."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/healthz"
        self.worst = 0.0
        self.failures = 0
        self.asked = 0

    async def run(self, stop: asyncio.Event) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    async with session.get(self.url) as response:
                        await response.read()
                        ok = response.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    ok = False
                self.asked += 1
                self.failures += not ok
                self.worst = max(self.worst, time.perf_counter() - started)
                await asyncio.sleep(0.05)


def names_body(count: int, pod: dict[str, Any] | None = None) -> bytes:
    names = ",".join(f'"node-{i:07d}"' for i in range(count))
    return json.dumps({"Pod": pod or {}, "Nodes": None}).encode()[:-1] + (
        f',"NodeNames":[{names}]}}'.encode()
    )


def fuzzed(rng: random.Random) -> bytes:
    base = names_body(50, {"metadata": {"name": "p"}})
    kind = rng.randrange(4)
    if kind == 0:
        return base[: rng.randrange(len(base))]
    if kind == 1:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(300)))
    if kind == 2:
        at = rng.randrange(len(base))
        return base[:at] + rng.choice([b"{", b"]", b'"', b"\\", b"\x00", b"1e999"]) + base[at:]
    return json.dumps({"Pod": rng.choice([[], 1, "x", None]), "NodeNames": [1, None]}).encode()


async def send(
    session: aiohttp.ClientSession, url: str, body: bytes, statuses: Counter[int]
) -> None:
    try:
        async with session.post(url, data=body) as response:
            await response.read()
            statuses[response.status] += 1
    except (aiohttp.ClientError, TimeoutError):
        statuses[0] += 1  # no answer (the connection was closed)


async def phases(base: str, port: int, fuzz: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    timeout = aiohttp.ClientTimeout(total=60)

    async def batch(name: str, bodies: list[tuple[str, bytes]], at_once: int) -> None:
        statuses: Counter[int] = Counter()
        started = time.perf_counter()
        limit = asyncio.Semaphore(at_once)
        async with aiohttp.ClientSession(timeout=timeout) as session:

            async def one(verb: str, body: bytes) -> None:
                async with limit:
                    await send(session, f"{base}/{verb}", body, statuses)

            await asyncio.gather(*(one(v, b) for v, b in bodies))
        out[name] = {
            "requests": len(bodies),
            "statuses": dict(sorted(statuses.items())),
            "seconds": round(time.perf_counter() - started, 2),
        }

    pod_nodes = b'{"Pod":{"metadata":{"name":"p"}},"Nodes":{"items":[{"metadata":{"name":"a"},"x":'
    await batch(
        "nested 990 levels",
        [("filter", pod_nodes + DEEP + b"}]}}")] * 100
        + [("prioritize", b'{"Pod":{"x":' + DEEP + b'},"NodeNames":["a"]}')] * 100,
        4,
    )
    huge_cpu = {"spec": {"containers": [{"resources": {"requests": {"cpu": "1e10000000"}}}]}}
    await batch("cpu 1e10000000", [("prioritize", names_body(100, huge_cpu))] * 200, 4)
    million = names_body(1_000_000)
    await batch("a million names", [("prioritize", million)] * 8, 4)
    big = names_body(10, {"pad": "x" * 100_000_000})
    await batch("100 MB bodies", [("filter", big)] * 4, 4)
    del big, million

    # Half-open connections: how many the server closed within the wait.
    held = []
    for _ in range(300):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /filter HTTP/1.1\r\nHost: x\r\n")
        held.append((reader, writer))
    await asyncio.sleep(20)
    closed_by_server = 0
    for reader, writer in held:
        with contextlib.suppress(TimeoutError, ConnectionError):  # still open: no end read
            closed_by_server += await asyncio.wait_for(reader.read(1), 0.2) == b""
        writer.close()
    out["300 half-open connections"] = {
        "requests": 300,
        "waited_s": 20,
        "closed_by_the_server": closed_by_server,
    }

    # Trickling bodies.
    statuses: Counter[int] = Counter()
    started = time.perf_counter()

    async def trickle() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        body = names_body(5)
        writer.write(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
        answer = asyncio.create_task(reader.readline())  # the status line, whenever it comes
        try:
            for byte in body:
                if answer.done():
                    break
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.2)
            line = await asyncio.wait_for(answer, 30)
        except ConnectionError:
            line = answer.result() if answer.done() and not answer.exception() else b""
        statuses[int(line.split()[1]) if line else 0] += 1
        writer.close()

    await asyncio.gather(*(trickle() for _ in range(10)))
    out["a byte every 200 ms"] = {
        "requests": 10,
        "statuses": dict(statuses),
        "seconds": round(time.perf_counter() - started, 2),
    }

    rng = random.Random(7)
    await batch(
        "fuzzed bodies",
        [(rng.choice(["filter", "prioritize", "preempt"]), fuzzed(rng)) for _ in range(fuzz)],
        8,
    )
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    cluster = bench_cluster()
    cluster.up()
    port = free_port()
    log = cluster.work_dir / "hostile-extender.log"
    log.unlink(missing_ok=True)
    extender = Joulie(
        cluster,
        "extender",
        {"EXTENDER_ADDR": f"127.0.0.1:{port}", "LOG_LEVEL": "info"},
        log,
        cpu=None,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if "ready" in extender.readyz():
                    break
            except httpx.TransportError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise SystemExit("the extender never became ready")
            await asyncio.sleep(0.5)
        pid = extender.process.pid
        before = rss_mib(pid)
        probe = Probe(extender.metrics_port)
        stop = asyncio.Event()
        probing = asyncio.create_task(probe.run(stop))
        results = await phases(f"http://127.0.0.1:{port}", port, args.fuzz)
        stop.set()
        await probing
        await asyncio.sleep(2)
        lines = log.read_bytes().splitlines() if log.exists() else []
        sent = sum(int(r["requests"]) for r in results.values())
        five_xx = sum(
            n for r in results.values() for s, n in r.get("statuses", {}).items() if s >= 500
        )
        return {
            "phases": results,
            "requests": sent,
            "answers_5xx": five_xx,
            "healthz": {
                "asked": probe.asked,
                "failed": probe.failures,
                "worst_s": round(probe.worst, 3),
            },
            "rss_mib": {
                "before": round(before, 1),
                "peak": round(rss_mib(pid, "VmHWM"), 1),
                "after": round(rss_mib(pid), 1),
            },
            "log": {"lines": len(lines), "longest_bytes": max(map(len, lines), default=0)},
            "extender_alive": extender.process.poll() is None,
        }
    finally:
        extender.stop()
        cluster.down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fuzz", type=int, default=5000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = asyncio.run(main_async(args))
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    sys.exit(0 if report["answers_5xx"] == 0 and report["extender_alive"] else 1)


if __name__ == "__main__":
    main()
