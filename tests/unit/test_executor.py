"""L0: the executor against a fake dynamic client (the real API server is in tests/cluster)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError

from reconcile.engine.executor import (
    ERR_RESOURCE_EXISTS,
    NORMAL,
    WARNING,
    execute,
    returned_objects,
)
from reconcile.engine.plan import Conflict, Create, Delete, ObjectKey, Patch, Plan
from reconcile.mpijob.policy import FIELD_MANAGER
from tests.unit.dynamic_writer import DynamicWriter
from tests.unit.fakes import FakeDynamic

CM = ObjectKey("", "ConfigMap", "ns", "cm")
POD = ObjectKey("", "Pod", "ns", "pod")
PG = ObjectKey("scheduling.x-k8s.io", "PodGroup", "ns", "pg")


def api_error(status: int, reason: str = "", message: str = "boom") -> ApiException:
    return ApiException(status=status, reason=reason, body=json.dumps({"reason": reason, "message": message}))


def body(key: ObjectKey) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": key.kind, "metadata": {"name": key.name, "namespace": key.namespace}}


def full_plan() -> Plan:
    return Plan(
        creates=(Create(CM, "v1", body(CM)),),
        patches=(
            Patch(
                POD, "v1", "uid-pod", body(POD), ({"op": "add", "path": "/metadata/labels/a", "value": "b"},)
            ),
        ),
        deletes=(Delete(ObjectKey("", "Pod", "ns", "old"), "v1", "uid-old"),),
        conflicts=(Conflict(ObjectKey("", "Service", "ns", "svc"), "v1", "uid-svc", ""),),
    )


def test_requests_follow_the_protocol() -> None:
    fake = FakeDynamic()
    result = execute(full_plan(), DynamicWriter(fake), FIELD_MANAGER, owner_description="MPIJob")
    verbs = [verb for verb, _ in fake.calls]
    assert verbs == ["delete", "create", "apply"], "deletes first, then creates, then patches"
    delete, create, apply = (kw for _, kw in fake.calls)
    assert delete["body"] == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "propagationPolicy": "Background",
        "preconditions": {"uid": "uid-old"},
    }
    assert create["field_manager"] == FIELD_MANAGER and create["namespace"] == "ns"
    assert apply["force_conflicts"] is True and apply["field_manager"] == FIELD_MANAGER
    assert apply["body"] == body(POD) and apply["name"] == "pod"
    assert all(kw["dry_run"] is None for _, kw in fake.calls)
    assert result.ok
    assert [(o.key.name, o.result) for o in result.done] == [
        ("old", "deleted"),
        ("cm", "created"),
        ("pod", "configured"),
    ]
    assert result.request_counts() == {
        ("delete", "Pod", "200"): 1,
        ("create", "ConfigMap", "201"): 1,
        ("apply", "Pod", "200"): 1,
    }
    assert returned_objects(result)[1]["uid"] == "new"
    assert (WARNING, ERR_RESOURCE_EXISTS, 'Resource "svc" already exists and is not managed by MPIJob') in [
        (e.type, e.reason, e.message) for e in result.events
    ]
    assert {(e.type, e.reason) for e in result.events if e.type == NORMAL} == {
        (NORMAL, "SuccessfulCreate"),
        (NORMAL, "SuccessfulDelete"),
    }


def test_dry_run_is_passed_to_every_write() -> None:
    fake = FakeDynamic()
    execute(full_plan(), DynamicWriter(fake), FIELD_MANAGER, dry_run=True)
    assert [kw["dry_run"] for _, kw in fake.calls] == ["All", "All", "All"]


def test_already_exists_on_create_means_replan_not_failure() -> None:
    fake = FakeDynamic({("create", "cm"): api_error(409, "AlreadyExists")})
    result = execute(Plan(creates=(Create(CM, "v1", body(CM)),)), DynamicWriter(fake), FIELD_MANAGER)
    assert result.replan and not result.retry and not result.failures and not result.ok
    assert result.request_counts() == {("create", "ConfigMap", "409"): 1}


def test_not_found_on_delete_is_success() -> None:
    fake = FakeDynamic({("delete", "old"): api_error(404, "NotFound")})
    result = execute(
        Plan(deletes=(Delete(ObjectKey("", "Pod", "ns", "old"), "v1", "u"),)),
        DynamicWriter(fake),
        FIELD_MANAGER,
    )
    assert result.ok and [o.result for o in result.done] == ["gone"]
    assert not result.events


@pytest.mark.parametrize(
    "exc",
    [
        api_error(409, "Conflict", "Precondition failed: UID in precondition: u"),
        api_error(429, "TooManyRequests"),
        api_error(500, "InternalError"),
        api_error(503, "ServiceUnavailable"),
        MaxRetryError(None, "/api", "connection refused"),  # type: ignore[arg-type]
        ConnectionRefusedError(111, "refused"),
    ],
    ids=["409", "429", "500", "503", "urllib3", "oserror"],
)
def test_conflicts_and_transient_errors_are_retryable_and_others_continue(exc: BaseException) -> None:
    fake = FakeDynamic({("delete", "old"): exc})
    result = execute(full_plan(), DynamicWriter(fake), FIELD_MANAGER)
    assert result.retry and not result.ok
    assert [f.verb for f in result.failures] == ["delete"]
    assert [o.result for o in result.done] == ["created", "configured"], "one failure does not stop the rest"
    assert any(e.reason == "FailedDelete" and e.type == WARNING for e in result.events)
    code = str(getattr(exc, "status", "error")) if isinstance(exc, ApiException) else "error"
    assert ("delete", "Pod", code) in result.request_counts()


def test_invalid_is_a_failure_without_retry() -> None:
    fake = FakeDynamic({("apply", "pod"): api_error(422, "Invalid", "field is immutable")})
    result = execute(full_plan(), DynamicWriter(fake), FIELD_MANAGER)
    assert not result.retry and not result.replan
    assert [(f.verb, f.code, f.message) for f in result.failures] == [("apply", "422", "field is immutable")]
    assert any(e.reason == "FailedUpdate" and "field is immutable" in e.message for e in result.events)


def test_patch_of_a_vanished_object_replans() -> None:
    fake = FakeDynamic({("apply", "pod"): api_error(404, "NotFound")})
    result = execute(full_plan(), DynamicWriter(fake), FIELD_MANAGER)
    assert result.replan and not result.failures


def test_unknown_kind_is_a_retryable_failure_without_a_request() -> None:
    fake = FakeDynamic()
    plan = Plan(creates=(Create(PG, "scheduling.x-k8s.io/v1alpha1", body(PG)),))
    result = execute(plan, DynamicWriter(fake), FIELD_MANAGER)
    assert result.retry and [f.code for f in result.failures] == ["discovery"]
    assert not fake.calls and not result.requests


def test_empty_plan_sends_nothing() -> None:
    fake = FakeDynamic()
    result = execute(Plan(), DynamicWriter(fake), FIELD_MANAGER)
    assert result.ok and not fake.calls and not result.events


def test_unreachable_server_is_retryable() -> None:
    from kubernetes.client import ApiClient, Configuration

    config = Configuration(host="http://127.0.0.1:9")  # discard port: connection refused
    config.retries = 0
    with ApiClient(config) as api:
        result = execute(full_plan(), DynamicWriter(api), FIELD_MANAGER)
    assert result.retry and not result.ok
    assert [(f.verb, f.code) for f in result.failures] == [
        ("delete", "discovery"),
        ("create", "discovery"),
        ("apply", "discovery"),
    ]


class ListWriter:
    """A Writer faked directly (no DynamicClient under it): the objects it holds, by name."""

    def __init__(self, prepare_error: BaseException | None = None) -> None:
        self.prepare_error = prepare_error
        self.objects: dict[str, dict[str, Any]] = {"old": {"metadata": {"name": "old"}}}
        self.sent: list[str] = []

    def prepare(self) -> None:
        if self.prepare_error is not None:
            raise self.prepare_error

    def resource(self, api_version: str, kind: str) -> object:
        return (api_version, kind)

    def create(
        self,
        resource: object,
        body: Mapping[str, Any],
        *,
        namespace: str | None,
        field_manager: str,
        dry_run: str | None,
    ) -> dict[str, Any] | None:
        self.sent.append(f"create {body['metadata']['name']}")
        self.objects[body["metadata"]["name"]] = dict(body)
        return dict(body)

    def json_patch(
        self,
        resource: object,
        name: str,
        ops: Sequence[Mapping[str, Any]],
        *,
        namespace: str | None,
        field_manager: str,
        dry_run: str | None,
    ) -> dict[str, Any] | None:
        self.sent.append(f"patch {name}")
        return self.objects.get(name)

    def apply(
        self,
        resource: object,
        name: str,
        body: Mapping[str, Any],
        *,
        namespace: str | None,
        field_manager: str,
        dry_run: str | None,
    ) -> dict[str, Any] | None:
        self.sent.append(f"apply {name}")
        self.objects[name] = dict(body)
        return dict(body)

    def delete(
        self,
        resource: object,
        name: str,
        options: Mapping[str, Any],
        *,
        namespace: str | None,
        dry_run: str | None,
    ) -> dict[str, Any] | None:
        self.sent.append(f"delete {name}")
        if self.objects.pop(name, None) is None:
            raise api_error(404, "NotFound")
        return {"kind": "Status"}


def test_a_writer_faked_directly_carries_out_the_plan() -> None:
    writer = ListWriter()
    result = execute(full_plan(), writer, FIELD_MANAGER)
    assert writer.sent == ["delete old", "create cm", "apply pod"]
    assert set(writer.objects) == {"cm", "pod"} and result.ok
    again = execute(Plan(deletes=full_plan().deletes), writer, FIELD_MANAGER)
    assert [o.result for o in again.done] == ["gone"]  # 404 on delete: already done


def test_a_writer_that_cannot_prepare_fails_every_write_without_a_request() -> None:
    writer = ListWriter(prepare_error=OSError("connection refused"))
    result = execute(full_plan(), writer, FIELD_MANAGER)
    assert not writer.sent and not result.requests and result.retry
    assert [(f.verb, f.code) for f in result.failures] == [
        ("delete", "discovery"),
        ("create", "discovery"),
        ("apply", "discovery"),
    ]


def test_the_dynamic_writer_asks_for_plain_dict_answers() -> None:
    # the answer as decoded: the default ResourceInstance wrapper costs CPU on every write
    fake = FakeDynamic()
    execute(full_plan(), DynamicWriter(fake), FIELD_MANAGER)
    assert len(fake.calls) == 3
    assert all(kw["serializer"](None, {"a": 1}) == {"a": 1} for _, kw in fake.calls)


REMOVALS = (
    {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
    {"op": "remove", "path": "/metadata/labels/old"},
)


def removal(with_body: bool) -> Plan:
    ops = ({"op": "remove", "path": "/metadata/labels/old"},)
    return Plan(patches=(Patch(POD, "v1", "uid-pod", body(POD) if with_body else None, ops, (), REMOVALS),))


def test_removals_are_a_json_patch_sent_before_the_apply() -> None:
    fake = FakeDynamic()
    result = execute(removal(with_body=True), DynamicWriter(fake), FIELD_MANAGER)
    assert [verb for verb, _ in fake.calls] == ["patch", "apply"]
    patch = fake.calls[0][1]
    assert patch["body"] == list(REMOVALS) and patch["content_type"] == "application/json-patch+json"
    assert patch["field_manager"] == FIELD_MANAGER and patch["name"] == "pod" and patch["namespace"] == "ns"
    assert result.ok and [o.result for o in result.done] == ["configured"]
    assert result.request_counts() == {("patch", "Pod", "200"): 1, ("apply", "Pod", "200"): 1}


def test_removal_only_patch_sends_no_apply() -> None:
    fake = FakeDynamic()
    result = execute(removal(with_body=False), DynamicWriter(fake), FIELD_MANAGER, dry_run=True)
    assert [(verb, kw["dry_run"]) for verb, kw in fake.calls] == [("patch", "All")]
    assert result.ok and returned_objects(result) == [{"patched": list(REMOVALS)}]


@pytest.mark.parametrize(
    "exc",
    [
        api_error(422, "Invalid", "the server rejected our request due to an error in our request"),
        api_error(409),
    ],
    ids=["422-test-failed", "409"],
)
def test_removals_on_a_moved_object_retry_without_the_apply_or_an_event(exc: ApiException) -> None:
    fake = FakeDynamic({("patch", "pod"): exc})
    result = execute(removal(with_body=True), DynamicWriter(fake), FIELD_MANAGER)
    assert [verb for verb, _ in fake.calls] == ["patch"]
    assert result.retry and not result.failures and not result.events and not result.done


def test_removals_rejected_for_a_field_are_a_failure() -> None:
    exc = ApiException(
        status=422,
        reason="Invalid",
        body=json.dumps(
            {
                "reason": "Invalid",
                "message": "Pod is invalid: spec: Forbidden",
                "details": {"causes": [{"field": "spec", "reason": "FieldValueForbidden"}]},
            }
        ),
    )
    fake = FakeDynamic({("patch", "pod"): exc})
    result = execute(removal(with_body=True), DynamicWriter(fake), FIELD_MANAGER)
    assert not result.retry and [(f.verb, f.code) for f in result.failures] == [("patch", "422")]
    assert [e.reason for e in result.events] == ["FailedUpdate"]


def test_removals_from_a_vanished_object_replan() -> None:
    fake = FakeDynamic({("patch", "pod"): api_error(404, "NotFound")})
    result = execute(removal(with_body=True), DynamicWriter(fake), FIELD_MANAGER)
    assert result.replan and not result.failures and [verb for verb, _ in fake.calls] == ["patch"]


def test_a_force_delete_sends_grace_period_zero() -> None:
    fake = FakeDynamic()
    key = ObjectKey("", "Pod", "ns", "pi-worker-1")
    forced = Plan(deletes=(Delete(key, "v1", "uid-1", grace_period_seconds=0),))
    assert str(forced.deletes[0]) == "force-delete Pod ns/pi-worker-1 (uid uid-1)"
    result = execute(forced, DynamicWriter(fake), FIELD_MANAGER, owner_description="MPIJob")
    ((verb, kw),) = fake.calls
    assert verb == "delete" and kw["body"]["gracePeriodSeconds"] == 0
    assert kw["body"]["preconditions"] == {"uid": "uid-1"}
    assert [(e.type, e.reason, e.message) for e in result.events] == [
        ("Warning", "ForceDeleted", "Force-deleted Pod ns/pi-worker-1 (grace period 0)")
    ]
