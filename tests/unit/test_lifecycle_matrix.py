"""The node-lifecycle policy matrix: the default is the spec's table, entry for entry, and an
operator's override file is checked whole before any node depends on it."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from joulie.api.lifecycle import (
    Action,
    BootGrace,
    IdleGrace,
    MatrixError,
    StateTuple,
    Window,
    WorkerState,
    all_tuples,
    default_matrix,
    load_matrix,
    matrix_from_document,
)

SPEC_TABLE = Path(__file__).resolve().parents[1] / "data" / "lifecycle" / "spec-matrix.txt"


def spec_table() -> dict[tuple[str, str, str, str], str | None]:
    table = ast.literal_eval(SPEC_TABLE.read_text())
    assert isinstance(table, dict)
    return table


SPEC = spec_table()


def key_of(entry: tuple[str, str, str, str]) -> StateTuple:
    state, window, boot, idle = entry
    return StateTuple(WorkerState(state), Window(window), BootGrace(boot), IdleGrace(idle))


def document() -> dict[str, Any]:
    return default_matrix().to_document()


def write(tmp_path: Path, content: Any, name: str = "matrix.yaml") -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    return path


def problem(tmp_path: Path, content: Any) -> str:
    path = write(tmp_path, content)
    with pytest.raises(MatrixError) as caught:
        load_matrix(path)
    message = str(caught.value)
    assert str(path) in message
    return message


# --- the default is the spec's table --------------------------------------------------------------


def test_the_spec_table_is_the_whole_product_of_its_value_lists() -> None:
    assert len(SPEC) == 48
    values = (
        ["unpaired", "busy", "idle", "down"],
        ["open", "closed"],
        ["boot wait", "boot exceeded"],
        ["not idle", "idle wait", "idle exceeded"],
    )
    assert set(SPEC) == set(itertools.product(*values))


@pytest.mark.parametrize(
    ("entry", "expected"), list(SPEC.items()), ids=[" / ".join(entry) for entry in SPEC]
)
def test_default_matrix_gives_the_spec_action(
    entry: tuple[str, str, str, str], expected: str | None
) -> None:
    action = default_matrix().action(key_of(entry))
    assert action is (Action.NONE if expected is None else Action(expected))


def test_default_matrix_is_total_and_listed_in_the_spec_order() -> None:
    matrix = default_matrix()
    assert len(matrix.actions) == 48
    assert set(matrix.actions) == set(all_tuples())
    assert [key for key, _ in matrix.rows()] == [key_of(entry) for entry in SPEC]


def test_no_path_means_the_default() -> None:
    default = default_matrix()
    assert load_matrix(None).actions == default.actions
    assert load_matrix("").actions == default.actions


# --- an operator's override -----------------------------------------------------------------------


def test_an_override_file_changes_an_action(tmp_path: Path) -> None:
    doc = document()
    # This site never drains an idle node while its billing window is closed ... unless told to.
    target = ["idle", "closed", "boot exceeded", "idle exceeded"]
    for entry in doc["entries"]:
        if entry[:4] == target:
            entry[4] = "START_DRAIN"
    path = write(tmp_path, doc)
    matrix = load_matrix(path)
    key = key_of(("idle", "closed", "boot exceeded", "idle exceeded"))
    assert matrix.action(key) is Action.START_DRAIN
    assert default_matrix().action(key) is Action.NONE
    changed = [k for k in all_tuples() if matrix.action(k) != default_matrix().action(k)]
    assert changed == [key]
    assert matrix.source == str(path)


def test_a_yaml_null_action_means_do_nothing(tmp_path: Path) -> None:
    doc = document()
    for entry in doc["entries"]:
        if entry[4] == "None":
            entry[4] = None
    assert load_matrix(write(tmp_path, doc)).actions == default_matrix().actions


def test_to_document_round_trips() -> None:
    matrix = default_matrix()
    again = matrix_from_document(matrix.to_document(), "copy")
    assert again.actions == matrix.actions
    assert again.to_document() == matrix.to_document()


def test_to_document_round_trips_through_a_file(tmp_path: Path) -> None:
    matrix = default_matrix()
    assert load_matrix(write(tmp_path, matrix.to_document())).actions == matrix.actions


# --- invalid files: each problem names what it is about -------------------------------------------


def test_a_missing_tuple_is_named(tmp_path: Path) -> None:
    doc = document()
    doc["entries"] = [
        e for e in doc["entries"] if e[:4] != ["down", "open", "boot wait", "not idle"]
    ]
    message = problem(tmp_path, doc)
    assert "tuple (down, open, boot wait, not idle): missing" in message
    assert message.count(": missing") == 1


def test_many_missing_tuples_are_summarised(tmp_path: Path) -> None:
    doc = document()
    doc["entries"] = doc["entries"][:38]
    message = problem(tmp_path, doc)
    assert "tuple (unpaired, closed, boot exceeded, not idle): missing" in message
    assert "(unpaired, closed, boot exceeded, idle wait)" not in message
    assert "and 2 more" in message


def test_an_unknown_action_names_the_tuple_and_the_accepted_actions(tmp_path: Path) -> None:
    doc = document()
    doc["entries"][30][4] = "POWER_OFF"
    message = problem(tmp_path, doc)
    assert "tuple (idle, open, boot exceeded, idle exceeded): action 'POWER_OFF' is unknown" in (
        message
    )
    assert "(accepted: None, START_DRAIN, START_SHUTDOWN)" in message


@pytest.mark.parametrize(
    ("column", "value", "field", "accepted"),
    [
        (0, "sleeping", "worker state", "unpaired, busy, idle, down"),
        (1, "ajar", "billing window", "open, closed"),
        (2, "boot late", "boot grace", "boot wait, boot exceeded"),
        (3, "idle exceed", "idle grace", "not idle, idle wait, idle exceeded"),
    ],
)
def test_an_unknown_state_value_names_the_entry(
    tmp_path: Path, column: int, value: str, field: str, accepted: str
) -> None:
    doc = document()
    doc["entries"][6][column] = value
    message = problem(tmp_path, doc)
    assert f"entry 7: {field} '{value}' is unknown (accepted: {accepted})" in message
    # The bad entry is the problem reported, not the tuple it left out.
    assert ": missing" not in message


def test_an_entry_of_the_wrong_shape_is_named(tmp_path: Path) -> None:
    doc = document()
    doc["entries"][2] = ["busy", "closed", "boot exceeded", "START_DRAIN"]
    message = problem(tmp_path, doc)
    assert "entry 3:" in message
    assert "is not [state, window, boot grace, idle grace, action]" in message


def test_a_duplicated_tuple_is_refused(tmp_path: Path) -> None:
    doc = document()
    doc["entries"].append(["idle", "open", "boot wait", "idle wait", "START_DRAIN"])
    message = problem(tmp_path, doc)
    assert "tuple (idle, open, boot wait, idle wait): listed more than once (entry 49" in message


@pytest.mark.parametrize("version", [2, "1", None])
def test_a_wrong_version_is_refused(tmp_path: Path, version: object) -> None:
    doc = document()
    doc["version"] = version
    message = problem(tmp_path, doc)
    assert f"version {version!r} is not supported (accepted: 1)" in message


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("version: 1\nentries: [[busy, closed\n", "lifecycle matrix is not valid YAML at line"),
        ("- busy\n- idle\n", "not a mapping with 'version' and 'entries'"),
        ("version: 1\nentries: {busy: None}\n", "'entries' must be a list"),
    ],
)
def test_a_file_that_is_not_a_matrix_is_named(tmp_path: Path, content: str, expected: str) -> None:
    assert expected in problem(tmp_path, content)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.yaml"
    with pytest.raises(MatrixError, match=r"nowhere\.yaml: cannot read lifecycle matrix"):
        load_matrix(path)
