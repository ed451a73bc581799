"""`make test` installs the package without setuptools' "Editable installation" banner, and
without hiding any other warning."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

# What setuptools' InformationOnly.emit prints for an editable install (summary first).
BANNER = (
    "Editable installation.\n!!\n\n        ****\n        Please be careful with folders in your "
    "working directory with the same\n        name as your package as they may take precedence "
    "during imports.\n        ****\n\n!!"
)


def editable_install_env(repo_root: Path) -> dict[str, str]:
    """The variables the Makefile sets in front of its `pip install -e`."""
    shown = subprocess.run(
        ["make", "-n", "-W", "pyproject.toml", "install"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    (line,) = [line for line in shown.stdout.splitlines() if re.search(r"pip install .*-e ", line)]
    words = shlex.split(line)
    return dict(
        w.split("=", 1) for w in words[: next(i for i, w in enumerate(words) if "=" not in w)]
    )


def warn(message: str, env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "-c", f"import warnings; warnings.warn({message!r}, UserWarning)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.stderr


def test_the_editable_install_banner_is_filtered(repo_root: Path) -> None:
    env = editable_install_env(repo_root)
    assert "PYTHONWARNINGS" in env
    assert warn(BANNER, env) == ""


def test_other_warnings_still_show(repo_root: Path) -> None:
    env = editable_install_env(repo_root)
    shown = warn("Something else went wrong", env)
    assert "Something else went wrong" in shown
    assert "Invalid -W option" not in shown
