"""The executor's Writer over Kube: the known kinds' paths, the query and content type of each write."""

from __future__ import annotations

import pytest
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from reconcile.runtime.kube import APPLY_PATCH, JOB, POD
from reconcile.runtime.kubewriter import JSON_PATCH, KubeWriter


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def request(self, method, path, *, query=None, body=None, content_type=None, timeout=30):
        self.calls.append((method, path, query, body, content_type))
        return {"kind": "Answer"}


def test_each_write_is_one_request_on_the_kinds_path():
    kube = Recorder()
    w = KubeWriter(kube)  # type: ignore[arg-type]
    w.prepare()
    pod = w.resource("v1", "Pod")
    assert pod is POD and w.resource("batch/v1", "Job") is JOB
    body = {"metadata": {"name": "pi-worker-0"}}
    assert w.create(pod, body, namespace="ns", field_manager="m", dry_run=None) == {"kind": "Answer"}
    w.json_patch(
        pod, "pi-worker-0", [{"op": "remove", "path": "/x"}], namespace="ns", field_manager="m", dry_run="All"
    )
    w.apply(JOB, "pi-launcher", {"spec": {}}, namespace="ns", field_manager="m", dry_run=None)
    w.delete(pod, "pi-worker-0", {"preconditions": {"uid": "u"}}, namespace="ns", dry_run=None)
    assert kube.calls == [
        ("POST", "/api/v1/namespaces/ns/pods", {"fieldManager": "m", "dryRun": None}, body, None),
        (
            "PATCH",
            "/api/v1/namespaces/ns/pods/pi-worker-0",
            {"fieldManager": "m", "dryRun": "All"},
            [{"op": "remove", "path": "/x"}],
            JSON_PATCH,
        ),
        (
            "PATCH",
            "/apis/batch/v1/namespaces/ns/jobs/pi-launcher",
            {"fieldManager": "m", "force": "true", "dryRun": None},
            {"spec": {}},
            APPLY_PATCH,
        ),
        (
            "DELETE",
            "/api/v1/namespaces/ns/pods/pi-worker-0",
            {"dryRun": None},
            {"preconditions": {"uid": "u"}},
            None,
        ),
    ]


def test_a_kind_outside_the_table_is_not_found_as_with_discovery():
    with pytest.raises(ResourceNotFoundError):
        KubeWriter(Recorder()).resource("example.com/v1", "Thing")  # type: ignore[arg-type]
