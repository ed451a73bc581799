"""`make demo`'s settings: a value it cannot use is named, with what it accepts, before anything
starts (no cluster, no process)."""

from __future__ import annotations

import os
import subprocess
import sys

from hack.cluster.runner import REPO
from hack.demo.view import clock, progress


def test_a_bad_setting_stops_the_demo_before_it_starts() -> None:
    env = {**os.environ, "DEMO_DURATION": "soon", "DEMO_TIME_SCALE": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "hack.demo"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "DEMO_DURATION='soon'" in done.stderr
    assert "DEMO_TIME_SCALE='0'" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_the_view_shows_progress_and_time_plainly() -> None:
    assert progress(0.5) == "[" + "#" * 20 + "." * 20 + "]  50%"
    assert progress(1.7).endswith("100%")
    assert (clock(75), clock(3 * 3600 + 60)) == ("1m15s", "3h01m")
