"""What the job's GangScheduled condition says with `--gang-scheduling=kubernetes`.

The condition appears only when there is something to say, so a gang placed at once costs no write:
* False, GangSchedulingUnavailable: the cluster cannot gang schedule (no Workload API served, or the API
  server dropped the workers' reference), so the workers are scheduled one at a time;
* False, GangUnschedulable: the scheduler cannot place the gang, in its own words (the PodGroup's
  condition where the version has one, else a pending worker's PodScheduled condition);
* True, GangScheduled: after that, every worker is placed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from render import conditions as cond
from render import names
from render.api import Config, MPIJob
from render.children import workload
from render.observed import (
    KIND_PODGROUP,
    KIND_WORKLOAD,
    JobView,
    Observed,
    condition,
    is_controlled_by,
    is_terminating,
    node_name,
    view,
)
from render.timeutil import parse_time

GANG_SCHEDULED = "GangScheduled"
REASON_UNAVAILABLE = "GangSchedulingUnavailable"
REASON_UNSCHEDULABLE = "GangUnschedulable"
REASON_SCHEDULED = "GangScheduled"
# The PodGroup's condition that says whether the scheduler could place it (v1alpha2, then v1beta1).
_GROUP_SCHEDULED = ("PodGroupScheduled", "PodGroupInitiallyScheduled")

# How long the scheduler may hold a gang's workers without a word before the operator speaks for it:
# longer than creating a job's children takes, so a job being created says nothing.
SILENCE = timedelta(seconds=10)

SetCondition = Callable[[str, str, str, str], None]


def gang_condition(
    job: MPIJob,
    v: JobView,
    observed: Observed,
    config: Config,
    conds: list[dict[str, Any]],
    setc: SetCondition,
) -> None:
    """Sets GangScheduled on an active job (``setc`` as status' own setter)."""
    if config.gang_scheduling != names.KUBERNETES_GANG or job.worker_replicas == 0:
        return
    ns_name = f"{job.namespace}/{job.name}"
    workers = [p for i, p in sorted(v.workers.items()) if i < job.worker_replicas]
    if not workload.enabled(config):
        versions = ", ".join(names.WORKLOAD_API_VERSIONS)
        setc(
            GANG_SCHEDULED,
            cond.FALSE,
            REASON_UNAVAILABLE,
            f"MPIJob {ns_name} is not gang scheduled: the API server serves no Workload API ({versions}); "
            "its workers are scheduled one at a time.",
        )
        return
    field, _ = workload.reference(job, config)
    dropped = _dropped(job, workers, observed, field)
    if dropped:
        setc(
            GANG_SCHEDULED,
            cond.FALSE,
            REASON_UNAVAILABLE,
            f"MPIJob {ns_name} is not gang scheduled: the API server dropped spec.{field} from pod "
            f"{dropped} (its GenericWorkload feature gate is off); its workers are scheduled one at a time.",
        )
        return
    current = cond.find(conds, GANG_SCHEDULED)
    if current is not None and current.get("reason") == REASON_UNAVAILABLE:
        return
    bound = [p for p in workers if node_name(p)]
    why = _group_unschedulable(job, observed) if len(bound) < job.worker_replicas else ""
    if not why:
        stuck = [(p, c) for p in workers if not node_name(p) and (c := _unschedulable(p)) is not None]
        if stuck:
            pod, c = stuck[0]
            why = f"pod {(pod.get('metadata') or {}).get('name', '')}: {_words(c)}"
    if not why:
        why, _ = _silence(job, workers, observed, config)
    if why:
        setc(
            GANG_SCHEDULED,
            cond.FALSE,
            REASON_UNSCHEDULABLE,
            f"The scheduler cannot place the gang of MPIJob {ns_name} (at least {workload.min_count(job)} of "
            f"{job.worker_replicas} workers together; {len(bound)} placed): {why}",
        )
    elif current is not None and len(bound) == job.worker_replicas:
        setc(
            GANG_SCHEDULED,
            cond.TRUE,
            REASON_SCHEDULED,
            f"All {job.worker_replicas} workers of MPIJob {ns_name} are placed.",
        )


def _silence(
    job: MPIJob, workers: list[dict[str, Any]], observed: Observed, config: Config
) -> tuple[str, datetime | None]:
    """Where the scheduler holds the gang without a word (its gang object missing, fewer workers than
    minCount): the operator's words once its workers have waited SILENCE, else when to look again."""
    unbound = [p for p in workers if not node_name(p) and not is_terminating(p)]
    created = [t for p in unbound if (t := parse_time((p.get("metadata") or {}).get("creationTimestamp")))]
    if not created:
        return "", None
    missing = [
        kind
        for kind in workload.kinds(config)
        if not is_controlled_by(observed.get(kind, job.name) or {}, job.uid)
    ]
    present = sum(1 for p in workers if not is_terminating(p))
    if missing:
        why = f"{missing[0]} {job.name} does not exist, and the scheduler holds the workers until it does"
    elif present < workload.min_count(job):
        need = workload.min_count(job)
        why = f"only {present} of the {need} workers the gang needs exist, and the scheduler holds them"
        why += " until the rest do"
    else:
        return "", None
    speak_at = min(created) + SILENCE
    return (why, None) if observed.now >= speak_at else ("", speak_at)


def next_word(job: MPIJob, status: Mapping[str, Any], observed: Observed, config: Config) -> datetime | None:
    """When the operator speaks for a silent scheduler (``_silence``), if that is still to come."""
    if config.gang_scheduling != names.KUBERNETES_GANG or not workload.enabled(config):
        return None
    conds = cond.clean(status.get("conditions"))
    if cond.is_finished(conds) or job.suspended or job.worker_replicas == 0:
        return None
    v = view(observed, job, [])  # the workers only: conflicts are status' business
    workers = [p for i, p in sorted(v.workers.items()) if i < job.worker_replicas]
    return _silence(job, workers, observed, config)[1]


def _words(c: Mapping[str, Any]) -> str:
    return str(c.get("message") or c.get("reason") or "").strip()


def _group_unschedulable(job: MPIJob, observed: Observed) -> str:
    """The PodGroup's own word (from v1alpha2 on) that it cannot be scheduled."""
    group = observed.get(KIND_PODGROUP, job.name)
    if group is None or not is_controlled_by(group, job.uid):
        return ""
    for ctype in _GROUP_SCHEDULED:
        c = condition(group, ctype)
        if c is not None and c.get("status") == cond.FALSE:
            return f"PodGroup {job.name}: {_words(c)}"
    return ""


def _unschedulable(pod: dict[str, Any]) -> Any:
    c = condition(pod, "PodScheduled")
    if c is not None and c.get("status") == cond.FALSE and c.get("reason") == "Unschedulable":
        return c
    return None


def _dropped(job: MPIJob, workers: list[dict[str, Any]], observed: Observed, field: str) -> str:
    """The first worker created after the Workload yet without a reference: the API server removed it.
    A worker older than the Workload came from before gang scheduling was on and proves nothing."""
    live = observed.get(KIND_WORKLOAD, job.name)
    if live is None or not is_controlled_by(live, job.uid):
        return ""
    since = str((live.get("metadata") or {}).get("creationTimestamp") or "")
    for pod in workers:
        meta = pod.get("metadata") or {}
        created = str(meta.get("creationTimestamp") or "")
        if since and created >= since and not (pod.get("spec") or {}).get(field):
            return str(meta.get("name", ""))
    return ""
