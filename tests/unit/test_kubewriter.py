"""The Writer over Kube: each request value is one request on its kind's path, with its query and content
type; the server's refusals and a missing answer become WriteFailed; the fence's refusal goes through."""

from __future__ import annotations

import json

import pytest

from reconcile.engine.writer import WriteFailed, WriteRequest
from reconcile.kubewriter import KubeWriter
from reconcile.runtime.fence import NotLeader
from reconcile.runtime.kube import APPLY_PATCH, JSON_PATCH, MERGE_PATCH, ApiError


class Recorder:
    def __init__(self, raises: BaseException | None = None) -> None:
        self.calls: list[tuple] = []
        self.raises = raises

    def request(self, method, path, *, query=None, body=None, content_type=None, timeout=30):
        self.calls.append((method, path, {k: v for k, v in (query or {}).items() if v}, body, content_type))
        if self.raises is not None:
            raise self.raises
        return {"kind": "Answer"}


def send(kube: Recorder, *args, **kw) -> dict | None:
    return KubeWriter(kube).send(WriteRequest(*args, **kw))  # type: ignore[arg-type]


def test_each_write_is_one_request_on_the_kinds_path():
    kube = Recorder()
    body = {"metadata": {"name": "pi-worker-0"}}
    ops = [{"op": "remove", "path": "/x"}]
    assert send(kube, "create", "v1", "Pod", "ns", "pi-worker-0", body, field_manager="m") == {
        "kind": "Answer"
    }
    send(kube, "json-patch", "v1", "Pod", "ns", "pi-worker-0", ops, field_manager="m", dry_run=True)
    send(kube, "apply", "batch/v1", "Job", "ns", "pi-launcher", {"spec": {}}, field_manager="m")
    send(kube, "delete", "v1", "Pod", "ns", "pi-worker-0", {"preconditions": {"uid": "u"}})
    send(kube, "update", "kubeflow.org/v2beta1", "MPIJob", "ns", "pi", body, subresource="status")
    send(kube, "merge-patch", "batch/v1", "Job", "ns", "pi-launcher", {"status": {}}, subresource="status")
    assert kube.calls == [
        ("POST", "/api/v1/namespaces/ns/pods", {"fieldManager": "m"}, body, None),
        (
            "PATCH",
            "/api/v1/namespaces/ns/pods/pi-worker-0",
            {"fieldManager": "m", "dryRun": "All"},
            ops,
            JSON_PATCH,
        ),
        (
            "PATCH",
            "/apis/batch/v1/namespaces/ns/jobs/pi-launcher",
            {"fieldManager": "m", "force": "true"},
            {"spec": {}},
            APPLY_PATCH,
        ),
        ("DELETE", "/api/v1/namespaces/ns/pods/pi-worker-0", {}, {"preconditions": {"uid": "u"}}, None),
        ("PUT", "/apis/kubeflow.org/v2beta1/namespaces/ns/mpijobs/pi/status", {}, body, None),
        ("PATCH", "/apis/batch/v1/namespaces/ns/jobs/pi-launcher/status", {}, {"status": {}}, MERGE_PATCH),
    ]


def test_a_kind_outside_the_table_fails_without_a_request():
    kube = Recorder()
    with pytest.raises(WriteFailed) as caught:
        send(kube, "create", "example.com/v1", "Thing", "ns", "t", {})
    assert caught.value.unknown_kind and caught.value.code == "discovery" and not kube.calls


def test_a_refusal_carries_the_servers_status_object():
    status = {
        "reason": "Invalid",
        "message": "Pod is invalid",
        "details": {"causes": [{"field": "spec", "message": "Forbidden"}]},
    }
    kube = Recorder(ApiError(422, "Unprocessable Entity", json.dumps(status)))
    with pytest.raises(WriteFailed) as caught:
        send(kube, "create", "v1", "Pod", "ns", "p", {})
    err = caught.value
    assert (err.status, err.reason, err.message, err.code) == (422, "Invalid", "Pod is invalid", "422")
    assert err.causes == ({"field": "spec", "message": "Forbidden"},)


def test_no_answer_is_a_failure_without_a_status_and_the_fence_goes_through():
    with pytest.raises(WriteFailed) as caught:
        send(Recorder(ConnectionResetError(104, "reset")), "create", "v1", "Pod", "ns", "p", {})
    assert caught.value.status is None and caught.value.code == "error"
    assert "ConnectionResetError" in caught.value.message
    with pytest.raises(NotLeader):
        send(Recorder(NotLeader("lease lost")), "create", "v1", "Pod", "ns", "p", {})
