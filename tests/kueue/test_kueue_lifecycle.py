"""Changes while admitted and jobs Kueue hands elsewhere: workers scaled while the job runs (Kueue stops
it, replaces the Workload with the new count and admits that one; the job runs again with all workers),
and `managedBy: kueue.x-k8s.io/multikueue`, which our operator leaves alone: no children, no status."""

from __future__ import annotations

import pytest

from localcluster.e2e import condition_is
from reconcile.runtime.kube import CONFIGMAP, JOB, SECRET, SERVICE
from tests.kueue.support import KueueE2E, Timeline, active_replicas, queued_job

pytestmark = [pytest.mark.l2, pytest.mark.kueue]


def test_workers_scaled_while_admitted_run_under_a_new_workload(kq: KueueE2E) -> None:
    kq.queue([("plain", "10")])
    kq.submit(queued_job("pi"))
    old = kq.wait_admitted("pi", "plain")
    kq.wait_running("pi")
    kq.wait_quota(3)

    tl = Timeline()
    kq.patch("pi", {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 3}}}})
    tl.mark("Worker.replicas 2 -> 3")

    def new_workload() -> dict | None:
        wl = kq.workload("pi")
        ok = (
            wl is not None
            and wl["metadata"]["uid"] != old["metadata"]["uid"]
            and condition_is(wl, "Admitted")
        )
        return wl if ok else None

    wl = kq.wait_for(new_workload, "a new Workload for 3 workers admitted", timeout=60, job="pi")
    tl.mark("new Workload admitted")
    assert [ps["count"] for ps in wl["spec"]["podSets"]] == [1, 3]
    job = kq.wait_running("pi")
    tl.mark("3 workers Running")
    assert active_replicas(job) == {"Launcher": 1, "Worker": 3}
    kq.wait_quota(4)
    # Kueue stopped the job to replace its Workload, then admitted it again: our Suspended, then resumed.
    suspended = next(c for c in job["status"]["conditions"] if c["type"] == "Suspended")
    assert (suspended["status"], suspended["reason"]) == ("False", "MPIJobResumed"), suspended
    print(f"\nscale timeline:\n{tl}")

    kq.release_launcher("pi")
    kq.wait_condition("pi", "Succeeded")
    kq.wait_workload("pi", "Finished")


def test_managed_by_multikueue_is_left_alone(kq: KueueE2E) -> None:
    kq.queue([("plain", "10")])
    remote = queued_job("remote")
    remote["spec"]["runPolicy"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    created = kq.submit(remote)
    uid = created["metadata"]["uid"]
    # Kueue admits and unsuspends it here (no MultiKueue admission check): still not ours to run.
    kq.wait_admitted("remote", "plain")
    kq.wait_for(
        lambda: not kq.get("remote")["spec"]["runPolicy"].get("suspend"), "remote unsuspended by Kueue"
    )
    # A later job running proves the operator has processed the first one's events by now.
    kq.submit(queued_job("local"))
    kq.wait_running("local")

    job = kq.get("remote")
    assert not job.get("status"), job.get("status")
    assert kq.children(uid) == []
    for res, name in (
        (JOB, "remote-launcher"),
        (SERVICE, "remote"),
        (CONFIGMAP, "remote-config"),
        (SECRET, "remote-ssh"),
    ):
        assert kq.find(name, res) is None, name
    assert kq.pods("remote") == []
    kq.release_launcher("local")
    kq.wait_condition("local", "Succeeded")
