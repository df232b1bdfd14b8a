"""Every benchmark imports: a name moved or renamed in the code they measure breaks them here, offline,
not on the day someone runs them."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "benchmarks").glob("*.py"))


def test_the_benchmarks_are_found() -> None:
    assert "scale_bench" in BENCHMARKS and "first_job_bench" in BENCHMARKS


@pytest.mark.parametrize("name", [b for b in BENCHMARKS if b != "__init__"])
def test_each_benchmark_imports(name: str) -> None:
    module = importlib.import_module(f"benchmarks.{name}")
    assert callable(getattr(module, "main", None)), f"benchmarks/{name}.py has no main()"
