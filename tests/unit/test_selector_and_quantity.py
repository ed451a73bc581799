from __future__ import annotations

from fractions import Fraction

import pytest

from joulie.api.quantity import QuantityError, parse_quantity
from joulie.api.selector import SelectorError, parse_selector


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("joulie.io/managed=true", {"joulie.io/managed": "true"}, True),
        ("joulie.io/managed=true", {"joulie.io/managed": "false"}, False),
        ("joulie.io/managed==true", {"joulie.io/managed": "true"}, True),
        ("a!=x", {}, True),
        ("a!=x", {"a": "x"}, False),
        ("node-role.kubernetes.io/worker", {"node-role.kubernetes.io/worker": ""}, True),
        ("!joulie.io/reserved", {"joulie.io/reserved": "true"}, False),
        ("tier in (gold, silver),zone notin (z1)", {"tier": "gold", "zone": "z2"}, True),
        ("tier in (gold, silver),zone notin (z1)", {"tier": "gold", "zone": "z1"}, False),
        ("", {"anything": "x"}, True),
    ],
)
def test_selector_matching(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_selector(text).matches(labels) is expected


def test_selector_canonical_form() -> None:
    assert str(parse_selector(" a==b , c in (x,y), !d ")) == "a=b,c in (x,y),!d"


@pytest.mark.parametrize("text", ["a in (b", "=x", "a=b=c", "bad key=1", "a,,b", "a=" + "x" * 64])
def test_selector_errors_name_the_problem(text: str) -> None:
    with pytest.raises(SelectorError):
        parse_selector(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2", 2),
        ("500m", Fraction(1, 2)),
        ("1Gi", 2**30),
        ("1k", 1000),
        ("1e3", 1000),
        ("0.5", Fraction(1, 2)),
        (3, 3),
        ("1.5Gi", 3 * 2**29),
        # Exa after a fraction: a ValueError escaped (found by the fuzz suite).
        ("1.5E", 15 * 10**17),
        ("0.E", 0),
    ],
)
def test_quantities(text: str | int, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "5 Gi", "1Zi"])
def test_bad_quantities(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    "text",
    [
        "1e20000000",  # exact arithmetic on it blocked the extender for 26.7 s
        "1e-20000000",
        "1e" + "9" * 5000,  # past Python's integer-string limit: was a ValueError, not ours
        "1" * 65,
        float("inf"),
        float("nan"),
    ],
)
def test_outsized_quantities_are_refused_at_once(text: str | float) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_the_bounds_leave_every_real_quantity_alone() -> None:
    assert parse_quantity("1e64") == 10**64
    assert parse_quantity("1e-64") == Fraction(1, 10**64)
    assert parse_quantity("8Ei") == 8 * 2**60
    assert parse_quantity("0." + "0" * 40 + "1") == Fraction(1, 10**41)


def test_whole_numbers_take_the_fast_path_to_the_same_values() -> None:
    # Long whole numbers and signed ones go through Decimal; both give the exact value.
    assert parse_quantity("123456789012345678") == 123456789012345678
    assert parse_quantity("1234567890123456789m") == Fraction(1234567890123456789, 1000)
    assert parse_quantity("-3m") == Fraction(-3, 1000)
    assert parse_quantity("12345m") == Fraction(12345, 1000)
