"""`python -m hack.demo` (what `make demo` runs). Settings come from the environment:
DEMO_DURATION (default 3m), DEMO_TIME_SCALE (60), DEMO_DIR, DEMO_SUMMARY; see hack/demo/run.py.
"""

from __future__ import annotations

import os
import sys

from hack.demo.run import DemoSettings, main


def entry() -> int:
    loaded = DemoSettings.from_env(os.environ)
    if loaded.problems:
        print("demo: invalid configuration:", file=sys.stderr)
        for problem in loaded.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    return main(loaded.settings)


if __name__ == "__main__":
    sys.exit(entry())
