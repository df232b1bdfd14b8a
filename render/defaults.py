"""Upstream's defaults (`SetDefaults_MPIJob`), except that cleanPodPolicy defaults to Running."""

from __future__ import annotations

import attrs

from render import names
from render.api import MPIJob, ReplicaSpec

DEFAULT_CLEAN_POD_POLICY = "Running"  # upstream: None, which leaves sshd workers holding nodes forever
DEFAULT_SLOTS_PER_WORKER = 1
DEFAULT_MPI_IMPLEMENTATION = "OpenMPI"
DEFAULT_LAUNCHER_CREATION_POLICY = "AtStartup"
DEFAULT_LAUNCHER_RESTART_POLICY = "OnFailure"
DEFAULT_WORKER_RESTART_POLICY = "Never"


def apply_defaults(job: MPIJob) -> MPIJob:
    spec = job.spec
    run_policy = spec.run_policy
    if run_policy.clean_pod_policy is None:
        run_policy = attrs.evolve(run_policy, clean_pod_policy=DEFAULT_CLEAN_POD_POLICY)
    specs = spec.mpi_replica_specs
    if specs is not None:
        specs = dict(specs)
        launcher = specs.get(names.LAUNCHER)
        if launcher is not None:
            specs[names.LAUNCHER] = _replica_defaults(launcher, 1, DEFAULT_LAUNCHER_RESTART_POLICY)
        worker = specs.get(names.WORKER)
        if worker is not None:
            specs[names.WORKER] = _replica_defaults(worker, 0, DEFAULT_WORKER_RESTART_POLICY)
    spec = attrs.evolve(
        spec,
        slots_per_worker=DEFAULT_SLOTS_PER_WORKER if spec.slots_per_worker is None else spec.slots_per_worker,
        run_policy=run_policy,
        mpi_replica_specs=specs,
        ssh_auth_mount_path=spec.ssh_auth_mount_path or names.ROOT_SSH_PATH,
        launcher_creation_policy=spec.launcher_creation_policy or DEFAULT_LAUNCHER_CREATION_POLICY,
        mpi_implementation=spec.mpi_implementation or DEFAULT_MPI_IMPLEMENTATION,
    )
    return attrs.evolve(job, spec=spec)


def _replica_defaults(spec: ReplicaSpec, replicas: int, restart_policy: str) -> ReplicaSpec:
    return attrs.evolve(
        spec,
        replicas=replicas if spec.replicas is None else spec.replicas,
        restart_policy=spec.restart_policy or restart_policy,
    )
