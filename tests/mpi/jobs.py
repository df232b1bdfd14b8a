"""MPIJobs for the L3 scenarios, written the way a user writes them (upstream's pi examples).

`backoffLimit` defaults to 0 here so that a broken scenario fails in seconds instead of after six
launcher restarts; the scenarios about retries set it explicitly.
"""

from __future__ import annotations

from typing import Any

from localcluster.jobs import minimal_job
from tests.mpi.images import IMAGES

NS = "l3"


def mpijob(
    name: str,
    image: str,
    *,
    impl: str = "OpenMPI",
    workers: int | None = 2,
    slots: int = 2,
    ranks: int = 4,
    launcher_as_worker: bool = False,
    policy: str | None = None,
    worker_command: list[str] | None = None,
    readiness_port: int | None = None,
    backoff_limit: int | None = 0,
) -> dict[str, Any]:
    img = IMAGES[image]
    root = img.user == "root"
    sec: dict[str, Any] = {} if root else {"securityContext": {"runAsUser": img.uid}}
    mpirun = ["mpirun", "-n", str(ranks)]
    if root and impl == "OpenMPI":
        mpirun.append("--allow-run-as-root")
    launcher = {
        "name": "launcher",
        "image": image,
        **sec,
        "command": mpirun[:1],
        "args": [*mpirun[1:], img.probe],
    }
    sshd = (
        ["/usr/sbin/sshd", "-De"] if root else ["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"]
    )
    worker: dict[str, Any] = {"name": "worker", "image": image, **sec}
    if worker_command is not None:
        worker["command"] = worker_command
    elif not root:
        worker.update(command=sshd[:1], args=sshd[1:])
    # root workers: no command, so the operator defaults it to `sshd -De`
    if readiness_port is not None:
        worker["readinessProbe"] = {"tcpSocket": {"port": readiness_port}, "periodSeconds": 1}
    run_policy: dict[str, Any] = {"cleanPodPolicy": "Running"}
    if backoff_limit is not None:
        run_policy["backoffLimit"] = backoff_limit
    spec: dict[str, Any] = {"slotsPerWorker": slots, "mpiImplementation": impl, "runPolicy": run_policy}
    if not root:
        spec["sshAuthMountPath"] = "/home/mpiuser/.ssh"
    if launcher_as_worker:
        spec["runLauncherAsWorker"] = True
    if policy is not None:
        spec["launcherCreationPolicy"] = policy
    job = minimal_job(name, workers or None, image=image, launcher_replicas=1, namespace=NS, **spec)
    specs = job["spec"]["mpiReplicaSpecs"]
    specs["Launcher"]["template"]["spec"]["containers"] = [launcher]
    if "Worker" in specs:
        specs["Worker"]["template"]["spec"]["containers"] = [worker]
    return job


def sshd_argv(image: str) -> list[str]:
    root = IMAGES[image].user == "root"
    return (
        ["/usr/sbin/sshd", "-De"] if root else ["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"]
    )
