"""L1 helpers shared by the cluster tests (fixtures are in conftest.py): the MPIJob API's names, kubectl
and `mpijob plan` as a user runs them, access reviews as a given user, and the objects of a cluster
without controllers or nodes: pod and Job status moved by hand through the status subresource, as upstream's
integration suite does, and the MPIJob's status and events read back."""

from __future__ import annotations

import copy
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from localcluster.cluster import wait_for_crds
from localcluster.wait import wait_for
from reconcile.mpijob.kinds import MPIJOB
from reconcile.runtime.kube import EVENT, JOB, POD, ApiError, Kube
from tests.utils import REPO

GROUP, VERSION, PLURAL = "kubeflow.org", "v2beta1", "mpijobs"


CRD_NAME = f"{PLURAL}.{GROUP}"


OPERATOR_NS = "mpi-operator"


OPERATOR_SA = f"system:serviceaccount:{OPERATOR_NS}:mpi-operator"


def _can(
    api_client: Any, verb: str, resource: str, namespace: str = "", name: str = "", group: str = ""
) -> bool:
    resource, _, subresource = resource.partition("/")
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "verb": verb,
                "group": group,
                "resource": resource,
                "subresource": subresource,
                "namespace": namespace,
                "name": name,
            }
        },
    }
    return client.AuthorizationV1Api(api_client).create_self_subject_access_review(review).status.allowed


def plan(kubeconfig: Path, *args: str) -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "reconcile.cli", "plan", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, yaml.safe_load(proc.stdout)


def install_crds(cluster: Any, docs: list[dict[str, Any]]) -> None:
    """The CRDs created (if not yet) and served."""
    api = cluster.api_client()
    try:
        ext = client.ApiextensionsV1Api(api)
        for doc in docs:
            try:
                ext.create_custom_resource_definition(doc)
            except client.ApiException as err:
                if err.status != 409:
                    raise
        wait_for_crds(api, [d["metadata"]["name"] for d in docs])
    finally:
        api.close()


def now_str() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def create_mpijob(kube: Kube, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return kube.create(MPIJOB, namespace, body)


def get_job(kube: Kube, ns: str, name: str = "pi") -> dict[str, Any]:
    return kube.get(MPIJOB, ns, name)


def workers(kube: Kube, ns: str, name: str = "pi") -> list[dict[str, Any]]:
    pods = kube.list(
        POD, ns, labelSelector=f"training.kubeflow.org/job-name={name},training.kubeflow.org/job-role=worker"
    )
    return sorted(pods["items"], key=lambda p: p["metadata"]["name"])


def replica_status(kube: Kube, ns: str, role: str, field: str = "active", name: str = "pi") -> int | None:
    """A role's count in the MPIJob's status.replicaStatuses (None: not there yet)."""
    statuses = (get_job(kube, ns, name).get("status") or {}).get("replicaStatuses") or {}
    return (statuses.get(role) or {}).get(field)


def wait_workers(kube: Kube, ns: str, count: int = 2) -> list[dict[str, Any]]:
    """Until the MPIJob "pi" has `count` worker pods: them."""
    return wait_for(lambda: len(workers(kube, ns)) == count and workers(kube, ns), f"{count} workers")


def run_pods(kube: Kube, pods: list[dict[str, Any]], ready: bool = True) -> None:
    """The pods Running (and Ready or not), as their kubelet would say."""
    for pod in pods:
        set_pod_status(kube, pod, "Running", ready=ready)


def live_workers(kube: Kube, ns: str, name: str = "pi") -> list[dict[str, Any]]:
    return [p for p in workers(kube, ns, name) if not p["metadata"].get("deletionTimestamp")]


def set_pod_status(
    kube: Kube, pod: dict[str, Any], phase: str, ready: bool | None = None, **extra: Any
) -> None:
    for _ in range(10):
        cur = kube.get(POD, pod["metadata"]["namespace"], pod["metadata"]["name"])
        status: dict[str, Any] = {"phase": phase, **extra}
        if ready is not None:
            status["conditions"] = [
                {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": now_str()}
            ]
        cur["status"] = status
        try:
            kube.replace(POD, cur, subresource="status")
            return
        except ApiError as err:
            if err.status != 409:
                raise
    raise AssertionError("pod status kept conflicting")


def set_job_status(kube: Kube, ns: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
    for _ in range(10):
        cur = kube.get(JOB, ns, name)
        old = cur.get("status") or {}
        # startTime may not move or vanish once set on an unsuspended Job
        cur["status"] = {**status, **({"startTime": old["startTime"]} if old.get("startTime") else {})}
        try:
            return kube.replace(JOB, cur, subresource="status")
        except ApiError as err:
            if err.status != 409:
                raise
    raise AssertionError("job status kept conflicting")


def complete_launcher(kube: Kube, ns: str, name: str = "pi-launcher") -> None:
    t = now_str()
    set_job_status(
        kube,
        ns,
        name,
        {
            "startTime": t,
            "completionTime": t,
            "succeeded": 1,
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": t, "lastProbeTime": t},
                {"type": "Complete", "status": "True", "lastTransitionTime": t, "lastProbeTime": t},
            ],
        },
    )


def fail_launcher(kube: Kube, ns: str, name: str = "pi-launcher", failed: int = 2) -> None:
    t = now_str()
    cond = {"reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}
    set_job_status(
        kube,
        ns,
        name,
        {
            "startTime": t,
            "failed": failed,
            "conditions": [
                {
                    "type": "FailureTarget",
                    "status": "True",
                    "lastTransitionTime": t,
                    "lastProbeTime": t,
                    **cond,
                },
                {"type": "Failed", "status": "True", "lastTransitionTime": t, "lastProbeTime": t, **cond},
            ],
        },
    )


def create_launcher_pod(kube: Kube, ns: str, job_name: str = "pi-launcher", suffix: str = "abcde") -> dict:
    """What the Job controller would create: a pod from the Job's template, controlled by the Job."""
    job = kube.get(JOB, ns, job_name)
    template = copy.deepcopy(job["spec"]["template"])
    meta = template.get("metadata") or {}
    meta.pop("ownerReferences", None)
    meta.update(
        {
            "name": f"{job_name}-{suffix}",
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job_name,
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }
    )
    return kube.create(
        POD, ns, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}
    )


def start_launcher_pod(kube: Kube, ns: str) -> dict[str, Any]:
    """The launcher Job's pod, created as the Job controller would, Running and Ready."""
    pod = create_launcher_pod(kube, ns)
    set_pod_status(kube, pod, "Running", ready=True)
    return pod


def events_of(kube: Kube, ns: str, name: str = "pi") -> list[tuple[str, str]]:
    items = kube.list(EVENT, ns)["items"]
    items = [
        e
        for e in items
        if e["involvedObject"].get("name") == name and e["involvedObject"]["kind"] == "MPIJob"
    ]
    items.sort(key=lambda e: (e.get("firstTimestamp") or "", e["metadata"]["name"]))
    return [(e["type"], e["reason"]) for e in items]


def has_event(kube: Kube, ns: str, type_: str, reason: str, name: str = "pi") -> bool:
    return (type_, reason) in events_of(kube, ns, name)


def exists(kube: Kube, res: Any, ns: str, name: str) -> bool:
    try:
        kube.get(res, ns, name)
        return True
    except ApiError as err:
        if err.status == 404:
            return False
        raise
