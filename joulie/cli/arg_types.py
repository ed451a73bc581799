"""argparse ``type`` functions for the CLI's numbers: a bad value is refused by argparse itself,
which names the option and exits 2 with its usage line."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["MAX_WAIT_S", "at_least", "seconds"]

MAX_WAIT_S = 86400.0
"""The longest wait an option takes (a day): longer is a typo, and inf never returns."""


def at_least(low: int) -> Callable[[str], int]:
    """An integer no smaller than ``low``."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is less than {low}")
        return value

    convert.__name__ = "integer"
    return convert


def seconds(text: str) -> float:
    """A wait in seconds: a finite number above 0, at most :data:`MAX_WAIT_S`."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 < value <= MAX_WAIT_S:
        raise argparse.ArgumentTypeError(
            f"{text} is not a number of seconds above 0 and at most {MAX_WAIT_S:g}"
        )
    return value
