"""matplotlib is an extra (`joulie[plots]`) the role images do not install: nothing but the
charts imports it, and without it a chart ends the command with one line naming the extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from joulie.sim import plots

# Imports every module of the package but the `python -m` entry points (the charts' module too:
# it imports matplotlib only inside its functions) and says which matplotlib modules that loaded.
IMPORT_ALL = """
import importlib, pkgutil, sys
import joulie
for info in pkgutil.walk_packages(joulie.__path__, "joulie."):
    if not info.name.endswith(".__main__"):  # runs the CLI
        importlib.import_module(info.name)
print(sorted(m for m in sys.modules if m.split(".")[0] == "matplotlib"))
"""

# `joulie simulate --output DIR` with matplotlib made unimportable, as in a role image.
WITHOUT_MATPLOTLIB = """
import sys
sys.modules["matplotlib"] = None
sys.argv = ["joulie", *sys.argv[1:]]
from joulie.cli import entrypoint
entrypoint()
"""


def test_no_module_imports_matplotlib_at_import_time() -> None:
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_chart_without_matplotlib_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(plots.PlotsExtraMissing) as caught:
        plots.energy_figure([])
    message = str(caught.value.code)
    assert "joulie[plots]" in message
    assert "--no-plots" in message
    assert "\n" not in message
    with pytest.raises(plots.PlotsExtraMissing):
        plots.require_plots()


def test_require_plots_passes_where_matplotlib_is_installed() -> None:
    plots.require_plots()


def test_simulate_without_matplotlib_ends_with_one_line(tmp_path: Path) -> None:
    args = ["simulate", "--hours", "1", "--baselines", "A", "--quiet", "--output", str(tmp_path)]
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_MATPLOTLIB, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [str(plots.PlotsExtraMissing().code)]
    # What needs no chart is written before the first chart is tried.
    assert (tmp_path / "results.json").is_file()
    assert not list(tmp_path.glob("*.png"))
    # Without charts the same command succeeds.
    plain = subprocess.run(
        [sys.executable, "-c", WITHOUT_MATPLOTLIB, *args, "--no-plots"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plain.returncode == 0, plain.stderr
