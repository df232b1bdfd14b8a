"""L0: request classification (verb, kind) for metrics, and resource paths."""

from __future__ import annotations

import pytest

from reconcile.runtime.kube import JOB, LEASE, POD, classify_path


@pytest.mark.parametrize(
    ("method", "path", "watch", "expected"),
    [
        ("GET", "/api/v1/namespaces/ns/pods", False, ("list", "Pod")),
        ("GET", "/api/v1/pods", True, ("watch", "Pod")),
        ("GET", "/api/v1/namespaces/ns/pods/p", False, ("get", "Pod")),
        ("PATCH", "/apis/batch/v1/namespaces/ns/jobs/j", False, ("patch", "Job")),
        (
            "PUT",
            "/apis/kubeflow.org/v2beta1/namespaces/ns/mpijobs/m/status",
            False,
            ("update", "MPIJob/status"),
        ),
        ("POST", "/api/v1/namespaces/ns/events", False, ("create", "Event")),
        ("DELETE", "/api/v1/namespaces/ns/pods/p", False, ("delete", "Pod")),
        ("DELETE", "/api/v1/namespaces/ns/pods", False, ("deletecollection", "Pod")),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/mpi-operator/leases/l", False, ("update", "Lease")),
        ("GET", "/api/v1/namespaces/ns", False, ("get", "namespaces")),
    ],
)
def test_classify_request(method, path, watch, expected):
    assert classify_path(method, path, watch) == expected


def test_resource_paths():
    assert POD.path("ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert JOB.path("ns", "j", "status") == "/apis/batch/v1/namespaces/ns/jobs/j/status"
    assert LEASE.path(None) == "/apis/coordination.k8s.io/v1/leases"


def test_a_watch_stream_yields_whole_lines_however_the_chunks_fall():
    from reconcile.runtime.kube import Kube

    class Raw:
        status = 200

        def __init__(self, pieces):
            self.pieces = pieces
            self.released = False

        def chunks(self):
            yield from self.pieces

        def release_conn(self):
            self.released = True

    raw = Raw([b'{"a":1}\n{"b"', b":2}\n\n", b'{"c":3}\n{"d":4}\n{"e"', b":5}"])
    kube = Kube.__new__(Kube)
    kube._open_stream = lambda *args, **kwargs: raw  # type: ignore[method-assign]
    lines = list(kube.stream_lines("/api/v1/pods", {}, (1, 1)))
    assert lines == [b'{"a":1}', b'{"b":2}', b'{"c":3}', b'{"d":4}', b'{"e":5}']
    assert raw.released
