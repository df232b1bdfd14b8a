"""The MPIJob `kubeflow.org/v2beta1` schema: our fields, their defaults, enums and admission rules.

Field names, types and JSON shapes match upstream mpi-operator v2beta1 so existing manifests keep working.
Defaults and rejections follow docs/api.md: `cleanPodPolicy` defaults to `Running`, and
what upstream only checked inside its controller is rejected here at admission.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from render import bounds
from tools.crdgen.k8s_schema import LABEL_SELECTOR, QUANTITY, Converter, pod_template_spec

Schema = dict[str, Any]

LAUNCHER = "Launcher"
WORKER = "Worker"
MANAGED_BY_VALUES = ("kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue")
DNS_LABEL_MAX = bounds.DNS_LABEL_MAX
# Worker pod and host names are "<job>-worker-<index>"; they must be DNS-1035 labels.
WORKER_INFIX = bounds.WORKER_INFIX
INT32_MAX = bounds.INT32_MAX


def obj(
    description: str, properties: dict[str, Schema], required: Iterable[str] = (), **extra: Any
) -> Schema:
    out: Schema = {"description": description, "type": "object", "properties": properties}
    if required:
        out["required"] = list(required)
    out.update(extra)
    return out


def string(description: str, **extra: Any) -> Schema:
    return {"description": description, "type": "string", **extra}


def integer(description: str, fmt: str = "int32", **extra: Any) -> Schema:
    return {"description": description, "type": "integer", "format": fmt, **extra}


def boolean(description: str, **extra: Any) -> Schema:
    return {"description": description, "type": "boolean", **extra}


def timestamp(description: str) -> Schema:
    return {"description": description, "type": "string", "format": "date-time"}


def rule(expression: str, message: str, **extra: Any) -> Schema:
    return {"rule": " ".join(expression.split()), "message": message, **extra}


def _described(schema: Schema, description: str) -> Schema:
    schema["description"] = description
    return schema


def scheduling_policy(k8s: Converter) -> Schema:
    quantity = k8s.named(QUANTITY)
    return obj(
        "Gang-scheduling settings, used only when the operator runs with --gang-scheduling (Volcano or the "
        "scheduler-plugins coscheduler). They shape the PodGroup created for the job.",
        {
            "minAvailable": integer(
                "Minimum number of pods that must be schedulable together before any of them starts (the "
                "PodGroup's minMember). Defaults to the number of workers plus one for the launcher.",
                minimum=0,
                maximum=INT32_MAX,
            ),
            "queue": string("Volcano queue the PodGroup is submitted to. Volcano only."),
            "minResources": {
                "description": "Minimum total resources the gang needs before it is scheduled. When unset, "
                "the operator sums the requests of the pods that form the gang.",
                "type": "object",
                "additionalProperties": quantity,
            },
            "priorityClass": string("PriorityClass name of the PodGroup. Volcano only."),
            "scheduleTimeoutSeconds": integer(
                "Seconds the coscheduler waits for the whole gang before it gives up on a scheduling "
                "attempt. scheduler-plugins only.",
                minimum=0,
                maximum=INT32_MAX,
            ),
        },
    )


def run_policy(k8s: Converter) -> Schema:
    return obj(
        "How the job runs and ends: cleanup of pods after it finishes, retries, deadline, time to live, "
        "suspension and which controller manages it.",
        {
            "cleanPodPolicy": string(
                "Which worker pods to delete when the job finishes. Running (default): those still "
                "running or pending, so idle workers release their nodes; All: every worker pod; None: "
                "keep them all. The launcher Job and its pods are kept for their logs.",
                enum=["All", "Running", "None"],
                default="Running",
            ),
            "ttlSecondsAfterFinished": integer(
                "Seconds after the job finishes (Succeeded or Failed) before the MPIJob itself, and with it "
                "every object it owns, is deleted. Unset: never deleted automatically.",
                minimum=0,
                maximum=INT32_MAX,
            ),
            "activeDeadlineSeconds": integer(
                "Seconds the job may be active, counted from its start (and again from each resume). When "
                "it passes, the job fails with reason DeadlineExceeded and its pods are stopped. At most "
                "about 292 years, the longest duration Kubernetes can represent.",
                fmt="int64",
                minimum=0,
                maximum=bounds.MAX_DURATION_SECONDS,
            ),
            "backoffLimit": integer(
                "Number of launcher retries before the job is marked Failed. Passed to the launcher Job; "
                "unset means the Job default (6).",
                minimum=0,
                maximum=INT32_MAX,
            ),
            "schedulingPolicy": scheduling_policy(k8s),
            "suspend": boolean(
                "Whether the job is suspended. Setting it deletes the worker pods and suspends the launcher "
                "Job; clearing it resumes the job from scratch. Kueue uses this field to admit jobs.",
                default=False,
            ),
            "managedBy": string(
                "The controller that reconciles this job. Unset or kubeflow.org/mpi-operator: this "
                "operator. kueue.x-k8s.io/multikueue: Kueue's MultiKueue dispatches it to a worker cluster "
                "and this operator leaves it alone. Immutable.",
                enum=["", *MANAGED_BY_VALUES],
            ),
        },
        default={},
    )


def replica_spec(k8s: Converter) -> Schema:
    template = _described(
        pod_template_spec(k8s),
        "Pod template for this replica type. The operator adds its own labels, environment, volumes and "
        "SSH settings to it. Must contain at least one container.",
    )
    return obj(
        "One replica type of the job: how many pods, their restart policy and their pod template.",
        {
            "replicas": integer(
                "Number of pods. Launcher: 1 (the default). Worker: at least 1 and required, and at most "
                "as many as the hostfile ConfigMap (1 MiB) holds for the job's name length: "
                f"{bounds.max_workers(10)} for a "
                "name of 10 characters.",
                minimum=0,
                maximum=INT32_MAX,
            ),
            "restartPolicy": string(
                "Restart policy of the pods. Defaults to OnFailure for the Launcher and Never for workers; a "
                "failed worker is replaced by the operator while the job runs.",
                enum=["Never", "OnFailure"],
            ),
            "template": template,
        },
        required=["template"],
    )


def _replica(key: str) -> str:
    return f'self["{key}"]'


def mpi_replica_specs(k8s: Converter) -> Schema:
    launcher, worker = _replica(LAUNCHER), _replica(WORKER)
    return {
        "description": "The job's replica types, keyed Launcher (required; runs mpirun) and Worker "
        "(optional; runs sshd and the MPI ranks).",
        "type": "object",
        "additionalProperties": replica_spec(k8s),
        "x-kubernetes-validations": [
            rule(
                f'self.all(k, k == "{LAUNCHER}" || k == "{WORKER}")',
                "only the replica types Launcher and Worker are supported",
            ),
            rule(f'"{LAUNCHER}" in self', "a Launcher replica spec is required", reason="FieldValueRequired"),
            rule(
                f'!("{LAUNCHER}" in self) || !has({launcher}.replicas) || {launcher}.replicas == 1',
                "Launcher replicas must be 1",
                fieldPath=f".{LAUNCHER}.replicas",
            ),
            rule(
                f'!("{WORKER}" in self) || (has({worker}.replicas) && {worker}.replicas >= 1)',
                "Worker replicas must be set and be at least 1 (omit the Worker spec for a launcher-only "
                "job with runLauncherAsWorker)",
                fieldPath=f".{WORKER}.replicas",
            ),
        ],
    }


def _managed_by(var: str) -> str:
    return f'(has({var}.runPolicy) && has({var}.runPolicy.managedBy) ? {var}.runPolicy.managedBy : "")'


def mpijob_spec(k8s: Converter) -> Schema:
    return obj(
        "Desired state of the MPIJob.",
        {
            "slotsPerWorker": integer(
                "MPI slots per worker host in the hostfile (usually one per GPU or core used by ranks).",
                default=1,
                minimum=0,
                maximum=INT32_MAX,
            ),
            "runLauncherAsWorker": boolean(
                "Also run MPI ranks in the launcher pod: it is listed first in the hostfile.",
                default=False,
            ),
            "runPolicy": run_policy(k8s),
            "mpiReplicaSpecs": mpi_replica_specs(k8s),
            "sshAuthMountPath": string(
                "Directory where the job's SSH key Secret is mounted in the launcher and in every worker. "
                "Empty means the default, as upstream treats it.",
                default="/root/.ssh",
            ),
            "launcherCreationPolicy": string(
                "When the launcher is created. AtStartup: together with the workers. WaitForWorkersReady: "
                "once every worker pod is Ready (again after each resume).",
                enum=["AtStartup", "WaitForWorkersReady"],
                default="AtStartup",
            ),
            "mpiImplementation": string(
                "MPI implementation in the images; selects the hostfile format and the launcher's "
                "environment.",
                enum=["OpenMPI", "Intel", "MPICH"],
                default="OpenMPI",
            ),
        },
        required=["mpiReplicaSpecs"],
        **{
            "x-kubernetes-validations": [
                rule(
                    f"{_managed_by('self')} == {_managed_by('oldSelf')}",
                    "spec.runPolicy.managedBy is immutable",
                    fieldPath=".runPolicy.managedBy",
                )
            ]
        },
    )


def job_condition() -> Schema:
    return obj(
        "One observed condition of the job.",
        {
            "type": string(
                "Condition type: Created, Running, Restarting, Succeeded, Failed or Suspended.",
            ),
            "status": string("Whether the condition holds.", enum=["True", "False", "Unknown"]),
            "reason": string("Machine-readable, CamelCase reason for the last transition."),
            "message": string("Human-readable details about the last transition."),
            "lastUpdateTime": timestamp("Last time the condition was updated."),
            "lastTransitionTime": timestamp("Last time the condition changed status."),
        },
        required=["type", "status"],
    )


def replica_status(k8s: Converter) -> Schema:
    return obj(
        "Pod counts of one replica type.",
        {
            "active": integer("Number of running pods."),
            "succeeded": integer("Number of pods that succeeded."),
            "failed": integer("Number of pods that failed."),
            "labelSelector": _described(
                k8s.named(LABEL_SELECTOR), "Deprecated: use selector. Label selector of the replica's pods."
            ),
            "selector": string(
                "Label selector of this replica type's pods, in the string form of `kubectl get -l`."
            ),
        },
    )


def job_status(k8s: Converter) -> Schema:
    return obj(
        "Observed state of the MPIJob, written by the operator.",
        {
            "conditions": {
                "description": "Conditions of the job, one per type. The last one is the current state.",
                "type": "array",
                "items": job_condition(),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "replicaStatuses": {
                "description": "Pod counts per replica type (Launcher, Worker).",
                "type": "object",
                "additionalProperties": replica_status(k8s),
            },
            "startTime": timestamp("When the operator first started the job (reset on resume)."),
            "completionTime": timestamp("When the job finished, successfully or not."),
            "lastReconcileTime": timestamp("When the operator last reconciled the job."),
        },
    )


def name_rules() -> list[Schema]:
    """metadata.name checks (only the root may read it): worker pods and hosts are "<job>-worker-<index>".

    CEL's string(int) is too costly for the API server's estimator, so the length check compares the
    worker count against the largest count whose last index still fits, looked up by name length.
    """
    name = "self.metadata.name"
    guard = f"!has({name}) || !has(self.spec) || !has(self.spec.mpiReplicaSpecs)"
    specs = "self.spec.mpiReplicaSpecs"
    worker = f'{specs}["{WORKER}"]'
    replicas = f'(("{WORKER}" in {specs} && has({worker}.replicas)) ? {worker}.replicas : 0)'
    room = DNS_LABEL_MAX - len(WORKER_INFIX)  # name length + index digits must fit in this
    max_digits = 10  # an int32 index has at most 10 digits
    # For a name of length L in (room - max_digits, room), the index may have room - L digits: at most
    # 10**(room - L) replicas.
    limits = ", ".join(str(10 ** (room - length)) for length in range(room - max_digits + 1, room))
    return [
        rule(
            f'!has({name}) || {name}.matches("^[a-z][-a-z0-9]*$")',
            "metadata.name must start with a lowercase letter and contain only lowercase letters, digits "
            "and '-': it names the job's Service and worker hosts, which must be DNS-1035 labels",
            fieldPath=".metadata.name",
            reason="FieldValueInvalid",
        ),
        rule(
            f"{guard} || size({name}) <= {room - max_digits} || (size({name}) < {room} && "
            f"{replicas} <= [{limits}][size({name}) - {room - max_digits + 1}])",
            f"metadata.name is too long: the last worker pod <name>{WORKER_INFIX}<replicas-1> must have at "
            f"most {DNS_LABEL_MAX} characters",
            fieldPath=".metadata.name",
            reason="FieldValueInvalid",
        ),
        # bounds.max_workers, one rule per name length so the message says this job's limit (CEL's
        # string(int) in a messageExpression is beyond the API server's cost budget).
        *(
            rule(
                f"{guard} || size({name}) != {length} || {replicas} <= {limit}",
                bounds.worker_limit_message(length),
                fieldPath=f".spec.mpiReplicaSpecs.{WORKER}.replicas",
                reason="FieldValueInvalid",
            )
            for length, limit in enumerate(bounds.max_workers_table(), start=1)
            if length + len("-launcher") <= DNS_LABEL_MAX  # longer names fail the rule above
        ),
    ]


def mpijob(k8s: Converter) -> Schema:
    """The whole `openAPIV3Schema` of the MPIJob version."""
    return obj(
        "MPIJob runs an MPI program: one launcher pod that runs mpirun and a set of worker pods that run "
        "sshd, wired together with a hostfile and an SSH key.",
        {
            "apiVersion": string(
                "Versioned schema of this representation of an object; kubeflow.org/v2beta1."
            ),
            "kind": string("Kind of the object: MPIJob."),
            "metadata": {
                "type": "object",
                # Bounds the cost of the name rule; the rule itself says how long the name may be.
                "properties": {"name": {"type": "string", "maxLength": DNS_LABEL_MAX}},
            },
            "spec": mpijob_spec(k8s),
            "status": job_status(k8s),
        },
        required=["spec"],
        **{"x-kubernetes-validations": name_rules()},
    )
