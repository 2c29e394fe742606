"""Typed command-line values, checked where they are parsed.

Each function here builds an argparse `type=` callable. A value out of range, NaN, an infinity or
a number too large to mean anything is refused there with one line naming the flag's rule, so no
command runs on `--budget nan`, `--limit -1` or `--steps 1000000000000`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

# the largest size any count or tensor dimension may have (PyTorch indexes with int64)
MAX_INT = 2**31 - 1


def _number(text: str) -> float:
    try:
        v = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return v


def finite_float(lo: float, hi: float, *, lo_open: bool = False, unit: str = "") -> Callable[[str], float]:
    """A finite number in [lo, hi] (or (lo, hi] with `lo_open`)."""
    low = f"> {lo:g}" if lo_open else f">= {lo:g}"
    rule = f"a number {low} and <= {hi:g}{(' ' + unit) if unit else ''}"

    def parse(text: str) -> float:
        v = _number(text)
        if v < lo or (lo_open and v == lo) or v > hi:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {rule}")
        return v

    parse.__name__ = "number"
    return parse


def positive_seconds(hi: float = 7 * 86400.0) -> Callable[[str], float]:
    """Seconds: a finite number > 0 (at most a week by default)."""
    return finite_float(0.0, hi, lo_open=True, unit="seconds")


def bounded_int(lo: int, hi: int = MAX_INT) -> Callable[[str], int]:
    """A whole number in [lo, hi]."""
    def parse(text: str) -> int:
        s = str(text).strip()
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{s[:30]}: expected a whole number from {lo} to {hi}")
        return v

    parse.__name__ = "whole number"
    return parse
