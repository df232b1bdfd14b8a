"""L1: `kubectl get mpijobs`' State column, read through the API server, stays the job's state while its
syncs fail and after they recover.

The failures are real: a ValidatingAdmissionPolicy refuses the operator's status writes while the MPIJob
carries a label, except the write that only adds the SyncFailed condition.
"""

from __future__ import annotations

import json

import pytest

from localcluster.jobs import pi_job
from localcluster.wait import wait_for
from reconcile.mpijob.kinds import MPIJOB
from reconcile.runtime.kube import ApiError, Kube

pytestmark = pytest.mark.l1

FAIL_LABEL = "test.mpijob.dev/refuse-status"
POLICY_NAME = "refuse-mpijob-status"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"

POLICY = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": POLICY_NAME},
    "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": ["kubeflow.org"],
                    "apiVersions": ["v2beta1"],
                    "operations": ["UPDATE"],
                    "resources": ["mpijobs/status"],
                }
            ]
        },
        "validations": [
            {
                # only a write that changes nothing but the SyncFailed condition goes through
                "expression": (
                    f"!has(object.metadata.labels) || !('{FAIL_LABEL}' in object.metadata.labels) || "
                    "(has(object.status.conditions) && has(oldObject.status.conditions) && "
                    "object.status.conditions.filter(c, c.type != 'SyncFailed') == "
                    "oldObject.status.conditions.filter(c, c.type != 'SyncFailed'))"
                ),
                "message": "status writes refused for this test",
            }
        ],
    },
}


def binding(namespace: str) -> dict:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": f"{POLICY_NAME}-{namespace}"},
        "spec": {
            "policyName": POLICY_NAME,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }


def state_column(kube: Kube, namespace: str, name: str) -> str:
    """The State cell of the server's Table for the MPIJob (what `kubectl get mpijobs` prints)."""
    resp = kube.api_client.call_api(
        "GET",
        kube.api_client.configuration.host + MPIJOB.path(namespace, name),
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
    )
    table = json.loads(resp.read())
    columns = [c["name"] for c in table["columnDefinitions"]]
    return str(table["rows"][0]["cells"][columns.index("State")])


def conditions(kube: Kube, namespace: str) -> dict[str, str]:
    job = kube.get(MPIJOB, namespace, "pi")
    return {c["type"]: c["status"] for c in (job.get("status") or {}).get("conditions") or []}


def _create(kube: Kube, path: str, body: dict) -> None:
    try:
        kube.request("POST", path, body=body)
    except ApiError as err:
        if err.status != 409:
            raise


def test_the_state_column_is_the_jobs_state_through_failing_syncs_and_recovery(
    kube, namespace, start_operator
):
    _create(kube, f"{ADMISSION}/validatingadmissionpolicies", POLICY)
    _create(kube, f"{ADMISSION}/validatingadmissionpolicybindings", binding(namespace))
    try:
        start_operator()
        kube.create(MPIJOB, namespace, pi_job(workers=1))
        wait_for(lambda: conditions(kube, namespace).get("Created") == "True", "Created")
        assert state_column(kube, namespace, "pi") == "Created"

        # From now on the operator's status writes are refused; suspending the job is a status change.
        kube.patch(MPIJOB, namespace, "pi", {"metadata": {"labels": {FAIL_LABEL: "true"}}})
        kube.patch(MPIJOB, namespace, "pi", {"spec": {"runPolicy": {"suspend": True}}})
        wait_for(lambda: conditions(kube, namespace).get("SyncFailed") == "True", "SyncFailed", timeout=60)
        assert "Suspended" not in conditions(kube, namespace)  # the refused write did not happen
        assert state_column(kube, namespace, "pi") == "Created"

        kube.patch(MPIJOB, namespace, "pi", {"metadata": {"labels": {FAIL_LABEL: None}}})
        wait_for(
            lambda: (
                conditions(kube, namespace).get("SyncFailed") == "False"
                and conditions(kube, namespace).get("Suspended") == "True"
            ),
            "recovered: SyncFailed False, Suspended True",
            timeout=60,
        )
        assert state_column(kube, namespace, "pi") == "Suspended"
    finally:
        for kind, name in (
            ("validatingadmissionpolicybindings", f"{POLICY_NAME}-{namespace}"),
            ("validatingadmissionpolicies", POLICY_NAME),
        ):
            try:
                kube.request("DELETE", f"{ADMISSION}/{kind}/{name}")
            except ApiError as err:
                if err.status != 404:
                    raise
