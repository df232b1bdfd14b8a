"""L4 fixtures: a local cluster with three real nodes (`localcluster --tier real --nodes 3`: kubelets,
containerds, CoreDNS, real images, no kwok nodes, all sealed in the sandbox), deploy/base-no-operator
applied, and the operator as its own process under the mpi-operator ServiceAccount. The machine is
recorded before and compared after: a run that changed it fails. Needs root; a machine that cannot run
the nodes fails the tier with the reason (never skips it), except with --skip-cluster."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest

from localcluster import ClusterSpec, LocalCluster
from localcluster.e2e import apply_base, create_namespace
from localcluster.operator import OperatorRunner
from localcluster.realnode import NodeE2E
from localcluster.sandbox import RealCluster, machine
from localcluster.wait import wait_for
from reconcile.runtime.kube import POD, Kube
from tests.node.support import REAL_NODES
from tests.utils import (
    SKIP_REASON,
    TEST_NAMESPACE_LABELS,
    namespace_name,
    operator_for,
    running_again,
    skip_cluster,
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "node_e2e" in getattr(item, "fixturenames", ()) and item.get_closest_marker("l4") is None:
            item.add_marker(pytest.mark.l4)
        if skip_cluster(config) and item.get_closest_marker("l4"):
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.fixture(scope="session")
def machine_unchanged() -> Iterator[None]:
    """The machine's network, mounts, kernel settings and this run's parent processes are the same
    after the real tier as before it (set up before the cluster, checked after its teardown)."""
    before = machine.snapshot()
    yield
    changed = machine.differences(before, machine.snapshot())
    assert not changed, "the real tier changed the machine:\n" + "\n".join(changed)


@pytest.fixture(scope="session")
def real_cluster(machine_unchanged: None) -> Iterator[LocalCluster]:
    cluster = RealCluster(ClusterSpec(tier="real", nodes=0, real_nodes=REAL_NODES, startup_timeout=180))
    began = time.monotonic()
    cluster.start()  # NodeUnavailable / BinariesMissing: the tier errors with the reason
    print(f"\n[localcluster] {REAL_NODES} real nodes ready in {time.monotonic() - began:.1f}s")
    try:
        apply_base(cluster)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def node_operator(
    real_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorRunner]:
    yield from operator_for(real_cluster, tmp_path_factory, "node-operator")


@pytest.fixture
def node_e2e(
    request: pytest.FixtureRequest, real_cluster: LocalCluster, node_operator: OperatorRunner
) -> Iterator[NodeE2E]:
    from kubernetes import client

    running_again(node_operator)
    api = real_cluster.api_client()
    core = client.CoreV1Api(api)
    ns = create_namespace(core, namespace_name(request.node.name, "n"), TEST_NAMESPACE_LABELS)
    e2e = NodeE2E(real_cluster, Kube(api, qps=0), ns, node_operator)
    try:
        yield e2e
    finally:
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(ns, propagation_policy="Foreground")
        # Next test starts on an empty node: wait until this namespace's pods are gone.
        wait_for(lambda: not e2e.kube.list(POD, ns)["items"], f"{ns}'s pods gone", 60, 0.5)
        api.close()
