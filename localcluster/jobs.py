"""MPIJob manifests for the tests and the benchmarks, all from one builder.

* ``minimal_job``: the one function that builds an MPIJob dict: the smallest valid MPIJob, one container
  per role with only a name and an image; every other builder calls it and changes its result;
* ``pi_job``: the pi MPIJob as users run it (``examples/pi.yaml``), changed as asked;
* ``example``: the objects of an ``examples/`` file.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
IMAGES = {
    "OpenMPI": "mpioperator/mpi-pi:openmpi",
    "Intel": "mpioperator/mpi-pi:intel",
    "MPICH": "mpioperator/mpi-pi:mpich",
}


def minimal_job(
    name: str = "pi",
    workers: int | None = 2,
    *,
    image: str = "mpi:latest",
    containers: tuple[str, str] = ("launcher", "worker"),
    launcher_replicas: int | None = None,
    namespace: str | None = None,
    uid: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """The smallest valid MPIJob: one container per role with only a name and an image (no Worker spec
    when `workers` is None); `spec` keys set as given."""

    def replica(container: str) -> dict[str, Any]:
        return {"template": {"spec": {"containers": [{"name": container, "image": image}]}}}

    launcher = replica(containers[0])
    if launcher_replicas is not None:
        launcher = {"replicas": launcher_replicas, **launcher}
    specs: dict[str, Any] = {"Launcher": launcher}
    if workers is not None:
        specs["Worker"] = {"replicas": workers, **replica(containers[1])}
    meta: dict[str, Any] = {"name": name}
    meta |= {"namespace": namespace} if namespace is not None else {}
    meta |= {"uid": uid} if uid is not None else {}
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": meta,
        "spec": {**spec, "mpiReplicaSpecs": specs},
    }


def containers_of(job: dict[str, Any]) -> list[dict[str, Any]]:
    """Every container of every role's pod template, for changing them all alike."""
    return [c for r in job["spec"]["mpiReplicaSpecs"].values() for c in r["template"]["spec"]["containers"]]


def example(name: str) -> list[dict[str, Any]]:
    """The objects of examples/<name>.yaml, in their order."""
    return [d for d in yaml.safe_load_all((EXAMPLES / f"{name}.yaml").read_text()) if d]


def example_pi() -> dict[str, Any]:
    (job,) = example("pi")
    return job


def pi_job(
    name: str = "pi",
    *,
    impl: str = "OpenMPI",
    root: bool = False,
    workers: int | None = 2,
    resources: bool = True,
    launcher_annotations: dict[str, str] | None = None,
    worker_annotations: dict[str, str] | None = None,
    run_policy: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """``examples/pi.yaml`` (Open MPI, non-root: uid 1000, the SSH key at /home/mpiuser/.ssh, 2 workers,
    limits of 1 CPU and 1Gi), changed as asked:

    * ``root``: upstream's e2e base job: no securityContext or sshAuthMountPath, ``--allow-run-as-root``,
      Open MPI workers without a command (the operator defaults it to ``sshd -De``);
    * ``impl`` Intel or MPICH: their image, the image entrypoint for the launcher (``args``) and the
      workers (sshd as ``args``), and a TCP readiness probe on :2222, as upstream's examples do;
    * ``workers`` (None: no Worker spec), ``resources=False`` (no limits), pod-template annotations,
      ``run_policy`` merged into the example's, other ``spec`` keys set.
    """
    pi = copy.deepcopy(example_pi())
    example_specs = pi["spec"].pop("mpiReplicaSpecs")
    job = minimal_job(name, example_specs["Worker"]["replicas"], launcher_replicas=1, **pi["spec"])
    body = job["spec"]
    specs = body["mpiReplicaSpecs"]
    for role, replica in specs.items():
        replica["template"] = example_specs[role]["template"]
    launcher = specs["Launcher"]["template"]["spec"]["containers"][0]
    worker = specs["Worker"]["template"]["spec"]["containers"][0]
    sshd_args = worker["args"]  # -De -f /home/mpiuser/.sshd_config
    for container in (launcher, worker):
        container["image"] = IMAGES[impl]
        if root:
            container.pop("securityContext", None)
        if not resources:
            container.pop("resources", None)
    if root:
        body.pop("sshAuthMountPath", None)
        sshd_args = ["-De"]
    if impl == "OpenMPI":
        if root:
            launcher["args"] = ["--allow-run-as-root", *launcher["args"]]
            del worker["command"], worker["args"]
    else:
        body["mpiImplementation"] = impl
        launcher["args"] = [*launcher.pop("command"), *launcher["args"]]
        worker["args"] = [*worker.pop("command"), *sshd_args]
        worker["readinessProbe"] = {"tcpSocket": {"port": 2222}, "initialDelaySeconds": 2}
    for role, notes in (("Launcher", launcher_annotations), ("Worker", worker_annotations)):
        if notes:
            specs[role]["template"].setdefault("metadata", {})["annotations"] = dict(notes)
    if workers is None:
        del specs["Worker"]
    else:
        specs["Worker"]["replicas"] = workers
    body["runPolicy"].update(run_policy or {})
    body.update(spec)
    return job
