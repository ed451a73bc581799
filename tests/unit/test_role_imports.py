"""A process loads what its roles use: the agent, which runs on every node, and the commands that
need no cluster do not pay for the manager's numpy, httpx and lifecycle actuators (about 16 MiB
of RSS each, measured by ``ru_maxrss`` after import: agent role 72.8 -> 56.7 MiB)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import importlib, json, sys
import joulie.cli
from joulie.process.roles import ROLES
for role in sys.argv[1:]:
    ROLES[role].settings
    importlib.import_module(ROLES[role].implementation.partition(":")[0])
heavy = ("numpy", "httpx", "grpc", "matplotlib", "joulie.manager")
print(json.dumps(sorted(m for m in heavy if m in sys.modules)))
"""


def loaded(*roles: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *roles], capture_output=True, text=True, check=True
    )
    found: list[str] = json.loads(out.stdout)
    return found


@pytest.mark.parametrize(
    ("roles", "expected"),
    [
        ((), []),  # `joulie plan`, `joulie status`, `joulie config` before a role is chosen
        (("agent",), []),
        (("simulator",), []),
        (("extender",), ["numpy"]),  # its score tables are arrays
        (("manager",), ["joulie.manager", "numpy"]),  # httpx only with a Prometheus or webhook
    ],
)
def test_a_role_loads_only_the_libraries_it_uses(
    roles: tuple[str, ...], expected: list[str]
) -> None:
    assert loaded(*roles) == expected
