"""L0: events are created, aggregated into a count, recreated after expiry, never raise."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from reconcile.events import EventRecorder
from reconcile.kube import EVENT, ApiError
from tests.unit.fakes import FakeKube

JOB_OBJ = {
    "apiVersion": "kubeflow.org/v2beta1",
    "kind": "MPIJob",
    "metadata": {"name": "pi", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
}


def test_event_is_created_with_component_and_involved_object():
    kube = FakeKube()
    rec = EventRecorder(kube, host="h", clock=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    rec.event(JOB_OBJ, "Normal", "MPIJobCreated", "MPIJob ns/pi is created.")
    (event,) = [o for k, o in kube.objects.items() if k[0] == EVENT.plural]
    assert event["source"]["component"] == "mpi-job-controller"
    assert event["involvedObject"] == {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "namespace": "ns",
        "name": "pi",
        "uid": "u1",
        "resourceVersion": "7",
    }
    assert (event["type"], event["reason"], event["count"]) == ("Normal", "MPIJobCreated", 1)
    assert event["firstTimestamp"] == "2026-01-01T00:00:00Z"


def test_repeated_event_is_aggregated_into_count():
    kube = FakeKube()
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    rec = EventRecorder(kube, clock=lambda: now[0])
    for _ in range(3):
        rec.event(JOB_OBJ, "Normal", "MPIJobRunning", "running")
        now[0] += timedelta(seconds=5)
    events = [o for k, o in kube.objects.items() if k[0] == EVENT.plural]
    assert len(events) == 1
    assert events[0]["count"] == 3
    assert events[0]["lastTimestamp"] == "2026-01-01T00:00:10Z"
    rec.event(JOB_OBJ, "Normal", "MPIJobRunning", "other message")
    assert len([k for k in kube.objects if k[0] == EVENT.plural]) == 2


def test_expired_event_is_recreated_and_errors_never_raise():
    kube = FakeKube()
    rec = EventRecorder(kube)
    rec.event(JOB_OBJ, "Warning", "X", "m")
    kube.objects.clear()  # the event TTL removed it
    rec.event(JOB_OBJ, "Warning", "X", "m")
    assert len(kube.objects) == 1
    kube.fail["create"] = ApiError(403, "Forbidden", "{}")
    rec.event(JOB_OBJ, "Warning", "Y", "m")  # logged, not raised
