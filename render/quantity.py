"""Kubernetes resource quantities: parse, add, multiply and print (for PodGroup minResources)."""

from __future__ import annotations

import math
import re
from fractions import Fraction

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(
    r"^([+-]?[0-9]+(?:\.[0-9]*)?|[+-]?\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)


class QuantityError(ValueError):
    pass


def parse(value: object) -> tuple[Fraction, bool]:
    """The exact value, and whether it was written with a binary suffix (to print sums the same way)."""
    if isinstance(value, bool):
        raise QuantityError(f"quantities must match the regular expression {_QUANTITY.pattern!r}")
    if isinstance(value, int):
        return Fraction(value), False
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError("must be a finite number")
        return Fraction(str(value)), False
    if not isinstance(value, str):
        raise QuantityError("must be a string or a number")
    m = _QUANTITY.match(value.strip())
    if m is None or len(value) > 64:
        raise QuantityError(f"quantities must match the regular expression {_QUANTITY.pattern!r}")
    number, suffix = Fraction(m.group(1)), m.group(2) or ""
    if suffix in _BINARY:
        return number * 1024 ** _BINARY[suffix], True
    if suffix in _DECIMAL:
        return number * Fraction(10) ** _DECIMAL[suffix], False
    exponent = int(suffix[1:])
    if abs(exponent) > 30:
        raise QuantityError("exponent out of range")
    return number * Fraction(10) ** exponent, False


def is_valid(value: object) -> bool:
    try:
        parse(value)
    except QuantityError:
        return False
    return True


def format_quantity(value: Fraction, binary: bool) -> str:
    """Canonical-looking text: the largest suffix that keeps the number whole, like the API server."""
    if value.denominator == 1:
        n = value.numerator
        if n == 0:
            return "0"
        if binary:
            for suffix, power in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
                if n % 1024**power == 0:
                    return f"{n // 1024**power}{suffix}"
        for suffix in ("E", "P", "T", "G", "M", "k"):
            scale = 10 ** _DECIMAL[suffix]
            if n % scale == 0:
                return f"{n // scale}{suffix}"
        return str(n)
    for suffix in ("m", "u", "n"):
        scaled = value * Fraction(10) ** -_DECIMAL[suffix]
        if scaled.denominator == 1:
            return f"{scaled.numerator}{suffix}"
    # Kubernetes rounds sub-nano values up to 1n.
    scaled = value * 10**9
    return f"{-((-scaled.numerator) // scaled.denominator)}n"
