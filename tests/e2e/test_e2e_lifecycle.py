"""Our behaviour beyond upstream's e2e suite, end to end: TTL after finish deletes the MPIJob, the
deadline fails a running job and cleans up, an evicted worker is replaced, scaling, WaitForWorkersReady
across suspend/resume (#615), and garbage collection of every child.

Jobs that must stay running carry the kwok knob `localcluster.mpijob.dev/hold: "true"` on the launcher
template; `E2E.release_launcher` lets the held launcher pod succeed.
"""

from __future__ import annotations

import pytest

from localcluster.e2e import E2E, HOLD, KNOB, condition_is, conditions, name_of, phase, pod_ready
from localcluster.jobs import pi_job
from reconcile.runtime.kube import JOB, POD
from tests.e2e.support import labelled_node
from tests.utils import TEST_FINALIZER, processed_after_nudge, seconds_between

pytestmark = pytest.mark.l2


def running_workers(e2e: E2E, job: str) -> list[str]:
    return [name_of(p) for p in e2e.workers(job) if phase(p) == "Running"]


def test_ttl_after_finished_deletes_the_mpijob(e2e: E2E) -> None:
    # A test finalizer keeps the deleted MPIJob readable: the TTL is read from its own timestamps.
    body = pi_job(root=True, run_policy={"ttlSecondsAfterFinished": 3})
    body["metadata"]["finalizers"] = [TEST_FINALIZER]
    created = e2e.submit(body)
    job = e2e.wait_condition("pi", "Succeeded")
    assert job["metadata"]["uid"] == created["metadata"]["uid"]
    deleted = e2e.wait_for(lambda: (j := e2e.get("pi"))["metadata"].get("deletionTimestamp") and j, "gone")
    ttl = seconds_between(job["status"]["completionTime"], deleted["metadata"]["deletionTimestamp"])
    assert ttl >= 3 - 1, ttl  # not before the TTL (whole seconds)
    e2e.patch("pi", {"metadata": {"finalizers": None}})
    e2e.wait_gone("pi", timeout=30)
    uid = created["metadata"]["uid"]
    e2e.wait_for(lambda: not e2e.children(uid), "children garbage-collected after TTL")


def test_deadline_fails_a_running_job_and_cleans_up(e2e: E2E) -> None:
    e2e.submit(pi_job(root=True, launcher_annotations=HOLD, run_policy={"activeDeadlineSeconds": 6}))
    e2e.wait_condition("pi", "Running")
    job = e2e.wait_condition("pi", "Failed", timeout=30)
    failed = conditions(job)["Failed"]
    assert failed["reason"].startswith("DeadlineExceeded"), failed
    assert job["status"].get("completionTime")
    assert not condition_is(job, "Running")
    e2e.wait_for(lambda: not running_workers(e2e, "pi"), "no running workers after the deadline")
    e2e.wait_for(lambda: not e2e.launcher_pods("pi"), "launcher pods gone after the deadline")
    assert not condition_is(e2e.get("pi"), "Succeeded")


def test_evicted_worker_is_replaced_and_the_job_succeeds(e2e: E2E) -> None:
    e2e.submit(pi_job(root=True, launcher_annotations=HOLD))
    e2e.wait_condition("pi", "Running")
    before = {name_of(p): p["metadata"]["uid"] for p in e2e.workers("pi")}
    assert set(before) == {"pi-worker-0", "pi-worker-1"}

    e2e.patch("pi-worker-1", {"metadata": {"annotations": {f"{KNOB}evict": "true"}}}, POD)

    def replaced() -> bool:
        now = {name_of(p): p for p in e2e.workers("pi")}
        new = now.get("pi-worker-1")
        return (
            new is not None
            and new["metadata"]["uid"] != before["pi-worker-1"]
            and phase(new) == "Running"
            and now["pi-worker-0"]["metadata"]["uid"] == before["pi-worker-0"]
        )

    e2e.wait_for(replaced, "pi-worker-1 replaced by a new Running pod", job="pi")
    job = e2e.wait_condition("pi", "Running")
    assert not condition_is(job, "Failed"), e2e.describe("pi")

    e2e.release_launcher("pi")
    job = e2e.wait_finished("pi")
    assert condition_is(job, "Succeeded"), e2e.describe("pi")
    assert not condition_is(job, "Failed")


