"""CI runs every tier: .ci/run refuses skip variables, and under MPIJOB_CI a skip fails the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MPIJOB_") and k != "PYTEST_ADDOPTS"}
    return {**env, **extra}


def test_ci_run_refuses_a_skip_variable_before_any_work() -> None:
    for var in ("MPIJOB_SKIP_CLUSTER", "MPIJOB_SKIP_ANYTHING", "PYTEST_ADDOPTS"):
        proc = subprocess.run(
            [str(REPO / ".ci" / "run")], env=_env(**{var: "1"}), capture_output=True, text=True, timeout=30
        )
        assert proc.returncode == 2, proc.stderr
        assert var in proc.stderr and "CI runs every tier" in proc.stderr
        assert proc.stdout == ""  # nothing was set up


def _pytest(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
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
    assert _pytest(tmp_path, "test_x.py").returncode == 0
    ci = _pytest(tmp_path, "test_x.py", MPIJOB_CI="1")
    assert ci.returncode == 1, ci.stdout
    assert "skipped, and CI skips nothing" in ci.stdout


def test_under_ci_skip_cluster_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text("def test_ok():\n    pass\n")
    ci = _pytest(tmp_path, "test_x.py", "--skip-cluster", MPIJOB_CI="1")
    assert ci.returncode == 4, ci.stdout + ci.stderr
    assert "CI runs every tier" in ci.stderr
    assert _pytest(tmp_path, "test_x.py", MPIJOB_SKIP_CLUSTER="1", MPIJOB_CI="1").returncode == 4
