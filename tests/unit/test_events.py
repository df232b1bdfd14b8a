"""L0: events are created, aggregated into a count, recreated after expiry, never raise."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from reconcile.mpijob.policy import EVENT_COMPONENT
from reconcile.runtime.events import BackgroundEventRecorder, EventRecorder
from reconcile.runtime.kube import EVENT, ApiError
from tests.unit.fakes import FakeKube

JOB_OBJ = {
    "apiVersion": "kubeflow.org/v2beta1",
    "kind": "MPIJob",
    "metadata": {"name": "pi", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
}


def test_event_is_created_with_component_and_involved_object():
    kube = FakeKube()
    rec = EventRecorder(
        kube, component=EVENT_COMPONENT, host="h", clock=lambda: datetime(2026, 1, 1, tzinfo=UTC)
    )
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


def test_background_recorder_sends_in_order_without_blocking_the_caller():
    kube = FakeKube()
    gate = threading.Event()
    create = kube.create

    def slow_create(*args, **kwargs):
        gate.wait(5)
        return create(*args, **kwargs)

    kube.create = slow_create  # type: ignore[method-assign]
    times = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i) for i in range(3)]
    clock = iter(times)
    rec = BackgroundEventRecorder(kube, clock=lambda: next(clock))
    for reason in ("A", "B", "C"):
        rec.event(JOB_OBJ, "Normal", reason, reason)  # returns at once: the API is stuck
    assert not [k for k in kube.objects if k[0] == EVENT.plural]
    gate.set()
    assert rec.flush(5)
    events = sorted((o for k, o in kube.objects.items() if k[0] == EVENT.plural), key=lambda e: e["reason"])
    assert [e["reason"] for e in events] == ["A", "B", "C"]
    # stamped when the sync recorded them, not when the thread got to send them
    assert [e["firstTimestamp"] for e in events] == [
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:00:01Z",
        "2026-01-01T00:00:02Z",
    ]


def test_background_recorder_drops_beyond_its_capacity():
    kube = FakeKube()
    gate = threading.Event()
    create = kube.create
    kube.create = lambda *a, **k: (gate.wait(5), create(*a, **k))[1]  # type: ignore[method-assign]
    rec = BackgroundEventRecorder(kube, capacity=2)
    for i in range(10):
        rec.event(JOB_OBJ, "Normal", f"R{i}", "m")
    gate.set()
    assert rec.flush(5)
    sent = [k for k in kube.objects if k[0] == EVENT.plural]
    assert 2 <= len(sent) <= 3  # one in flight, two waiting; the rest dropped
