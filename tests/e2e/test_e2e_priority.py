"""L2: API Priority and Fairness serves the operator's Lease requests at the leader-election level.

deploy/rbac/leader-election.yaml holds a FlowSchema for them: without it the renewals share workload-low
with every ServiceAccount's writes, and on a saturated server they came late and the fence held the
operator's writes back. The API server names the priority level it chose in a response header of every
request; the operator ServiceAccount's other requests must stay where they were.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client, config

from localcluster import LocalCluster
from localcluster.e2e import SA_USER
from localcluster.wait import wait_for

pytestmark = pytest.mark.l2

LEVEL_HEADER = "X-Kubernetes-PF-PriorityLevel-UID"


@pytest.fixture
def operator_api(e2e_cluster: LocalCluster, tmp_path) -> Iterator[client.ApiClient]:
    path = e2e_cluster.write_user_kubeconfig(SA_USER, path=tmp_path / "sa.kubeconfig")
    with config.new_client_from_config(config_file=str(path)) as api:
        yield api


def get_level(api: client.ApiClient, path: str) -> str:
    """The priority level UID the API server served a GET of ``path`` at (any answer code: a 404, no
    operator has made the Lease yet, is classified too)."""
    req = api.param_serialize(
        "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
    )
    resp = api.call_api(*req, _request_timeout=10)
    resp.read()
    return str(resp.getheader(LEVEL_HEADER) or "")


def test_lease_requests_are_served_at_the_leader_election_level(e2e_cluster, operator_api):
    with e2e_cluster.api_client() as admin:
        flow = client.FlowcontrolApiserverV1Api(admin)
        schema = flow.read_flow_schema("mpi-operator-leader-election")
        assert schema.spec.priority_level_configuration.name == "leader-election"
        levels = {pl.metadata.name: pl.metadata.uid for pl in flow.list_priority_level_configuration().items}
    lease = "/apis/coordination.k8s.io/v1/namespaces/mpi-operator/leases/mpi-operator"
    # the schema takes effect once the API server's APF controller has read it
    wait_for(
        lambda: get_level(operator_api, lease) == levels["leader-election"],
        "the Lease GET served at leader-election",
        describe=lambda: f"served at {get_level(operator_api, lease)}; levels {levels}",
    )
    pods = "/api/v1/namespaces/mpi-operator/pods"
    assert get_level(operator_api, pods) == levels["workload-low"]
