"""The MPIJob model (`kubeflow.org/v2beta1`) as attrs classes; pod templates stay plain Kubernetes dicts."""

from __future__ import annotations

from typing import Any

import attrs

from render import names


@attrs.frozen
class Config:
    """Operator configuration that changes what render produces."""

    cluster_domain: str = ""  # --cluster-domain; "" keeps upstream's short `.svc` FQDNs in the hostfile
    gang_scheduling: str = ""  # "" | "volcano" | "kubernetes" | a scheduler-plugins scheduler name
    # With "kubernetes": the Workload API version the API server serves (names.WORKLOAD_API_VERSIONS),
    # "" when it serves none (the job then says it is not gang scheduled).
    workload_api: str = ""
    # --force-delete-lost-workers-after: seconds a node holding workers is not Ready before they are
    # force-deleted (render/nodes.py); 0: never
    force_delete_lost_workers_after: int = 0


@attrs.frozen
class SSHKey:
    """SSH key material: ECDSA P-521, private key as PEM `EC PRIVATE KEY`, public key in OpenSSH form."""

    private_pem: str
    public_openssh: str


@attrs.frozen
class SchedulingPolicy:
    min_available: int | None = None
    queue: str = ""
    min_resources: dict[str, Any] | None = None
    priority_class: str = ""
    schedule_timeout_seconds: int | None = None


@attrs.frozen
class RunPolicy:
    clean_pod_policy: str | None = None
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None
    backoff_limit: int | None = None
    scheduling_policy: SchedulingPolicy | None = None
    suspend: bool | None = None
    managed_by: str | None = None


@attrs.frozen
class ReplicaSpec:
    replicas: int | None = None
    restart_policy: str = ""
    template: dict[str, Any] = attrs.field(factory=dict)  # corev1.PodTemplateSpec in wire form


@attrs.frozen
class MPIJobSpec:
    slots_per_worker: int | None = None
    run_launcher_as_worker: bool | None = None
    run_policy: RunPolicy = attrs.field(factory=RunPolicy)
    mpi_replica_specs: dict[str, ReplicaSpec] | None = None
    ssh_auth_mount_path: str = ""
    launcher_creation_policy: str = ""
    mpi_implementation: str = ""


@attrs.frozen
class MPIJob:
    name: str
    namespace: str
    uid: str
    spec: MPIJobSpec
    labels: dict[str, str] = attrs.field(factory=dict)
    annotations: dict[str, str] = attrs.field(factory=dict)
    status: dict[str, Any] = attrs.field(factory=dict)
    raw: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)  # the dict it was parsed from

    @property
    def launcher(self) -> ReplicaSpec:
        specs = self.spec.mpi_replica_specs or {}
        return specs[names.LAUNCHER]

    @property
    def worker(self) -> ReplicaSpec | None:
        return (self.spec.mpi_replica_specs or {}).get(names.WORKER)

    @property
    def worker_replicas(self) -> int:
        worker = self.worker
        return worker.replicas or 0 if worker is not None else 0

    @property
    def run_launcher_as_worker(self) -> bool:
        return bool(self.spec.run_launcher_as_worker)

    @property
    def suspended(self) -> bool:
        return bool(self.spec.run_policy.suspend)

    @property
    def managed_externally(self) -> bool:
        return managed_externally(self.spec.run_policy.managed_by)

    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": names.API_VERSION,
            "kind": names.KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def managed_externally(managed_by: object) -> bool:
    """True when another controller (e.g. MultiKueue) owns the job: we render and write nothing."""
    return managed_by not in (None, "", names.MANAGED_BY_SELF)
