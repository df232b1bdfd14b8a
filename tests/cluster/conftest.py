"""L1 fixtures: the MPIJob and PodGroup CRDs, a Kube client, and the operator as its own process.

- `kube`: a `reconcile.runtime.kube.Kube` with the admin client, no client-side rate limit.
- `dyn`: a `kubernetes.dynamic.DynamicClient` with the admin client.
- `mpijob_crd`, `podgroup_crds` (session): the CRDs installed (deploy/crd, tests/crds) and served.
- `start_operator(*flags, wait=True)`: a `localcluster.operator.OperatorRunner` watching the test's
  namespace (leader election in it too); stopped after the test, its log printed if the test failed.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from localcluster import LocalCluster
from localcluster.kubectl import kubectl
from localcluster.operator import OperatorRunner
from localcluster.wait import wait_for
from reconcile.runtime.kube import Kube
from tests.cluster.support import CRD_NAME, install_crds
from tests.utils import podgroup_crds as podgroup_crd_docs
from tools.crdgen.build import CRD_PATH


@pytest.fixture
def kube(api_client: client.ApiClient) -> Kube:
    return Kube(api_client, qps=0)


@pytest.fixture
def dyn(api_client: client.ApiClient) -> DynamicClient:
    return DynamicClient(api_client)


@pytest.fixture(scope="session")
def mpijob_crd(l1_cluster: LocalCluster) -> None:
    install_crds(l1_cluster, [d for d in yaml.safe_load_all(CRD_PATH.read_text()) if d])


@pytest.fixture(scope="session")
def podgroup_crds(l1_cluster: LocalCluster) -> None:
    install_crds(l1_cluster, podgroup_crd_docs())


@pytest.fixture
def start_operator(
    l1_cluster: LocalCluster, namespace: str, mpijob_crd: None, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., OperatorRunner]]:
    started: list[OperatorRunner] = []
    failed_before = request.session.testsfailed

    def start(*flags: str, wait: bool = True) -> OperatorRunner:
        op = OperatorRunner(
            l1_cluster.kubeconfig,
            tmp_path / f"operator-{len(started)}.log",
            f"--namespace={namespace}",
            f"--lock-namespace={namespace}",
            *flags,
            log_format="json",
        )
        started.append(op)
        return op.start(wait=wait, timeout=40)

    yield start
    for op in started:
        op.stop()
    if request.session.testsfailed > failed_before:  # the call phase failed: show what the operator said
        for op in started:
            print(f"--- operator log ({op.log_path.name}) ---\n{op.log_tail()}")


@pytest.fixture(scope="module")
def crd_install(l1_cluster) -> subprocess.CompletedProcess:
    """The CRD, server-side applied as a user would, and Established."""
    applied = kubectl(l1_cluster, "apply", "--server-side", "--force-conflicts", "-f", str(CRD_PATH))
    # Polled here: `kubectl wait` errors out while the new CRD has no status yet.
    api = l1_cluster.api_client()
    try:
        ext = client.ApiextensionsV1Api(api)
        wait_for(
            lambda: any(
                c.type == "Established" and c.status == "True"
                for c in ext.read_custom_resource_definition(CRD_NAME).status.conditions or []
            ),
            "CRD Established",
            60,
            0.2,
        )
    finally:
        api.close()
    return applied


@pytest.fixture
def mpijobs(crd_install, api_client) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)
