"""Controller pieces that need no API server: leader election, events, informers, request labels,
status comparison, flags, probes and logs. A small in-memory fake stands in for the API."""

from __future__ import annotations

import io
import json
import logging
import threading
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from reconcile import flags, logs
from reconcile.events import EventRecorder
from reconcile.health import HealthServer
from reconcile.informer import Informer, Store, controller_uid_index, key_of
from reconcile.kube import EVENT, JOB, LEASE, POD, ApiError, Resource, classify
from reconcile.leader import LeaderElector
from reconcile.metrics import Metrics
from reconcile.syncstate import (
    is_managed_externally,
    launcher_resume_needs_start_time_cleared,
    status_changed,
)


class FakeKube:
    """Objects by (plural, namespace, name); resourceVersion checked on replace like the server."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.calls: list[tuple[str, str, str]] = []
        self.rv = 0
        self.fail: dict[str, ApiError] = {}

    def _bump(self, obj: dict) -> dict:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return obj

    def _check(self, verb: str) -> None:
        if verb in self.fail:
            raise self.fail[verb]

    def get(self, res: Resource, namespace, name):
        self.calls.append(("get", res.kind, name))
        self._check("get")
        try:
            return json.loads(json.dumps(self.objects[(res.plural, namespace or "", name)]))
        except KeyError:
            raise ApiError(404, "Not Found", json.dumps({"code": 404})) from None

    def create(self, res: Resource, namespace, body):
        self.calls.append(("create", res.kind, body["metadata"]["name"]))
        self._check("create")
        key = (res.plural, namespace or "", body["metadata"]["name"])
        if key in self.objects:
            raise ApiError(409, "Conflict", json.dumps({"reason": "AlreadyExists"}))
        obj = self._bump(json.loads(json.dumps(body)))
        self.objects[key] = obj
        return json.loads(json.dumps(obj))

    def replace(self, res: Resource, body, subresource=None):
        meta = body["metadata"]
        self.calls.append(("update", res.kind, meta["name"]))
        self._check("update")
        key = (res.plural, meta.get("namespace", ""), meta["name"])
        cur = self.objects.get(key)
        if cur is None:
            raise ApiError(404, "Not Found", "{}")
        if meta.get("resourceVersion") != cur["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", json.dumps({"reason": "Conflict"}))
        obj = self._bump(json.loads(json.dumps(body)))
        self.objects[key] = obj
        return json.loads(json.dumps(obj))

    def patch(self, res: Resource, namespace, name, body, *, content_type="", subresource=None, **query):
        self.calls.append(("patch", res.kind, name))
        self._check("patch")
        key = (res.plural, namespace or "", name)
        if key not in self.objects:
            raise ApiError(404, "Not Found", "{}")
        self.objects[key].update(body)
        return self._bump(self.objects[key])


# -- leader election ---------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def elector(kube, identity, clock):
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return LeaderElector(
        kube, "mpi-operator", identity, clock=clock, wall=lambda: start + timedelta(seconds=clock.t)
    )


def test_first_candidate_creates_the_lease_and_leads():
    kube, clock = FakeKube(), Clock()
    a = elector(kube, "a", clock)
    assert a.try_acquire_or_renew()
    lease = kube.objects[("leases", "mpi-operator", "mpi-operator")]
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["leaseDurationSeconds"] == 15
    assert lease["spec"]["renewTime"] == "2026-01-01T00:00:00.000000Z"


def test_second_candidate_waits_until_the_lease_expires_unrenewed():
    kube, clock = FakeKube(), Clock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock.t = 10
    assert a.try_acquire_or_renew()  # renewal: b observes a changed record
    clock.t = 12
    assert not b.try_acquire_or_renew()
    clock.t = 12 + 14.9  # b first saw the renewed record at t=12, on its own clock
    assert not b.try_acquire_or_renew()
    clock.t = 12 + 15.1
    assert b.try_acquire_or_renew()
    spec = kube.objects[("leases", "mpi-operator", "mpi-operator")]["spec"]
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1
    # a lost it: its next attempt sees b's fresh record and fails
    assert not a.try_acquire_or_renew()


def test_conflicting_write_does_not_acquire():
    kube, clock = FakeKube(), Clock()
    a = elector(kube, "a", clock)
    assert a.try_acquire_or_renew()
    kube.fail["update"] = ApiError(409, "Conflict", "{}")
    assert not a.try_acquire_or_renew()


def test_release_lets_a_standby_take_over_at_once():
    kube, clock = FakeKube(), Clock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a.try_acquire_or_renew()
    a._set_leading(True)
    assert not b.try_acquire_or_renew()
    assert a.release()
    assert not a.is_leader
    assert kube.objects[("leases", "mpi-operator", "mpi-operator")]["spec"]["holderIdentity"] == ""
    assert b.try_acquire_or_renew()


def test_run_exits_via_on_stopped_only_when_another_holds_the_lease():
    kube = FakeKube()
    started, stopped, changes = threading.Event(), threading.Event(), []
    le = LeaderElector(
        kube,
        "ns",
        "a",
        lease_duration=1.0,
        renew_deadline=0.5,
        retry_period=0.1,
        on_started=started.set,
        on_stopped=stopped.set,
        on_change=changes.append,
        watch_lease=False,
    )
    stop = threading.Event()
    t = threading.Thread(target=le.run, args=(stop,))
    t.start()
    assert started.wait(2)
    assert le.is_leader and le.fence.is_open()
    # An unreachable API server: the fence lapses, but leadership is not given up (no exit).
    kube.fail["get"] = ApiError(500, "boom", "{}")
    assert not stopped.wait(1.5)
    assert le.is_leader and not le.fence.is_open()
    # The API server is back and nobody took the lease: renewed, writes resume.
    del kube.fail["get"]
    for _ in range(100):
        if le.fence.is_open():
            break
        threading.Event().wait(0.02)
    assert le.fence.is_open()
    # Someone else holds it now: lost.
    kube.objects[("leases", "ns", "mpi-operator")]["spec"]["holderIdentity"] = "b"
    kube.objects[("leases", "ns", "mpi-operator")]["spec"]["renewTime"] = "2099-01-01T00:00:00.000000Z"
    kube.fail["update"] = ApiError(409, "Conflict", "{}")
    assert stopped.wait(3)
    t.join(2)
    assert changes == [True, False]
    assert not le.fence.is_open()


def test_run_stops_workers_before_releasing_on_shutdown():
    kube = FakeKube()
    order = []
    le = LeaderElector(
        kube, "ns", "a", lease_duration=1.0, renew_deadline=0.5, retry_period=0.1, watch_lease=False
    )
    stop = threading.Event()
    t = threading.Thread(
        target=le.run,
        args=(stop, lambda timeout: order.append(("stop-workers", le.is_leader, le.fence.is_open()))),
    )
    t.start()
    for _ in range(100):
        if le.is_leader:
            break
        threading.Event().wait(0.02)
    stop.set()
    t.join(3)
    assert order == [("stop-workers", True, True)]
    assert kube.objects[("leases", "ns", "mpi-operator")]["spec"]["holderIdentity"] == ""
    assert not le.fence.is_open()


def test_health_fails_when_leader_stops_renewing():
    kube, clock = FakeKube(), Clock()
    a = elector(kube, "a", clock)
    assert a.try_acquire_or_renew()
    a._set_leading(True)
    clock.t = 30
    assert a.healthy()
    clock.t = 36
    assert not a.healthy()


def test_lease_timings_are_validated():
    with pytest.raises(ValueError):
        LeaderElector(FakeKube(), "ns", "a", lease_duration=5, renew_deadline=5)


# -- events ------------------------------------------------------------------------------------------
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


# -- request classification --------------------------------------------------------------------------
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


def test_api_request_count_excludes_kinds():
    m = Metrics()
    m.api_requests.labels(verb="update", kind="Lease", code="200").inc(5)
    m.api_requests.labels(verb="patch", kind="Pod", code="200").inc(2)
    m.api_requests.labels(verb="list", kind="Pod", code="200").inc(1)
    assert m.api_request_count() == 8
    assert m.api_request_count(exclude_kinds=frozenset({"Lease"})) == 3
    assert m.api_request_count(exclude_kinds=frozenset({"Lease"}), verbs=frozenset({"patch"})) == 2


def test_job_info_series_is_removed_when_the_job_goes():
    m = Metrics()
    m.set_job_info("ns/pi", "pi-launcher", "ns")
    assert b'mpi_operator_job_info{launcher="pi-launcher",namespace="ns"} 1.0' in m.exposition()
    m.remove_job_info("ns/pi")
    m.remove_job_info("ns/pi")
    assert b"pi-launcher" not in m.exposition()


# -- informer store and watch handling ---------------------------------------------------------------
def pod(name, rv, owner=None, ns="ns"):
    meta = {"name": name, "namespace": ns, "resourceVersion": str(rv), "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [{"uid": owner, "controller": True, "kind": "MPIJob", "name": "pi"}]
    meta["managedFields"] = [
        {"manager": "x", "operation": "Apply"},
        {"manager": "kubelet", "operation": "Update", "subresource": "status"},
    ]
    return {"metadata": meta}


def test_store_indexes_follow_updates_and_deletes():
    store = Store({"controller": controller_uid_index})
    store.upsert(pod("a", 1, "u1"))
    store.upsert(pod("b", 1, "u1"))
    assert [key_of(o) for o in store.by_index("controller", "u1")] == ["ns/a", "ns/b"]
    store.upsert(pod("a", 2, "u2"))
    assert [key_of(o) for o in store.by_index("controller", "u1")] == ["ns/b"]
    store.delete("ns/b")
    assert store.by_index("controller", "u1") == []
    assert [key_of(o) for o in store.by_index("controller", "u2")] == ["ns/a"]


class ListWatchKube:
    def __init__(self, pages, streams):
        self.pages = list(pages)
        self.streams = list(streams)
        self.watch_queries = []

    def list(self, res, namespace=None, **query):
        return self.pages.pop(0)

    def stream_lines(self, path, query, timeout, on_open=None):
        self.watch_queries.append(dict(query))
        item = self.streams.pop(0) if self.streams else None
        if isinstance(item, Exception):
            raise item
        if item is None:
            threading.Event().wait(0.05)
            return iter(())
        return iter(json.dumps(e).encode() for e in item)


def run_informer(kube, until, **kw):
    inf = Informer(kube, POD, backoff=(0.01, 0.02), **kw)
    events = []
    inf.add_handler(lambda e, old, new: events.append((e, key_of(new or old))))
    inf.start()
    for _ in range(200):
        if until(inf, events):
            break
        threading.Event().wait(0.01)
    inf.stop()
    return inf, events


def test_informer_lists_watches_and_relists_on_410():
    kube = ListWatchKube(
        pages=[
            {"metadata": {"resourceVersion": "10"}, "items": [pod("a", 5), pod("b", 6)]},
            {"metadata": {"resourceVersion": "30"}, "items": [pod("a", 21)]},
        ],
        streams=[
            [
                {"type": "MODIFIED", "object": pod("a", 11)},
                {"type": "MODIFIED", "object": pod("a", 11)},  # same RV: not delivered
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
                {"type": "ERROR", "object": {"code": 410, "reason": "Expired"}},
            ]
        ],
    )
    inf, events = run_informer(kube, lambda inf, ev: len(ev) >= 5)
    assert events == [
        ("ADDED", "ns/a"),
        ("ADDED", "ns/b"),
        ("MODIFIED", "ns/a"),
        ("DELETED", "ns/b"),  # gone in the relist
        ("MODIFIED", "ns/a"),
    ]
    assert kube.watch_queries[0]["resourceVersion"] == "10"
    assert kube.watch_queries[0]["allowWatchBookmarks"] == "true"
    assert kube.watch_queries[1]["resourceVersion"] == "30"
    assert inf.has_synced()
    # Main-resource entries stay for the differ's removals; subresource entries are dropped.
    assert inf.store.get("ns/a")["metadata"]["managedFields"] == [{"manager": "x", "operation": "Apply"}]
    assert inf.store.get("ns/a")["kind"] == "Pod"


def test_informer_resumes_from_bookmark_after_error():
    kube = ListWatchKube(
        pages=[{"metadata": {"resourceVersion": "10"}, "items": []}],
        streams=[
            [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}}],
            ApiError(500, "Internal", "{}"),
        ],
    )
    run_informer(kube, lambda inf, ev: len(kube.watch_queries) >= 3)
    assert [q["resourceVersion"] for q in kube.watch_queries[:3]] == ["10", "42", "42"]


@pytest.mark.parametrize("status", [401, 403, 429, 500, 503, None])
def test_informer_retries_transient_list_errors_and_counts_them(status):
    """A restarting kube-apiserver answers 403 until its RBAC cache syncs: retried, never fatal."""
    errors = []
    kube = ListWatchKube(pages=[{"metadata": {"resourceVersion": "10"}, "items": [pod("a", 5)]}], streams=[])
    real_list, calls = kube.list, []

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) <= 3:
            raise ApiError(status, "Err", "{}") if status else ConnectionResetError("reset")
        return real_list(*a, **k)

    kube.list = flaky
    inf, events = run_informer(kube, lambda inf, ev: inf.has_synced(), on_error=lambda *a: errors.append(a))
    assert inf.has_synced()
    assert events[0] == ("ADDED", "ns/a")
    assert errors == [("pods.core", str(status) if status else "error")] * 3


def test_observe_keeps_newer_cached_object():
    inf = Informer(ListWatchKube([], []), POD)
    inf.store.upsert(pod("a", 9))
    inf.observe(pod("a", 8))
    assert inf.store.get("ns/a")["metadata"]["resourceVersion"] == "9"
    inf.observe(pod("a", 10))
    assert inf.store.get("ns/a")["metadata"]["resourceVersion"] == "10"


# -- status comparison and resume --------------------------------------------------------------------
def cond(t, s, reason="r", ts="2026-01-01T00:00:00Z"):
    return {"type": t, "status": s, "reason": reason, "lastTransitionTime": ts, "lastUpdateTime": ts}


def test_status_change_ignores_moved_condition_timestamps_only():
    old = {"conditions": [cond("Created", "True")], "replicaStatuses": {"Worker": {}}}
    moved = {"conditions": [cond("Created", "True", ts="2026-01-02T00:00:00Z")], "replicaStatuses": {}}
    assert not status_changed(old, moved)
    assert status_changed(old, {**old, "conditions": [cond("Created", "True", reason="other")]})
    assert status_changed(old, {**old, "startTime": "2026-01-01T00:00:00Z"})
    assert status_changed(old, {**old, "replicaStatuses": {"Worker": {"active": 1}}})
    assert status_changed({}, {"conditions": [cond("Created", "True")]})


def test_managed_by_other_controller():
    assert is_managed_externally({"spec": {"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"}}})
    assert not is_managed_externally({"spec": {"runPolicy": {"managedBy": "kubeflow.org/mpi-operator"}}})
    assert not is_managed_externally({"spec": {}})


def launcher(suspend, start_time=None, owner="u1"):
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "pi-launcher", "ownerReferences": [{"uid": owner, "controller": True}]},
        "spec": {"suspend": suspend},
    }
    if start_time:
        job["status"] = {"startTime": start_time}
    return job


def test_resume_clears_start_time_only_when_resuming_a_started_launcher():
    t = "2026-01-01T00:00:00Z"
    live = launcher(True, t)
    assert launcher_resume_needs_start_time_cleared([launcher(False)], [live]) is live
    assert launcher_resume_needs_start_time_cleared([launcher(True)], [live]) is None
    assert launcher_resume_needs_start_time_cleared([launcher(False)], [launcher(True)]) is None
    assert launcher_resume_needs_start_time_cleared([launcher(False)], [launcher(False, t)]) is None
    assert launcher_resume_needs_start_time_cleared([launcher(False)], [launcher(True, t, owner="x")]) is None


# -- flags, probes, logs -----------------------------------------------------------------------------
def test_flag_defaults_match_upstream(monkeypatch):
    monkeypatch.setenv("KUBEFLOW_NAMESPACE", "kf")
    a = flags.parse([])
    assert (a.threadiness, a.kube_api_qps, a.kube_api_burst) == (2, 5, 10)
    assert (a.controller_queue_rate_limit, a.controller_queue_burst) == (10, 100)
    assert (a.lock_namespace, a.namespace, a.monitoring_port) == ("mpi-operator", "kf", 8080)
    assert flags.parse(["--kubeConfig", "/k"]).kubeconfig == "/k"
    with pytest.raises(SystemExit):
        flags.parse(["--threadiness", "0"])


def test_health_server_probes_and_metrics():
    state = {"healthy": True, "ready": False}
    m = Metrics()
    srv = HealthServer(
        "127.0.0.1", 0, healthy=lambda: state["healthy"], ready=lambda: state["ready"], metrics=m.exposition
    )
    srv.start()
    try:

        def code(path):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}{path}", timeout=5) as r:
                    return r.status, r.read()
            except urllib.error.HTTPError as e:
                return e.code, b""

        assert code("/healthz")[0] == 200
        assert code("/readyz")[0] == 503
        state["ready"] = True
        assert code("/readyz")[0] == 200
        status, body = code("/metrics")
        assert status == 200 and b"mpi_operator_jobs_created_total" in body
        assert code("/nope")[0] == 404
    finally:
        srv.stop()


def test_json_logs_carry_extra_fields():
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logs.JSONFormatter())
    logger = logging.getLogger("test-json")
    logger.addHandler(handler)
    logger.propagate = False
    logger.warning("sync failed", extra={"key": "ns/pi", "error": "boom"})
    line = json.loads(buf.getvalue())
    assert line["msg"] == "sync failed"
    assert line["key"] == "ns/pi" and line["level"] == "warning"
