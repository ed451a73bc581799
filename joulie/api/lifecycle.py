"""The node-lifecycle policy matrix: the four facts about a node (its state tuple) and the action
each combination calls for.

The matrix is data an operator may replace (LIFECYCLE_MATRIX_FILE), so its file format is a
contract like an inventory's, and lives here. The default is the table of the node-manager
policy matrix the lifecycle is built from, embedded as ``data/lifecycle-matrix.yaml``.

A matrix is checked when it is loaded, not when a node first needs it: it must give exactly one
of the three actions to every one of the 48 tuples, so no node can ever reach a tuple nobody
decided. Every problem names the tuple (or the entry) it is about.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from joulie.api.yaml_file import YamlFileError, read_yaml_file

__all__ = [
    "Action",
    "BootGrace",
    "IdleGrace",
    "Matrix",
    "MatrixError",
    "StateTuple",
    "Window",
    "WorkerState",
    "all_tuples",
    "default_matrix",
    "load_matrix",
    "matrix_from_document",
]

MATRIX_VERSION = 1
DEFAULT_MATRIX_RESOURCE = "data/lifecycle-matrix.yaml"


class WorkerState(StrEnum):
    UNPAIRED = "unpaired"
    """The node never came up: no kubelet heartbeat and never Ready."""
    BUSY = "busy"
    """A workload pod is bound to it (or nominated to it)."""
    IDLE = "idle"
    DOWN = "down"
    """It was up and is no longer: NotReady past a grace, or its heartbeat stale."""


class Window(StrEnum):
    OPEN = "open"
    """A shutdown now costs nothing more than one later (the billing window is open)."""
    CLOSED = "closed"


class BootGrace(StrEnum):
    WAIT = "boot wait"
    EXCEEDED = "boot exceeded"


class IdleGrace(StrEnum):
    NOT_IDLE = "not idle"
    WAIT = "idle wait"
    EXCEEDED = "idle exceeded"


class Action(StrEnum):
    NONE = "None"
    START_DRAIN = "START_DRAIN"
    """Cancellable: taint and cordon, settle, re-check, then shut down (or undo everything)."""
    START_SHUTDOWN = "START_SHUTDOWN"
    """Not cancellable: a node that is broken or never came up is powered off."""


@dataclass(frozen=True, slots=True)
class StateTuple:
    state: WorkerState
    window: Window
    boot: BootGrace
    idle: IdleGrace

    def __str__(self) -> str:
        return f"({self.state}, {self.window}, {self.boot}, {self.idle})"

    def as_list(self) -> list[str]:
        return [self.state.value, self.window.value, self.boot.value, self.idle.value]


def all_tuples() -> Iterator[StateTuple]:
    """Every state tuple, in the order the spec's table lists them."""
    for state, window, boot, idle in itertools.product(
        sorted(WorkerState, key=_SPEC_ORDER.index),
        (Window.CLOSED, Window.OPEN),
        (BootGrace.EXCEEDED, BootGrace.WAIT),
        (IdleGrace.EXCEEDED, IdleGrace.WAIT, IdleGrace.NOT_IDLE),
    ):
        yield StateTuple(state, window, boot, idle)


_SPEC_ORDER = [WorkerState.BUSY, WorkerState.DOWN, WorkerState.IDLE, WorkerState.UNPAIRED]
_FIELDS = (
    ("worker state", WorkerState),
    ("billing window", Window),
    ("boot grace", BootGrace),
    ("idle grace", IdleGrace),
)


class MatrixError(ValueError):
    """A matrix that is not total, names an unknown value, or repeats a tuple."""


@dataclass(frozen=True)
class Matrix:
    """A total map from every state tuple to its action."""

    actions: Mapping[StateTuple, Action]
    source: str

    def action(self, key: StateTuple) -> Action:
        return self.actions[key]

    def rows(self) -> list[tuple[StateTuple, Action]]:
        return [(key, self.actions[key]) for key in all_tuples()]

    def to_document(self) -> dict[str, Any]:
        """The matrix as a file would hold it (``load_matrix`` reads it back unchanged)."""
        return {
            "version": MATRIX_VERSION,
            "entries": [[*key.as_list(), action.value] for key, action in self.rows()],
        }


def _action(value: Any) -> Action | None:
    if value is None:  # YAML null reads as "do nothing" too
        return Action.NONE
    try:
        return Action(str(value))
    except ValueError:
        return None


def matrix_from_document(document: Any, source: str) -> Matrix:
    """Check a parsed matrix file (``{"version": 1, "entries": [[state, window, boot grace, idle
    grace, action], ...]}``) and build the matrix; ``source`` names the file in messages."""
    if not isinstance(document, Mapping):
        raise MatrixError(f"{source}: not a mapping with 'version' and 'entries'")
    version = document.get("version")
    if version != MATRIX_VERSION:
        raise MatrixError(f"{source}: version {version!r} is not supported (accepted: 1)")
    entries = document.get("entries")
    if not isinstance(entries, list):
        raise MatrixError(
            f"{source}: 'entries' must be a list of [state, window, boot, idle, action]"
        )
    problems: list[str] = []
    actions: dict[StateTuple, Action] = {}
    for number, entry in enumerate(entries, start=1):
        where = f"entry {number}"
        if not isinstance(entry, list) or len(entry) != 5:
            problems.append(
                f"{where}: {entry!r} is not [state, window, boot grace, idle grace, action]"
            )
            continue
        values: list[Any] = []
        for (name, kind), raw in zip(_FIELDS, entry[:4], strict=True):
            try:
                values.append(kind(str(raw)))
            except ValueError:
                accepted = ", ".join(member.value for member in kind)
                problems.append(f"{where}: {name} {raw!r} is unknown (accepted: {accepted})")
        if len(values) != 4:
            continue
        key = StateTuple(*values)
        action = _action(entry[4])
        if action is None:
            accepted = ", ".join(a.value for a in Action)
            problems.append(f"tuple {key}: action {entry[4]!r} is unknown (accepted: {accepted})")
        elif key in actions:
            problems.append(f"tuple {key}: listed more than once (entry {number} repeats it)")
        else:
            actions[key] = action
    if not problems:
        problems.extend(f"tuple {key}: missing" for key in all_tuples() if key not in actions)
    if problems:
        shown = "; ".join(problems[:8])
        more = f"; and {len(problems) - 8} more" if len(problems) > 8 else ""
        raise MatrixError(f"{source}: invalid lifecycle matrix: {shown}{more}")
    return Matrix(actions, source)


def default_matrix() -> Matrix:
    """The spec's table, as shipped in the package."""
    text = resources.files("joulie.api").joinpath(DEFAULT_MATRIX_RESOURCE).read_text()
    return matrix_from_document(yaml.safe_load(text), "the default lifecycle matrix")


def load_matrix(path: Path | str | None) -> Matrix:
    """The matrix in ``path`` (checked to be total), or the default when ``path`` is None/empty."""
    if not path:
        return default_matrix()
    try:
        document = read_yaml_file(Path(path), "lifecycle matrix")
    except YamlFileError as exc:
        raise MatrixError(str(exc)) from exc
    return matrix_from_document(document, str(path))
