"""L4 fixtures: a local cluster with three real nodes (`localcluster --tier real --nodes 3`: kubelets,
containerds, CoreDNS, real images, no kwok nodes, all sealed in the sandbox), deploy/base-no-operator
applied, and the operator as its own process under the mpi-operator ServiceAccount. The machine is
recorded before and compared after: a run that changed it fails. Needs root; a machine that cannot run
the nodes fails the tier with the reason (never skips it), except with --skip-cluster."""

from __future__ import annotations

import contextlib
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import ClusterSpec, LocalCluster
from localcluster.cluster import wait_for_crds, wait_for_default_service_account
from localcluster.operator import OperatorRunner
from localcluster.sandbox import RealCluster, machine, seal
from reconcile.runtime.kube import EVENT, NODE, POD, Kube
from tests.conftest import SKIP_ENV, _skip_cluster
from tests.e2e.support import E2E, REPO, name_of, operator_runner
from tests.node.jobs import launcher_restarts
from tests.utils import kubectl, wait_for

JOB_TIMEOUT = 240.0
REAL_NODES = 3
NODES = [f"real-node-{i}" for i in range(1, REAL_NODES + 1)]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "node_e2e" in getattr(item, "fixturenames", ()) and item.get_closest_marker("l4") is None:
            item.add_marker(pytest.mark.l4)
        if _skip_cluster(config) and item.get_closest_marker("l4"):
            item.add_marker(pytest.mark.skip(reason=f"--skip-cluster or {SKIP_ENV}=1 given"))


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
        kubectl(cluster, "apply", "--server-side", "-k", str(REPO / "deploy" / "base-no-operator"))
        with contextlib.closing(cluster.api_client()) as api:
            wait_for_crds(api, ["mpijobs.kubeflow.org"])
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def node_operator(
    real_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorRunner]:
    with operator_runner(real_cluster, tmp_path_factory.mktemp("node-operator") / "operator.log") as op:
        yield op


class NodeE2E(E2E):
    """E2E helpers plus what only a real node has: logs and processes."""

    def launcher_log(self, job: str) -> str:
        pods = self.launcher_pods(job)
        assert pods, f"no launcher pod of {job}\n{self.describe(job)}"
        newest = max(pods, key=lambda p: p["metadata"]["creationTimestamp"])
        return kubectl(self.cluster, "logs", "-n", self.ns, name_of(newest)).stdout

    def gate_log(self, job: str) -> str:
        """The newest launcher pod's wait-for-workers log."""
        pods = self.launcher_pods(job)
        assert pods, f"no launcher pod of {job}\n{self.describe(job)}"
        newest = max(pods, key=lambda p: p["metadata"]["creationTimestamp"])
        return kubectl(self.cluster, "logs", "-n", self.ns, name_of(newest), "-c", "wait-for-workers").stdout

    def events(self, job: str) -> list[dict]:
        """Events about the MPIJob `job`."""
        return [
            e
            for e in self.kube.list(EVENT, self.ns)["items"]
            if (e.get("involvedObject") or {}).get("kind") == "MPIJob"
            and (e.get("involvedObject") or {}).get("name") == job
        ]

    def node(self, name: str) -> dict:
        return self.kube.get(NODE, None, name)

    def restarts(self, job: str) -> int:
        return launcher_restarts(self.launcher_pods(job))

    def run(self, body: dict, timeout: float = JOB_TIMEOUT) -> tuple[dict, str]:
        """Submit, wait until finished, return (MPIJob, the launcher's log)."""
        name = body["metadata"]["name"]
        self.submit(body)
        job = self.wait_finished(name, timeout)
        print(f"[l4] {name}: launcher restarts {self.restarts(name)}")
        return job, self.launcher_log(name)


@pytest.fixture
def node_e2e(
    request: pytest.FixtureRequest, real_cluster: LocalCluster, node_operator: OperatorRunner
) -> Iterator[NodeE2E]:
    from kubernetes import client

    if not node_operator.alive():  # its death failed the test during which it died (tests/conftest.py)
        node_operator.check()  # raises if that was not told yet
        node_operator.start()
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    ns = f"n-{slug}-{secrets.token_hex(3)}"
    api = real_cluster.api_client()
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns, "labels": {"mpijob.dev/test": "true"}}})
    wait_for_default_service_account(core, ns)
    e2e = NodeE2E(real_cluster, Kube(api, qps=0), ns, node_operator)
    try:
        yield e2e
    finally:
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(ns, propagation_policy="Foreground")
        # Next test starts on an empty node: wait until this namespace's pods are gone.
        wait_for(lambda: not e2e.kube.list(POD, ns)["items"], f"{ns}'s pods gone", 60, 0.5)
        api.close()


def processes_named(cluster: LocalCluster, comm: str, node: str | None = None) -> list[int]:
    """Processes called `comm` on the real nodes (or on one), found in the cgroups the sandbox made."""
    pids = []
    for pid in seal.sandbox_pids(cluster.work_dir, node):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == comm:
                pids.append(pid)
    return pids


def sshd_processes(cluster: LocalCluster) -> list[int]:
    """sshd processes running on the real nodes."""
    return processes_named(cluster, "sshd")
