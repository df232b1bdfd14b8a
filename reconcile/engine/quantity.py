"""Kubernetes resource quantities (``500m``, ``1Gi``, ``2e3``) as exact decimals, by apimachinery's
grammar (``k8s.io/apimachinery/pkg/api/resource``).

Hand-written rather than ``kubernetes.utils.parse_quantity``: importing that module imports the whole
generated client (about 30 MiB of the operator's memory), and it also takes forms the API server refuses
(``1K``, ``NaN``, ``1_000``). On every form the server accepts the two agree (a property test holds it).
"""

from __future__ import annotations

import re
from decimal import Decimal

_FORM = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<exponent>[eE][+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(text: str | int | float) -> Decimal:
    """The value of a quantity; ``ValueError`` for a form the API server refuses. A number is read as
    it prints (a float through its shortest repr, so ``0.1`` stays ``0.1``; NaN and infinities refused)."""
    if isinstance(text, bool):
        raise ValueError(f"not a quantity: {text!r}")
    match = _FORM.fullmatch(repr(text) if isinstance(text, (int, float)) else text)
    if match is None:
        raise ValueError(f"not a quantity: {text!r}")
    number = Decimal(match["number"])
    if match["exponent"]:
        return number.scaleb(int(match["exponent"][1:]))
    suffix = match["suffix"]
    if suffix in _BINARY:
        return number * Decimal(1024 ** _BINARY[suffix])
    if suffix:
        return number.scaleb(_DECIMAL[suffix])
    return number
