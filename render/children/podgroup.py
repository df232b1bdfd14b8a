"""The gang-scheduling PodGroup `<job>` for Volcano or scheduler-plugins (coscheduling)."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

from render import names, quantity
from render.api import Config, MPIJob, ReplicaSpec
from render.jsonutil import clone


def min_member(job: MPIJob) -> int:
    """schedulingPolicy.minAvailable, else every pod that must be up together.

    With WaitForWorkersReady the launcher only appears once the workers run, so counting it would
    deadlock the gang (upstream #608): the default is then the workers alone.
    """
    sp = job.spec.run_policy.scheduling_policy
    if sp is not None and sp.min_available is not None:
        return sp.min_available
    if job.spec.launcher_creation_policy == "WaitForWorkersReady":
        return job.worker_replicas
    return job.worker_replicas + 1


def _pod_resources(template: dict[str, Any]) -> dict[str, tuple[Fraction, bool]]:
    """Requests of every container; a resource with only a limit counts its limit."""
    total: dict[str, tuple[Fraction, bool]] = {}
    for c in (template.get("spec") or {}).get("containers") or ():
        res = c.get("resources") or {}
        requests = res.get("requests") or {}
        limits = res.get("limits") or {}
        merged = dict(limits)
        merged.update(requests)
        for name, q in merged.items():
            value, binary = quantity.parse(q)
            old = total.get(name)
            total[name] = (value + old[0], old[1] or binary) if old else (value, binary)
    return total


def min_resources(job: MPIJob, members: int, priority_of: Callable[[str], int]) -> dict[str, str] | None:
    """Resources of the first `members` pods, higher PriorityClass first (workers last on a tie)."""
    if members <= 0:
        return None
    order: list[tuple[int, int, ReplicaSpec]] = []
    for tie, rtype in ((1, names.LAUNCHER), (0, names.WORKER)):
        spec = (job.spec.mpi_replica_specs or {}).get(rtype)
        if spec is None:
            continue
        pc = (spec.template.get("spec") or {}).get("priorityClassName") or ""
        order.append((priority_of(pc) if pc else 0, tie, spec))
    order.sort(key=lambda t: (t[0], t[1]), reverse=True)
    remaining = members
    total: dict[str, tuple[Fraction, bool]] = {}
    for _, _, spec in order:
        count = min(spec.replicas or 0, remaining)
        remaining -= count
        for name, (value, binary) in _pod_resources(spec.template).items():
            old = total.get(name)
            total[name] = (value * count + (old[0] if old else 0), binary or bool(old and old[1]))
    return {name: quantity.format_quantity(v, b) for name, (v, b) in sorted(total.items())}


def podgroup(job: MPIJob, config: Config, priority_of: Callable[[str], int]) -> dict[str, Any]:
    sp = job.spec.run_policy.scheduling_policy
    members = min_member(job)
    if sp is not None and sp.min_resources is not None:
        resources: dict[str, Any] | None = clone(sp.min_resources)
    else:
        resources = min_resources(job, members, priority_of)
    spec: dict[str, Any] = {"minMember": members}
    if config.gang_scheduling == names.VOLCANO:
        api_version = names.VOLCANO_API_VERSION
        queue = (sp.queue if sp else "") or job.annotations.get(names.VOLCANO_QUEUE_ANNOTATION, "")
        if queue:
            spec["queue"] = queue
        pc = (sp.priority_class if sp else "") or _template_priority_class(job)
        if pc:
            spec["priorityClassName"] = pc
    else:
        api_version = names.SCHED_PLUGINS_API_VERSION
        timeout = sp.schedule_timeout_seconds if sp else None
        spec["scheduleTimeoutSeconds"] = timeout or 0
    if resources:
        spec["minResources"] = resources
    meta: dict[str, Any] = {
        "name": job.name,
        "namespace": job.namespace,
        "labels": names.object_labels(job.name),
        "ownerReferences": [job.owner_reference()],
    }
    return {"apiVersion": api_version, "kind": "PodGroup", "metadata": meta, "spec": spec}


def _template_priority_class(job: MPIJob) -> str:
    for rtype in (names.LAUNCHER, names.WORKER):
        spec = (job.spec.mpi_replica_specs or {}).get(rtype)
        if spec is not None:
            pc = (spec.template.get("spec") or {}).get("priorityClassName")
            if pc:
                return str(pc)
    return ""
