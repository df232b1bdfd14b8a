"""The import architecture: no import cycles, and the layering rules in pyproject.toml's import-linter
contracts (render imports nothing from reconcile; neither imports localcluster, which the wheel leaves
out; tests and benchmarks import nothing from each other, what both use is in localcluster; the engine
and the runtime know nothing about MPI)."""

from __future__ import annotations

import ast
import graphlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("render", "reconcile", "localcluster")
CONTRACTS = (
    "acyclic",
    "render-pure",
    "wheel-self-contained",
    "tests-and-benchmarks-apart",
    "engine-generic",
    "runtime-generic",
    "engine-runtime-independent",
)
# Stand-ins for the two root packages of scripts, which every stand-in tree below needs: import-linter
# would otherwise find the ones of whichever checkout the environment's editable install points at.
SCRIPT_PACKAGES = {"tests/__init__.py": "", "benchmarks/__init__.py": ""}


def _lint_imports(cwd: Path, config: Path) -> subprocess.CompletedProcess[str]:
    # A child process: import-linter resolves packages from its working directory first, which lets the
    # negative test below put stand-in packages of the same names there.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command; lint_imports_command()",
            str(config),
            "--no-cache",
            "--no-logo",
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def module_cycle(graph: grimp.ImportGraph) -> list[str] | None:
    """One import cycle between modules (package __init__ modules included), or None."""
    deps = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    try:
        graphlib.TopologicalSorter(deps).prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def test_no_import_cycle_between_any_two_modules() -> None:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert len(graph.modules) > 50  # the whole tree was read, not an empty stand-in
    assert module_cycle(graph) is None, " -> ".join(module_cycle(graph) or [])


def test_the_import_contracts_hold() -> None:
    proc = _lint_imports(REPO, REPO / "pyproject.toml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in proc.stdout


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_each_contract_catches_its_violation(tmp_path: Path) -> None:
    """Stand-in packages with the real names break every rule once; each contract must say so."""
    _write(
        tmp_path,
        {
            "render/__init__.py": "",
            "render/core.py": "from reconcile import main\n",
            "reconcile/__init__.py": "",
            "reconcile/main.py": "import localcluster.cluster\n",
            "reconcile/engine/__init__.py": "",
            "reconcile/engine/executor.py": "from reconcile.mpijob import controller\n",
            "reconcile/engine/plan.py": "from reconcile.runtime import kube\n",
            "reconcile/mpijob/__init__.py": "",
            "reconcile/mpijob/controller.py": "",
            "reconcile/runtime/__init__.py": "",
            "reconcile/runtime/informer.py": "import render.core\n",
            "reconcile/runtime/kube.py": "",
            "localcluster/__init__.py": "",
            "localcluster/cluster.py": "from localcluster.sandbox import seal\n",
            "localcluster/sandbox/__init__.py": "",
            "localcluster/sandbox/seal.py": "from localcluster import cluster\n",
            **SCRIPT_PACKAGES,
            "tests/utils.py": "import benchmarks.bench\n",
            "benchmarks/bench.py": "import tests.utils\n",
        },
    )
    proc = _lint_imports(tmp_path, REPO / "pyproject.toml")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert f"Contracts: 0 kept, {len(CONTRACTS)} broken." in out
    assert "No cycles are allowed in localcluster." in out
    assert "render.core -> reconcile.main" in out
    assert "reconcile.main -> localcluster.cluster" in out
    assert "reconcile.engine.executor -> reconcile.mpijob.controller" in out
    assert "reconcile.runtime.informer -> render.core" in out
    assert "reconcile.engine.plan -> reconcile.runtime.kube" in out
    assert "benchmarks.bench -> tests.utils" in out
    assert "tests.utils -> benchmarks.bench" in out


def test_the_optional_layers_hold_before_they_exist(tmp_path: Path) -> None:
    """Without reconcile.mpijob and reconcile.runtime the contracts are still valid (and kept)."""
    _write(
        tmp_path,
        {
            "render/__init__.py": "",
            "reconcile/__init__.py": "",
            "reconcile/engine/__init__.py": "",
            "reconcile/engine/plan.py": "",
            "localcluster/__init__.py": "",
            "localcluster/cluster.py": "",
            **SCRIPT_PACKAGES,
        },
    )
    proc = _lint_imports(tmp_path, REPO / "pyproject.toml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in proc.stdout


def test_module_cycle_finds_a_package_importing_its_own_module(tmp_path: Path) -> None:
    # A cycle through a package's __init__ is no cycle between siblings; the module check catches it.
    _write(
        tmp_path,
        {
            "cyclepkg/__init__.py": "from cyclepkg.inner import thing\n",
            "cyclepkg/inner.py": "import cyclepkg\nthing = 1\n",
        },
    )
    sys.path.insert(0, str(tmp_path))
    try:
        graph = grimp.build_graph("cyclepkg", cache_dir=None)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("cyclepkg", None)
    cycle = module_cycle(graph)
    assert cycle is not None and set(cycle) == {"cyclepkg", "cyclepkg.inner"}


# What would name a product: the operator's kinds, groups and names. The runtime gets them from its caller.
PRODUCT_WORDS = ("mpi", "kubeflow", "volcano", "scheduling.x-k8s.io", "mpijob")


def product_words(source: str) -> list[str]:
    lowered = source.lower()
    return [w for w in PRODUCT_WORDS if w in lowered]


def test_the_runtime_names_no_product() -> None:
    found = {
        path.name: words
        for path in sorted((REPO / "reconcile" / "runtime").glob("*.py"))
        if (words := product_words(path.read_text(encoding="utf-8")))
    }
    assert found == {}
    assert product_words('COMPONENT = "mpi-job-controller"') == ["mpi"]  # the check sees one


def engine_imports(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_engine_reaches_no_client_or_transport() -> None:
    """The engine's Writer raises its own errors, and its quantities are its own: nothing of the
    kubernetes client or urllib3."""
    imported = set().union(
        *(engine_imports(p.read_text(encoding="utf-8")) for p in (REPO / "reconcile" / "engine").glob("*.py"))
    )
    outside = {m for m in imported if m.split(".")[0] in ("kubernetes", "urllib3")}
    assert outside == set()
    assert engine_imports("from kubernetes.client.exceptions import ApiException") == {
        "kubernetes.client.exceptions"
    }


def test_the_operator_process_loads_no_kubernetes_package() -> None:
    """Any part of the ``kubernetes`` package imports its generated client and models (about 30 MiB):
    the operator's process and its CLIs load none of it."""
    probe = (
        "import sys, reconcile.main, reconcile.cli, reconcile.mpijob.plan_command; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'pydantic')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
