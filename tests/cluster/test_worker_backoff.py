"""L1: a worker that keeps failing, against a real kube-apiserver (pod status moved by hand, as the kubelet
would): each failed pod stays through its back-off, then is replaced; past runPolicy.backoffLimit the job
ends Failed quoting the pod, its failed workers stay and its launcher Job is suspended."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from localcluster.e2e import condition_is, conditions
from localcluster.jobs import pi_job
from localcluster.wait import wait_for
from reconcile.runtime.kube import JOB, POD, Kube
from render import failures
from tests.cluster.support import (
    create_mpijob,
    get_job,
    has_event,
    live_workers,
    set_pod_status,
    wait_workers,
    workers,
)
from tests.utils import TEST_FINALIZER, seconds_between

MESSAGE = "sshd: no hostkeys available -- exiting."
BACKOFF = failures.BACKOFF_BASE_SECONDS  # a worker's first failure


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def crash(kube: Kube, pod: dict[str, Any]) -> str:
    """What the kubelet writes for a container that exited 1 a second after it started; returns its
    finishedAt."""
    end = datetime.now(UTC)
    term = {
        "exitCode": 1,
        "reason": "Error",
        "message": MESSAGE,
        "startedAt": stamp(end - timedelta(seconds=1)),
        "finishedAt": stamp(end),
        "containerID": "containerd://0",
    }
    set_pod_status(
        kube,
        pod,
        "Failed",
        containerStatuses=[
            {
                "name": "mpi-worker",
                "image": "x",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": term},
            }
        ],
    )
    return stamp(end)


def uid(pod: dict[str, Any]) -> str:
    return pod["metadata"]["uid"]


@pytest.mark.l1
def test_a_crashing_worker_is_replaced_after_its_backoff_and_the_bound_fails_the_job(
    kube, namespace, start_operator
):
    start_operator()
    create_mpijob(kube, namespace, pi_job(run_policy={"backoffLimit": 2}))
    first = wait_workers(kube, namespace, 2)
    created = {uid(p) for p in first}
    wait_for(lambda: kube.get(JOB, namespace, "pi-launcher"), "launcher Job")

    # failure 1 of worker 0: kept for 10 s, then replaced. A test finalizer keeps the deleted pod readable,
    # so the wait is read from the objects' timestamps, not from how busy this machine is.
    name0 = first[0]["metadata"]["name"]
    kube.patch(POD, namespace, name0, {"metadata": {"finalizers": [TEST_FINALIZER]}})
    finished = crash(kube, first[0])
    wait_for(lambda: condition_is(get_job(kube, namespace), "Restarting"), "Restarting")
    restarting = conditions(get_job(kube, namespace)).get("Restarting")
    assert MESSAGE in restarting["message"] and "pi-worker-0" in restarting["message"], restarting
    deleted = wait_for(
        lambda: (p := kube.get(POD, namespace, name0))["metadata"].get("deletionTimestamp") and p,
        "worker 0 deleted",
        timeout=30,
    )
    assert uid(deleted) == uid(first[0])
    kept = seconds_between(finished, deleted["metadata"]["deletionTimestamp"])
    assert kept >= BACKOFF - 1, kept  # timestamps have whole seconds; its logs stayed through the back-off
    kube.patch(POD, namespace, name0, {"metadata": {"finalizers": None}})
    second = wait_for(
        lambda: (
            (w := live_workers(kube, namespace))
            and len(w) == 2
            and uid(w[0]) not in created
            and w[0]["status"].get("phase") != "Failed"
            and w
        ),
        "worker 0 replaced",
        timeout=30,
    )
    assert seconds_between(finished, second[0]["metadata"]["creationTimestamp"]) >= BACKOFF - 1
    created |= {uid(p) for p in second}

    # failures 2 and 3 (worker 1, then worker 0 again): 3 > backoffLimit 2
    crash(kube, second[1])
    crash(kube, second[0])
    job = wait_for(lambda: condition_is(s := get_job(kube, namespace), "Failed") and s, "Failed", timeout=20)
    failed = conditions(job).get("Failed")
    assert failed["reason"] == "WorkerBackoffLimitExceeded", failed
    assert "more than backoffLimit 2" in failed["message"] and MESSAGE in failed["message"], failed
    assert "pod pi-worker-" in failed["message"], failed
    wait_for(lambda: has_event(kube, namespace, "Warning", "WorkerBackoffLimitExceeded"), "Warning event")
    # the launcher stops; the failed workers stay (cleanPodPolicy Running) and none is created again
    wait_for(lambda: kube.get(JOB, namespace, "pi-launcher")["spec"].get("suspend") is True, "suspended")
    time.sleep(12)  # past any back-off that was running
    left = workers(kube, namespace)
    assert {uid(p) for p in left} == {uid(p) for p in second}, left
    assert all(p["status"].get("phase") == "Failed" for p in left)
    assert len(created) == 3  # 2 first workers, 1 replacement
