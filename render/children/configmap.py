"""The ConfigMap `<job>-config`: hostfile, discover_hosts.sh and the launcher's wait script, mounted by the
launcher at /etc/mpi."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from render import hostfile, names
from render.api import Config, MPIJob
from render.children.common import object_meta
from render.children.sshwait import SCRIPT


def configmap(
    job: MPIJob, running_worker_indexes: Iterable[int], config: Config, discover_hosts: str | None = None
) -> dict[str, Any]:
    """``discover_hosts``: a fixed script text (a finished job keeps its last one) instead of the running
    workers'."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(job, names.config_name(job.name), names.object_labels(job.name)),
        "data": {
            names.HOSTFILE_KEY: hostfile.hostfile(job, config.cluster_domain),
            names.DISCOVER_HOSTS_KEY: discover_hosts
            if discover_hosts is not None
            else hostfile.discover_hosts(job, running_worker_indexes, config.cluster_domain),
            names.WAIT_SCRIPT_KEY: SCRIPT,
        },
    }
