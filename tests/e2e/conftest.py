"""L2 end-to-end fixtures (helpers in localcluster/e2e.py and support.py): the session's local cluster with
`deploy/base-no-operator` installed, the operator as its own process under the mpi-operator
ServiceAccount's RBAC (never admin), and an `E2E` helper per test.

- `operator` (session): the running operator, a `localcluster.operator.OperatorRunner`;
  `operator.restart("--gang-scheduling=volcano")` restarts it with other flags, `with
  operator.with_flags(...)` restores the default flags afterwards. Its log since the start of a failed
  test is attached to the test report.
- `e2e` (per test): `submit`, `wait_condition`, `wait_for`, `pods`, `describe` ... in a fresh namespace.
- `podgroup_crds` (session): the PodGroup CRDs of tests/crds/.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import ClusterSpec, LocalCluster
from localcluster.cluster import wait_for_crds
from localcluster.e2e import E2E, apply_base
from localcluster.kubectl import kubectl
from localcluster.operator import OperatorRunner
from reconcile.runtime.kube import Kube
from tests.utils import PODGROUP_CRD_FILES, operator_for, running_again
from tests.utils import podgroup_crds as podgroup_crd_docs


@pytest.fixture(scope="session")
def e2e_cluster(l2_cluster: LocalCluster) -> LocalCluster:
    """The session's L2 cluster with the CRD, namespace and RBAC of deploy/base-no-operator applied."""
    apply_base(l2_cluster)
    return l2_cluster


@pytest.fixture(scope="session")
def podgroup_crds(e2e_cluster: LocalCluster) -> None:
    """Minimal PodGroup CRDs of scheduler-plugins and Volcano (tests/crds/)."""
    for path in PODGROUP_CRD_FILES:
        kubectl(e2e_cluster, "apply", "--server-side", "-f", str(path))
    with e2e_cluster.api_client() as api:
        wait_for_crds(api, [d["metadata"]["name"] for d in podgroup_crd_docs()])


@pytest.fixture(scope="session")
def operator(e2e_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorRunner]:
    yield from operator_for(e2e_cluster, tmp_path_factory)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    op: OperatorRunner | None = getattr(item, "_e2e_operator", None)
    if op is not None and report.failed:
        offset = getattr(item, "_e2e_log_offset", 0)
        report.sections.append(("operator log since the test began", op.log_since(offset)))


@pytest.fixture(autouse=True)
def _attach_operator_log(request: pytest.FixtureRequest) -> None:
    if "operator" in request.fixturenames:
        op = request.getfixturevalue("operator")
        request.node._e2e_operator = op
        request.node._e2e_log_offset = op.log_size()


@pytest.fixture
def kube(e2e_cluster: LocalCluster) -> Iterator[Kube]:
    api = e2e_cluster.api_client()
    try:
        yield Kube(api, qps=0)
    finally:
        api.close()


@pytest.fixture
def e2e(e2e_cluster: LocalCluster, kube: Kube, namespace: str, operator: OperatorRunner) -> E2E:
    running_again(operator)
    return E2E(e2e_cluster, kube, namespace, operator)


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A fresh L2 cluster for one test (installs that must not meet the session cluster's)."""
    cluster = LocalCluster(ClusterSpec(tier="l2"), work_dir=tmp_path / "cluster")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
