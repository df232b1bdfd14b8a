"""L0: request classification (verb, kind) for metrics, and resource paths."""

from __future__ import annotations

import pytest

from reconcile.runtime.kube import JOB, LEASE, POD, classify


@pytest.mark.parametrize(
    ("method", "url", "expected"),
    [
        ("GET", "https://h/api/v1/namespaces/ns/pods?labelSelector=a", ("list", "Pod")),
        ("GET", "https://h/api/v1/pods?watch=true&resourceVersion=5", ("watch", "Pod")),
        ("GET", "https://h/api/v1/namespaces/ns/pods/p", ("get", "Pod")),
        ("PATCH", "https://h/apis/batch/v1/namespaces/ns/jobs/j?fieldManager=x", ("patch", "Job")),
        (
            "PUT",
            "https://h/apis/kubeflow.org/v2beta1/namespaces/ns/mpijobs/m/status",
            ("update", "MPIJob/status"),
        ),
        ("POST", "https://h/api/v1/namespaces/ns/events", ("create", "Event")),
        ("DELETE", "https://h/api/v1/namespaces/ns/pods/p", ("delete", "Pod")),
        (
            "PUT",
            "https://h/apis/coordination.k8s.io/v1/namespaces/mpi-operator/leases/l",
            ("update", "Lease"),
        ),
        ("GET", "https://h/api/v1/namespaces/ns", ("get", "namespaces")),
    ],
)
def test_classify_request(method, url, expected):
    assert classify(method, url) == expected


def test_resource_paths():
    assert POD.path("ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert JOB.path("ns", "j", "status") == "/apis/batch/v1/namespaces/ns/jobs/j/status"
    assert LEASE.path(None) == "/apis/coordination.k8s.io/v1/leases"
