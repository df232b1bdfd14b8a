"""L2: the Helm chart installs on a local cluster, runs the pi example and uninstalls cleanly.

A cluster of its own (a Helm release must own the cluster-wide RBAC it installs). kwok runs no containers,
so the operator runs as a local process with exactly the args of the chart's Deployment, under the chart's
ServiceAccount and RBAC. `helm uninstall` removes everything the release made and keeps the CRD, as Helm
does with crds/ (so the MPIJobs stay).
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from localcluster import LocalCluster
from localcluster.cluster import wait_for_default_service_account
from localcluster.e2e import condition_is
from localcluster.operator import OperatorRunner
from localcluster.wait import wait_for
from reconcile.mpijob.kinds import MPIJOB
from reconcile.runtime.kube import Kube
from tests.utils import PRIVILEGED_POD, REPO, RESTRICTED, assert_own_token_only

pytestmark = pytest.mark.l2

SLOW = 90.0  # a whole install or upgrade

CHART = REPO / "deploy" / "helm" / "mpi-operator"
NS = "mpi-operator"


def helm(cluster: LocalCluster, *args: str) -> str:
    binary = subprocess.run([str(REPO / "deploy/helm/build.sh")], capture_output=True, text=True, check=True)
    out = subprocess.run(
        [binary.stdout.strip(), *args],
        capture_output=True,
        text=True,
        env={
            **cluster.env(),
            "HOME": str(cluster.work_dir),
        },  # helm's caches and config stay with the cluster
        timeout=300,
    )
    assert out.returncode == 0, f"helm {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def read(kube: Kube, path: str) -> dict | None:
    """The object at ``path``, None if there is none."""
    try:
        return kube.request("GET", path)
    except Exception as err:
        if getattr(err, "status", None) == 404:
            return None
        raise


def exists(kube: Kube, path: str) -> bool:
    return read(kube, path) is not None


def test_chart_installs_runs_pi_and_uninstalls_keeping_the_crd(own_cluster, tmp_path):
    cluster = own_cluster
    api = cluster.api_client()
    kube = Kube(api, qps=0)
    from kubernetes import client

    core = client.CoreV1Api(api)
    # The release's namespace enforces the restricted Pod Security Standard, as deploy/'s Namespace does.
    core.create_namespace({"metadata": {"name": NS, "labels": RESTRICTED}})
    helm(cluster, "install", "mpi-operator", str(CHART), "-n", NS)
    assert "deployed" in helm(cluster, "status", "mpi-operator", "-n", NS).lower()
    deployment = kube.request("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/mpi-operator")
    # kwok runs no container, but the ReplicaSet's pods are admitted (or refused) as on any cluster.
    pods = wait_for(
        lambda: core.list_namespaced_pod(NS, label_selector="app=mpi-operator").items or None,
        "the chart's operator pods admitted in the restricted namespace",
        timeout=SLOW,
    )
    for pod in pods:
        assert_own_token_only(api.sanitize_for_serialization(pod))
    with pytest.raises(client.ApiException) as refused:  # the control: this namespace does enforce
        core.create_namespaced_pod(NS, {"metadata": {"name": "privileged"}, "spec": PRIVILEGED_POD})
    assert refused.value.status == 403 and "violates PodSecurity" in refused.value.body, refused.value
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]

    core.create_namespace({"metadata": {"name": "jobs"}})
    wait_for_default_service_account(core, "jobs")
    # The chart's args, then the local process's own port (8080 may be taken on this machine).
    op = OperatorRunner(
        cluster.write_user_kubeconfig(f"system:serviceaccount:{NS}:mpi-operator"),
        tmp_path / "operator.log",
        *[a for a in args if not a.startswith("--monitoring-port")],
        "--namespace=jobs",
    )
    op.start()
    try:
        pi = yaml.safe_load((REPO / "examples" / "pi.yaml").read_text())
        kube.create(MPIJOB, "jobs", pi)
        wait_for(
            lambda: condition_is(kube.get(MPIJOB, "jobs", "pi"), "Succeeded"), "pi Succeeded", timeout=SLOW
        )
    finally:
        op.stop()

    rbac = "/apis/rbac.authorization.k8s.io/v1"
    admin = f"{rbac}/clusterroles/kubeflow-mpijobs-admin"
    made = (
        f"/apis/apps/v1/namespaces/{NS}/deployments/mpi-operator",
        f"/api/v1/namespaces/{NS}/serviceaccounts/mpi-operator",
        f"{rbac}/namespaces/{NS}/roles/mpi-operator-leader-election",
        f"{rbac}/namespaces/{NS}/rolebindings/mpi-operator-leader-election",
        f"{rbac}/clusterroles/mpi-operator",
        f"{rbac}/clusterrolebindings/mpi-operator",
        f"{rbac}/clusterroles/kubeflow-mpijobs-edit",
        f"{rbac}/clusterroles/kubeflow-mpijobs-view",
        "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/mpi-operator-leader-election",
    )
    assert [path for path in (*made, admin) if not exists(kube, path)] == []  # the paths name what it made
    # No --wait: kube-controller-manager's aggregation controller writes the aggregated admin role with
    # server-side apply, which creates it again when the uninstall deleted it while it was queued; helm's
    # wait then runs out its timeout. The role stays aggregated: upstream's is, and an upgrade over it must
    # not meet the controller's ownership of its rules.
    helm(cluster, "uninstall", "mpi-operator", "-n", NS)
    for path in made:
        wait_for(lambda path=path: not exists(kube, path), f"{path} removed by helm uninstall", timeout=SLOW)

    def admin_gone_or_recreated() -> bool:
        role = read(kube, admin)
        # re-created by the aggregation controller: not the release's any more
        return role is None or "meta.helm.sh/release-name" not in (role["metadata"].get("annotations") or {})

    wait_for(
        admin_gone_or_recreated,
        "kubeflow-mpijobs-admin removed by helm uninstall (or re-created by the controller)",
        timeout=SLOW,
    )
    assert exists(kube, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/mpijobs.kubeflow.org")
    assert condition_is(kube.get(MPIJOB, "jobs", "pi"), "Succeeded")  # the CRD and its MPIJobs stay
    api.close()
