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


def test_a_watch_stream_yields_whole_lines_however_the_chunks_fall():
    from reconcile.runtime.kube import Kube

    class Raw:
        status = 200

        def __init__(self, chunks):
            self.chunks = chunks
            self.released = False

        def stream(self, amt=None, decode_content=True):
            yield from self.chunks

        def release_conn(self):
            self.released = True

    raw = Raw([b'{"a":1}\n{"b"', b":2}\n\n", b'{"c":3}\n{"d":4}\n{"e"', b":5}"])
    kube = Kube.__new__(Kube)
    kube._call = lambda *args, **kwargs: raw  # type: ignore[method-assign]
    lines = list(kube.stream_lines("/api/v1/pods", {}, (1, 1)))
    assert lines == [b'{"a":1}', b'{"b":2}', b'{"c":3}', b'{"d":4}', b'{"e":5}']
    assert raw.released
