"""Edits of a parsed YAML or JSON document, for tests that break one field of a valid file
(the catalog, an inventory) and read the loader's message."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Edit = Callable[[dict[str, Any]], None]


def set_at(path: tuple[str | int, ...], value: Any) -> Edit:
    """An edit that sets the field at ``path`` to ``value``."""

    def edit(data: dict[str, Any]) -> None:
        node: Any = data
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return edit


def drop_at(path: tuple[str | int, ...]) -> Edit:
    """An edit that removes the field at ``path``."""

    def edit(data: dict[str, Any]) -> None:
        node: Any = data
        for part in path[:-1]:
            node = node[part]
        del node[path[-1]]

    return edit


def embedded_catalog_data() -> dict[str, Any]:
    """The embedded hardware catalog as parsed YAML, to edit and load again."""
    from importlib import resources

    import yaml

    text = resources.files("joulie.hardware").joinpath("data", "hardware-catalog.yaml").read_text()
    data: dict[str, Any] = yaml.safe_load(text)
    return data
