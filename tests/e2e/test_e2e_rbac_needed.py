"""L2: the one grant that is not a request is needed too. With OwnerReferencesPermissionEnforcement on (as
in the e2e cluster), a child whose ownerReference sets blockOwnerDeletion (ours do) may be created only by
who may update the MPIJob's finalizers: the shipped ClusterRole can, the same role without that rule
cannot."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from localcluster import LocalCluster
from localcluster.jobs import minimal_job
from reconcile.mpijob.kinds import MPIJOB
from reconcile.runtime.kube import CONFIGMAP, ApiError, Kube
from tests.e2e.support import shipped
from tests.utils import bind_user, user_client

pytestmark = pytest.mark.l2

FINALIZERS = "mpijobs/finalizers"
WITHOUT = "test-mpi-operator-without-finalizers"


def _without_finalizers(role: dict[str, Any]) -> dict[str, Any]:
    rules = [r for r in role["rules"] if FINALIZERS not in r["resources"]]
    assert len(rules) == len(role["rules"]) - 1, role["rules"]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": WITHOUT},
        "rules": rules,
    }


@pytest.fixture
def roles(e2e_cluster: LocalCluster, namespace: str) -> Iterator[dict[str, Kube]]:
    """A client per role, each user bound to it in the test's namespace only."""
    admin = e2e_cluster.api_client()
    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.create_cluster_role(_without_finalizers(shipped("ClusterRole", "mpi-operator")))
    users: dict[str, Kube] = {}
    try:
        for user, role in (("test-shipped-role", "mpi-operator"), ("test-role-without-finalizers", WITHOUT)):
            bind_user(admin, namespace, user, role)
            users[role] = Kube(user_client(e2e_cluster, user), qps=0)
        yield users
    finally:
        for k in users.values():
            k.api_client.close()
        rbac.delete_cluster_role(WITHOUT)
        admin.close()


def test_blocking_an_mpijobs_deletion_needs_its_finalizers_grant(
    e2e_cluster: LocalCluster, namespace: str, roles: dict[str, Kube]
) -> None:
    with e2e_cluster.api_client() as api:
        owner = Kube(api, qps=0).create(MPIJOB, namespace, minimal_job("owner", workers=1))
    ref = {
        "apiVersion": MPIJOB.api_version,
        "kind": MPIJOB.kind,
        "name": "owner",
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }

    def child(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "ownerReferences": [ref]}, "data": {}}

    roles["mpi-operator"].create(CONFIGMAP, namespace, child("with-the-grant"))
    with pytest.raises(ApiError) as refused:
        roles[WITHOUT].create(CONFIGMAP, namespace, child("without-the-grant"))
    assert refused.value.status == 403, refused.value
    assert "blockOwnerDeletion" in str(refused.value), refused.value
