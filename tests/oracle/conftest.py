"""The differential tier's fixtures: one L2 cluster of its own (kwok nodes) with two namespaces, upstream's
released operator (deploy/local/build.sh builds it) scoped to `up-ns` under its own ClusterRole, and ours
scoped to `our-ns` under the mpi-operator ServiceAccount's RBAC. Both at their defaults, except upstream's
client rate limit (5 QPS), raised so the tier fits CI's budget; its behaviour has no flag that depends on it.

`oracle.ledger` collects what every step compared; the last test of the tier fails on stale entries.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from kubernetes import client

from localcluster import ClusterSpec, LocalCluster, upstream
from localcluster.e2e import create_namespace, operator_runner
from localcluster.nodes import DEFAULT_CAPACITY
from localcluster.operator import OperatorRunner
from reconcile.runtime.kube import Kube
from tests.oracle.compare import Ledger, load_entries
from tests.oracle.support import OUR_NS, UP_NS, Oracle, install_both
from tests.utils import skip_without_cluster

# Room for every input's pods on both sides at once (the inputs ask for up to 2 cpus a pod).
CAPACITY = {**DEFAULT_CAPACITY, "cpu": "512", "memory": "4Ti"}
PRIORITY_CLASSES = {"high": 1000, "low": 10}


@pytest.fixture(scope="session")
def oracle(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Oracle]:
    skip_without_cluster(request.config)
    work = tmp_path_factory.mktemp("oracle")
    cluster = LocalCluster(ClusterSpec(tier="l2", nodes=4, node_capacity=CAPACITY), work_dir=work / "cluster")
    cluster.start()
    try:
        install_both(cluster, work)
        with contextlib.closing(cluster.api_client()) as api:
            core = client.CoreV1Api(api)
            for name, value in PRIORITY_CLASSES.items():  # the ones the inputs name
                client.SchedulingV1Api(api).create_priority_class(
                    {"metadata": {"name": name}, "value": value, "globalDefault": False}
                )
            for ns in (UP_NS, OUR_NS):
                create_namespace(core, ns)
        ours: OperatorRunner = operator_runner(cluster, work / "ours.log")
        ours.flags = (f"--namespace={OUR_NS}",)
        theirs = upstream.UpstreamOperator(
            cluster.write_user_kubeconfig(upstream.USER),
            work / "upstream.log",
            UP_NS,
            "--kube-api-qps=100",
            "--kube-api-burst=200",
        )
        with ours, theirs:
            api = cluster.api_client()
            try:
                yield Oracle(cluster, Kube(api, qps=0), ours, theirs, Ledger(load_entries()))
            finally:
                api.close()
    finally:
        cluster.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    oracle: Oracle | None = getattr(item, "funcargs", {}).get("oracle")
    if oracle is not None and report.failed and report.when == "call":
        report.sections.append(("upstream operator log (tail)", oracle.upstream.log_tail(6000)))
        report.sections.append(("our operator log (tail)", oracle.ours.log_tail(6000)))
