"""The one style of every plain-text table Joulie prints (``plan``, ``status``, ``config``,
``lifecycle matrix``, ``simulate``): a header row in capitals (units keep their own case:
``SAVED kWh``, ``WINDOW h``), then one row per line, columns two spaces apart, labels
left-aligned and figures right-aligned, no rule line, no trailing spaces. It is kubectl's style,
since ``kubectl joulie`` runs as a kubectl plugin beside kubectl's own tables.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["aligned", "header_cell"]

UNITS = frozenset({"kWh", "kW", "W", "MiB", "GiB", "MHz", "GHz", "h", "s", "ms", "%", "w", "x"})
"""Words of a header written as they are (a unit, or ``w`` for "over the window")."""


def header_cell(name: str) -> str:
    """A column name as the header shows it: each word in capitals, units as they are."""
    return " ".join(
        "/".join(part if part in UNITS else part.upper() for part in word.split("/"))
        for word in name.split(" ")
    )


def aligned(rows: Sequence[Sequence[str]], *, labels: int | None = None) -> list[str]:
    """``rows`` (header first) as lines. The first ``labels`` columns are left-aligned and the
    rest right-aligned; None: every column left-aligned (tables of words). The last column is
    not padded."""
    if not rows:
        return []
    rows = [[header_cell(name) for name in rows[0]], *rows[1:]]
    count = len(rows[0])
    left = count if labels is None else labels
    widths = [max(len(row[i]) for row in rows) for i in range(count)]

    def line(row: Sequence[str]) -> str:
        cells = [
            cell.ljust(width) if i < left else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    return [line(row) for row in rows]
