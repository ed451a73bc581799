"""``joulie lifecycle matrix``: the node-lifecycle policy matrix in effect, one row per state
tuple, so an operator can read (or check) what every combination of facts about a node leads to
before the controller acts on it."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from joulie.api.lifecycle import Matrix, MatrixError, load_matrix
from joulie.api.text_table import aligned

__all__ = ["add_parser", "render_json", "render_table", "run"]

MATRIX_FILE_VARIABLE = "LIFECYCLE_MATRIX_FILE"
EXIT_CONFIG = 2


def add_parser(sub: Any) -> None:
    """The ``lifecycle`` subcommand and its own subcommands (``sub``: the CLI's subparsers)."""
    lifecycle = sub.add_parser("lifecycle", help="the node lifecycle: print its policy matrix")
    actions = lifecycle.add_subparsers(dest="lifecycle_command", metavar="COMMAND")
    matrix = actions.add_parser(
        "matrix",
        help="print the policy matrix in effect: the action for every state tuple",
        description="Prints the built-in matrix, or the override file (--file, else "
        f"{MATRIX_FILE_VARIABLE}) after checking that it decides every tuple exactly once. "
        "An invalid file exits with status 2 and says what is wrong.",
    )
    matrix.add_argument(
        "--output", "-o", choices=("table", "json"), default="table", help="what to print"
    )
    matrix.add_argument(
        "--file",
        metavar="PATH",
        help=f"a matrix file to check and print (default: {MATRIX_FILE_VARIABLE}, else the "
        "built-in matrix)",
    )


def run(args: argparse.Namespace) -> int:
    if args.lifecycle_command != "matrix":
        print("joulie: lifecycle: name a command: matrix", file=sys.stderr)
        return EXIT_CONFIG
    path = args.file if args.file is not None else os.environ.get(MATRIX_FILE_VARIABLE, "")
    if args.file is not None and not args.file:
        print("joulie: --file must name a file", file=sys.stderr)
        return EXIT_CONFIG
    try:
        matrix = load_matrix(path or None)
    except MatrixError as exc:
        print(f"joulie: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.output == "json":
        print(render_json(matrix), end="")
    else:
        print(render_table(matrix), end="")
    return 0


def render_table(matrix: Matrix) -> str:
    """One aligned row per tuple, in the order of the table the default comes from."""
    header = ["state", "window", "boot grace", "idle grace", "action"]
    rows = [[*key.as_list(), action.value] for key, action in matrix.rows()]
    lines = [f"lifecycle matrix: {matrix.source}", "", *aligned([header, *rows])]
    return "\n".join(lines) + "\n"


def render_json(matrix: Matrix) -> str:
    """The matrix file's document (``load_matrix`` reads it back), one entry per line."""
    document = matrix.to_document()
    entries = ",\n".join(f"    {json.dumps(entry)}" for entry in document["entries"])
    return (
        f'{{\n  "version": {json.dumps(document["version"])},\n  "entries": [\n{entries}\n  ]\n}}\n'
    )
