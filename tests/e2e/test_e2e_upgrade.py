"""L2: upgrading an upstream v0.8.2 install in place, standalone and Kubeflow.

Each case gets a local cluster of its own (the install rewrites cluster-wide RBAC). Upstream's manifests
(the released module from the Go module proxy, built with `kubectl kustomize`, the Deployment's image set
to ours) go in first, a job runs, then ours are applied over them exactly as docs/install.md says: the apply
succeeds (the Deployment's selector is upstream's), the job, its pods and its launcher Job keep their uids,
and the operator, restarted under the same ServiceAccount with our RBAC, takes the job to Succeeded.
"""

from __future__ import annotations

import pytest
import yaml

from localcluster.cluster import wait_for_default_service_account
from localcluster.e2e import HOLD, KNOB, condition_is
from localcluster.jobs import pi_job
from localcluster.kubectl import kubectl
from localcluster.operator import OperatorRunner
from localcluster.wait import wait_for
from reconcile.mpijob.kinds import MPIJOB
from reconcile.runtime.kube import JOB, POD, Kube
from tests.upstream_source import upstream_manifests
from tests.utils import REPO

pytestmark = pytest.mark.l2

SLOW = 90.0  # a whole install or upgrade

# (upstream's overlay, ours, the install namespace)
VARIANTS = {
    "standalone": ("overlays/standalone", "deploy", "mpi-operator"),
    "kubeflow": ("overlays/kubeflow", "deploy/overlays/kubeflow", "kubeflow"),
}
UPSTREAM_SELECTOR = {
    "app": "mpi-operator",
    "app.kubernetes.io/component": "mpijob",
    "app.kubernetes.io/name": "mpi-operator",
    "kustomize.component": "mpi-operator",
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_apply_ours_over_an_upstream_install_keeps_running_jobs(variant, own_cluster, tmp_path):
    upstream_variant, ours, ns = VARIANTS[variant]
    cluster = own_cluster
    api = cluster.api_client()
    kube = Kube(api, qps=0)
    from kubernetes import client

    core = client.CoreV1Api(api)
    if ns == "kubeflow":  # a Kubeflow install brings its namespace; upstream's overlay does not create it
        core.create_namespace({"metadata": {"name": ns}})

    docs = upstream_manifests(cluster.bin_dir / "kubectl", upstream_variant, tmp_path)
    for d in docs:
        if d["kind"] == "Deployment":
            d["spec"]["template"]["spec"]["containers"][0]["image"] = "mpijob-operator:0.1.0"
    kubectl(cluster, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(docs))
    crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/mpijobs.kubeflow.org"
    wait_for(
        lambda: any(
            c["type"] == "Established" and c["status"] == "True"
            for c in (kube.request("GET", crd_path).get("status") or {}).get("conditions") or []
        ),
        "CRD established",
        timeout=SLOW,
    )

    core.create_namespace({"metadata": {"name": "jobs"}})
    wait_for_default_service_account(core, "jobs")
    # upstream's RBAC is not what our operator needs: run it as admin
    admin = OperatorRunner(
        cluster.kubeconfig, tmp_path / "operator.log", "--namespace=jobs", f"--lock-namespace={ns}"
    )
    admin.start()
    try:
        job = kube.create(MPIJOB, "jobs", pi_job(launcher_annotations=HOLD))
        wait_for(lambda: condition_is(kube.get(MPIJOB, "jobs", "pi"), "Running"), "Running", timeout=SLOW)
    finally:
        admin.stop()  # as the rollout replaces the old operator pod
    pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.list(POD, "jobs")["items"]}
    launcher_uid = kube.get(JOB, "jobs", "pi-launcher")["metadata"]["uid"]

    # The upgrade, as docs/install.md says; the Deployment keeps upstream's selector (it is immutable).
    kubectl(cluster, "apply", "--server-side", "-k", str(REPO / ours))
    deployment = kube.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/mpi-operator")
    assert deployment["spec"]["selector"]["matchLabels"] == UPSTREAM_SELECTOR
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--lock-namespace={ns}" in args and "-alsologtostderr" not in args
    crd = kube.request("GET", crd_path)
    assert crd["spec"]["versions"][0].get("additionalPrinterColumns"), "our CRD is installed"
    if ns == "kubeflow":
        assert "pod-security.kubernetes.io/enforce" not in (core.read_namespace(ns).metadata.labels or {})

    assert kube.get(MPIJOB, "jobs", "pi")["metadata"]["uid"] == job["metadata"]["uid"]
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.list(POD, "jobs")["items"]} == pods
    assert kube.get(JOB, "jobs", "pi-launcher")["metadata"]["uid"] == launcher_uid

    # Our operator under the same ServiceAccount, now with our RBAC, finishes the job.
    sa = OperatorRunner(
        cluster.write_user_kubeconfig(f"system:serviceaccount:{ns}:mpi-operator"),
        tmp_path / "operator.log",
        "--namespace=jobs",
        f"--lock-namespace={ns}",
    )
    sa.start()
    try:
        for pod in kube.list(POD, "jobs", labelSelector="training.kubeflow.org/job-role=launcher")["items"]:
            kube.patch(
                POD, "jobs", pod["metadata"]["name"], {"metadata": {"annotations": {f"{KNOB}hold": None}}}
            )
        wait_for(lambda: condition_is(kube.get(MPIJOB, "jobs", "pi"), "Succeeded"), "Succeeded", timeout=SLOW)
    finally:
        sa.stop()
    api.close()
