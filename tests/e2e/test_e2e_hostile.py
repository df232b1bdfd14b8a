"""Hostile MPIJobs through the API server with the operator running: every invalid job is
rejected at admission or, within 30 s, ends with a condition naming the field; no launcher starts for a
job whose workers cannot exist; a name held by a foreign object leaves no worker running; and a normal job
beside them all still succeeds."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import pytest

from localcluster.e2e import E2E, conditions, name_of, phase
from localcluster.jobs import pi_job
from reconcile.runtime.kube import JOB, POD, ApiError

pytestmark = pytest.mark.l2

TIMEOUT = 30.0


def _worker(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


def _mutate(name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    job = pi_job(name)
    change(job)
    return job


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(job: dict[str, Any]) -> None:
        target = job
        *head, last = path.split(".")
        for key in head:
            target = target.setdefault(key, {})
        target[last] = value

    return change


# Rejected by the CRD (schema and CEL): the API server says which field and why.
REJECTED = {
    "workers-30000": (_set("spec.mpiReplicaSpecs.Worker.replicas", 30000), "replicas"),
    "workers-int32": (_set("spec.mpiReplicaSpecs.Worker.replicas", 2**31 - 1), "replicas"),
    "deadline-huge": (_set("spec.runPolicy.activeDeadlineSeconds", 300000000000), "activeDeadlineSeconds"),
    "slots-negative": (_set("spec.slotsPerWorker", -1), "slotsPerWorker"),
    "ttl-int32": (_set("spec.runPolicy.ttlSecondsAfterFinished", 2**31), "ttlSecondsAfterFinished"),
}


def _no_image(job: dict[str, Any]) -> None:
    del _worker(job)["image"]


# Admitted, refused by the API server when the operator creates a worker: Failed naming the MPIJob field.
REFUSED = {
    "no-image": (_no_image, "spec.mpiReplicaSpecs[Worker].template.spec.containers[0].image"),
    "port-70000": (
        lambda j: _worker(j).update(ports=[{"containerPort": 70000}]),
        "spec.mpiReplicaSpecs[Worker].template.spec.containers[0].ports[0].containerPort",
    ),
    "uid-negative": (
        lambda j: _worker(j).update(securityContext={"runAsUser": -1}),
        "spec.mpiReplicaSpecs[Worker].template.spec.containers[0].securityContext.runAsUser",
    ),
    "env-a-eq-b": (
        lambda j: _worker(j).update(env=[{"name": "A=B", "value": "1"}]),
        "spec.mpiReplicaSpecs[Worker].template.spec.containers[0].env[0].name",
    ),
    "requests-over": (
        lambda j: _worker(j).update(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}),
        "spec.mpiReplicaSpecs[Worker].template.spec.containers[0].resources.requests",
    ),
}


def test_hostile_jobs_are_rejected_or_end_with_a_condition_naming_the_field(e2e: E2E) -> None:
    for name, (change, field) in REJECTED.items():
        with pytest.raises(ApiError) as info:
            e2e.submit(_mutate(name, change))
        assert info.value.status == 422 and field in info.value.message, (name, info.value.message)

    submitted = time.monotonic()
    for name, (change, _field) in REFUSED.items():
        e2e.submit(_mutate(name, change))
    # a foreign pod (no labels: invisible to the operator's watches) holds worker 1's name
    e2e.kube.create(
        POD,
        e2e.ns,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "held-worker-1"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    e2e.submit(pi_job("held"))
    e2e.submit(pi_job("fine"))

    for name, (_change, field) in REFUSED.items():
        job = e2e.wait_condition(name, "Failed", timeout=max(1.0, TIMEOUT - (time.monotonic() - submitted)))
        failed = conditions(job)["Failed"]
        assert failed["reason"] == "ValidationError" and field in failed["message"], (name, failed)
        assert (job.get("status") or {}).get("completionTime")
    for name in REFUSED:  # no launcher while its workers cannot exist
        assert e2e.find(f"{name}-launcher", JOB) is None, name

    held = e2e.wait_condition("held", "Created", "False", timeout=TIMEOUT)
    assert conditions(held)["Created"]["reason"] == "ErrResourceExists"
    e2e.wait_for(
        lambda: not [p for p in e2e.workers("held") if phase(p) in ("Pending", "Running")],
        "no worker of the held job left",
        timeout=TIMEOUT,
    )
    assert e2e.find("held-launcher", JOB) is None
    assert name_of(e2e.get("held-worker-1", POD)) == "held-worker-1"  # the foreign pod is untouched

    e2e.wait_condition("fine", "Succeeded", timeout=60)
    assert e2e.operator.alive()


def test_far_away_times_in_a_status_do_not_break_the_sync(e2e: E2E) -> None:
    e2e.submit(pi_job("far", run_policy={"activeDeadlineSeconds": 10, "ttlSecondsAfterFinished": 100}))
    job = e2e.wait_condition("far", "Created")
    status = copy.deepcopy(job.get("status") or {})
    status["startTime"] = "9999-12-31T23:59:59Z"
    body = {**job, "status": status}
    from reconcile.mpijob.kinds import MPIJOB

    e2e.kube.replace(MPIJOB, body, subresource="status")
    e2e.submit(pi_job("beside"))
    e2e.wait_condition("beside", "Succeeded", timeout=60)
    far = e2e.get("far")
    assert not any(c["type"] == "SyncFailed" and c["status"] == "True" for c in far["status"]["conditions"])
    assert e2e.operator.alive()


def test_a_quota_is_created_false_until_it_clears(e2e: E2E) -> None:
    from reconcile.runtime.kube import Resource

    quota = Resource("v1", "ResourceQuota", "resourcequotas")
    e2e.kube.create(
        quota,
        e2e.ns,
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "pods"},
            "spec": {"hard": {"pods": "1"}},
        },
    )
    e2e.wait_for(lambda: (e2e.get("pods", quota).get("status") or {}).get("hard"), "quota status")
    e2e.submit(pi_job("quota"))
    job = e2e.wait_condition("quota", "Created", "False", timeout=TIMEOUT)
    created = conditions(job)["Created"]
    assert created["reason"] == "FailedCreate" and "exceeded quota" in created["message"], created
    assert e2e.find("quota-launcher", JOB) is None  # no launcher while a worker cannot be created
    e2e.delete("pods", quota)
    e2e.wait_condition("quota", "Succeeded", timeout=90)
    assert conditions(e2e.get("quota"))["Created"]["status"] == "True"


def test_a_missing_priority_class_is_created_false_naming_it(e2e: E2E) -> None:
    job = pi_job("prio")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["priorityClassName"] = "no-such-class"
    e2e.submit(job)
    mj = e2e.wait_condition("prio", "Created", "False", timeout=TIMEOUT)
    created = conditions(mj)["Created"]
    assert created["reason"] == "FailedCreate" and "no-such-class" in created["message"], created
    assert e2e.find("prio-launcher", JOB) is None
