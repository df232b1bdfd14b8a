"""Worker Pods `<job>-worker-<i>` (plain Pods: sshd, reached by the launcher over SSH)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from render import names
from render.api import Config, MPIJob
from render.children.common import decorate_gang, decorate_pod_spec, env_var, object_meta, pod_template_parts
from render.jsonutil import copy_plain

DEFAULT_WORKER_COMMAND = ["/usr/sbin/sshd", "-De"]


def worker_pod(job: MPIJob, index: int, config: Config) -> dict[str, Any]:
    worker = job.worker
    assert worker is not None
    labels, annotations, spec = pod_template_parts(worker.template)
    name = names.worker_name(job.name, index)
    labels.update(names.role_selector(job.name, names.ROLE_WORKER))
    # With the launcher as rank 0, workers are ranks 1..N (Kueue TAS orders pods by this label, #690).
    labels[names.LABEL_REPLICA_INDEX] = str(index + 1 if job.run_launcher_as_worker else index)
    container = decorate_pod_spec(job, spec, name, config)
    spec["restartPolicy"] = worker.restart_policy
    if not container.get("command") and not container.get("args"):
        container["command"] = list(DEFAULT_WORKER_COMMAND)
    container.setdefault("env", []).append(env_var("K_MPI_JOB_ROLE", names.ROLE_WORKER))
    for c in spec["containers"]:
        # A container that fails without writing a termination message gets its log's tail there, so
        # the job's Failed condition can quote it without the operator reading logs.
        c.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    decorate_gang(job, spec, labels, annotations, config, worker=True)
    meta = object_meta(job, name, labels)
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def worker_pods(job: MPIJob, indexes: Iterable[int], config: Config) -> list[dict[str, Any]]:
    """The pods for `indexes`: one is built in full, the others are copies with their own name and index
    (only the hostname and two labels differ between workers)."""
    out: list[dict[str, Any]] = []
    prototype: dict[str, Any] | None = None
    for index in indexes:
        if prototype is None:
            prototype = worker_pod(job, index, config)
            out.append(prototype)
            continue
        pod = copy_plain(prototype)
        name = names.worker_name(job.name, index)
        pod["metadata"]["name"] = name
        pod["metadata"]["labels"][names.LABEL_REPLICA_INDEX] = str(
            index + 1 if job.run_launcher_as_worker else index
        )
        pod["spec"]["hostname"] = name
        out.append(pod)
    return out
