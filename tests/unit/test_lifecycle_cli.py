"""`joulie lifecycle matrix`, as an operator runs it to read or check the policy matrix."""

from __future__ import annotations

import ast
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from joulie.api.lifecycle import Action, default_matrix, load_matrix
from joulie.cli import main

JOULIE = str(Path(sys.executable).parent / "joulie")
SPEC_TABLE = Path(__file__).resolve().parents[1] / "data" / "lifecycle" / "spec-matrix.txt"


@pytest.fixture(autouse=True)
def no_matrix_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LIFECYCLE_MATRIX_FILE", raising=False)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["lifecycle", "matrix", *args])
    out, err = capsys.readouterr()
    return code, out, err


def table_rows(out: str) -> list[list[str]]:
    lines = out.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("STATE")))
    columns = [lines[header].index(name) for name in ("WINDOW", "BOOT GRACE", "IDLE GRACE")]
    columns.append(lines[header].index("ACTION"))
    rows = []
    for line in lines[header + 1 :]:
        bounds = [0, *columns, len(line)]
        rows.append([line[a:b].strip() for a, b in itertools.pairwise(bounds)])
    return rows


def test_the_table_lists_every_tuple_with_the_spec_action(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys)
    assert code == 0, err
    assert out.splitlines()[0] == "lifecycle matrix: the default lifecycle matrix"
    spec = ast.literal_eval(SPEC_TABLE.read_text())
    expected = [[*key, "None" if action is None else action] for key, action in spec.items()]
    assert table_rows(out) == expected  # 48 rows, aligned, in the spec's order
    assert len(expected) == 48


def test_json_is_a_matrix_file_load_matrix_reads_back(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run(capsys, "--output", "json")
    assert code == 0, err
    assert json.loads(out) == default_matrix().to_document()
    path = tmp_path / "matrix.json"
    path.write_text(out)
    assert load_matrix(path).actions == default_matrix().actions


def test_an_override_file_is_printed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    document = default_matrix().to_document()
    document["entries"][24][4] = "START_DRAIN"  # (idle, closed, boot exceeded, idle exceeded)
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(document))
    code, out, err = run(capsys, "--file", str(path))
    assert code == 0, err
    assert out.splitlines()[0] == f"lifecycle matrix: {path}"
    rows = table_rows(out)
    assert rows[24] == ["idle", "closed", "boot exceeded", "idle exceeded", "START_DRAIN"]
    code, out, _ = run(capsys, "--file", str(path), "--output", "json")
    assert code == 0
    assert load_matrix(path).actions == load_matrix(_written(tmp_path, out)).actions


def test_the_file_in_the_environment_is_the_one_in_effect(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    document = default_matrix().to_document()
    for entry in document["entries"]:
        entry[4] = "None"
    path = tmp_path / "never.yaml"
    path.write_text(yaml.safe_dump(document))
    monkeypatch.setenv("LIFECYCLE_MATRIX_FILE", str(path))
    code, out, err = run(capsys)
    assert code == 0, err
    assert {row[-1] for row in table_rows(out)} == {Action.NONE.value}
    # --file wins over the environment.
    code, out, _ = run(
        capsys, "--file", str(_written(tmp_path, json.dumps(default_matrix().to_document())))
    )
    assert {row[-1] for row in table_rows(out)} == {a.value for a in Action}


def test_an_invalid_file_exits_2_naming_the_tuple(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    document = default_matrix().to_document()
    del document["entries"][30]
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(document))
    code, out, err = run(capsys, "--file", str(path))
    assert code == 2
    assert out == ""
    assert str(path) in err
    assert "tuple (idle, open, boot exceeded, idle exceeded): missing" in err


def test_an_invalid_file_in_the_environment_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LIFECYCLE_MATRIX_FILE", str(tmp_path / "absent.yaml"))
    code, out, err = run(capsys, "--output", "json")
    assert code == 2
    assert out == ""
    assert "absent.yaml: cannot read lifecycle matrix" in err


def test_an_empty_file_flag_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--file", "")
    assert code == 2
    assert "--file must name a file" in err


def test_lifecycle_without_a_command_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lifecycle"]) == 2
    assert "matrix" in capsys.readouterr().err


def test_the_installed_command(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LIFECYCLE_MATRIX_FILE"}
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "version: 1\nentries:\n  - [busy, closed, boot exceeded, idle exceeded, DRAIN]\n"
    )
    result = subprocess.run(
        [JOULIE, "lifecycle", "matrix", "--file", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 2
    assert "tuple (busy, closed, boot exceeded, idle exceeded): action 'DRAIN' is unknown" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
    helped = subprocess.run([JOULIE, "--help"], capture_output=True, text=True, timeout=60, env=env)
    assert "lifecycle" in helped.stdout


def _written(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "copy.yaml"
    path.write_text(text)
    return path
