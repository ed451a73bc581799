"""Prometheus is a prerequisite of `make test`, not a silent skip: the tests that need it fail
under `make test` and CI when it is missing, and `make test` installs it or says how."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.processes import prometheus_binary


def without_prometheus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("JOULIE_REQUIRE_PROMETHEUS", raising=False)


def test_missing_prometheus_fails_under_make_test(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    without_prometheus(monkeypatch, tmp_path)
    monkeypatch.setenv("JOULIE_REQUIRE_PROMETHEUS", "1")
    with pytest.raises(pytest.fail.Exception, match="make prometheus"):
        prometheus_binary()


def test_missing_prometheus_skips_a_plain_local_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    without_prometheus(monkeypatch, tmp_path)
    with pytest.raises(pytest.skip.Exception, match="apt-get install"):
        prometheus_binary()


def test_make_test_installs_prometheus_then_requires_it(repo_root: Path) -> None:
    shown = subprocess.run(
        ["make", "-n", "test"], cwd=repo_root, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    install = lines.index("hack/install-prometheus.sh")
    run = next(i for i, line in enumerate(lines) if line.endswith("/pytest -q"))
    assert install < run
    assert lines[run].startswith("JOULIE_REQUIRE_PROMETHEUS=1 ")


def test_install_script_says_how_when_it_cannot_install(tmp_path: Path, repo_root: Path) -> None:
    # A machine without prometheus, as an ordinary user with apt-get available.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    bash = shutil.which("bash")
    assert bash is not None
    (bin_dir / "bash").symlink_to(bash)
    for name, output in (("id", "1000"), ("apt-get", "")):
        (bin_dir / name).write_text(f"#!{bash}\necho {output}\n")
        (bin_dir / name).chmod(0o755)
    result = subprocess.run(
        [bash, str(repo_root / "hack" / "install-prometheus.sh")],
        env={**os.environ, "PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "sudo apt-get install --no-install-recommends prometheus" in result.stderr
