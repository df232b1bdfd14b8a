"""Upstream's e2e scenarios (test/e2e, reference §4.3) on the local L2 cluster: the operator as its own
process with the ServiceAccount's RBAC, kwok nodes that run pods and finish launcher pods on request."""

from __future__ import annotations

import pytest

from localcluster.e2e import E2E, KNOB, condition_is, conditions, phase
from localcluster.jobs import pi_job
from reconcile.runtime.kube import CONFIGMAP, JOB, SECRET
from tests.utils import processed_after_nudge

pytestmark = pytest.mark.l2


def assert_succeeded(e2e: E2E, name: str) -> dict:
    job = e2e.wait_finished(name)
    assert condition_is(job, "Succeeded"), e2e.describe(name)
    assert not condition_is(job, "Failed"), e2e.describe(name)
    st = job["status"]
    assert st["startTime"] <= st["completionTime"]
    assert st["replicaStatuses"]["Launcher"].get("succeeded") == 1, st["replicaStatuses"]
    return job


def test_openmpi_succeeds(e2e: E2E) -> None:
    # The launcher runs 3 s, long enough for Running to be observed before success.
    e2e.submit(pi_job(root=True, launcher_annotations={f"{KNOB}delay": "3s"}))
    running = e2e.wait_condition("pi", "Running")
    assert conditions(running)["Running"]["reason"] == "MPIJobRunning"
    assert conditions(running)["Created"]["status"] == "True"
    job = assert_succeeded(e2e, "pi")
    conds = conditions(job)
    assert conds["Running"]["status"] == "False"
    assert "never set" not in conds["Running"]["message"]
    assert conds["Succeeded"]["reason"] == "MPIJobSucceeded"
    # cleanPodPolicy Running: the sshd workers do not outlive the job.
    e2e.wait_for(lambda: not e2e.workers("pi"), "worker pods deleted after success", job="pi")


def test_openmpi_launcher_failure_ends_failed_with_exit_code(e2e: E2E) -> None:
    e2e.submit(
        pi_job(
            root=True,
            launcher_annotations={f"{KNOB}exit-code": "3", f"{KNOB}delay": "500ms"},
            run_policy={"backoffLimit": 1},
        )
    )
    job = e2e.wait_finished("pi")
    conds = conditions(job)
    assert conds["Failed"]["status"] == "True", e2e.describe("pi")
    assert not condition_is(job, "Succeeded")
    reason, message = conds["Failed"]["reason"], conds["Failed"]["message"]
    assert reason.startswith("BackoffLimitExceeded"), (reason, message)
    assert "code 3" in f"{reason} {message}", (reason, message)
    assert "pi-launcher" in message, message
    assert job["status"]["replicaStatuses"]["Launcher"].get("failed", 0) >= 2
    e2e.wait_for(
        lambda: not [p for p in e2e.workers("pi") if phase(p) in ("Running", "Pending")],
        "no running workers after failure",
        job="pi",
    )


def test_suspended_at_creation_then_resumed(e2e: E2E) -> None:
    e2e.submit(pi_job(root=True, run_policy={"suspend": True}))
    job = e2e.wait_condition("pi", "Suspended")
    assert conditions(job)["Suspended"]["reason"] == "MPIJobSuspended"
    assert condition_is(job, "Running", "False")
    # Once the operator has processed a later event of the job: no pods at all.
    processed_after_nudge(e2e.kube, e2e.operator, e2e.ns, "pi")
    assert e2e.list_pods() == [], e2e.describe("pi")
    job = e2e.get("pi")
    assert not (job.get("status") or {}).get("startTime")
    launcher = e2e.find("pi-launcher", JOB)
    assert launcher is None or launcher["spec"].get("suspend") is True

    e2e.patch("pi", {"spec": {"runPolicy": {"suspend": False}}})
    job = assert_succeeded(e2e, "pi")
    resumed = conditions(job)["Suspended"]
    assert (resumed["status"], resumed["reason"]) == ("False", "MPIJobResumed")


def test_host_network(e2e: E2E) -> None:
    job = pi_job(root=True, workers=1)
    for spec in job["spec"]["mpiReplicaSpecs"].values():
        spec["template"]["spec"]["hostNetwork"] = True
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["args"] = [
        "/home/mpiuser/pi"
    ]
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"] = {
        "annotations": {f"{KNOB}delay": "3s"}
    }
    e2e.submit(job)
    e2e.wait_for(lambda: len(e2e.launcher_pods("pi")) == 1, "launcher pod", job="pi")
    for pod in e2e.workers("pi") + e2e.launcher_pods("pi"):
        assert pod["spec"].get("hostNetwork") is True
        assert pod["spec"].get("dnsPolicy") == "ClusterFirstWithHostNet", pod["metadata"]["name"]
    assert_succeeded(e2e, "pi")


