"""The gang-scheduling Workload `<job>` for Kubernetes' own scheduler (`--gang-scheduling=kubernetes`).

One pod group, the workers, with a gang policy; each worker pod points at it. The launcher is not a
member: under WaitForWorkersReady it only exists once the workers run, so counting it would deadlock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from render import names
from render.api import Config, MPIJob


def enabled(config: Config) -> bool:
    """Gang scheduling through a Workload API version render knows and the API server serves."""
    return (
        config.gang_scheduling == names.KUBERNETES_GANG and config.workload_api in names.WORKLOAD_API_VERSIONS
    )


def wanted(job: MPIJob, config: Config) -> bool:
    """The job has a Workload: gang scheduling through it, and workers to schedule."""
    return enabled(config) and job.worker_replicas > 0


def min_count(job: MPIJob) -> int:
    """schedulingPolicy.minAvailable, at most every worker (the launcher is not in the gang); else every
    worker."""
    sp = job.spec.run_policy.scheduling_policy
    workers = job.worker_replicas
    if sp is not None and sp.min_available is not None:
        return max(1, min(sp.min_available, workers))
    return workers


def workload(job: MPIJob, config: Config) -> dict[str, Any]:
    group = {"name": names.WORKLOAD_POD_GROUP, "policy": {"gang": {"minCount": min_count(job)}}}
    return {
        "apiVersion": config.workload_api,
        "kind": "Workload",
        "metadata": {
            "name": job.name,
            "namespace": job.namespace,
            "labels": names.object_labels(job.name),
            "ownerReferences": [job.owner_reference()],
        },
        "spec": {
            "controllerRef": {
                "apiGroup": names.API_VERSION.split("/")[0],
                "kind": names.KIND,
                "name": job.name,
            },
            "podGroups": [group],
        },
    }


def pod_reference(job: MPIJob) -> dict[str, Any]:
    """A worker's ``spec.workloadRef``."""
    return {"name": job.name, "podGroup": names.WORKLOAD_POD_GROUP}


def gang_policies(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Each pod group's gang policy by name: the part of a Workload that cannot change once created."""
    groups = (obj.get("spec") or {}).get("podGroups")
    out: dict[str, Any] = {}
    for g in groups if isinstance(groups, list) else ():
        if isinstance(g, Mapping):
            out[str(g.get("name"))] = ((g.get("policy") or {}).get("gang") or {}).get("minCount")
    return out


def outdated(live: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """The live Workload's pod groups differ from the desired ones. They are immutable, so it is left out
    of the children (deleted) and comes back as desired in the next sync; the workers keep their
    reference, which names the Workload and its group, not one object."""
    return live is not None and gang_policies(live) != gang_policies(desired)
