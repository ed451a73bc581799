"""Reading the YAML files a user hands Joulie (inventories, hardware catalogs), with errors that
name the file.

PyYAML given a string reports the place as ``in "<unicode string>", line 2, column 8``: the user
cannot tell which file that is. These messages name the file and the line instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["YamlFileError", "read_yaml_file", "yaml_problem"]


class YamlFileError(ValueError):
    """A YAML file that cannot be read or parsed; the message names the file."""


def yaml_problem(exc: yaml.YAMLError) -> str:
    """What is wrong, where, without PyYAML's ``<unicode string>`` place names: ``at line 3,
    column 1: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence
    started at line 2, column 8)``."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return str(exc)
    parts = []
    if exc.problem_mark is not None:
        parts.append(f"at {_place(exc.problem_mark)}:")
    parts.append(exc.problem or type(exc).__name__)
    if exc.context:
        context = exc.context
        if exc.context_mark is not None and exc.context_mark != exc.problem_mark:
            context += f" started at {_place(exc.context_mark)}"
        parts.append(f"({context})")
    return " ".join(parts)


def _place(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


MAX_YAML_BYTES = 64 * 1024**2
"""Largest file read (an inventory of 100,000 nodes is a few megabytes)."""


def read_yaml_file(path: Path, what: str) -> Any:
    """The document in ``path``; YamlFileError names the file and says what went wrong (``what``
    says what the file was meant to be, e.g. "inventory")."""
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_YAML_BYTES + 1)
    except OSError as exc:
        raise YamlFileError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    except ValueError:  # a NUL in the name
        raise YamlFileError(f"{str(path)!r}: cannot read {what}: not a file name") from None
    if len(raw) > MAX_YAML_BYTES:
        raise YamlFileError(f"{path}: {what} is larger than {MAX_YAML_BYTES} bytes")
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise YamlFileError(f"{path}: cannot read {what}: not a text file (UTF-8)") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise YamlFileError(f"{path}: {what} is not valid YAML {yaml_problem(exc)}") from None
