"""Validation errors that carry field paths."""

from __future__ import annotations

import json
import unicodedata

import attrs


def one_line(text: str) -> str:
    """Control and line-separator characters escaped, so one error is one line wherever it is printed."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch == " " or unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp", "Cs"):
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def quote(value: object) -> str:
    """A value as Kubernetes quotes it in error messages (control characters escaped: one line)."""
    try:
        return json.dumps(value, default=str)
    except (ValueError, RecursionError):  # NaN is fine; only cycles and absurd nesting land here
        return json.dumps(repr(value)[:200])


@attrs.frozen
class FieldError:
    """One problem with one field, e.g. `spec.mpiReplicaSpecs[Worker].replicas: must be ...`."""

    path: str
    message: str

    def __str__(self) -> str:
        return one_line(f"{self.path}: {self.message}")


class ValidationError(ValueError):
    """Every problem found in an MPIJob at once; the only exception invalid input raises."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(str(e) for e in self.errors))

    def lines(self) -> list[str]:
        return [str(e) for e in self.errors]
