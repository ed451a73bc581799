"""A malformed YAML file given to the CLI: the message names the file and the line, never
PyYAML's "<unicode string>", and no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

JOULIE = str(Path(sys.executable).parent / "joulie")
INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "01-cluster-nodes.yaml"
MALFORMED = "nodes:\n  - node_name_prefix: [a\n"


def plan(inventory: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "HARDWARE_CATALOG_PATH"}
    return subprocess.run(
        [JOULIE, "plan", "--inventory", str(inventory)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **env},
    )


def assert_names_the_file(result: subprocess.CompletedProcess[str], path: Path) -> None:
    assert result.returncode == 2
    assert result.stderr.startswith(f"joulie: {path}: ")
    assert "<unicode string>" not in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_malformed_inventory_is_named_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "inventory.yaml"
    bad.write_text(MALFORMED)
    result = plan(bad)
    assert_names_the_file(result, bad)
    assert "inventory is not valid YAML at line 3, column 1" in result.stderr
    assert "started at line 2, column 23" in result.stderr


def test_a_malformed_hardware_catalog_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "catalog.yaml"
    bad.write_text("cpus: [\n")
    result = plan(INVENTORY, HARDWARE_CATALOG_PATH=str(bad))
    assert_names_the_file(result, bad)
    assert "the hardware catalog is not valid YAML at line 2" in result.stderr


@pytest.mark.parametrize("as_catalog", [False, True])
def test_a_binary_file_is_refused_by_name(tmp_path: Path, as_catalog: bool) -> None:
    binary = tmp_path / "data.bin"
    binary.write_bytes(b"\xff\xfe\x00binary")
    result = plan(INVENTORY, HARDWARE_CATALOG_PATH=str(binary)) if as_catalog else plan(binary)
    assert_names_the_file(result, binary)
    assert "not a text file" in result.stderr
