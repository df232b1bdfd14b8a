"""Controller logic that needs no server: event → key mapping, the policy data, SSH key reuse across
retries, and names held by objects our watches cannot see."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest

import render
from reconcile.engine.plan import Plan
from reconcile.engine.policy import CREATE_ONLY, JOB_POLICY, PATCH, SERVICE_POLICY
from reconcile.mpijob import controller as controller_module
from reconcile.mpijob.controller import Controller
from reconcile.mpijob.metrics import Metrics
from reconcile.mpijob.policy import POLICY
from reconcile.runtime.events import EventRecorder
from reconcile.runtime.kube import CONFIGMAP, JOB, POD, ApiError, resource_for
from render.timeutil import parse_time
from render.yamlio import load_objects
from tests.unit import golden_cases
from tests.unit.fakes import FakeKube, NoKube

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def controller(kube=None, gang: str = "") -> Controller:
    kube = kube or NoKube()
    return Controller(
        kube,
        render.Config(gang_scheduling=gang),
        metrics=Metrics(),
        recorder=EventRecorder(kube),
        now=lambda: NOW,
    )


def ref(kind, name, uid, api_version):
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}


def obj(kind, name, owner=None, uid=None, ns="ns", api_version="v1"):
    meta = {"name": name, "namespace": ns, "uid": uid or f"uid-{name}", "resourceVersion": "1"}
    if owner:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


MPIJOB_REF = ref("MPIJob", "pi", "job-uid", "kubeflow.org/v2beta1")


def test_children_map_to_their_mpijob_and_launcher_pods_through_the_job():
    c = controller()
    launcher = obj("Job", "pi-launcher", MPIJOB_REF, uid="launcher-uid", api_version="batch/v1")
    c.children[JOB].store.upsert(launcher)
    assert c.owner_key(obj("Pod", "pi-worker-0", MPIJOB_REF)) == "ns/pi"
    launcher_pod = obj("Pod", "pi-launcher-x", ref("Job", "pi-launcher", "launcher-uid", "batch/v1"))
    assert c.owner_key(launcher_pod) == "ns/pi"
    # a pod of some other Job, an object with no controller, a controller of another kind: not ours
    other_job = obj("Job", "other", ref("CronJob", "c", "cj", "batch/v1"), api_version="batch/v1")
    c.children[JOB].store.upsert(other_job)
    assert c.owner_key(obj("Pod", "p", ref("Job", "other", "uid-other", "batch/v1"))) is None
    assert c.owner_key(obj("Pod", "p")) is None
    assert c.owner_key(obj("Pod", "p", ref("ReplicaSet", "rs", "x", "apps/v1"))) is None


def test_child_events_enqueue_the_owner_key():
    c = controller()
    c._on_child("ADDED", None, obj("ConfigMap", "pi-config", MPIJOB_REF))
    c._on_child("ADDED", None, obj("ConfigMap", "stray"))
    assert c.queue.get(timeout=1) == "ns/pi"
    c.queue.done("ns/pi")
    assert len(c.queue) == 0


def test_policy_is_the_design_table():
    assert POLICY.for_kind("", "Pod") == CREATE_ONLY
    assert POLICY.for_kind("", "Secret") == CREATE_ONLY
    assert POLICY.for_kind("batch", "Job") == JOB_POLICY
    assert "spec.suspend" in JOB_POLICY.mutable_paths
    for group, kind in [("", "ConfigMap"), ("scheduling.volcano.sh", "PodGroup")]:
        assert POLICY.for_kind(group, kind) == PATCH
    # Patched in place, knowing the fields the API server defaults (else each sync would "remove" them).
    assert POLICY.for_kind("", "Service") == SERVICE_POLICY
    assert SERVICE_POLICY.mode == "patch"
    assert POLICY.rank("Service") < POLICY.rank("Pod") < POLICY.rank("Job")


def test_gang_scheduling_adds_podgroup_and_priorityclass_informers():
    assert controller().podgroup_res is None
    c = controller(gang="volcano")
    assert c.podgroup_res.api_version == "scheduling.volcano.sh/v1beta1"
    assert c.priority_classes is not None
    assert controller(gang="sp-scheduler").podgroup_res.api_version == "scheduling.x-k8s.io/v1alpha1"


def minimal_job():
    return render.parse_mpijob(
        {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "metadata": {"name": "pi", "namespace": "ns", "uid": "job-uid"},
            "spec": {
                "mpiReplicaSpecs": {
                    "Launcher": {"template": {"spec": {"containers": [{"name": "l", "image": "i"}]}}},
                    "Worker": {
                        "replicas": 2,
                        "template": {"spec": {"containers": [{"name": "w", "image": "i"}]}},
                    },
                }
            },
        }
    )


def test_fresh_ssh_key_is_reused_until_the_secret_exists():
    c = controller()
    job = minimal_job()
    first = c._observe(job, [], NOW).fresh_ssh_key
    assert first is not None
    assert c._observe(job, [], NOW).fresh_ssh_key is first  # a retried sync renders the same Secret
    secret = obj("Secret", "pi-ssh", MPIJOB_REF)
    assert c._observe(job, [secret], NOW).fresh_ssh_key is None
    assert c._observe(job, [], NOW).fresh_ssh_key is not first  # forgotten once the Secret was seen


def test_wanted_names_held_by_unlabelled_objects_are_read_until_gone():
    kube = FakeKube()
    c = controller(kube)
    job = minimal_job()
    foreign = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pi-config", "namespace": "ns"}}
    kube.objects[("configmaps", "ns", "pi-config")] = foreign
    # nothing remembered yet: no reads at all (the steady state costs no requests)
    assert c._held_names(job, []) == []
    assert kube.calls == []
    # a create found the name taken: from now on the holder is read on every sync of this job
    c._taken[job.uid] = {(CONFIGMAP, "pi-config"): True}
    held = c._held_names(job, [])
    assert [o["metadata"]["name"] for o in held] == ["pi-config"]
    assert held[0]["kind"] == "ConfigMap"
    del kube.objects[("configmaps", "ns", "pi-config")]
    assert c._held_names(job, []) == []
    assert job.uid not in c._taken


def test_wanted_names_in_the_cache_are_seen_without_requests():
    kube = FakeKube()
    c = controller(kube)
    job = minimal_job()
    stale = obj("Pod", "pi-worker-1", ref("MPIJob", "pi", "old-uid", "kubeflow.org/v2beta1"))
    c.children[POD].store.upsert(stale)
    held = c._held_names(job, [])
    assert held == [stale]
    assert kube.calls == []


def test_api_errors_other_than_404_propagate_from_reads():
    kube = FakeKube()
    kube.fail["get"] = ApiError(500, "boom", "{}")
    c = controller(kube)
    c._taken["job-uid"] = {(CONFIGMAP, "pi-config"): True}
    with pytest.raises(ApiError) as err:
        c._held_names(minimal_job(), [])
    assert err.value.status == 500


def test_invalid_job_gets_failed_status_and_warning_event_once():
    kube = FakeKube()
    c = controller(kube)
    bad = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "bad", "namespace": "ns", "uid": "bad-uid", "resourceVersion": "1"},
        "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 1}}},  # no Launcher
    }
    kube.objects[("mpijobs", "ns", "bad")] = bad
    kube.rv = 10  # the server's next resourceVersion is newer than the cached one
    c.mpijobs.store.upsert(bad)
    c.sync("ns/bad")
    status = kube.objects[("mpijobs", "ns", "bad")]["status"]
    failed = next(x for x in status["conditions"] if x["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "ValidationError")
    assert "Launcher" in failed["message"]
    events = [o for k, o in kube.objects.items() if k[0] == "events"]
    assert [(e["type"], e["reason"]) for e in events if e["reason"] == "ValidationError"] == [
        ("Warning", "ValidationError")
    ]
    # a second sync of the unchanged job writes nothing
    calls = len(kube.calls)
    c.sync("ns/bad")
    assert kube.calls[calls:] == []


def test_managed_externally_and_deleted_jobs_are_left_alone():
    kube = FakeKube()
    c = controller(kube)
    ext = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "ext", "namespace": "ns", "uid": "e", "resourceVersion": "1"},
        "spec": {"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"}},
    }
    c.mpijobs.store.upsert(ext)
    c.sync("ns/ext")
    c.metrics.set_job_info("ns/gone", "gone-launcher", "ns")
    c.sync("ns/gone")  # not in the cache: only the job_info series goes
    assert kube.calls == []
    assert b"gone-launcher" not in c.metrics.exposition()


# Cases with a live launcher Job, but not the one whose TTL expired (the sync deletes the MPIJob).
LAUNCHER_CASES = [
    c
    for c in golden_cases.cases()
    if any(o.get("kind") == "Job" for o in golden_cases.load_case(c)[1])
    and "ttl_expired: true" not in (golden_cases.GOLDEN / c / "lifecycle.yaml").read_text()
]


@pytest.mark.parametrize("case", LAUNCHER_CASES)
def test_the_controller_plans_exactly_what_render_returns(case, monkeypatch):
    """The golden children are what the sync hands the engine: no controller-side edits of render's
    output (the launcher template labels once were merged over live ones)."""
    mpijob, objects, config, now_text = golden_cases.load_case(case)
    kube = FakeKube()
    kube.api_client = None  # execute gets an empty plan: no request
    for o in [mpijob, *objects]:
        o["metadata"].setdefault("resourceVersion", "1")
        if o["kind"] == "Job":  # the labels the API server adds to a Job's template
            template = o.setdefault("spec", {}).setdefault("template", {})
            labels = template.setdefault("metadata", {}).setdefault("labels", {})
            labels.update({"controller-uid": "x", "batch.kubernetes.io/job-name": o["metadata"]["name"]})
        kube.objects[(resource_for(o).plural, o["metadata"].get("namespace", ""), o["metadata"]["name"])] = o
    c = Controller(
        kube, config, metrics=Metrics(), recorder=EventRecorder(kube), now=lambda: parse_time(now_text)
    )
    c.mpijobs.observe(mpijob)
    for o in objects:
        inf = c._informer_for(o)
        if inf is not None:
            inf.observe(o)
    planned = []

    def capture(desired, live, policy, owner_uid, **kw):
        planned.append(copy.deepcopy(desired))
        return Plan()

    monkeypatch.setattr(controller_module, "plan", capture)
    c.sync(f"{mpijob['metadata']['namespace']}/{mpijob['metadata']['name']}")
    golden = load_objects((golden_cases.GOLDEN / case / "children.yaml").read_text())
    assert planned == [golden]


def test_process_records_the_version_each_finished_sync_acted_on(monkeypatch):
    c = controller()
    c.mpijobs.store.upsert(obj("MPIJob", "pi", api_version="kubeflow.org/v2beta1"))
    monkeypatch.setattr(c, "sync", lambda key: None)
    assert c.synced_version("ns/pi") is None
    c.process("ns/pi")
    assert c.synced_version("ns/pi") == "1"
    c.mpijobs.store.delete("ns/pi")
    c.process("ns/pi")
    assert c.synced_version("ns/pi") is None  # gone: forgotten


def test_a_counts_only_status_change_waits_once_then_is_written(monkeypatch):
    c = controller()
    clock = [100.0]
    monkeypatch.setattr(controller_module.time, "monotonic", lambda: clock[0])
    queued: list[tuple[str, float]] = []
    monkeypatch.setattr(c.queue, "add_after", lambda key, delay: queued.append((key, delay)))
    running = {"conditions": [{"type": "Running", "status": "True"}], "replicaStatuses": {"Worker": {}}}
    more = {**running, "replicaStatuses": {"Worker": {"active": 2}}}
    assert c._status_can_wait("ns/pi", running, more)
    assert queued == [("ns/pi", pytest.approx(controller_module.STATUS_COALESCE_SECONDS + 0.01))]
    clock[0] += 0.5
    assert c._status_can_wait("ns/pi", running, more)  # still within the window of the first change
    clock[0] += 0.6
    assert not c._status_can_wait("ns/pi", running, more)  # its time has come: written
    assert "ns/pi" not in c._status_waiting
    # a condition change never waits
    done = {"conditions": [{"type": "Succeeded", "status": "True"}], "replicaStatuses": {}}
    assert not c._status_can_wait("ns/pi", running, done)
    # but a job's first status does, once: a client's create-then-update meets no conflict of ours
    assert c._status_can_wait("ns/new", {}, running)
    clock[0] += 1.1
    assert not c._status_can_wait("ns/new", {}, running)


def test_a_configmap_only_plan_waits_once_but_creates_never_wait(monkeypatch):
    from reconcile.engine.plan import Create, ObjectKey, Patch

    c = controller()
    clock = [100.0]
    monkeypatch.setattr(controller_module.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(c.queue, "add_after", lambda key, delay: None)
    cm = ObjectKey("", "ConfigMap", "ns", "pi-config")
    patch = Patch(cm, "v1", "uid", {"data": {}}, (), (), ())
    hostfile_only = Plan(patches=(patch,))
    assert c._hostfile_can_wait("ns/pi", hostfile_only)
    clock[0] += 1.1
    assert not c._hostfile_can_wait("ns/pi", hostfile_only)
    pod = ObjectKey("", "Pod", "ns", "pi-worker-1")
    with_create = Plan(creates=(Create(pod, "v1", {}),), patches=(patch,))
    assert not c._hostfile_can_wait("ns/pi", with_create)
