"""Validation errors that carry field paths."""

from __future__ import annotations

import attrs


@attrs.frozen
class FieldError:
    """One problem with one field, e.g. `spec.mpiReplicaSpecs[Worker].replicas: must be ...`."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ValidationError(ValueError):
    """Every problem found in an MPIJob at once; the only exception invalid input raises."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(str(e) for e in self.errors))

    def lines(self) -> list[str]:
        return [str(e) for e in self.errors]
