"""The tools tier: checks that need what scripts/setup builds or fetches from the Go module proxy (kubectl,
helm, the Kubernetes module's OpenAPI spec, upstream's released source) but no cluster.

Each tool is resolved once per session. A missing tool fails the test; only --skip-cluster (or
MPIJOB_SKIP_CLUSTER=1) skips the tier, as it skips the cluster tiers.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from localcluster.binaries import find_bin_dir
from tests.tools.support import Objects, documents
from tests.upstream_source import upstream_flags
from tests.utils import REPO
from tools.crdgen import build as crdbuild


@pytest.fixture(scope="session")
def kubectl_binary() -> Path:
    """The Go-built kubectl's path (kubectl commands against a cluster: `localcluster.kubectl`)."""
    path = find_bin_dir() / "kubectl"
    assert path.is_file(), f"{path} is missing: run deploy/local/build.sh"
    return path


@pytest.fixture(scope="session")
def helm() -> Path:
    out = subprocess.run([str(REPO / "deploy/helm/build.sh")], capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.strip())


@pytest.fixture(scope="session")
def kubernetes_src() -> Path:
    """The k8s.io/kubernetes module directory of the pinned version (deploy/local/build.sh fetches it)."""
    src = crdbuild.k8s_src_dir()
    assert crdbuild.spec_path(src).is_file(), src
    return src


@pytest.fixture(scope="session")
def upstream_flag_kinds() -> dict[str, str]:
    """Every flag of upstream's released binary and its Go kind (tests/upstream_source.py)."""
    return upstream_flags()


@pytest.fixture
def kustomize(kubectl_binary: Path) -> Callable[[Path], Objects]:
    """`kubectl kustomize DIR` as objects."""
    return lambda path: documents([str(kubectl_binary), "kustomize", str(path)])
