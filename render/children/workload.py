"""The gang-scheduling objects `<job>` for Kubernetes' own scheduler (`--gang-scheduling=kubernetes`), in
the shape of the Workload API version the cluster serves:

* v1alpha1 (1.35): a Workload with one pod group; each worker's ``spec.workloadRef`` names it and the group.
* v1alpha2 (1.36): a Workload with one pod group template and a PodGroup made from it
  (``podGroupTemplateRef``); each worker's ``spec.schedulingGroup.podGroupName`` names the PodGroup.
* v1beta1 (1.37): the same, the PodGroup naming its template with ``workloadRef``; ``minCount`` may change.

The gang is the workers. The launcher is not a member: under WaitForWorkersReady it only exists once the
workers run, so counting it would deadlock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from render import names
from render.api import Config, MPIJob

V1ALPHA1, V1ALPHA2, V1BETA1 = (f"{names.WORKLOAD_GROUP}/{v}" for v in ("v1alpha1", "v1alpha2", "v1beta1"))
# Versions whose gang policy cannot change once created: an outdated object is replaced.
_IMMUTABLE = frozenset({V1ALPHA1, V1ALPHA2})


def enabled(config: Config) -> bool:
    """Gang scheduling through a Workload API version render knows and the API server serves."""
    return (
        config.gang_scheduling == names.KUBERNETES_GANG and config.workload_api in names.WORKLOAD_API_VERSIONS
    )


def wanted(job: MPIJob, config: Config) -> bool:
    """The job has a Workload: gang scheduling through it, and workers to schedule."""
    return enabled(config) and job.worker_replicas > 0


def kinds(config: Config) -> tuple[str, ...]:
    """The kinds of the job's gang objects in the served version."""
    if not enabled(config):
        return ()
    return ("Workload",) if config.workload_api == V1ALPHA1 else ("Workload", "PodGroup")


def min_count(job: MPIJob) -> int:
    """schedulingPolicy.minAvailable, at most every worker (the launcher is not in the gang); else every
    worker."""
    sp = job.spec.run_policy.scheduling_policy
    workers = job.worker_replicas
    if sp is not None and sp.min_available is not None:
        return max(1, min(sp.min_available, workers))
    return workers


def _meta(job: MPIJob) -> dict[str, Any]:
    return {
        "name": job.name,
        "namespace": job.namespace,
        "labels": names.object_labels(job.name),
        "ownerReferences": [job.owner_reference()],
    }


def _gang(job: MPIJob) -> dict[str, Any]:
    return {"gang": {"minCount": min_count(job)}}


def objects(job: MPIJob, config: Config) -> list[dict[str, Any]]:
    """The Workload, then (from v1alpha2 on) the PodGroup made from its template."""
    version = config.workload_api
    group = names.WORKLOAD_POD_GROUP
    controller = {"apiGroup": names.API_VERSION.split("/")[0], "kind": names.KIND, "name": job.name}
    if version == V1ALPHA1:
        spec: dict[str, Any] = {
            "controllerRef": controller,
            "podGroups": [{"name": group, "policy": _gang(job)}],
        }
        return [{"apiVersion": version, "kind": "Workload", "metadata": _meta(job), "spec": spec}]
    template = {"name": group, "schedulingPolicy": _gang(job)}
    workload = {
        "apiVersion": version,
        "kind": "Workload",
        "metadata": _meta(job),
        "spec": {"controllerRef": controller, "podGroupTemplates": [template]},
    }
    if version == V1ALPHA2:
        ref: dict[str, Any] = {
            "podGroupTemplateRef": {"workload": {"workloadName": job.name, "podGroupTemplateName": group}}
        }
    else:
        ref = {"workloadRef": {"workloadName": job.name, "templateName": group}}
    pod_group = {
        "apiVersion": version,
        "kind": "PodGroup",
        "metadata": _meta(job),
        "spec": {**ref, "schedulingPolicy": _gang(job)},
    }
    return [workload, pod_group]


def reference(job: MPIJob, config: Config) -> tuple[str, dict[str, Any]]:
    """The field of a worker's spec that puts it in the gang, and its value."""
    if config.workload_api == V1ALPHA1:
        return "workloadRef", {"name": job.name, "podGroup": names.WORKLOAD_POD_GROUP}
    return "schedulingGroup", {"podGroupName": job.name}


def gang_policies(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The gang's minCount by pod group (template) name, in any version's Workload or PodGroup."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "PodGroup":
        return {"": ((spec.get("schedulingPolicy") or {}).get("gang") or {}).get("minCount")}
    out: dict[str, Any] = {}
    for key, policy in (("podGroups", "policy"), ("podGroupTemplates", "schedulingPolicy")):
        groups = spec.get(key)
        for g in groups if isinstance(groups, list) else ():
            if isinstance(g, Mapping):
                out[str(g.get("name"))] = ((g.get(policy) or {}).get("gang") or {}).get("minCount")
    return out


def outdated(live: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """The live object's gang policy differs from the desired one in a version where it cannot change.
    It is then left out of the children (deleted) and comes back as desired in the next sync; the
    workers keep their reference, which names the object, not one incarnation of it. From v1beta1 on
    minCount is patched in place."""
    return (
        live is not None
        and desired.get("apiVersion") in _IMMUTABLE
        and gang_policies(live) != gang_policies(desired)
    )
