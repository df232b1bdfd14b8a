"""The hostfile and discover_hosts.sh of the ConfigMap."""

from __future__ import annotations

from collections.abc import Iterable

from render import names
from render.api import MPIJob


def hostfile(job: MPIJob, cluster_domain: str) -> str:
    """Launcher first when it runs as a worker, then every worker from spec.replicas."""
    slots = job.spec.slots_per_worker
    openmpi = job.spec.mpi_implementation == "OpenMPI"
    # Only the launcher reads the hostfile, and it must see its own line as itself: Open MPI 5 (PRRTE) and
    # Intel MPI compare the name with the local hostname instead of resolving it, so the launcher's line is
    # its bare hostname (upstream writes the FQDN and they then ssh to the launcher; docs/design-notes.md).
    hosts = []
    if job.run_launcher_as_worker:
        hosts.append(names.launcher_name(job.name))
    hosts += [
        names.host_fqdn(names.worker_name(job.name, i), job.name, job.namespace, cluster_domain)
        for i in range(job.worker_replicas)
    ]
    lines = [f"{host} slots={slots}\n" if openmpi else f"{host}:{slots}\n" for host in hosts]
    return "".join(lines)


def discover_hosts(job: MPIJob, running_worker_indexes: Iterable[int], cluster_domain: str) -> str:
    """For Elastic Horovod: the launcher (if a worker) and the Running workers, in numeric index order."""

    def fqdn(host: str) -> str:
        return names.host_fqdn(host, job.name, job.namespace, cluster_domain)

    lines = ["#!/bin/sh\n"]
    if job.run_launcher_as_worker:
        lines.append(f"echo {fqdn(names.launcher_name(job.name))}\n")
    for i in sorted(running_worker_indexes):
        lines.append(f"echo {fqdn(names.worker_name(job.name, i))}\n")
    return "".join(lines)