def test_non_root_ssh_auth_mount_path(e2e: E2E) -> None:
    e2e.submit(pi_job(root=False, launcher_annotations={f"{KNOB}delay": "2s"}))
    e2e.wait_for(lambda: len(e2e.workers("pi")) == 2, "2 worker pods", job="pi")
    for pod in e2e.workers("pi"):
        container = pod["spec"]["containers"][0]
        assert [*container.get("command", []), *container.get("args", [])][:2] == ["/usr/sbin/sshd", "-De"]
        mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts") or []}
        assert "/home/mpiuser/.ssh" in mounts.values(), mounts
        secret = next(v["secret"] for v in pod["spec"]["volumes"] if "secret" in v)
        # 0600 is for /root/.ssh only; elsewhere the API server's default 0644 applies.
        assert secret.get("defaultMode", 0o644) == 0o644, secret
    assert_succeeded(e2e, "pi")


@pytest.mark.parametrize(
    ("managed_by", "runs"),
    [("kueue.x-k8s.io/multikueue", False), ("kubeflow.org/mpi-operator", True)],
    ids=["multikueue", "mpi-operator"],
)
def test_managed_by(e2e: E2E, managed_by: str, runs: bool) -> None:
    e2e.submit(pi_job(root=False, run_policy={"managedBy": managed_by}))
    if runs:
        assert_succeeded(e2e, "pi")
        return
    # A control job in the same namespace shows the operator is working meanwhile.
    e2e.submit(pi_job("control", root=False))
    e2e.wait_finished("control")
    processed_after_nudge(e2e.kube, e2e.operator, e2e.ns, "pi")
    job = e2e.get("pi")
    assert not job.get("status"), job.get("status")
    assert e2e.pods("pi") == []
    assert e2e.find("pi-launcher", JOB) is None
    assert e2e.find("pi-ssh", SECRET) is None


@pytest.mark.parametrize("root", [True, False], ids=["root", "non-root"])
@pytest.mark.parametrize("impl", ["Intel", "MPICH"])
def test_intel_and_mpich(e2e: E2E, impl: str, root: bool) -> None:
    e2e.submit(pi_job(impl=impl, root=root, launcher_annotations={f"{KNOB}delay": "2s"}))
    e2e.wait_for(lambda: len(e2e.launcher_pods("pi")) == 1, "launcher pod", job="pi")
    ns = e2e.ns
    assert e2e.config_data("pi")["hostfile"] == "".join(f"pi-worker-{i}.pi.{ns}.svc:1\n" for i in range(2))
    env = {
        e["name"]: e.get("value")
        for e in e2e.launcher_pods("pi")[0]["spec"]["containers"][0].get("env") or []
    }
    if impl == "Intel":
        assert env["I_MPI_HYDRA_HOST_FILE"] == "/etc/mpi/hostfile"
        assert env["I_MPI_PERHOST"] == "1"
    else:
        assert env["HYDRA_HOST_FILE"] == "/etc/mpi/hostfile"
    for pod in e2e.workers("pi"):
        # Intel MPI and MPICH workers resolve the launcher's short name through this search domain.
        assert f"pi.{ns}.svc.cluster.local" in pod["spec"]["dnsConfig"]["searches"]
    assert_succeeded(e2e, "pi")


def test_custom_cluster_domain_with_launcher_as_worker(e2e: E2E) -> None:
    with e2e.operator.with_flags("--cluster-domain=cluster.local"):
        e2e.submit(pi_job(root=True, runLauncherAsWorker=True, launcher_annotations={f"{KNOB}delay": "2s"}))
        e2e.wait_for(lambda: e2e.find("pi-config", CONFIGMAP), "ConfigMap pi-config", job="pi")
        ns = e2e.ns
        # The launcher's own line is its bare hostname (docs/design-notes.md).
        assert e2e.config_data("pi")["hostfile"] == (
            "pi-launcher slots=1\n"
            f"pi-worker-0.pi.{ns}.svc.cluster.local slots=1\n"
            f"pi-worker-1.pi.{ns}.svc.cluster.local slots=1\n"
        )
        e2e.wait_for(lambda: len(e2e.workers("pi")) == 2, "2 worker pods", job="pi")
        indexes = sorted(
            p["metadata"]["labels"]["training.kubeflow.org/replica-index"] for p in e2e.workers("pi")
        )
        assert indexes == ["1", "2"]  # the launcher is rank 0
        assert_succeeded(e2e, "pi")
