"""Kubernetes resource quantities ("500m", "2", "1Gi", "1e3") as exact numbers.

Quantities come from outsiders (pod specs in extender requests, query strings, settings), and
exact arithmetic on a number of millions of digits takes seconds: the text is bounded to
:data:`MAX_TEXT` characters and a decimal exponent to :data:`MAX_EXPONENT` either way, far past
any real quantity (an exabyte is 1e18), and anything past those is refused like any other bad
quantity. So every quantity parses in microseconds.
"""

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


MAX_TEXT = 64
"""The longest quantity text accepted, in characters (after surrounding blanks)."""
MAX_EXPONENT = 64
"""The largest decimal exponent accepted, either way ("1e64", "1e-64")."""


class QuantityError(ValueError):
    pass


def parse_quantity(text: str | int | float) -> Fraction:
    """Parse a quantity exactly; raise QuantityError with the offending text otherwise."""
    if isinstance(text, bool):
        raise QuantityError(f"not a quantity: {text!r}")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        if text != text or text in (float("inf"), float("-inf")):
            raise QuantityError(f"not a quantity: {text!r}")
        return Fraction(Decimal(repr(text)))
    stripped = text.strip()
    if len(stripped) > MAX_TEXT:
        raise QuantityError(
            f"not a quantity: {stripped[:MAX_TEXT]!r}... ({len(stripped)} characters, "
            f"at most {MAX_TEXT})"
        )
    match = _QUANTITY.match(stripped)
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
    if len(suffix) > 1 and suffix[0] in ("e", "E"):  # "E" alone is exa
        exponent = int(suffix[1:])  # at most MAX_TEXT digits: cheap
        if abs(exponent) > MAX_EXPONENT:
            raise QuantityError(
                f"not a quantity: {text!r} (exponent past {MAX_EXPONENT} either way)"
            )
        return number * Fraction(10) ** exponent
    return number * _DECIMAL[suffix]
