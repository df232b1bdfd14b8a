"""L1: the operator as a subprocess against a real kube-apiserver, with no controllers or nodes.

Pod and Job status are moved by hand through the status subresource, like upstream's integration suite.
Upstream's seven scenarios, plus: a foreign ConfigMap with a wanted name, zero writes once converged.
The process-level scenarios (SIGKILL mid-reconcile, two replicas) are in test_operator_process.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from localcluster.e2e import condition_is
from localcluster.jobs import pi_job
from localcluster.wait import wait_for
from reconcile.mpijob.kinds import MPIJOB, SCHED_PLUGINS_PODGROUP, VOLCANO_PODGROUP
from reconcile.runtime.kube import CONFIGMAP, JOB, POD, SECRET, SERVICE, Kube
from tests.cluster.support import (
    complete_launcher,
    create_launcher_pod,
    create_mpijob,
    events_of,
    exists,
    fail_launcher,
    get_job,
    has_event,
    live_workers,
    now_str,
    replica_status,
    run_pods,
    set_job_status,
    set_pod_status,
    start_launcher_pod,
    wait_workers,
    workers,
)
from tests.utils import api_writes, controller_uid, processed_after_nudge

OPERATOR_LABEL = "training.kubeflow.org/operator-name=mpi-operator"


# -- upstream's integration scenarios ------------------------------------------------------------------
@pytest.mark.l1
def test_mpijob_success(kube, namespace, start_operator):
    op = start_operator()
    job = create_mpijob(kube, namespace, pi_job())
    uid = job["metadata"]["uid"]

    wait_for(lambda: has_event(kube, namespace, "Normal", "MPIJobCreated"), "event MPIJobCreated")
    svc = wait_for(lambda: kube.get(SERVICE, namespace, "pi"), "Service")
    cm = wait_for(lambda: kube.get(CONFIGMAP, namespace, "pi-config"), "ConfigMap")
    secret = wait_for(lambda: kube.get(SECRET, namespace, "pi-ssh"), "Secret")
    pods = wait_workers(kube, namespace, 2)
    launcher = wait_for(lambda: kube.get(JOB, namespace, "pi-launcher"), "launcher Job")
    for obj in (svc, cm, secret, launcher, *pods):
        assert controller_uid(obj) == uid, obj["metadata"]["name"]
    # the Service selects the workers; Secret and ConfigMap are mounted
    selector = svc["spec"]["selector"]
    for pod in pods:
        assert selector.items() <= pod["metadata"]["labels"].items()
        assert any(v.get("secret", {}).get("secretName") == "pi-ssh" for v in pod["spec"]["volumes"])
    launcher_vols = launcher["spec"]["template"]["spec"]["volumes"]
    assert any(v.get("secret", {}).get("secretName") == "pi-ssh" for v in launcher_vols)
    assert any(v.get("configMap", {}).get("name") == "pi-config" for v in launcher_vols)
    assert secret["type"] == "kubernetes.io/ssh-auth"
    assert "pi-worker-1.pi." in cm["data"]["hostfile"]
    created = wait_for(
        lambda: condition_is(get_job(kube, namespace), "Created") and get_job(kube, namespace), "Created"
    )
    assert op.metric("mpi_operator_jobs_created_total") == 1

    run_pods(kube, pods)
    wait_for(lambda: replica_status(kube, namespace, "Worker") == 2, "Worker.active=2")
    start_launcher_pod(kube, namespace)
    wait_for(lambda: has_event(kube, namespace, "Normal", "MPIJobRunning"), "event MPIJobRunning")
    running = wait_for(
        lambda: (
            (s := get_job(kube, namespace))["status"]["replicaStatuses"].get("Launcher", {}).get("active")
            == 1
            and condition_is(s, "Running")
            and s
        ),
        "Launcher.active=1 and Running",
    )
    assert running["status"].get("startTime")
    assert created

    complete_launcher(kube, namespace)
    done = wait_for(
        lambda: condition_is(s := get_job(kube, namespace), "Succeeded") and s, "Succeeded condition"
    )
    assert done["status"]["replicaStatuses"]["Launcher"].get("succeeded") == 1
    assert done["status"].get("completionTime")
    wait_for(lambda: live_workers(kube, namespace) == [], "workers deleted (cleanPodPolicy Running)")
    wait_for(lambda: has_event(kube, namespace, "Normal", "MPIJobSucceeded"), "event MPIJobSucceeded")
    assert wait_for(lambda: op.metric("mpi_operator_jobs_successful_total") == 1, "successful metric")


@pytest.mark.l1
def test_mpijob_waits_for_workers_ready(kube, namespace, start_operator):
    op = start_operator()
    create_mpijob(kube, namespace, pi_job(launcherCreationPolicy="WaitForWorkersReady"))
    pods = wait_workers(kube, namespace, 2)
    run_pods(kube, pods, ready=False)
    wait_for(lambda: replica_status(kube, namespace, "Worker") == 2, "Worker.active=2")
    processed_after_nudge(kube, op, namespace, "pi")
    assert not exists(kube, JOB, namespace, "pi-launcher"), "launcher created before the workers were ready"
    run_pods(kube, pods)
    wait_for(lambda: exists(kube, JOB, namespace, "pi-launcher"), "launcher Job once workers are ready")
    start_launcher_pod(kube, namespace)
    wait_for(lambda: condition_is(get_job(kube, namespace), "Running"), "Running condition")


def launcher_template_spec(kube: Kube, ns: str) -> dict[str, Any]:
    return kube.get(JOB, ns, "pi-launcher")["spec"]["template"]


@pytest.mark.l1
def test_mpijob_suspend_and_resume_with_scheduling_directives(kube, namespace, start_operator):
    start_operator()
    create_mpijob(kube, namespace, pi_job(run_policy={"suspend": True}))
    wait_for(lambda: has_event(kube, namespace, "Normal", "MPIJobSuspended"), "event MPIJobSuspended")
    assert has_event(kube, namespace, "Normal", "MPIJobCreated")
    launcher = wait_for(lambda: kube.get(JOB, namespace, "pi-launcher"), "suspended launcher Job")
    assert launcher["spec"]["suspend"] is True
    job = wait_for(lambda: condition_is(s := get_job(kube, namespace), "Suspended") and s, "Suspended")
    assert not job["status"].get("startTime")
    assert workers(kube, namespace) == []
    # What the Job controller does for a suspended Job, so the #772 path is exercised.
    set_job_status(kube, namespace, "pi-launcher", {"startTime": now_str()})

    # Kueue-style admission: scheduling directives injected into the launcher template, then resume.
    job = get_job(kube, namespace)
    tmpl = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    tmpl.setdefault("metadata", {})["labels"] = {"kueue": "admitted"}
    tmpl["metadata"]["annotations"] = {"kueue/flavor": "a"}
    tmpl["spec"]["nodeSelector"] = {"pool": "a"}
    tmpl["spec"]["tolerations"] = [{"key": "pool", "operator": "Equal", "value": "a", "effect": "NoSchedule"}]
    tmpl["spec"]["schedulingGates"] = [{"name": "kueue/gate"}]
    job["spec"]["runPolicy"]["suspend"] = False
    kube.replace(MPIJOB, job)

    wait_for(lambda: has_event(kube, namespace, "Normal", "MPIJobResumed"), "event MPIJobResumed")
    wait_for(lambda: len(workers(kube, namespace)) == 2, "2 workers after resume")
    launcher = wait_for(
        lambda: (j := kube.get(JOB, namespace, "pi-launcher"))["spec"].get("suspend") is False and j,
        "unsuspended",
    )
    t = launcher["spec"]["template"]
    assert t["metadata"]["labels"]["kueue"] == "admitted"
    assert t["metadata"]["annotations"]["kueue/flavor"] == "a"
    assert t["spec"]["nodeSelector"] == {"pool": "a"}
    assert t["spec"]["tolerations"][0]["key"] == "pool"
    assert t["spec"]["schedulingGates"] == [{"name": "kueue/gate"}]
    job = wait_for(
        lambda: (s := get_job(kube, namespace))["status"].get("startTime") and s, "startTime after resume"
    )
    assert condition_is(job, "Suspended", "False")

    # suspend again: launcher suspended, workers deleted, Running False
    job = get_job(kube, namespace)
    job["spec"]["runPolicy"]["suspend"] = True
    kube.replace(MPIJOB, job)
    wait_for(
        lambda: kube.get(JOB, namespace, "pi-launcher")["spec"].get("suspend") is True,
        "launcher suspended again",
    )
    wait_for(lambda: live_workers(kube, namespace) == [], "workers deleted on suspend")
    wait_for(lambda: condition_is(get_job(kube, namespace), "Running", "False"), "Running=False")

    # change the template while suspended and resume: the new directives propagate
    set_job_status(kube, namespace, "pi-launcher", {"startTime": now_str()})
    kube.patch(  # a merge patch: the status our operator writes meanwhile cannot conflict with it
        MPIJOB,
        namespace,
        "pi",
        {
            "spec": {
                "runPolicy": {"suspend": False},
                "mpiReplicaSpecs": {
                    "Launcher": {
                        "template": {
                            "metadata": {"labels": {"kueue": "readmitted"}},
                            "spec": {"nodeSelector": {"pool": "b"}},
                        }
                    }
                },
            }
        },
    )
    t = wait_for(
        lambda: (
            (j := kube.get(JOB, namespace, "pi-launcher"))["spec"].get("suspend") is False
            and j["spec"]["template"]
        ),
        "unsuspended again",
    )
    assert t["metadata"]["labels"]["kueue"] == "readmitted"
    assert t["spec"]["nodeSelector"] == {"pool": "b"}


@pytest.mark.l1
def test_mpijob_failure(kube, namespace, start_operator):
    op = start_operator()
    create_mpijob(kube, namespace, pi_job())
    pods = wait_workers(kube, namespace, 2)
    run_pods(kube, pods)
    wait_for(lambda: exists(kube, JOB, namespace, "pi-launcher"), "launcher Job")
    # one failed launcher pod does not fail the job
    lpod = create_launcher_pod(kube, namespace, suffix="aaaaa")
    set_pod_status(kube, lpod, "Failed")
    set_job_status(kube, namespace, "pi-launcher", {"startTime": now_str(), "failed": 1})
    wait_for(lambda: replica_status(kube, namespace, "Launcher", "failed") == 1, "Launcher.failed=1")
    assert not condition_is(get_job(kube, namespace), "Failed")

    fail_launcher(kube, namespace, failed=2)
    job = wait_for(lambda: condition_is(s := get_job(kube, namespace), "Failed") and s, "Failed condition")
    assert job["status"]["replicaStatuses"]["Launcher"]["failed"] == 2
    assert job["status"].get("completionTime")
    wait_for(lambda: live_workers(kube, namespace) == [], "workers deleted")
    wait_for(
        lambda: any(
            t == "Warning" and (r.startswith("BackoffLimitExceeded") or r == "MPIJobFailed")
            for t, r in events_of(kube, namespace)
        ),
        "Warning failure event",
    )
    assert wait_for(lambda: op.metric("mpi_operator_jobs_failed_total") == 1, "failed metric")


@pytest.mark.l1
def test_mpijob_with_scheduler_plugins(kube, namespace, start_operator, podgroup_crds):
    start_operator("--gang-scheduling", "scheduler-plugins-scheduler")
    create_mpijob(kube, namespace, pi_job(run_policy={"schedulingPolicy": {"scheduleTimeoutSeconds": 900}}))
    pg = wait_for(lambda: kube.get(SCHED_PLUGINS_PODGROUP, namespace, "pi"), "scheduler-plugins PodGroup")
    assert pg["spec"]["minMember"] == 3
    assert pg["spec"]["scheduleTimeoutSeconds"] == 900
    pods = wait_workers(kube, namespace, 2)
    assert pods[0]["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
    assert pods[0]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "pi"
    job = get_job(kube, namespace)
    job["spec"]["runPolicy"]["schedulingPolicy"]["scheduleTimeoutSeconds"] = 10
    kube.replace(MPIJOB, job)
    wait_for(
        lambda: kube.get(SCHED_PLUGINS_PODGROUP, namespace, "pi")["spec"]["scheduleTimeoutSeconds"] == 10,
        "PodGroup updated",
    )


@pytest.mark.l1
def test_mpijob_with_volcano(kube, namespace, start_operator, podgroup_crds):
    start_operator("--gang-scheduling", "volcano")
    create_mpijob(
        kube, namespace, pi_job(run_policy={"schedulingPolicy": {"minAvailable": 3, "queue": "q1"}})
    )
    pg = wait_for(lambda: kube.get(VOLCANO_PODGROUP, namespace, "pi"), "volcano PodGroup")
    assert pg["spec"]["minMember"] == 3
    assert pg["spec"]["queue"] == "q1"
    pods = wait_workers(kube, namespace, 2)
    assert pods[0]["spec"]["schedulerName"] == "volcano"
    assert pods[0]["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "pi"
    job = get_job(kube, namespace)
    job["spec"]["runPolicy"]["schedulingPolicy"].update({"minAvailable": 2, "queue": "q2"})
    kube.replace(MPIJOB, job)
    wait_for(
        lambda: (
            (s := kube.get(VOLCANO_PODGROUP, namespace, "pi")["spec"])["minMember"] == 2
            and s["queue"] == "q2"
        ),
        "PodGroup updated",
    )


@pytest.mark.l1
def test_mpijob_managed_externally(kube, namespace, start_operator):
    op = start_operator()
    create_mpijob(kube, namespace, pi_job(run_policy={"managedBy": "kueue.x-k8s.io/multikueue"}))
    # a job we do manage, as a witness that the operator is working in this namespace
    create_mpijob(kube, namespace, pi_job("witness"))
    wait_for(lambda: exists(kube, SERVICE, namespace, "witness"), "the witness job's Service")
    processed_after_nudge(kube, op, namespace, "pi")
    job = get_job(kube, namespace)
    assert not job.get("status"), job.get("status")
    assert not exists(kube, JOB, namespace, "pi-launcher")
    assert not exists(kube, SERVICE, namespace, "pi")
    assert not exists(kube, SECRET, namespace, "pi-ssh")
    assert workers(kube, namespace) == []
    assert op.alive(), op.log_tail()


# -- beyond upstream ----------------------------------------------------------------------------------
@pytest.mark.l1
def test_foreign_configmap_is_left_alone_and_reported(kube, namespace, start_operator):
    foreign = kube.create(
        CONFIGMAP,
        namespace,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pi-config"}, "data": {"mine": "yes"}},
    )
    op = start_operator()
    create_mpijob(kube, namespace, pi_job())
    wait_for(lambda: has_event(kube, namespace, "Warning", "ErrResourceExists"), "event ErrResourceExists")
    wait_for(lambda: exists(kube, SERVICE, namespace, "pi"), "the other children still appear")
    processed_after_nudge(kube, op, namespace, "pi")
    cm = kube.get(CONFIGMAP, namespace, "pi-config")
    assert cm["data"] == {"mine": "yes"}
    assert cm["metadata"]["resourceVersion"] == foreign["metadata"]["resourceVersion"]
    assert not cm["metadata"].get("ownerReferences")
    # the job says why, in its status
    status = get_job(kube, namespace).get("status") or {}
    text = json.dumps(status.get("conditions") or [])
    assert "pi-config" in text, text


@pytest.mark.l1
def test_no_writes_once_converged(kube, namespace, start_operator):
    op = start_operator()
    create_mpijob(kube, namespace, pi_job(workers=3))
    pods = wait_workers(kube, namespace, 3)
    run_pods(kube, pods)
    wait_for(lambda: exists(kube, JOB, namespace, "pi-launcher"), "launcher Job")
    start_launcher_pod(kube, namespace)
    wait_for(lambda: condition_is(get_job(kube, namespace), "Running"), "Running")
    processed_after_nudge(kube, op, namespace, "pi")  # every write the Running state causes is done
    before = api_writes(op)
    rv_before = {
        (o["kind"], o["metadata"]["name"]): o["metadata"]["resourceVersion"]
        for o in all_children(kube, namespace)
    }
    # Changes that are not ours to act on still make the operator sync: each sync must plan nothing.
    # (A Service field the server defaults, "removed" on every sync, was caught this way.)
    for i in range(3):
        kube.patch(MPIJOB, namespace, "pi", {"metadata": {"annotations": {"example.com/touch": str(i)}}})
        kube.patch(POD, namespace, pods[0]["metadata"]["name"], {"metadata": {"labels": {"x": str(i)}}})
        processed_after_nudge(kube, op, namespace, "pi")
    rv_before = {  # our own objects only; the patches above moved the MPIJob and one pod
        key: rv
        for key, rv in rv_before.items()
        if key not in (("MPIJob", "pi"), ("Pod", pods[0]["metadata"]["name"]))
    }
    assert api_writes(op) == before, "the operator wrote for changes that are not its to act on"
    rv_after = {
        (o["kind"], o["metadata"]["name"]): o["metadata"]["resourceVersion"]
        for o in all_children(kube, namespace)
    }
    assert {k: v for k, v in rv_after.items() if k in rv_before} == rv_before


def all_children(kube: Kube, ns: str) -> list[dict[str, Any]]:
    out = [get_job(kube, ns)]
    for res in (POD, SERVICE, CONFIGMAP, SECRET, JOB):
        out += [{**o, "kind": res.kind} for o in kube.list(res, ns)["items"]]  # list items carry no kind
    return out
