"""Where a role's memory goes: the top allocation sites of a traced heap, for every role's bench.

In the bench's own process (``bench.manager``), call :func:`start` and then :func:`top_sites`.
A role the bench runs as a ``joulie`` process (the pool agent, the extender) runs under this
module instead, which traces it from its first allocation and writes its top sites to a file
each time the bench asks (:func:`dump` creates ``OUT_FILE.request``; a thread polls for it,
since a signal handler would wait for the event loop to run Python code):

    python -m bench.heap OUT_FILE LIMIT -- --role=agent

``bench.agent_pool --tracemalloc N`` and ``bench.extender --tracemalloc N`` do that, signal at
the moments they measure, and print the file. Tracing slows a role several times over: the
timings of a traced run mean nothing, and RSS includes tracemalloc's own bookkeeping.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

FRAMES = int(os.environ.get("BENCH_TRACE_FRAMES", "4"))
"""Frames kept per allocation: enough to name the caller of a library function (``json``'s
decoder, ``copy``) that allocated for a Joulie module. Each frame slows tracing further; with
4 on a busy 2-core machine the in-process manager missed its lease renewals, so
``BENCH_TRACE_FRAMES=1`` trades the callers for speed."""


def start() -> None:
    tracemalloc.start(FRAMES)


def top_sites(limit: int, title: str = "") -> str:
    """The files and the lines holding the most traced memory now, in MiB; for an allocation
    inside the standard library or a dependency, the first Joulie frame that led to it."""
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [
            tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, __file__),
        ]
    )
    by_file = snapshot.statistics("filename")
    total = sum(s.size for s in by_file)
    lines = [f"traced memory{' ' + title if title else ''}: total {total / 2**20:.1f} MiB"]
    lines.append("  by file:")
    for stat in by_file[:limit]:
        frame = stat.traceback[0]
        lines.append(f"  {stat.size / 2**20:8.1f} MiB {stat.count:>9} blocks  {frame.filename}")
    lines.append("  by line (-> the Joulie line that called it):")
    for stat in snapshot.statistics("traceback")[:limit]:
        frame = stat.traceback[0]
        site = f"{_short(frame.filename)}:{frame.lineno}"
        caller = next(
            (f for f in stat.traceback if "/joulie/" in f.filename and f is not frame), None
        )
        if caller is not None and "/joulie/" not in frame.filename:
            site += f" -> {_short(caller.filename)}:{caller.lineno}"
        lines.append(f"  {stat.size / 2**20:8.1f} MiB {stat.count:>9} blocks  {site}")
    return "\n".join(lines)


def _short(filename: str) -> str:
    for marker in ("/site-packages/", "/lib/python3", "/work/", "/joulie/"):
        if marker in filename:
            return (
                filename.split(marker, 1)[1]
                if marker != "/joulie/"
                else "joulie/" + (filename.split(marker, 1)[1])
            )
    return filename


def command(out: Path, limit: int, role_args: list[str]) -> list[str]:
    """The command line that runs ``joulie role_args`` traced, writing to ``out`` on SIGUSR2."""
    return [sys.executable, "-m", "bench.heap", str(out), str(limit), "--", *role_args]


def dump(process: subprocess.Popen[bytes], out: Path, timeout: float = 300) -> str:
    """Has a process started by :func:`command` write its top sites now; returns them."""
    out.unlink(missing_ok=True)
    _request(out).touch()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if out.exists():
            return out.read_text()
        time.sleep(0.5)
    return f"(no heap dump from pid {process.pid} within {timeout:.0f} s)"


def _request(out: Path) -> Path:
    return out.with_name(out.name + ".request")


def main() -> None:
    out, limit = Path(sys.argv[1]), int(sys.argv[2])
    role_args = sys.argv[sys.argv.index("--") + 1 :]
    start()

    def serve() -> None:
        while True:
            time.sleep(0.5)
            if _request(out).exists():
                _request(out).unlink()
                text = top_sites(limit, f"of pid {os.getpid()}")
                tmp = out.with_name(out.name + ".tmp")
                tmp.write_text(text + "\n")
                tmp.replace(out)  # whole, at once: dump() reads it as soon as it exists

    threading.Thread(target=serve, name="heap-dump", daemon=True).start()
    from joulie.cli import entrypoint

    sys.argv = ["joulie", *role_args]
    entrypoint()


if __name__ == "__main__":
    main()
