"""L4: upstream's e2e scenarios that need real pods, on the real node. Every scenario checks the ranks'
hosts as the MPI program itself reports them (the launcher's log), not just the MPIJob's condition."""

from __future__ import annotations

import json

import pytest

from localcluster.e2e import condition_is, conditions, name_of
from localcluster.realnode import NodeE2E, node_job, pi_value, rank_hosts, set_mpirun_args
from tests.node.support import sshd_processes

pytestmark = pytest.mark.l4


def assert_pi(log: str, expected_hosts: dict[int, str]) -> None:
    assert rank_hosts(log) == expected_hosts, log
    value = pi_value(log)
    assert value is not None and abs(value - 3.14159) < 0.01, log


@pytest.mark.parametrize("impl", ["openmpi", "openmpi-nonroot", "mpich", "intel"])
def test_pi_one_rank_per_worker(node_e2e: NodeE2E, impl: str) -> None:
    job, log = node_e2e.run(node_job(impl))
    assert condition_is(job, "Succeeded"), node_e2e.describe("pi")
    assert_pi(log, {0: "pi-worker-0", 1: "pi-worker-1"})
    # At the default policy (AtStartup) the launcher's gate held mpirun until the workers answered over
    # SSH: no launcher restart (upstream's Job retries the race with the workers' DNS and sshd).
    assert node_e2e.restarts("pi") == 0, node_e2e.describe("pi")
    assert "reachable over SSH" in node_e2e.gate_log("pi")