def test_scaling_workers_updates_pods_hostfile_and_discover_hosts(e2e: E2E) -> None:
    job = pi_job(root=True, launcher_annotations=HOLD)
    # A launcher that discovers hosts (Horovod elastic) reads discover_hosts.sh as it runs: the list follows
    # the Running workers within a second (for any other launcher within a minute: test_sync_actions).
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher["args"] = ["--host-discovery-script", "/etc/mpi/discover_hosts.sh", *launcher["args"]]
    e2e.submit(job)
    e2e.wait_condition("pi", "Running")
    ns = e2e.ns

    def expect(n: int) -> None:
        hosts = [f"pi-worker-{i}.pi.{ns}.svc" for i in range(n)]
        want_hostfile = "".join(f"{h} slots=1\n" for h in hosts)
        want_discover = "#!/bin/sh\n" + "".join(f"echo {h}\n" for h in hosts)

        def converged() -> bool:
            live = [name_of(p) for p in e2e.workers("pi") if not p["metadata"].get("deletionTimestamp")]
            data = e2e.config_data("pi")
            return (
                sorted(live) == sorted(f"pi-worker-{i}" for i in range(n))
                and sorted(running_workers(e2e, "pi")) == sorted(live)
                and data.get("hostfile") == want_hostfile
                and data.get("discover_hosts.sh") == want_discover
            )

        e2e.wait_for(converged, f"{n} workers in pods, hostfile and discover_hosts.sh", job="pi")

    expect(2)
    e2e.patch("pi", {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 4}}}})
    expect(4)
    e2e.patch("pi", {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 1}}}})
    expect(1)
    e2e.wait_for(lambda: len(e2e.workers("pi")) == 1, "scaled-down pods gone", job="pi")
    job = e2e.wait_for(
        lambda: (j := e2e.get("pi"))["status"]["replicaStatuses"]["Worker"].get("active") == 1 and j,
        "status: 1 active worker",
        job="pi",
    )
    assert not condition_is(job, "Failed")
    e2e.release_launcher("pi")
    assert condition_is(e2e.wait_finished("pi"), "Succeeded"), e2e.describe("pi")


def test_wait_for_workers_ready_holds_across_suspend_and_resume(e2e: E2E) -> None:
    # Workers can only run on a node that does not exist yet, so they stay Pending and never Ready.
    pool = {"mpijob.dev/e2e-pool": e2e.ns}
    job = pi_job(root=True, launcher_annotations={f"{KNOB}delay": "2s"}, run_policy={"suspend": True})
    job["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = dict(pool)
    e2e.submit(job)
    e2e.wait_condition("pi", "Suspended")

    e2e.patch("pi", {"spec": {"runPolicy": {"suspend": False}}})
    e2e.wait_condition("pi", "Suspended", "False")
    e2e.wait_for(lambda: len(e2e.workers("pi")) == 2, "2 worker pods after resume", job="pi")

    def launcher_held() -> None:
        assert all(phase(p) == "Pending" for p in e2e.workers("pi")), e2e.describe("pi")
        launcher = e2e.find("pi-launcher", JOB)
        assert launcher is None or launcher["spec"].get("suspend") is True, e2e.describe("pi")
        assert e2e.launcher_pods("pi") == [], e2e.describe("pi")

    # #615: upstream unsuspends the launcher on resume, before any worker is ready. Checked once the
    # operator has processed a later event of the job (and the pods' creation), not after a sleep.
    processed_after_nudge(e2e.kube, e2e.operator, e2e.ns, "pi")
    launcher_held()

    with labelled_node(e2e.kube, f"pool-{e2e.ns}"[:63], pool):
        e2e.wait_for(
            lambda: len(e2e.workers("pi")) == 2 and all(pod_ready(p) for p in e2e.workers("pi")),
            "workers Ready on the new node",
            job="pi",
        )
        launcher_pod = e2e.wait_for(lambda: e2e.launcher_pods("pi"), "launcher pod", job="pi")[0]
        ready_at = max(
            c["lastTransitionTime"]
            for p in e2e.workers("pi")
            for c in p["status"]["conditions"]
            if c["type"] == "Ready"
        )
        assert launcher_pod["metadata"]["creationTimestamp"] >= ready_at
        assert condition_is(e2e.wait_finished("pi"), "Succeeded"), e2e.describe("pi")


def test_deleting_the_mpijob_removes_every_child(e2e: E2E) -> None:
    created = e2e.submit(pi_job(root=True, launcher_annotations=HOLD))
    uid = created["metadata"]["uid"]
    e2e.wait_condition("pi", "Running")
    kinds = {o["kind"] for o in e2e.children(uid)}
    assert {"Pod", "Service", "ConfigMap", "Secret", "Job"} <= kinds, kinds
    e2e.delete("pi")
    e2e.wait_gone("pi")
    e2e.wait_for(lambda: not e2e.children(uid), "every child garbage-collected")
    assert e2e.list_pods() == [], e2e.describe()
