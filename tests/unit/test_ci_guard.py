"""CI runs every tier in full: .ci/run refuses skip and narrowing variables; under MPIJOB_CI a skip (at run
or collection time) fails the run and Hypothesis runs with a fixed, printed seed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import hypothesis
import pytest

from tests.utils import HYPOTHESIS_SEED, NARROWING_ENV

REPO = Path(__file__).resolve().parents[2]
# Variables by which Hypothesis knows a CI host and derandomizes: the runs below stand for a developer's
# machine unless they set MPIJOB_CI themselves.
_HOST_CI = set(getattr(hypothesis._settings, "_CI_VARS", ("CI", "TF_BUILD")))


def _env(**extra: str) -> dict[str, str]:
    ours = {"PYTEST_ADDOPTS", *NARROWING_ENV, *_HOST_CI}
    env = {k: v for k, v in os.environ.items() if not k.startswith("MPIJOB_") and k not in ours}
    return {**env, **extra}


def test_ci_run_refuses_a_skip_variable_before_any_work() -> None:
    for var in ("MPIJOB_SKIP_CLUSTER", "MPIJOB_SKIP_ANYTHING", "PYTEST_ADDOPTS"):
        proc = subprocess.run(
            [str(REPO / ".ci" / "run")], env=_env(**{var: "1"}), capture_output=True, text=True, timeout=30
        )
        assert proc.returncode == 2, proc.stderr
        assert var in proc.stderr and "CI runs every tier" in proc.stderr
        assert proc.stdout == ""  # nothing was set up


def run_pytest(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            *args,
        ],
        cwd=tmp_path,
        env=_env(PYTHONPATH=str(REPO), **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_under_ci_a_skipped_test_fails_the_run(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text("import pytest\n\ndef test_skips():\n    pytest.skip('no')\n")
    assert run_pytest(tmp_path, "test_x.py").returncode == 0
    ci = run_pytest(tmp_path, "test_x.py", MPIJOB_CI="1")
    assert ci.returncode == 1, ci.stdout
    assert "skipped, and CI skips nothing" in ci.stdout


def test_under_ci_skip_cluster_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text("def test_ok():\n    pass\n")
    ci = run_pytest(tmp_path, "test_x.py", "--skip-cluster", MPIJOB_CI="1")
    assert ci.returncode == 4, ci.stdout + ci.stderr
    assert "CI runs every tier" in ci.stderr
    assert run_pytest(tmp_path, "test_x.py", MPIJOB_SKIP_CLUSTER="1", MPIJOB_CI="1").returncode == 4


def test_under_ci_a_module_skipped_at_collection_fails_the_run(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text("import pytest\n\npytest.importorskip('no_such_module_here')\n")
    (tmp_path / "test_b.py").write_text("import pytest\n\npytest.skip('no', allow_module_level=True)\n")
    (tmp_path / "test_c.py").write_text("def test_ok():\n    pass\n")
    assert run_pytest(tmp_path).returncode == 0
    ci = run_pytest(tmp_path, MPIJOB_CI="1")
    assert ci.returncode == 1, ci.stdout
    assert "2 test(s) skipped, and CI skips nothing: ['test_a.py', 'test_b.py']" in ci.stdout
    # alone, a skipped module leaves nothing collected: still a failure, not "no tests ran"
    assert run_pytest(tmp_path, "test_b.py", MPIJOB_CI="1").returncode == 1


def test_under_ci_a_knob_that_narrows_a_test_is_refused(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text("def test_ok():\n    pass\n")
    knobs = dict.fromkeys(NARROWING_ENV, "1")
    assert run_pytest(tmp_path, **knobs).returncode == 0
    ci = run_pytest(tmp_path, MPIJOB_CI="1", **knobs)
    assert ci.returncode == 4, ci.stdout + ci.stderr
    assert f"unset {' '.join(NARROWING_ENV)}" in ci.stderr
    for var in NARROWING_ENV:
        proc = subprocess.run(
            [str(REPO / ".ci" / "run")], env=_env(**{var: "0"}), capture_output=True, text=True, timeout=30
        )
        assert proc.returncode == 2 and var in proc.stderr, proc.stderr


# Read from the environment by tests, and why they do not narrow one.
NOT_NARROWING = {
    "MPIJOB_CI": "this guard",
    "MPIJOB_SKIP_CLUSTER": "a skip request: refused under CI by its own check",
    "MPIJOB_MPI_CACHE": "where the real-MPI tier caches its build",
    "PATH": "where programs are found",
    "KUBERNETES_EXEC_INFO": "what the kubeconfig loader hands a test's exec plugin, read by that plugin",
}


def test_every_knob_a_test_reads_is_known() -> None:
    read = set()
    for path in (REPO / "tests").rglob("*.py"):
        read |= set(
            re.findall(r"""(?:environ\.get|getenv|environ\[)\(?\s*["']([A-Z0-9_]+)["']""", path.read_text())
        )
    unknown = read - set(NARROWING_ENV) - set(NOT_NARROWING)
    assert not unknown, f"add to NARROWING_ENV (tests/utils.py) or NOT_NARROWING with the reason: {unknown}"
    assert {"MPIJOB_STATUS_ORDER_ROUNDS", "MPIJOB_FUZZ_EXAMPLES"} <= read  # the scan finds them


def test_under_ci_hypothesis_runs_with_a_fixed_printed_seed(tmp_path: Path) -> None:
    (tmp_path / "test_h.py").write_text(
        "from hypothesis import given, strategies as st\n\n"
        "@given(st.integers())\n"
        "def test_h(n):\n"
        "    print('drew', n)\n"
    )
    runs = [run_pytest(tmp_path, "-s", MPIJOB_CI="1") for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stdout
        assert f"hypothesis profile 'ci', seed {HYPOTHESIS_SEED}" in run.stdout
    assert runs[0].stdout.count("drew") > 10
    draws = [[line for line in run.stdout.splitlines() if line.startswith("drew")] for run in runs]
    assert draws[0] == draws[1]  # the same examples: a failure reproduces
    fresh = [run_pytest(tmp_path, "-s") for _ in range(2)]
    assert "seed" not in fresh[0].stdout.split("collected")[0]
    assert {line for line in fresh[0].stdout.splitlines() if line.startswith("drew")} != {
        line for line in fresh[1].stdout.splitlines() if line.startswith("drew")
    }


def test_under_ci_update_golden_is_a_usage_error() -> None:
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co", "-q", "--update-golden"]
    proc = subprocess.run(
        [*argv, "tests/unit/test_golden.py"],
        cwd=REPO,
        env=_env(MPIJOB_CI="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "never rewrites them" in proc.stderr


def test_the_offline_tier_runs_no_go_built_tool() -> None:
    for argv in (["go", "version"], [str(REPO / "deploy/helm/build.sh")], ["/opt/bin/kubectl", "version"]):
        with pytest.raises(RuntimeError, match="tests/tools"):
            subprocess.run(argv, capture_output=True, timeout=10)
    assert subprocess.run([sys.executable, "-c", "pass"], timeout=60).returncode == 0
