"""`joulie plan ... | head -2`: a reader that stops early ends the command quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

JOULIE = str(Path(sys.executable).parent / "joulie")


def test_a_pipe_closed_early_ends_without_a_traceback(data_dir: Path) -> None:
    # The 5k inventory's JSON plan is far larger than a pipe's buffer, so the write meets the
    # closed pipe whatever the timing.
    process = subprocess.Popen(
        [
            JOULIE,
            "plan",
            "--inventory",
            str(data_dir / "inventories" / "02-cluster-nodes-5k.yaml"),
            "--output",
            "json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    first = [process.stdout.readline() for _ in range(2)]
    process.stdout.close()  # what `head -2` does once it has its lines
    stderr = process.stderr.read().decode()
    status = process.wait(timeout=60)
    assert first[0] == b"{\n"
    assert stderr == ""
    assert status in (0, 141)
