"""render(): every child object the MPIJob should have right now."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from render import conditions as cond
from render import failures, names
from render.api import Config, MPIJob
from render.children import workload as wl
from render.children.configmap import configmap
from render.children.launcher import launcher_job
from render.children.podgroup import podgroup
from render.children.secret import secret_data, ssh_secret
from render.children.service import service
from render.children.workers import worker_pods
from render.errors import FieldError, ValidationError
from render.observed import (
    KIND_CONFIGMAP,
    Observed,
    WorkerFailure,
    is_controlled_by,
    is_pod_ready,
    is_terminating,
    phase,
    view,
)
from render.parse import parse_mpijob
from render.status import OPERATOR_FAILURES, status, wanted_names


def render(mpijob: Mapping[str, Any] | MPIJob, observed: Observed, config: Config) -> list[dict[str, Any]]:
    """Children in wire form, in a stable order: Service, ConfigMap, Secret, PodGroup or Workload, workers,
    launcher Job.

    The status that decides cleanup and the launcher's suspension is computed here with status(), so the
    result does not depend on whether the caller wrote the status first (status() is idempotent).
    """
    return render_with_status(mpijob, observed, config)[0]


def render_with_status(
    mpijob: Mapping[str, Any] | MPIJob, observed: Observed, config: Config
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """render() and the status it was computed from: a caller that needs both computes the status once."""
    job = parse_mpijob(mpijob)
    if not job.uid:
        raise ValidationError([FieldError("metadata.uid", "Required value: children need an owner UID")])
    st = status(job, observed, config)
    if job.managed_externally:
        return [], st
    return _children(job, observed, config, st), st


def _children(job: MPIJob, observed: Observed, config: Config, st: dict[str, Any]) -> list[dict[str, Any]]:
    conds = cond.clean(st.get("conditions"))
    finished = cond.is_finished(conds)
    failed = cond.find(conds, cond.FAILED)
    # Failed by the operator's own decision (deadline, unreachable workers): stop the launcher's pods.
    stop_launcher = (
        failed is not None and failed.get("status") == cond.TRUE and failed.get("reason") in OPERATOR_FAILURES
    )
    v = view(observed, job, wanted_names(job, config))
    replicas = job.worker_replicas
    active = not finished and not job.suspended

    running = [i for i, p in v.workers.items() if i < replicas and phase(p) == "Running"]
    frozen = _frozen_hosts(job, observed) if finished else None
    out: list[dict[str, Any]] = [service(job), configmap(job, running, config, frozen)]
    data = secret_data(v.ssh_secret, observed.fresh_ssh_key)
    if data is not None:
        out.append(ssh_secret(job, data))
    if config.gang_scheduling == names.KUBERNETES_GANG:
        if active and wl.wanted(job, config):
            for desired in wl.objects(job, config):
                live = observed.get(desired["kind"], job.name)
                if live is None or not is_controlled_by(live, job.uid) or not wl.outdated(live, desired):
                    out.append(desired)
    elif config.gang_scheduling and active:
        out.append(podgroup(job, config, lambda pc: _priority(observed, pc)))

    # A foreign object holds a wanted name before the job started: start nothing (and stop what an
    # earlier sync created before it knew), so no worker is left running for a job that cannot run.
    held = bool(v.conflicts) and v.launcher is None
    if active and not held:
        # Pods are create-only: a Failed worker is kept while its back-off lasts (its logs stay readable),
        # then left out (so it is deleted) and comes back in the next round.
        records = {r.index: r for r in failures.count(job, observed)}
        wanted = [
            i for i in range(replicas) if _worker_wanted(v.workers.get(i), records.get(i), observed.now)
        ]
        out += _with_counts(worker_pods(job, wanted, config), wanted, v.workers, records)
    elif finished:
        policy = job.spec.run_policy.clean_pod_policy
        kept = [i for i in sorted(v.workers) if i < replicas and _kept_after_finish(policy, v.workers[i])]
        out += _with_counts(worker_pods(job, kept, config), kept, v.workers, {})

    live = v.launcher
    if finished:
        if live is not None:
            suspend = stop_launcher or bool((live.get("spec") or {}).get("suspend"))
            out.append(launcher_job(job, config, suspend=suspend))
    elif job.suspended:
        out.append(launcher_job(job, config, suspend=True))
    else:
        wait = job.spec.launcher_creation_policy == "WaitForWorkersReady"
        ready = sum(1 for i, p in v.workers.items() if i < replicas and is_pod_ready(p))
        all_ready = ready == replicas
        if live is not None:
            # WaitForWorkersReady holds across suspend and resume (upstream #615).
            held = bool((live.get("spec") or {}).get("suspend")) and wait and not all_ready
            out.append(launcher_job(job, config, suspend=held))
        elif (not wait or all_ready) and not held:
            out.append(launcher_job(job, config, suspend=False))
    return out


def _worker_wanted(pod: dict[str, Any] | None, record: WorkerFailure | None, now: datetime) -> bool:
    """A Failed worker stays while its back-off runs (pods are create-only: left out, it is deleted); a
    missing one is created, unless the back-off of the failed pod it replaces still runs (someone else
    deleted that one)."""
    backing_off = failures.in_backoff(record, now)
    if pod is None:
        return not backing_off
    return backing_off if _failed(pod) else True


def _with_counts(
    pods: list[dict[str, Any]],
    indexes: list[int],
    live: Mapping[int, dict[str, Any]],
    records: Mapping[int, WorkerFailure],
) -> list[dict[str, Any]]:
    """The failure count so far on a replacement about to be created; a live pod's own value as it is
    (pod metadata is patched, so anything else would be a write)."""
    for index, pod in zip(indexes, pods, strict=True):
        live_pod = live.get(index)
        record = records.get(index)
        if live_pod is not None:
            value = ((live_pod.get("metadata") or {}).get("annotations") or {}).get(
                names.WORKER_FAILURES_ANNOTATION
            )
        else:
            value = str(record.count) if record is not None else None
        if isinstance(value, str):
            pod["metadata"].setdefault("annotations", {})[names.WORKER_FAILURES_ANNOTATION] = value
    return pods


def _frozen_hosts(job: MPIJob, observed: Observed) -> str | None:
    """After the end nothing reads discover_hosts.sh: keep the live text rather than spend a write per
    job rewriting it while the workers are cleaned up."""
    live = observed.get(KIND_CONFIGMAP, names.config_name(job.name))
    if live is None or not is_controlled_by(live, job.uid):
        return None
    text = (live.get("data") or {}).get(names.DISCOVER_HOSTS_KEY)
    return text if isinstance(text, str) else None


def _failed(pod: dict[str, Any] | None) -> bool:
    return pod is not None and phase(pod) == "Failed" and not is_terminating(pod)


def _kept_after_finish(policy: str | None, pod: dict[str, Any]) -> bool:
    """cleanPodPolicy: None keeps every worker, Running keeps the finished ones, All keeps none."""
    return policy == "None" or (policy == "Running" and phase(pod) not in ("Running", "Pending"))


def _priority(observed: Observed, name: str) -> int:
    pc = observed.get("PriorityClass", name)
    value = (pc or {}).get("value", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
