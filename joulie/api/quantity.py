"""Kubernetes resource quantities ("500m", "2", "1Gi", "1e3") as exact numbers."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_SCALED = {
    **{suffix: (factor, 1) for suffix, factor in _BINARY.items()},
    **{suffix: (f.numerator, f.denominator) for suffix, f in _DECIMAL.items()},
}
"""Suffix -> the factor it scales a number by, as (numerator, denominator)."""
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$"
)


class QuantityError(ValueError):
    pass


def parse_quantity(text: str | int | float) -> Fraction:
    """Parse a quantity exactly; raise QuantityError with the offending text otherwise."""
    if isinstance(text, bool):
        raise QuantityError(f"not a quantity: {text!r}")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        return Fraction(Decimal(repr(text)))
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise QuantityError(f"not a quantity: {text!r}")
    digits = match["num"]
    suffix = match["suffix"] or ""
    if suffix in _SCALED and digits.isascii() and digits.isdigit() and len(digits) <= 18:
        # The common form (a whole number with at most an SI or binary suffix), without the
        # Decimal round trip: every pod's requests are read this way.
        numerator, denominator = _SCALED[suffix]
        return Fraction(int(digits) * numerator, denominator)
    try:
        number = Fraction(Decimal(digits))
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise QuantityError(f"not a quantity: {text!r}") from exc
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix[:1] in ("e", "E"):
        return number * Fraction(10) ** int(suffix[1:])
    return number * _DECIMAL[suffix]
