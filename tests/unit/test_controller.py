"""Controller logic that needs no server: event → key mapping, the policy data, and the observe step
(SSH key reuse across retries, names held by objects our watches cannot see)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import attrs
import pytest

import render
from localcluster import jobs
from reconcile.engine.policy import CREATE_ONLY, JOB_POLICY, PATCH, SERVICE_POLICY
from reconcile.mpijob.controller import Controller
from reconcile.mpijob.decide import decide
from reconcile.mpijob.memory import JobMemory
from reconcile.mpijob.metrics import Metrics
from reconcile.mpijob.observe import children_of, wanted
from reconcile.mpijob.policy import POLICY
from reconcile.runtime.events import EventRecorder
from reconcile.runtime.kube import CONFIGMAP, JOB, POD, SECRET, ApiError
from reconcile.runtime.loop import Result
from tests.unit.fakes import FakeKube, NoKube, RecordingWriter

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def controller(kube=None, gang: str = "", workload_api: str = "", writer=None) -> Controller:
    kube = kube or NoKube()
    return Controller(
        kube,
        render.Config(gang_scheduling=gang, workload_api=workload_api),
        metrics=Metrics(),
        recorder=EventRecorder(kube),
        now=lambda: NOW,
        writer=writer or RecordingWriter(),
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
    assert c.keys.owner_key(obj("Pod", "pi-worker-0", MPIJOB_REF)) == "ns/pi"
    launcher_pod = obj("Pod", "pi-launcher-x", ref("Job", "pi-launcher", "launcher-uid", "batch/v1"))
    assert c.keys.owner_key(launcher_pod) == "ns/pi"
    # a pod of some other Job, an object with no controller, a controller of another kind: not ours
    other_job = obj("Job", "other", ref("CronJob", "c", "cj", "batch/v1"), api_version="batch/v1")
    c.children[JOB].store.upsert(other_job)
    assert c.keys.owner_key(obj("Pod", "p", ref("Job", "other", "uid-other", "batch/v1"))) is None
    assert c.keys.owner_key(obj("Pod", "p")) is None
    assert c.keys.owner_key(obj("Pod", "p", ref("ReplicaSet", "rs", "x", "apps/v1"))) is None


def test_child_events_enqueue_the_owner_key():
    c = controller()
    handler = c.children[CONFIGMAP]._handlers[0]
    handler("ADDED", None, obj("ConfigMap", "pi-config", MPIJOB_REF))
    handler("ADDED", None, obj("ConfigMap", "stray"))
    assert c.queue.get(timeout=1) == "ns/pi"
    c.queue.done("ns/pi")
    assert len(c.queue) == 0


def test_a_node_event_enqueues_the_jobs_with_pods_on_it_and_their_children_include_it():
    kube = NoKube()
    c = Controller(kube, render.Config(), metrics=Metrics(), recorder=EventRecorder(kube), watch_nodes=True)
    assert c.nodes is not None and c.nodes in c.informers
    assert controller().nodes is None
    launcher = obj("Job", "pi-launcher", MPIJOB_REF, uid="launcher-uid", api_version="batch/v1")
    c.children[JOB].store.upsert(launcher)
    launcher_pod = obj("Pod", "pi-launcher-x", ref("Job", "pi-launcher", "launcher-uid", "batch/v1"))
    other = ref("MPIJob", "other", "other-uid", "kubeflow.org/v2beta1")
    for pod, node in ((obj("Pod", "pi-worker-0", MPIJOB_REF), "n1"), (launcher_pod, "n2")):
        c.children[POD].store.upsert({**pod, "spec": {"nodeName": node}})
    c.children[POD].store.upsert({**obj("Pod", "other-worker-0", other), "spec": {"nodeName": "n3"}})
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2", "resourceVersion": "1"}}
    c.nodes.store.upsert(node)
    assert c.keys.of_node(node, node) == ["ns/pi"]
    assert c.keys.of_node({"metadata": {"name": "n9"}}, None) == []  # no pod there
    job = render.parse_mpijob({**_mpijob(), "metadata": {**_mpijob()["metadata"], "uid": "job-uid"}})
    nodes = [o for o in children_of(job, c.reader) if o["kind"] == "Node"]
    assert nodes == [node]  # n1 is not in the cache


def test_policy_is_the_design_table():
    assert POLICY.for_kind("", "Pod") == CREATE_ONLY
    assert POLICY.for_kind("", "Secret") == CREATE_ONLY
    assert POLICY.for_kind("batch", "Job") == attrs.evolve(JOB_POLICY, deletes=False)
    assert "spec.suspend" in JOB_POLICY.mutable_paths
    assert POLICY.for_kind("scheduling.volcano.sh", "PodGroup") == PATCH
    assert POLICY.for_kind("", "ConfigMap") == attrs.evolve(PATCH, deletes=False)
    # Patched in place, knowing the fields the API server defaults (else each sync would "remove" them).
    assert POLICY.for_kind("", "Service") == attrs.evolve(SERVICE_POLICY, deletes=False)
    assert SERVICE_POLICY.mode == "patch"
    assert POLICY.rank("Service") < POLICY.rank("Pod") < POLICY.rank("Job")


def test_gang_scheduling_adds_podgroup_and_priorityclass_informers():
    assert controller().gang_resources == ()
    c = controller(gang="volcano")
    assert [r.api_version for r in c.gang_resources] == ["scheduling.volcano.sh/v1beta1"]
    assert c.priority_classes is not None
    sp = controller(gang="sp-scheduler").gang_resources
    assert [r.api_version for r in sp] == ["scheduling.x-k8s.io/v1alpha1"]


@pytest.mark.parametrize(
    ("version", "kinds"),
    [
        ("scheduling.k8s.io/v1alpha1", ["Workload"]),
        ("scheduling.k8s.io/v1alpha2", ["Workload", "PodGroup"]),
        ("scheduling.k8s.io/v1beta1", ["Workload", "PodGroup"]),
    ],
)
def test_kubernetes_gang_scheduling_watches_the_served_workload_api_alone(version, kinds):
    c = controller(gang="kubernetes", workload_api=version)
    assert [(r.api_version, r.kind) for r in c.gang_resources] == [(version, k) for k in kinds]
    assert c.priority_classes is None
    job = minimal_job()
    assert all((r, job.name) in wanted(job, c.config) for r in c.gang_resources)
    assert all(r in c.children for r in c.gang_resources)
    # nothing served: no informer, and no name to look up
    unserved = controller(gang="kubernetes")
    assert unserved.gang_resources == ()
    assert all(res.group != "scheduling.k8s.io" for res, _ in wanted(job, unserved.config))


def minimal_job():
    return render.parse_mpijob(
        jobs.minimal_job(namespace="ns", uid="job-uid", image="i", containers=("l", "w"))
    )


def _cached(name: str, uid: str, **spec: object) -> dict:
    """An MPIJob as the cache holds it, with exactly `spec`."""
    job = jobs.minimal_job(name, namespace="ns", uid=uid)
    job["metadata"]["resourceVersion"] = "1"
    job["spec"] = spec
    return job


def _mpijob(uid: str = "job-uid") -> dict:
    job = copy.deepcopy(minimal_job().raw)
    job["metadata"].update({"uid": uid, "resourceVersion": "1"})
    return job


def test_fresh_ssh_key_is_reused_until_the_secret_exists():
    c = controller()
    mpijob = _mpijob()
    _, memory = c.observe(mpijob, JobMemory(uid="job-uid"))
    first = memory.fresh_ssh_key
    assert first is not None
    _, again = c.observe(mpijob, memory)
    assert again.fresh_ssh_key is first  # a retried sync renders the same Secret
    secret = obj("Secret", "pi-ssh", MPIJOB_REF)
    c.children[SECRET].store.upsert(secret)
    children, seen = c.observe(mpijob, again)
    decision = decide(mpijob, children, seen, NOW, c.config)
    assert decision.memory.fresh_ssh_key is None  # forgotten once the Secret was seen


def test_wanted_names_held_by_unlabelled_objects_are_read_until_gone():
    kube = FakeKube()
    c = controller(kube)
    mpijob = _mpijob()
    foreign = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pi-config", "namespace": "ns"}}
    kube.objects[("configmaps", "ns", "pi-config")] = foreign
    # nothing remembered yet: no reads at all (the steady state costs no requests)
    children, _ = c.observe(mpijob, JobMemory(uid="job-uid"))
    assert children == []
    assert kube.calls == []
    # a create found the name taken: from now on the holder is read on every sync of this job
    taken = JobMemory(uid="job-uid", taken=frozenset({("ConfigMap", "pi-config")}))
    held, memory = c.observe(mpijob, taken)
    assert [(o["kind"], o["metadata"]["name"]) for o in held] == [("ConfigMap", "pi-config")]
    assert memory.taken == taken.taken
    del kube.objects[("configmaps", "ns", "pi-config")]
    held, memory = c.observe(mpijob, memory)
    assert held == []
    assert memory.taken == frozenset()


def test_wanted_names_in_the_cache_are_seen_without_requests():
    kube = FakeKube()
    c = controller(kube)
    stale = obj("Pod", "pi-worker-1", ref("MPIJob", "pi", "old-uid", "kubeflow.org/v2beta1"))
    c.children[POD].store.upsert(stale)
    held, _ = c.observe(_mpijob(), JobMemory(uid="job-uid"))
    assert held == [stale]
    assert kube.calls == []


def test_api_errors_other_than_404_propagate_from_reads():
    kube = FakeKube()
    kube.fail["get"] = ApiError(500, "boom", "{}")
    c = controller(kube)
    with pytest.raises(ApiError) as err:
        c.observe(_mpijob(), JobMemory(uid="job-uid", taken=frozenset({("ConfigMap", "pi-config")})))
    assert err.value.status == 500


def test_invalid_job_gets_failed_status_and_warning_event_once():
    kube, writer = FakeKube(), RecordingWriter()
    c = controller(kube, writer=writer)
    bad = _cached("bad", "bad-uid", mpiReplicaSpecs={"Worker": {"replicas": 1}})  # no Launcher
    writer.put(copy.deepcopy(bad))
    c.mpijobs.store.upsert(bad)
    c.sync("ns/bad")
    status = writer.objects[("MPIJob", "ns", "bad")]["status"]
    failed = next(x for x in status["conditions"] if x["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "ValidationError")
    assert "Launcher" in failed["message"]
    events = [o for k, o in kube.objects.items() if k[0] == "events"]
    assert [(e["type"], e["reason"]) for e in events if e["reason"] == "ValidationError"] == [
        ("Warning", "ValidationError")
    ]
    # a second sync of the unchanged job writes nothing
    assert writer.lines() == ["update MPIJob/status ns/bad"]
    c.sync("ns/bad")
    assert writer.lines() == ["update MPIJob/status ns/bad"]


def test_managed_externally_and_deleted_jobs_are_left_alone():
    kube, writer = FakeKube(), RecordingWriter()
    c = controller(kube, writer=writer)
    ext = _cached("ext", "e", runPolicy={"managedBy": "kueue.x-k8s.io/multikueue"})
    c.mpijobs.store.upsert(ext)
    c.sync("ns/ext")
    c.metrics.set_job_info("ns/gone", "gone-launcher", "ns")
    c.sync("ns/gone")  # not in the cache: only the job_info series goes
    assert kube.calls == [] and writer.sent == []
    assert b"gone-launcher" not in c.metrics.exposition()


def test_process_records_the_version_each_finished_sync_acted_on(monkeypatch):
    c = controller()
    c.mpijobs.store.upsert(obj("MPIJob", "pi", api_version="kubeflow.org/v2beta1"))
    monkeypatch.setattr(c, "sync", lambda key: Result())
    assert c.synced_version("ns/pi") is None
    c.process("ns/pi")
    assert c.synced_version("ns/pi") == "1"
    c.mpijobs.store.delete("ns/pi")
    c.process("ns/pi")
    assert c.synced_version("ns/pi") is None  # gone: forgotten


@pytest.mark.parametrize(
    ("res", "name"), [(JOB, "pi-launcher"), (POD, "pi-worker-0"), (CONFIGMAP, "pi-config")]
)
def test_a_job_held_by_a_foreign_object_is_looked_at_again_until_it_is_gone(res, name):
    from reconcile.mpijob.decide import HELD_RECHECK_SECONDS

    c = controller()
    mpijob = _mpijob()
    # someone else's object under a child's name: its deletion wakes no sync of this job
    foreign = obj(res.kind, name, ref("ConfigMap", "owner", "owner-uid", "v1"), api_version=res.api_version)
    c.children[res].store.upsert(foreign)
    children, memory = c.observe(mpijob, JobMemory(uid="job-uid"))
    held = decide(mpijob, children, memory, NOW, c.config)
    assert held.held_wake == HELD_RECHECK_SECONDS
    assert held.wake_after is not None and held.wake_after <= HELD_RECHECK_SECONDS
    assert not any(str(e.key).endswith(f"/{name}") for e in held.plan.creates)
    # a held job renders no launcher or worker: no conflict in the plan whose retry would look again
    assert bool(held.plan.conflicts) == (res is CONFIGMAP)
    c.children[res].store.delete(f"ns/{name}")
    children, memory = c.observe(mpijob, held.memory)
    free = decide(mpijob, children, memory, NOW, c.config)
    assert free.held_wake is None
