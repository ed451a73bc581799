"""The per-role memory bench's heap dump: a role run under ``bench.heap`` names where its memory
went when the bench asks, while it keeps running."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from bench import heap
from hack.cluster.runner import free_port


def test_a_traced_role_reports_its_top_allocation_sites_on_request(tmp_path: Path) -> None:
    out = tmp_path / "heap.txt"
    env = {
        **os.environ,
        # No cluster: the simulator role keeps retrying its connection, which is all the
        # dump needs (a live process with a traced heap).
        "KUBECONFIG": str(tmp_path / "absent"),
        "SIM_ADDR": f"127.0.0.1:{free_port()}",
        "METRICS_ADDR": f"127.0.0.1:{free_port()}",
        "LOG_LEVEL": "error",
    }
    process = subprocess.Popen(
        heap.command(out, 5, ["--role=simulator"]),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        first = heap.dump(process, out, timeout=120)
        second = heap.dump(process, out, timeout=120)
        assert process.poll() is None, "dumping must not stop the role"
    finally:
        process.terminate()
        process.wait(timeout=30)
    for text in (first, second):
        assert text.startswith(f"traced memory of pid {process.pid}: total ")
        sites = [line for line in text.splitlines() if " MiB " in line and " blocks " in line]
        assert len(sites) == 10, text  # 5 files, 5 lines
