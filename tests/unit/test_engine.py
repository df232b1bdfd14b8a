"""The engine package is generic: it imports nothing of the MPI controller or render, names no MPI
kind, no PodGroup group and no field manager of its own (as render's purity test guards render)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import reconcile.engine
from reconcile.engine.policy import Policy

ENGINE = Path(reconcile.engine.__file__).parent
MODULES = sorted(f"reconcile.engine.{p.stem}" for p in ENGINE.glob("*.py") if p.stem != "__init__")


def test_engine_imports_nothing_product_specific() -> None:
    code = (
        f"import sys; import {', '.join(MODULES)}; "
        "bad = [m for m in sys.modules if m.split('.')[0] == 'render' "
        "or (m.startswith('reconcile.') and not m.startswith('reconcile.engine'))]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# Words of the MPIJob product: its kinds, groups, roles and field manager ("compile" is not one).
PRODUCT = re.compile(
    r"mpi(?!le)|kubeflow|podgroup|volcano|scheduling\.x-k8s\.io|launcher|worker|sshd?\b", re.IGNORECASE
)


@pytest.mark.parametrize("module", [*MODULES, "reconcile.engine.__init__"])
def test_engine_sources_name_no_product_kind(module: str) -> None:
    path = ENGINE / f"{module.rsplit('.', 1)[1]}.py"
    hits = [
        f"{path.name}:{n}: {line.strip()}"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if PRODUCT.search(line) and "reconcile.mpijob.policy" not in line
    ]
    assert hits == []


def test_a_policy_has_no_default_field_manager() -> None:
    with pytest.raises(TypeError):
        Policy()  # type: ignore[call-arg]
    with pytest.raises(ValueError):
        Policy(field_manager="")
