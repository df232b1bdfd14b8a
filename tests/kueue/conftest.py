"""Kueue tier: real Kueue (built by deploy/local/build.sh) drives our MPIJobs on an L2 cluster of its own,
with the operator as a process under the mpi-operator ServiceAccount (localcluster.e2e's operator_runner).

Kueue is installed as a real install has it (localcluster.kueue): its webhooks suspend MPIJobs created
unsuspended, its controllers admit them by unsuspending and injecting each flavor's node labels and
tolerations, and evict them by suspending and restoring the templates.

The cluster (session) has these kwok nodes:
- kwok-node-0, kwok-node-1: plain, no taint (flavor "plain", no node labels);
- pool-a-0/1 and pool-b-0/1: label and NoSchedule taint `mpijob.dev/pool=a|b` (flavors "pool-a", "pool-b"
  carry them as nodeLabels, nodeTaints and tolerations, so admitted pods land there);
- rack-<r>-<i> (r = 0, 1; i = 0..3), 4 cpu each: label `mpijob.dev/rack=rack-<r>` and pool/taint `tas`
  (flavor "tas" with Topology "racks": levels rack, hostname).
Per test, `kq.queue(...)` makes a ClusterQueue named after the test's namespace with the given flavors
and cpu quota, and LocalQueue "queue" in the namespace; jobs request cpu so quota decides.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest

from localcluster import ClusterSpec, LocalCluster
from localcluster.e2e import running_with_base
from localcluster.kueue import Kueue
from localcluster.operator import OperatorRunner
from reconcile.runtime.kube import Kube
from tests.kueue.support import SESSION_OBJECTS, KueueE2E, kueue_nodes, running_kueue
from tests.utils import operator_for, running_again, skip_without_cluster


# -- session: cluster, Kueue, operator ------------------------------------------------------------------
@pytest.fixture(scope="session")
def kueue_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """An L2 cluster for this tier alone: Kueue's webhooks then never touch the other tiers' jobs."""
    skip_without_cluster(request.config)
    began = time.monotonic()
    # deploy/base-no-operator before Kueue: it sets up the integration then
    with running_with_base(LocalCluster(ClusterSpec(tier="l2", nodes=2))) as cluster:
        cluster.add_nodes(kueue_nodes())
        print(f"\n[localcluster] kueue tier cluster ready in {time.monotonic() - began:.1f}s")
        yield cluster


@pytest.fixture(scope="session")
def kueue(kueue_cluster: LocalCluster) -> Iterator[Kueue]:
    began = time.monotonic()
    with running_kueue(kueue_cluster, SESSION_OBJECTS) as kq:
        print(f"\n[kueue] ready in {time.monotonic() - began:.1f}s, webhooks at {kq.webhook_base}")
        yield kq


@pytest.fixture(scope="session")
def operator(
    kueue_cluster: LocalCluster, kueue: Kueue, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorRunner]:
    yield from operator_for(kueue_cluster, tmp_path_factory)


@pytest.fixture
def cluster(kueue_cluster: LocalCluster) -> LocalCluster:
    """The root conftest's `namespace` fixture makes the test's namespace on this tier's cluster."""
    return kueue_cluster


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    kq: KueueE2E | None = getattr(item, "_kueue_e2e", None)
    if kq is not None and report.failed and call.when == "call":
        report.sections.append(("operator log since the test began", kq.operator.log_since(kq.op_offset)))
        report.sections.append(("kueue log (tail)", kq.kueue.log_tail(60)))
        with contextlib.suppress(Exception):
            report.sections.append(("workloads", kq.describe_workloads()))


@pytest.fixture
def kq(
    kueue_cluster: LocalCluster,
    kueue: Kueue,
    namespace: str,
    operator: OperatorRunner,
    request: pytest.FixtureRequest,
) -> Iterator[KueueE2E]:
    running_again(operator)
    if not kueue.alive():
        raise RuntimeError(f"kueue died:\n{kueue.log_tail()}")
    api = kueue_cluster.api_client()
    helper = KueueE2E(kueue_cluster, Kube(api, qps=0), namespace, operator, kueue)
    request.node._kueue_e2e = helper
    try:
        yield helper
    finally:
        helper.cleanup()
        api.close()
