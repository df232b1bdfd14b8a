"""L0: the executor against the recording Writer fake (the real API server is in tests/cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.engine.executor import (
    ERR_RESOURCE_EXISTS,
    NORMAL,
    WARNING,
    execute,
    returned_objects,
)
from reconcile.engine.plan import Conflict, Create, Delete, ObjectKey, Patch, Plan
from reconcile.engine.writer import WriteFailed, WriteRequest
from reconcile.mpijob.policy import FIELD_MANAGER
from tests.unit.fakes import RecordingWriter

CM = ObjectKey("", "ConfigMap", "ns", "cm")
POD = ObjectKey("", "Pod", "ns", "pod")
PG = ObjectKey("scheduling.x-k8s.io", "PodGroup", "ns", "pg")


def body(key: ObjectKey) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": key.kind, "metadata": {"name": key.name, "namespace": key.namespace}}


def world(fail: dict[tuple[str, str], WriteFailed] | None = None) -> RecordingWriter:
    """A writer holding the pod the plans patch and the one they delete; ``fail``: (verb, name) refused."""
    refusals = fail or {}
    writer = RecordingWriter(kinds={"ConfigMap", "Pod"}, refuse=lambda r: refusals.get((r.verb, r.name)))
    for name, uid in (("pod", "uid-pod"), ("old", "uid-old")):
        writer.put(
            {
                **body(ObjectKey("", "Pod", "ns", name)),
                "metadata": {"name": name, "namespace": "ns", "uid": uid},
            }
        )
    return writer


def refused(status: int, reason: str = "", message: str = "boom") -> WriteFailed:
    return WriteFailed(status, message, reason=reason)


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
    writer = world()
    result = execute(full_plan(), writer, FIELD_MANAGER, owner_description="MPIJob")
    assert writer.lines() == ["delete Pod ns/old", "create ConfigMap ns/cm", "apply Pod ns/pod"], (
        "deletes first, then creates, then patches"
    )
    delete, create, apply = writer.sent
    assert delete.body == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "propagationPolicy": "Background",
        "preconditions": {"uid": "uid-old"},
    }
    assert create.field_manager == FIELD_MANAGER and create.namespace == "ns"
    assert apply.field_manager == FIELD_MANAGER and apply.body == body(POD) and apply.name == "pod"
    assert not any(r.dry_run for r in writer.sent)
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
    assert returned_objects(result)[1]["metadata"]["uid"] == "uid-cm"
    assert (WARNING, ERR_RESOURCE_EXISTS, 'Resource "svc" already exists and is not managed by MPIJob') in [
        (e.type, e.reason, e.message) for e in result.events
    ]
    assert {(e.type, e.reason) for e in result.events if e.type == NORMAL} == {
        (NORMAL, "SuccessfulCreate"),
        (NORMAL, "SuccessfulDelete"),
    }


def test_dry_run_is_passed_to_every_write() -> None:
    writer = world()
    execute(full_plan(), writer, FIELD_MANAGER, dry_run=True)
    assert [r.dry_run for r in writer.sent] == [True, True, True]
    assert ("ConfigMap", "ns", "cm") not in writer.objects


def test_already_exists_on_create_means_replan_not_failure() -> None:
    writer = world()
    writer.put(body(CM))
    result = execute(Plan(creates=(Create(CM, "v1", body(CM)),)), writer, FIELD_MANAGER)
    assert result.replan and not result.retry and not result.failures and not result.ok
    assert result.request_counts() == {("create", "ConfigMap", "409"): 1}


def test_not_found_on_delete_is_success() -> None:
    result = execute(
        Plan(deletes=(Delete(ObjectKey("", "Pod", "ns", "gone"), "v1", "u"),)), world(), FIELD_MANAGER
    )
    assert result.ok and [o.result for o in result.done] == ["gone"]
    assert not result.events


@pytest.mark.parametrize(
    "exc",
    [
        refused(409, "Conflict", "Precondition failed: UID in precondition: u"),
        refused(429, "TooManyRequests"),
        refused(500, "InternalError"),
        refused(503, "ServiceUnavailable"),
        WriteFailed(None, "ConnectionRefusedError: refused"),
    ],
    ids=["409", "429", "500", "503", "no-answer"],
)
def test_conflicts_and_transient_errors_are_retryable_and_others_continue(exc: WriteFailed) -> None:
    result = execute(full_plan(), world({("delete", "old"): exc}), FIELD_MANAGER)
    assert result.retry and not result.ok
    assert [f.verb for f in result.failures] == ["delete"]
    assert [o.result for o in result.done] == ["created", "configured"], "one failure does not stop the rest"
    assert any(e.reason == "FailedDelete" and e.type == WARNING for e in result.events)
    code = str(exc.status) if exc.status is not None else "error"
    assert ("delete", "Pod", code) in result.request_counts()


def test_invalid_is_a_failure_without_retry() -> None:
    writer = world({("apply", "pod"): refused(422, "Invalid", "field is immutable")})
    result = execute(full_plan(), writer, FIELD_MANAGER)
    assert not result.retry and not result.replan
    assert [(f.verb, f.code, f.message) for f in result.failures] == [("apply", "422", "field is immutable")]
    assert any(e.reason == "FailedUpdate" and "field is immutable" in e.message for e in result.events)


def test_patch_of_a_vanished_object_replans() -> None:
    writer = world()
    del writer.objects[("Pod", "ns", "pod")]
    result = execute(full_plan(), writer, FIELD_MANAGER)
    assert result.replan and not result.failures


def test_unknown_kind_is_a_retryable_failure_without_a_counted_request() -> None:
    plan = Plan(creates=(Create(PG, "scheduling.x-k8s.io/v1alpha1", body(PG)),))
    result = execute(plan, world(), FIELD_MANAGER)
    assert result.retry and [f.code for f in result.failures] == ["discovery"]
    assert not result.requests


def test_empty_plan_sends_nothing() -> None:
    writer = world()
    result = execute(Plan(), writer, FIELD_MANAGER)
    assert result.ok and not writer.sent and not result.events


def test_a_write_the_executor_cannot_judge_goes_to_its_caller() -> None:
    class Fenced(Exception):
        pass

    def fence(request: WriteRequest) -> WriteFailed | None:
        raise Fenced(str(request))

    with pytest.raises(Fenced):
        execute(full_plan(), RecordingWriter(refuse=fence), FIELD_MANAGER)


REMOVALS = (
    {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
    {"op": "remove", "path": "/metadata/labels/old"},
)


def removal(with_body: bool) -> Plan:
    ops = ({"op": "remove", "path": "/metadata/labels/old"},)
    return Plan(patches=(Patch(POD, "v1", "uid-pod", body(POD) if with_body else None, ops, (), REMOVALS),))


def test_removals_are_a_json_patch_sent_before_the_apply() -> None:
    writer = world()
    writer.objects[("Pod", "ns", "pod")]["metadata"].update(resourceVersion="7", labels={"old": "x"})
    result = execute(removal(with_body=True), writer, FIELD_MANAGER)
    assert [r.verb for r in writer.sent] == ["json-patch", "apply"]
    patch = writer.sent[0]
    assert patch.body == list(REMOVALS)
    assert patch.field_manager == FIELD_MANAGER and patch.name == "pod" and patch.namespace == "ns"
    assert result.ok and [o.result for o in result.done] == ["configured"]
    assert result.request_counts() == {("patch", "Pod", "200"): 1, ("apply", "Pod", "200"): 1}


def test_removal_only_patch_sends_no_apply() -> None:
    writer = world()
    writer.objects[("Pod", "ns", "pod")]["metadata"].update(resourceVersion="7", labels={"old": "x"})
    result = execute(removal(with_body=False), writer, FIELD_MANAGER, dry_run=True)
    assert [(r.verb, r.dry_run) for r in writer.sent] == [("json-patch", True)]
    (answer,) = returned_objects(result)
    assert result.ok and answer["metadata"]["labels"] == {}


@pytest.mark.parametrize(
    "exc",
    [
        refused(422, "Invalid", "the server rejected our request due to an error in our request"),
        refused(409),
    ],
    ids=["422-test-failed", "409"],
)
def test_removals_on_a_moved_object_retry_without_the_apply_or_an_event(exc: WriteFailed) -> None:
    writer = world({("json-patch", "pod"): exc})
    result = execute(removal(with_body=True), writer, FIELD_MANAGER)
    assert [r.verb for r in writer.sent] == ["json-patch"]
    assert result.retry and not result.failures and not result.events and not result.done


def test_removals_rejected_for_a_field_are_a_failure() -> None:
    exc = WriteFailed(
        422,
        "Pod is invalid: spec: Forbidden",
        reason="Invalid",
        causes=[{"field": "spec", "reason": "FieldValueForbidden"}],
    )
    result = execute(removal(with_body=True), world({("json-patch", "pod"): exc}), FIELD_MANAGER)
    assert not result.retry and [(f.verb, f.code) for f in result.failures] == [("patch", "422")]
    assert [e.reason for e in result.events] == ["FailedUpdate"]


def test_removals_from_a_vanished_object_replan() -> None:
    writer = world()
    del writer.objects[("Pod", "ns", "pod")]
    result = execute(removal(with_body=True), writer, FIELD_MANAGER)
    assert result.replan and not result.failures and [r.verb for r in writer.sent] == ["json-patch"]


def test_a_force_delete_sends_grace_period_zero() -> None:
    writer = world()
    key = ObjectKey("", "Pod", "ns", "old")
    forced = Plan(deletes=(Delete(key, "v1", "uid-old", grace_period_seconds=0),))
    assert str(forced.deletes[0]) == "force-delete Pod ns/old (uid uid-old)"
    result = execute(forced, writer, FIELD_MANAGER, owner_description="MPIJob")
    (request,) = writer.sent
    assert request.verb == "delete" and request.body["gracePeriodSeconds"] == 0
    assert request.body["preconditions"] == {"uid": "uid-old"}
    assert [(e.type, e.reason, e.message) for e in result.events] == [
        ("Warning", "ForceDeleted", "Force-deleted Pod ns/old (grace period 0)")
    ]