def test_unreachable_worker_fails_the_job_naming_it(node_e2e: NodeE2E) -> None:
    """One worker can never be scheduled: after the gate's timeout the job ends Failed/WorkersUnreachable
    with the host and why, a Warning event says the same, and nothing of the job keeps running."""
    body = node_job("openmpi-nonroot")
    body["metadata"]["annotations"] = {"mpijob.dev/ssh-wait-timeout-seconds": "20"}
    # Pinned to one node of 2 CPUs, the launcher asks 300m and each worker 1200m: one worker never fits.
    for spec in body["spec"]["mpiReplicaSpecs"].values():
        spec["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "real-node-1"}
    worker = body["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["resources"] = {"requests": {"cpu": "1200m", "memory": "256Mi"}, "limits": {"cpu": "2"}}
    name = "pi"
    node_e2e.submit(body)
    pending = node_e2e.wait_for(
        lambda: [
            name_of(p)
            for p in node_e2e.workers(name)
            if any(
                c.get("type") == "PodScheduled" and c.get("status") == "False"
                for c in p["status"].get("conditions") or []
            )
        ],
        "one worker unschedulable",
        60,
        name,
    )
    job = node_e2e.wait_finished(name, 180)
    failed = conditions(job).get("Failed")
    assert failed and failed["status"] == "True", node_e2e.describe(name)
    assert failed["reason"] == "WorkersUnreachable", failed
    (held,) = pending
    other = "pi-worker-1" if held == "pi-worker-0" else "pi-worker-0"
    assert f"workers not reachable over SSH after 20s: {held}.pi." in failed["message"], failed
    assert "(no DNS record)" in failed["message"], failed
    assert other not in failed["message"], failed  # it answered
    # Events are sent off the sync's path: wait for it rather than read a snapshot.
    warning = ("WorkersUnreachable", "Warning")
    node_e2e.wait_for(
        lambda: any((e.get("reason"), e.get("type")) == warning for e in node_e2e.events(name)),
        "a Warning event WorkersUnreachable",
        30,
        name,
    )
    # The launcher Job is suspended (its pod goes) and cleanPodPolicy Running removes the workers.
    node_e2e.wait_for(lambda: not node_e2e.launcher_pods(name), "launcher pods gone", 60, name)
    node_e2e.wait_for(lambda: not node_e2e.workers(name), "worker pods gone", 60, name)


@pytest.mark.parametrize("impl", ["openmpi-nonroot", "intel"])
def test_two_slots_per_worker(node_e2e: NodeE2E, impl: str) -> None:
    body = node_job(impl, slotsPerWorker=2)
    set_mpirun_args(body, "-n", "4", "/home/mpiuser/pi")
    job, log = node_e2e.run(body)
    assert condition_is(job, "Succeeded"), node_e2e.describe("pi")
    hosts = rank_hosts(log)
    assert sorted(hosts) == [0, 1, 2, 3], log
    # Each host's slots are filled in hostfile order.
    assert hosts == {0: "pi-worker-0", 1: "pi-worker-0", 2: "pi-worker-1", 3: "pi-worker-1"}, log


@pytest.mark.parametrize("impl", ["openmpi", "mpich", "intel"])
def test_run_launcher_as_worker(node_e2e: NodeE2E, impl: str) -> None:
    body = node_job(impl, workers=1, runLauncherAsWorker=True)
    job, log = node_e2e.run(body)
    assert condition_is(job, "Succeeded"), node_e2e.describe("pi")
    # The launcher's hostfile line comes first: rank 0 runs on the launcher itself.
    assert_pi(log, {0: "pi-launcher", 1: "pi-worker-0"})


def test_failing_program_exit_code_reaches_status(node_e2e: NodeE2E) -> None:
    # No retries, at the default policy: the gate keeps the race with the workers' DNS from failing
    # this job for the wrong reason.
    body = node_job("openmpi-nonroot", run_policy={"backoffLimit": 0})
    body["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = "Never"
    set_mpirun_args(body, "-n", "2", "/home/mpiuser/pi", "3")
    job, log = node_e2e.run(body)
    failed = conditions(job).get("Failed")
    assert failed and failed["status"] == "True", node_e2e.describe("pi")
    # The program really ran on both workers before failing, and mpirun's exit code is in the status.
    assert rank_hosts(log) == {0: "pi-worker-0", 1: "pi-worker-1"}, log
    assert "exited with code 3" in failed.get("message", ""), failed


def test_cleanup_after_success(node_e2e: NodeE2E) -> None:
    job, log = node_e2e.run(node_job("openmpi-nonroot"))
    assert condition_is(job, "Succeeded")
    assert_pi(log, {0: "pi-worker-0", 1: "pi-worker-1"})
    # cleanPodPolicy Running: no worker pod, and no sshd left on the node once the job is done.
    node_e2e.wait_for(lambda: not node_e2e.workers("pi"), "worker pods deleted", 60, "pi")
    node_e2e.wait_for(lambda: not sshd_processes(node_e2e.cluster), "no sshd in the node's pods", 60, "pi")


def test_operator_deployment_from_deploy_runs_pi(node_e2e: NodeE2E) -> None:
    """deploy/ as users apply it (restricted Pod Security, probes, RBAC as shipped), with the operator's
    image built here from the same Debian base; the process operator steps aside meanwhile."""
    from localcluster.images.build import OPERATOR_IMAGE
    from localcluster.kubectl import kubectl
    from localcluster.wait import wait_for
    from tests.utils import REPO, assert_own_token_only

    cluster, op = node_e2e.cluster, node_e2e.operator
    op.stop()
    try:
        kubectl(cluster, "apply", "--server-side", "-k", str(REPO / "deploy"))
        ns = ["-n", "mpi-operator"]
        out = kubectl(cluster, *ns, "rollout", "status", "deploy/mpi-operator", "--timeout=120s").stdout
        assert "successfully rolled out" in out
        image = kubectl(cluster, *ns, "get", "deploy/mpi-operator", "-o", "jsonpath={..image}").stdout
        assert image.replace("docker.io/library/", "") == OPERATOR_IMAGE.replace("docker.io/library/", "")
        pods = json.loads(kubectl(cluster, *ns, "get", "pods", "-l", "app=mpi-operator", "-o", "json").stdout)
        assert pods["items"], "no operator pod"
        for pod in pods["items"]:
            assert_own_token_only(pod)
        node_e2e.submit(node_job("openmpi-nonroot"))
        # the process operator is stopped: no liveness check of it here
        wait_for(
            lambda: condition_is(node_e2e.get("pi"), "Succeeded"),
            "pi Succeeded",
            180,
            0.5,
            describe=lambda: node_e2e.describe("pi"),
        )
        assert_pi(node_e2e.launcher_log("pi"), {0: "pi-worker-0", 1: "pi-worker-1"})
    finally:
        kubectl(cluster, "-n", "mpi-operator", "delete", "deployment", "mpi-operator", "--wait=true")
        op.start()
