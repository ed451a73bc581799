"""Roles for exercising the runtime in a real process: `python -m tests.support.demo_roles MODE`.

MODE is `ok` (a well-behaved role), `stuck` (ignores the stop request) or `crash` (fails on
its own).
The role writes what it did to the file named by DEMO_ROLE_LOG, so a test can see that a graceful
shutdown really ran the role's cleanup.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from joulie.process.logs import configure_logging
from joulie.process.runtime import run
from joulie.process.settings import ProcessSettings


class DemoRole:
    def __init__(self, name: str, mode: str, log: Path) -> None:
        self.name = name
        self.mode = mode
        self.log = log
        self._ready = False

    def is_ready(self) -> bool:
        return self._ready

    def note(self, text: str) -> None:
        with self.log.open("a") as f:
            f.write(text + "\n")

    async def run(self, stopping: asyncio.Event) -> None:
        self.note(f"{self.name} started")
        await asyncio.sleep(float(os.environ.get("DEMO_READY_DELAY", "0.5")))
        self._ready = True
        if self.mode == "crash":
            raise RuntimeError("demo role failure")
        await stopping.wait()
        if self.mode == "stuck":
            await asyncio.sleep(3600)
        self.note(f"{self.name} cleaned up")


def main() -> int:
    mode = sys.argv[1]
    loaded = ProcessSettings.from_env(os.environ)
    assert not loaded.problems, loaded.problems
    configure_logging(loaded.settings.log_format, loaded.settings.log_level)
    log = Path(os.environ["DEMO_ROLE_LOG"])
    roles = [DemoRole("first", "ok", log), DemoRole("second", mode, log)]
    return run(roles, loaded.settings)


if __name__ == "__main__":
    sys.exit(main())
