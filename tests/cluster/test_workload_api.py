"""L1: `--gang-scheduling=kubernetes` against a real API server, with and without the Workload API.

The session's cluster serves `scheduling.k8s.io/v1alpha1` (localcluster turns its gates on); a cluster of
this module's own turns the GenericWorkload gate off, as a cluster that never enabled it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import ClusterSpec, LocalCluster
from localcluster.cluster import wait_for_crds
from localcluster.jobs import pi_job
from localcluster.kubectl import kubectl
from localcluster.operator import OperatorRunner
from localcluster.wait import wait_for
from reconcile.mpijob.kinds import MPIJOB
from reconcile.runtime.kube import EVENT, JOB, WORKLOAD_V1ALPHA1, Kube
from render.gang import GANG_SCHEDULED, REASON_UNAVAILABLE
from tests.cluster.support import plan, wait_workers, workers
from tools.crdgen.build import CRD_PATH

pytestmark = pytest.mark.l1

REF = {"name": "pi", "podGroup": "workers"}


def min_count(workload: dict[str, Any]) -> int:
    (group,) = workload["spec"]["podGroups"]
    return int(group["policy"]["gang"]["minCount"])


def set_workers(kube: Kube, namespace: str, count: int) -> None:
    patch = {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": count}}}}
    kube.patch(MPIJOB, namespace, "pi", patch)


def test_the_workload_follows_the_worker_count(
    kube: Kube, namespace: str, start_operator: Callable[..., OperatorRunner], l1_cluster: LocalCluster
) -> None:
    body = pi_job(workers=3)
    body["metadata"]["namespace"] = namespace
    kube.create(MPIJOB, namespace, body)
    # `mpijob plan` asks the cluster which version it serves, as the operator does, and writes nothing
    code, report = plan(l1_cluster.kubeconfig, "--gang-scheduling=kubernetes", f"{namespace}/pi")
    assert code == 1 and f"Workload.scheduling.k8s.io {namespace}/pi" in [
        c["object"] for c in report["plan"]["creates"]
    ]
    start_operator("--gang-scheduling=kubernetes")
    first = wait_for(lambda: kube.get(WORKLOAD_V1ALPHA1, namespace, "pi"), "the Workload")
    assert min_count(first) == 3
    pods = wait_workers(kube, namespace, 3)
    assert [p["spec"].get("workloadRef") for p in pods] == [REF] * 3
    launcher = wait_for(lambda: kube.get(JOB, namespace, "pi-launcher"), "the launcher Job")
    assert "workloadRef" not in launcher["spec"]["template"]["spec"]
    wait_for(
        lambda: plan(l1_cluster.kubeconfig, "--gang-scheduling=kubernetes", f"{namespace}/pi")[0] == 0,
        "a plan with nothing to write",
    )

    # Fewer workers: the Workload's pod groups are immutable, so it is replaced (same name, new object);
    # the workers that stay keep their reference and are not re-created.
    kept = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods[:2]}
    set_workers(kube, namespace, 2)

    def replaced(count: int, old_uid: str) -> dict[str, Any] | None:
        live = kube.get(WORKLOAD_V1ALPHA1, namespace, "pi")
        return live if live["metadata"]["uid"] != old_uid and min_count(live) == count else None

    second = wait_for(lambda: replaced(2, first["metadata"]["uid"]), "the Workload with minCount 2")
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in workers(kube, namespace)} == kept
    set_workers(kube, namespace, 4)
    wait_for(lambda: replaced(4, second["metadata"]["uid"]), "the Workload with minCount 4")
    pods = wait_workers(kube, namespace, 4)
    assert [p["spec"].get("workloadRef") for p in pods] == [REF] * 4


@pytest.fixture(scope="module")
def no_workload_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    spec = ClusterSpec(
        tier="l1", apiserver_args=("--feature-gates=GenericWorkload=false,GangScheduling=false",)
    )
    cluster = LocalCluster(spec, work_dir=tmp_path_factory.mktemp("no-workload-api"))
    cluster.start()
    try:
        kubectl(cluster, "apply", "--server-side", "-f", str(CRD_PATH))
        with cluster.api_client() as api:
            wait_for_crds(api, ["mpijobs.kubeflow.org"])
        kubectl(cluster, "create", "namespace", "jobs")
        yield cluster
    finally:
        cluster.stop()


def test_no_workload_api_is_said_at_start_and_on_each_job(
    no_workload_api: LocalCluster, tmp_path: Path
) -> None:
    cluster = no_workload_api
    op = OperatorRunner(
        cluster.kubeconfig,
        tmp_path / "operator.log",
        "--namespace=jobs",
        "--lock-namespace=jobs",
        "--gang-scheduling=kubernetes",
        log_format="json",
    )
    op.start(timeout=40)
    try:
        with cluster.api_client() as api:
            kube = Kube(api, qps=0)
            body = pi_job()
            body["metadata"]["namespace"] = "jobs"
            kube.create(MPIJOB, "jobs", body)

            def said() -> dict[str, Any] | None:
                conds = (kube.get(MPIJOB, "jobs", "pi").get("status") or {}).get("conditions") or ()
                return next((c for c in conds if c["type"] == GANG_SCHEDULED), None)

            gang = wait_for(said, "the GangScheduled condition")
            assert (gang["status"], gang["reason"]) == ("False", REASON_UNAVAILABLE), gang
            assert "serves no Workload API" in gang["message"]
            pods = wait_workers(kube, "jobs", 2)
            assert all("workloadRef" not in p["spec"] for p in pods)
            warnings = wait_for(
                lambda: [
                    e
                    for e in kube.list(EVENT, "jobs")["items"]
                    if e.get("reason") == REASON_UNAVAILABLE and e.get("type") == "Warning"
                ],
                "the Warning event",
            )
            assert warnings[0]["involvedObject"]["name"] == "pi"
        start_lines = [
            line for line in op.log_tail(200_000).splitlines() if "gang scheduling is not possible" in line
        ]
        assert len(start_lines) == 1, op.log_tail()
    finally:
        op.stop()


def test_the_crd_keeps_both_gang_references_in_pod_templates(
    kube: Kube, namespace: str, mpijob_crd: None
) -> None:
    """A newer API server must not prune what the Workload API versions put in a pod spec."""
    body = pi_job()
    body["metadata"]["namespace"] = namespace
    spec = body["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["workloadRef"] = {"name": "w", "podGroup": "workers"}
    spec["schedulingGroup"] = {"podGroupName": "w"}
    kube.create(MPIJOB, namespace, body)
    kept = kube.get(MPIJOB, namespace, "pi")["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert kept["workloadRef"] == spec["workloadRef"] and kept["schedulingGroup"] == spec["schedulingGroup"]
