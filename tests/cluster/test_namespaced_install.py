"""L1: the namespace-scoped install (deploy/namespaced) gives the operator Roles in its watched namespaces
and nothing cluster-wide: it cannot read Secrets elsewhere."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from localcluster.e2e import condition_is
from localcluster.jobs import minimal_job
from localcluster.kubectl import KubectlFailed, kubectl
from localcluster.operator import OperatorRunner
from localcluster.wait import wait_for
from reconcile.mpijob.kinds import MPIJOB
from reconcile.runtime.kube import CONFIGMAP, POD, SECRET, SERVICE, ApiError, Kube
from tests.cluster.support import GROUP, OPERATOR_SA, _can
from tests.utils import user_client
from tools.manifests import DEPLOY

pytestmark = pytest.mark.l1


@pytest.fixture(scope="module")
def namespaced(l1_cluster, crd_install) -> Iterator[Any]:
    """The overlay applied; the default install's ClusterRoleBinding (other tests of this cluster apply
    it) removed while these tests run, and put back after."""
    with contextlib.suppress(KubectlFailed):  # another test of this cluster may have made it
        kubectl(l1_cluster, "create", "namespace", "team-a")
    kubectl(l1_cluster, "delete", "clusterrolebinding", "mpi-operator", "--ignore-not-found")
    # the Deployment is applied as a dry run (no image exists here), the rest for real
    text = kubectl(l1_cluster, "kustomize", str(DEPLOY / "namespaced")).stdout
    rendered = [d for d in yaml.safe_load_all(text) if d]
    real = [d for d in rendered if d["kind"] != "Deployment"]
    kubectl(
        l1_cluster, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump_all(real)
    )
    out = kubectl(
        l1_cluster, "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-", stdin=text
    )
    yield l1_cluster, rendered, out
    kubectl(l1_cluster, "apply", "--server-side", "--force-conflicts", "-k", str(DEPLOY / "base-no-operator"))


def test_the_overlay_has_no_cluster_role_for_the_operator_and_passes_a_server_dry_run(namespaced):
    _, rendered, out = namespaced
    kinds = {(d["kind"], d["metadata"]["name"]) for d in rendered}
    assert ("ClusterRole", "mpi-operator") not in kinds and (
        "ClusterRoleBinding",
        "mpi-operator",
    ) not in kinds
    (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
    assert "--namespace=team-a" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "deployment.apps/mpi-operator serverside-applied (server dry run)" in out.stdout


def test_the_operator_may_act_in_its_namespace_only(namespaced):
    cluster, _, _ = namespaced
    api = user_client(cluster, OPERATOR_SA)
    try:
        for verb, resource, group in [
            ("list", "secrets", ""),
            ("watch", "pods", ""),
            ("create", "pods", ""),
            ("create", "jobs", "batch"),
            ("list", "mpijobs", GROUP),
            ("update", "mpijobs/status", GROUP),
            ("create", "events", ""),
        ]:
            assert _can(api, verb, resource, "team-a", "", group), (verb, resource)
        for verb, resource, namespace, group in [
            ("list", "secrets", "", ""),
            ("get", "secrets", "default", ""),
            ("list", "secrets", "kube-system", ""),
            ("list", "pods", "", ""),
            ("list", "mpijobs", "", GROUP),
            ("list", "priorityclasses", "", "scheduling.k8s.io"),
        ]:
            assert not _can(api, verb, resource, namespace, "", group), (verb, resource, namespace)
    finally:
        api.close()


def test_the_operator_under_the_namespaced_roles_is_refused_nothing(namespaced, tmp_path):
    """The Deployment's own args and the ServiceAccount's identity: a job gets its children, and no
    request of the operator is answered 403."""
    cluster, rendered, _ = namespaced
    (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    op = OperatorRunner(
        cluster.write_user_kubeconfig(OPERATOR_SA),
        tmp_path / "operator.log",
        *[a for a in args if not a.startswith("--monitoring-port")],  # the runner picks a free port
    )
    op.start(timeout=40)
    api = cluster.api_client()
    kube = Kube(api, qps=0)
    try:
        kube.create(MPIJOB, "team-a", minimal_job("namespaced", workers=2))
        wanted = [(SERVICE, "namespaced"), (CONFIGMAP, "namespaced-config"), (SECRET, "namespaced-ssh")]
        wanted += [(POD, f"namespaced-worker-{i}") for i in range(2)]
        for res, name in wanted:
            wait_for(lambda res=res, name=name: kube.get(res, "team-a", name), f"{res.kind} {name}", 40)
        wait_for(lambda: condition_is(kube.get(MPIJOB, "team-a", "namespaced"), "Created"), "Created", 40)
        assert op.metric("mpi_operator_api_requests_total", code="201") >= len(wanted)
        assert op.metric("mpi_operator_api_requests_total", code="403") == 0
        assert op.metric("mpi_operator_transient_errors_total", code="403") == 0
    finally:
        op.stop()
        with contextlib.suppress(ApiError):
            kube.delete(MPIJOB, "team-a", "namespaced")
        api.close()
