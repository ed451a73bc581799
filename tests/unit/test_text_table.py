"""The one table style: capitals with units as written, labels left, figures right, no rule."""

from __future__ import annotations

from joulie.api.text_table import aligned, header_cell


def test_headers_are_capitals_with_units_as_written() -> None:
    assert header_cell("fac kWh/work-h") == "FAC kWh/WORK-H"
    assert header_cell("A IT kWh w") == "A IT kWh w"
    assert header_cell("saving %") == "SAVING %"


def test_labels_left_figures_right_no_rule_no_trailing_space() -> None:
    lines = aligned([["family", "nodes"], ["gpu:H100", "8"], ["cpu", "120"]], labels=1)
    assert lines == ["FAMILY    NODES", "gpu:H100      8", "cpu         120"]
    words = aligned([["state", "action"], ["busy", "None"], ["idle-long", "drain"]])
    assert words == ["STATE      ACTION", "busy       None", "idle-long  drain"]
    assert aligned([]) == []
