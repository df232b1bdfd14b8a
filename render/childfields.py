"""Where a field of a child object comes from in the MPIJob, to name it when the API server refuses it."""

from __future__ import annotations

from render import names
from render.observed import CreateFailure

# PodGroup fields rendered from the scheduling policy (Volcano and scheduler-plugins spell them alike).
_PODGROUP = {
    "spec.minMember": "spec.runPolicy.schedulingPolicy.minAvailable",
    "spec.queue": "spec.runPolicy.schedulingPolicy.queue",
    "spec.priorityClassName": "spec.runPolicy.schedulingPolicy.priorityClass",
    "spec.minResources": "spec.runPolicy.schedulingPolicy.minResources",
    "spec.scheduleTimeoutSeconds": "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds",
}


def mpijob_field(job_name: str, kind: str, child_name: str, field: str) -> str:
    """The MPIJob field path a child's `field` is rendered from; the child's own path if none is."""
    worker_prefix = names.worker_name(job_name, 0)[:-1]
    if kind == "Pod" and child_name.startswith(worker_prefix):
        return f"spec.mpiReplicaSpecs[{names.WORKER}].template.{field}"
    if kind == "Job" and child_name == names.launcher_name(job_name):
        if field.startswith("spec.template."):
            return f"spec.mpiReplicaSpecs[{names.LAUNCHER}].template." + field[len("spec.template.") :]
        if field == "spec.backoffLimit":
            return "spec.runPolicy.backoffLimit"
    if kind in ("Workload", "PodGroup") and field.endswith(".gang.minCount"):  # --gang-scheduling=kubernetes
        return "spec.runPolicy.schedulingPolicy.minAvailable"
    if kind == "PodGroup":
        for child, ours in _PODGROUP.items():
            if field == child or field.startswith(child + "."):
                return ours + field[len(child) :]
    if kind == "ConfigMap" and field.startswith("data"):
        return f"spec.mpiReplicaSpecs[{names.WORKER}].replicas"
    return f"{kind} {child_name}: {field}" if field else f"{kind} {child_name}"


def describe(job_name: str, namespace: str, failure: CreateFailure) -> list[str]:
    """One line per refused field, in MPIJob terms, naming the child the server refused."""
    child = f"{failure.kind} {namespace}/{failure.name}"
    if not failure.causes:
        return [f"{child}: {failure.message}"]
    refused = f"(the API server refused {child})"
    return [
        f"{mpijob_field(job_name, failure.kind, failure.name, field)}: {message} {refused}"
        for field, message in failure.causes
    ]
