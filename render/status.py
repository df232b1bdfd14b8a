"""The pure status function: conditions, replica statuses, start and completion times."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from render import childfields, evictions, failures, gang, names, nodes
from render import conditions as cond
from render.api import Config, MPIJob, managed_externally
from render.children import workload
from render.errors import ValidationError
from render.jsonutil import clone
from render.observed import (
    KIND_CONFIGMAP,
    KIND_PODGROUP,
    KIND_SECRET,
    KIND_SERVICE,
    JobView,
    Observed,
    WorkerFailure,
    condition,
    condition_true,
    is_controlled_by,
    phase,
    view,
)
from render.parse import parse_mpijob, too_deep
from render.timeutil import add_seconds, format_time, parse_time

MAX_MESSAGE = 1024

REASON_CREATED = "MPIJobCreated"
REASON_RUNNING = "MPIJobRunning"
REASON_RESTARTING = "MPIJobRestarting"
REASON_SUCCEEDED = "MPIJobSucceeded"
REASON_FAILED = "MPIJobFailed"
REASON_FINISHED = "MPIJobFinished"
REASON_SUSPENDED = "MPIJobSuspended"
REASON_RESUMED = "MPIJobResumed"
REASON_EVICTED = "MPIJobEvicted"
REASON_DEADLINE = "DeadlineExceeded"
REASON_VALIDATION = "ValidationError"
REASON_EXISTS = "ErrResourceExists"
REASON_FAILED_CREATE = "FailedCreate"
REASON_UNREACHABLE = "WorkersUnreachable"
REASON_WORKER_FAILURES = "WorkerBackoffLimitExceeded"
REASON_IMAGE_PULL = "ImagePullBackOff"
REASON_NODE_NOT_READY = "NodeNotReady"
REASON_NODE_OUT_OF_SERVICE = "NodeOutOfService"
REASON_NODES_READY = "NodesReady"
# The kubelet's waiting reasons for an image it cannot get; it alternates the first two while it retries,
# so one reason of ours covers them all (a status write when it starts and one when it ends).
IMAGE_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
# Failures the operator decides (not the launcher Job): render suspends the launcher Job for them.
OPERATOR_FAILURES = (REASON_DEADLINE, REASON_UNREACHABLE, REASON_WORKER_FAILURES)


def truncate(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


def wanted_names(job: MPIJob, config: Config) -> list[tuple[str, str]]:
    """(kind, name) of every child the job may own; another controller's object with one is a conflict."""
    wanted = [
        ("Service", job.name),
        ("ConfigMap", names.config_name(job.name)),
        ("Secret", names.ssh_secret_name(job.name)),
        ("Job", names.launcher_name(job.name)),
    ]
    wanted += gang_children(job, config)
    wanted += [("Pod", names.worker_name(job.name, i)) for i in range(job.worker_replicas)]
    return wanted


def gang_children(job: MPIJob, config: Config) -> list[tuple[str, str]]:
    """(kind, name) of the job's gang-scheduling children: the PodGroup, or the Workload API's objects
    (only for a job with workers)."""
    if config.gang_scheduling == names.KUBERNETES_GANG:
        return [(kind, job.name) for kind in workload.kinds(config)] if workload.wanted(job, config) else []
    return [(KIND_PODGROUP, job.name)] if config.gang_scheduling else []


def _started(launcher: Mapping[str, Any]) -> bool:
    st = launcher.get("status") or {}
    return bool(st.get("startTime") or st.get("active") or st.get("succeeded") or st.get("failed"))


def children_created(job: MPIJob, config: Config, observed: Observed, v: JobView) -> bool:
    """Every child that exists at creation is in ``observed``, ours: the Service, ConfigMap, SSH Secret,
    and unless suspended the PodGroup (gang scheduling) and the workers; the launcher Job unless it
    waits for the workers. ``Created=True`` means this, as upstream's (it writes status after them).
    A launcher Job that has started is enough: it came after every other child, and a job that ran or
    finished (its workers cleaned up) before a status write said so must still read Created."""
    if v.launcher is not None and is_controlled_by(v.launcher, job.uid) and _started(v.launcher):
        return True
    wanted = [
        (KIND_SERVICE, job.name),
        (KIND_CONFIGMAP, names.config_name(job.name)),
        (KIND_SECRET, names.ssh_secret_name(job.name)),
    ]
    if not job.suspended:  # a suspended job has no PodGroup (as upstream) or Workload
        wanted += gang_children(job, config)
    for kind, name in wanted:
        obj = observed.get(kind, name)
        if obj is None or not is_controlled_by(obj, job.uid):
            return False
    if not job.suspended and any(i not in v.workers for i in range(job.worker_replicas)):
        return False
    waits = job.spec.launcher_creation_policy == "WaitForWorkersReady" and not job.suspended
    return waits or v.launcher is not None


def status(mpijob: Mapping[str, Any] | MPIJob, observed: Observed, config: Config) -> dict[str, Any]:
    """The `.status` the job should have now, computed from its current `.status` and the observed world."""
    raw = mpijob.raw if isinstance(mpijob, MPIJob) else mpijob
    if not isinstance(mpijob, MPIJob) and not isinstance(mpijob, Mapping):
        parse_mpijob(mpijob)  # raises ValidationError
    old = mpijob.status if isinstance(mpijob, MPIJob) else raw.get("status")
    if not isinstance(mpijob, MPIJob) and too_deep(old) is not None:
        old = None  # not a status this operator wrote; parse_mpijob below reports where
    st: dict[str, Any] = clone(old) if isinstance(old, Mapping) else {}
    spec = raw.get("spec") if isinstance(raw, Mapping) else None
    run_policy = spec.get("runPolicy") if isinstance(spec, Mapping) else None
    managed_by = run_policy.get("managedBy") if isinstance(run_policy, Mapping) else None
    if isinstance(managed_by, str) and managed_externally(managed_by):
        return st  # another controller owns the status
    now = format_time(observed.now)
    try:
        job = parse_mpijob(mpijob)
    except ValidationError as exc:
        return _invalid(raw, st, exc, now)
    return _compute(job, observed, config, st, now)


def _invalid(raw: Mapping[str, Any], st: dict[str, Any], exc: ValidationError, now: str) -> dict[str, Any]:
    conds = cond.clean(st.get("conditions"))
    if cond.is_finished(conds):
        st["conditions"] = conds
        return st
    # No Created: it means every child of the creation exists, and an invalid job has none (as upstream,
    # which validates before its first status write).
    message = truncate("Found validation errors: " + "; ".join(exc.lines()))
    conds = cond.set_condition(conds, cond.FAILED, cond.TRUE, REASON_VALIDATION, message, now)
    st["conditions"] = cond.state_last(conds)
    st.setdefault("completionTime", now)
    return st


class _Conditions:
    """The conditions being computed: ``set`` replaces the list (``cond.set_condition`` returns a new
    one), so every step reads the latest through ``items``."""

    def __init__(self, items: list[dict[str, Any]], now: str) -> None:
        self.items = items
        self.now = now

    def set(self, ctype: str, status: str, reason: str, message: str) -> None:
        self.items = cond.set_condition(self.items, ctype, status, reason, message, self.now)


def _compute(job: MPIJob, observed: Observed, config: Config, st: dict[str, Any], now: str) -> dict[str, Any]:
    ns_name = f"{job.namespace}/{job.name}"
    c = _Conditions(cond.clean(st.get("conditions")), now)
    v = view(observed, job, wanted_names(job, config))
    _created(job, observed, config, v, c, ns_name)
    st["replicaStatuses"] = replica_statuses(job, v, st.get("replicaStatuses"), cond.is_finished(c.items))
    if cond.is_finished(c.items):
        return _finished_before(st, c.items, now)
    _suspension(job, st, c, now)
    records = failures.count(job, observed)
    if not _outcome(job, v, observed, st, c, records) and not job.suspended:
        _progress(job, v, observed, c, records)
    if not job.suspended and not cond.is_finished(c.items):
        gang.gang_condition(job, v, observed, config, c.items, c.set)
    conds = _node_condition(job, v, observed, config, c.items, now)
    return _finish(st, conds, ns_name)


def _created(
    job: MPIJob, observed: Observed, config: Config, v: JobView, c: _Conditions, ns_name: str
) -> None:
    """Created: False while a name is taken or a create is retried, True once every child exists."""
    if v.conflicts:
        kind, name = v.conflicts[0]
        c.set(
            cond.CREATED,
            cond.FALSE,
            REASON_EXISTS,
            f'Resource "{name}" of Kind "{kind}" already exists and is not managed by MPIJob',
        )
    elif observed.create_failure is not None and not observed.create_failure.permanent:
        # transient (quota, conflicts, server errors): retried with back-off, shown until it clears
        failure = observed.create_failure
        message = f"{failure.kind} {failure.name} could not be created ({failure.code}): {failure.message}"
        c.set(cond.CREATED, cond.FALSE, REASON_FAILED_CREATE, truncate(message))
    elif not cond.is_true(c.items, cond.CREATED) and children_created(job, config, observed, v):
        c.set(cond.CREATED, cond.TRUE, REASON_CREATED, f"MPIJob {ns_name} is created.")


def _finished_before(st: dict[str, Any], conds: list[dict[str, Any]], now: str) -> dict[str, Any]:
    """A job that finished in an earlier sync: its status stays, tidied."""
    # Older writers (upstream, earlier versions) may have left these behind.
    conds = [c if not _restarting(c) else {**c, "status": cond.FALSE} for c in conds]
    st["conditions"] = cond.state_last(conds)
    st.setdefault("completionTime", now)  # upstream #647
    return st


def _suspension(job: MPIJob, st: dict[str, Any], c: _Conditions, now: str) -> None:
    """Suspended and its Running=False, or the resume, which restarts the deadline's clock."""
    if job.suspended:
        c.set(cond.SUSPENDED, cond.TRUE, REASON_SUSPENDED, "MPIJob suspended")
        c.set(cond.RUNNING, cond.FALSE, REASON_SUSPENDED, f"MPIJob {job.namespace}/{job.name} is suspended.")
    else:
        if cond.is_true(c.items, cond.SUSPENDED):
            c.set(cond.SUSPENDED, cond.FALSE, REASON_RESUMED, "MPIJob resumed")
            st["startTime"] = now  # the deadline restarts on resume, as for a Job
        st.setdefault("startTime", now)


def _outcome(
    job: MPIJob,
    v: JobView,
    observed: Observed,
    st: dict[str, Any],
    c: _Conditions,
    records: tuple[WorkerFailure, ...],
) -> bool:
    """Succeeded or Failed, if the job finishes in this sync (the first cause that applies); True if so."""
    ns_name = f"{job.namespace}/{job.name}"
    launcher = v.launcher
    refused = observed.create_failure
    if refused is not None and refused.permanent and not job.suspended:
        # Invalid from the API server: no retry heals it, and nothing is created after it
        lines = childfields.describe(job.name, job.namespace, refused)
        c.set(
            cond.FAILED,
            cond.TRUE,
            REASON_VALIDATION,
            truncate("Found validation errors: " + "; ".join(lines)),
        )
    elif launcher is not None and (gate := unreachable(v.launcher_pods)) is not None:
        message = f"MPIJob {ns_name} has failed: {gate}"
        if records:  # why they were unreachable, most likely
            message += f"; the last worker failure: {failures.describe(_latest(records).evidence)}"
        c.set(cond.FAILED, cond.TRUE, REASON_UNREACHABLE, truncate(message))
    elif launcher is not None and condition_true(launcher, "Complete"):
        c.set(cond.SUCCEEDED, cond.TRUE, REASON_SUCCEEDED, f"MPIJob {ns_name} successfully completed.")
        completion = parse_time((launcher.get("status") or {}).get("completionTime"))
        st["completionTime"] = format_time(completion) if completion else c.now
        return True
    elif launcher is not None and condition_true(launcher, "Failed"):
        reason, message = launcher_failure(job, launcher, v)
        if records:  # a rank lost with its worker fails mpirun: the worker's end says why
            message += f"; the last worker failure: {failures.describe(_latest(records).evidence)}"
        c.set(cond.FAILED, cond.TRUE, reason, truncate(message))
    elif not job.suspended and failures.exceeded(job, records):
        c.set(cond.FAILED, cond.TRUE, REASON_WORKER_FAILURES, truncate(worker_failures_message(job, records)))
    elif not job.suspended and deadline_passed(job, st, observed):
        message = f"MPIJob {ns_name} was active longer than specified deadline"
        c.set(cond.FAILED, cond.TRUE, REASON_DEADLINE, message)
    else:
        return False
    st.setdefault("completionTime", c.now)
    return True


def _progress(
    job: MPIJob, v: JobView, observed: Observed, c: _Conditions, records: tuple[WorkerFailure, ...]
) -> None:
    """Running or Restarting for an active job that does not finish in this sync."""
    evicted_before = _restarting_for(c.items) == REASON_EVICTED
    _running_or_restarting(job, v, observed, c.set, records, evicted_before)
    running = cond.find(c.items, cond.RUNNING)
    if (
        running is not None
        and running.get("reason") == REASON_IMAGE_PULL
        and image_pull_problem(_live_pods(job, v)) is None
    ):
        c.items = [x for x in c.items if x is not running]  # pulled: the job is starting, not yet Running


def _finish(st: dict[str, Any], conds: list[dict[str, Any]], ns_name: str) -> dict[str, Any]:
    """The status of a job that finishes in this sync, or of an active one: conditions in state order."""
    if cond.is_finished(conds) and cond.find(conds, cond.RUNNING) is None:
        # upstream #787: a finished job always shows Running, dated at completion.
        conds.append(
            {
                "type": cond.RUNNING,
                "status": cond.FALSE,
                "reason": REASON_RUNNING,
                "message": f"MPIJob {ns_name} is finished but Running condition was never set.",
                "lastUpdateTime": st["completionTime"],
                "lastTransitionTime": st["completionTime"],
            }
        )
    if cond.is_finished(conds):
        # Finished just now: upstream's last write lists no workers and no active launcher pod (the
        # status is kept as is afterwards, so nothing may stay active, e.g. after our deadline).
        st["replicaStatuses"][names.WORKER] = {}
        if isinstance(st["replicaStatuses"].get(names.LAUNCHER), dict):
            st["replicaStatuses"][names.LAUNCHER].pop("active", None)
    st["conditions"] = cond.state_last(conds)
    return st


def _node_condition(
    job: MPIJob, v: JobView, observed: Observed, config: Config, conds: list[dict[str, Any]], now: str
) -> list[dict[str, Any]]:
    """NodeUnavailable while a node holding the job's pods is not Ready; a failure in this sync names
    such nodes too (they are the likeliest cause); at the finish the condition turns False."""
    ns_name = f"{job.namespace}/{job.name}"
    lost = nodes.lost_nodes(job.worker_replicas, v, observed)
    force_after = config.force_delete_lost_workers_after
    if cond.is_finished(conds):
        failed = cond.find(conds, cond.FAILED)
        if lost and failed is not None and failed.get("status") == cond.TRUE:
            message = str(failed.get("message", "")).rstrip(".") + ". " + nodes.describe(lost, force_after)
            conds = [{**c, "message": truncate(message)} if c is failed else c for c in conds]
        if cond.is_true(conds, cond.NODE_UNAVAILABLE):
            message = f"MPIJob {ns_name} has finished."
            conds = cond.set_condition(
                conds, cond.NODE_UNAVAILABLE, cond.FALSE, REASON_FINISHED, message, now
            )
        return conds
    if lost:
        reason = REASON_NODE_OUT_OF_SERVICE if all(n.out_of_service for n in lost) else REASON_NODE_NOT_READY
        message = truncate(f"MPIJob {ns_name} is held up: {nodes.describe(lost, force_after)}")
        return cond.set_condition(conds, cond.NODE_UNAVAILABLE, cond.TRUE, reason, message, now)
    if cond.is_true(conds, cond.NODE_UNAVAILABLE):
        message = f"No pod of MPIJob {ns_name} is on a node that is not Ready."
        return cond.set_condition(conds, cond.NODE_UNAVAILABLE, cond.FALSE, REASON_NODES_READY, message, now)
    return conds


def _restarting(c: Mapping[str, Any]) -> bool:
    return c.get("type") == cond.RESTARTING and c.get("status") == cond.TRUE


def _latest(records: tuple[WorkerFailure, ...]) -> WorkerFailure:
    return max(records, key=lambda r: (r.failed_at, r.index))


def worker_failures_message(job: MPIJob, records: tuple[WorkerFailure, ...]) -> str:
    """Why the job failed: how often, the bound, and the last failed pod's own words."""
    limit = failures.limit(job)
    bound = (
        f"backoffLimit {limit}"
        if job.spec.run_policy.backoff_limit is not None
        else f"the default backoffLimit {limit}"
    )
    return (
        f"MPIJob {job.namespace}/{job.name} has failed: worker pods failed {failures.total(records)} times,"
        f" more than {bound} allows; the last: {failures.describe(_latest(records).evidence)}"
    )


def _restarting_for(conds: list[dict[str, Any]]) -> str:
    """The reason of a True Restarting condition, else ""."""
    c = cond.find(conds, cond.RESTARTING)
    return str(c.get("reason", "")) if c is not None and _restarting(c) else ""


def _running_or_restarting(
    job: MPIJob,
    v: JobView,
    observed: Observed,
    setc: Any,
    records: tuple[WorkerFailure, ...],
    evicted_before: bool,
) -> None:
    """Restarting while pods are taken away or replaced, Running once all run. An eviction stays the
    cause said while the launcher restarts for it (its rank went with the evicted worker)."""
    ns_name = f"{job.namespace}/{job.name}"
    replicas = job.worker_replicas
    workers = {i: p for i, p in v.workers.items() if i < replicas}
    evicted = evictions.evictions(replicas, v, observed)
    failed = sorted(i for i, p in workers.items() if phase(p) == "Failed" and not evictions.is_evicted(p))
    running_launchers = [p for p in v.launcher_pods if phase(p) == "Running"]
    failed_launchers = [p for p in v.launcher_pods if phase(p) == "Failed"]
    if evicted:
        setc(cond.RESTARTING, cond.TRUE, REASON_EVICTED, truncate(evictions.describe(evicted, replicas)))
    elif failed:
        pods = ", ".join(names.worker_name(job.name, i) for i in failed)
        message = f"MPIJob {ns_name} is restarting: worker pod(s) {pods} failed and are being replaced"
        mine = [r for r in records if r.index in failed]
        if mine:
            last = _latest(tuple(mine))
            message += (
                f" after a back-off ({failures.total(records)} of {failures.limit(job)} failures allowed);"
                f" the last: {failures.describe(last.evidence)}"
            )
        setc(cond.RESTARTING, cond.TRUE, REASON_RESTARTING, truncate(message))
    elif v.launcher is not None and failed_launchers and not running_launchers and _replaced(v.launcher_pods):
        # Only once the Job made a new pod: a failed pod the Job does not retry is the job failing.
        if not evicted_before:
            pod = newest(failed_launchers)
            setc(
                cond.RESTARTING,
                cond.TRUE,
                REASON_RESTARTING,
                truncate(f"MPIJob {ns_name} is restarting: {pod_failure(pod)[1]}"),
            )
    elif (stuck := image_pull_problem(_live_pods(job, v))) is not None:
        setc(cond.RUNNING, cond.FALSE, REASON_IMAGE_PULL, truncate(f"MPIJob {ns_name} is waiting: {stuck}"))
    elif v.launcher is not None and running_launchers:
        running_workers = sum(1 for p in workers.values() if phase(p) == "Running")
        if running_workers == replicas:
            setc(cond.RUNNING, cond.TRUE, REASON_RUNNING, f"MPIJob {ns_name} is running.")


def _live_pods(job: MPIJob, v: JobView) -> list[dict[str, Any]]:
    workers = [p for i, p in sorted(v.workers.items()) if i < job.worker_replicas]
    return [p for p in [*workers, *v.launcher_pods] if not (p.get("metadata") or {}).get("deletionTimestamp")]


def image_pull_problem(pods: list[dict[str, Any]]) -> str | None:
    """The first pod container the kubelet cannot get the image of, and the kubelet's words, else None."""
    for pod in pods:
        st = pod.get("status") or {}
        statuses = [st.get("initContainerStatuses"), st.get("containerStatuses")]
        for cs in [c for group in statuses if isinstance(group, list) for c in group]:
            state = cs.get("state") if isinstance(cs, Mapping) else None
            waiting = state.get("waiting") if isinstance(state, Mapping) else None
            if isinstance(waiting, Mapping) and waiting.get("reason") in IMAGE_PULL_REASONS:
                name = (pod.get("metadata") or {}).get("name", "")
                text = (
                    f"pod {name}: container {cs.get('name', '')} cannot get its image ({waiting['reason']})"
                )
                detail = str(waiting.get("message") or "").strip()
                return f"{text}: {detail}" if detail else text
    return None


def _replaced(pods: list[dict[str, Any]]) -> bool:
    """A pod newer than the newest failed one is not Failed: the Job is retrying."""
    latest = newest(pods)
    return phase(latest) != "Failed"


def deadline_passed(job: MPIJob, st: Mapping[str, Any], observed: Observed) -> bool:
    moment = deadline(job, st)
    return moment is not None and moment <= observed.now


def deadline(job: MPIJob, st: Mapping[str, Any]) -> Any:
    ads = job.spec.run_policy.active_deadline_seconds
    start = parse_time(st.get("startTime"))
    if ads is None or start is None:
        return None
    return add_seconds(start, ads)


def newest(pods: list[dict[str, Any]]) -> dict[str, Any]:
    def key(p: Mapping[str, Any]) -> tuple[str, str]:
        meta = p.get("metadata") or {}
        return str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")

    return max(pods, key=key)


def pod_failure(pod: Mapping[str, Any]) -> tuple[str, str]:
    """(reason, message) of a failed pod: the pod's own reason (Evicted, ...) or its failed container's
    (OOMKilled, Error), and which container exited with which code."""
    status = pod.get("status") or {}
    name = (pod.get("metadata") or {}).get("name", "")
    reason = str(status.get("reason") or "")
    detail = ""
    for cs in status.get("containerStatuses") or ():
        if not isinstance(cs, Mapping):
            continue
        term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
        if isinstance(term, Mapping) and term.get("exitCode", 0) != 0:
            treason = str(term.get("reason") or "")
            detail = f"container {cs.get('name', '')} exited with code {term.get('exitCode')}"
            if treason:
                detail += f" ({treason})"
            reason = reason or treason
            break
    message = f"pod {name} failed"
    if detail:
        message = f"pod {name} {detail}"
    if status.get("message"):
        message += f": {status['message']}"
    return reason, message


def unreachable(pods: list[dict[str, Any]]) -> str | None:
    """The message of a launcher pod whose wait for the workers timed out (its init container exited
    with WAIT_UNREACHABLE_EXIT, now or before a restart), else None."""
    for pod in pods:
        for cs in (pod.get("status") or {}).get("initContainerStatuses") or ():
            if not isinstance(cs, Mapping) or cs.get("name") != names.WAIT_CONTAINER:
                continue
            for state in (cs.get("state"), cs.get("lastState")):
                term = (state or {}).get("terminated") if isinstance(state, Mapping) else None
                if isinstance(term, Mapping) and term.get("exitCode") == names.WAIT_UNREACHABLE_EXIT:
                    name = (pod.get("metadata") or {}).get("name", "")
                    detail = str(term.get("message") or "").strip() or "workers not reachable over SSH"
                    return f"launcher pod {name}: {detail}"
    return None


def launcher_failure(job: MPIJob, launcher: Mapping[str, Any], v: JobView) -> tuple[str, str]:
    """The launcher Job's failure reason as the Job gives it (BackoffLimitExceeded, DeadlineExceeded, ...:
    what alert rules match on); the newest failed launcher pod's reason, container and exit code go into
    the message."""
    jc = condition(launcher, "Failed") or {}
    reason = str(jc.get("reason") or REASON_FAILED)
    message = str(jc.get("message") or f"MPIJob {job.namespace}/{job.name} has failed")
    failed = [p for p in v.launcher_pods if phase(p) == "Failed"]
    if failed:
        pod_reason, pod_message = pod_failure(newest(failed))
        message += ": " + pod_message
        if pod_reason and pod_reason not in pod_message:
            message += f" ({pod_reason})"
    return reason, truncate(message)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _launcher_active(launcher: Mapping[str, Any], pods: list[dict[str, Any]]) -> int:
    """The launcher's Running pods, and those that ended but that the Job has not counted yet: until the
    Job controller takes the end in (Complete, or a failure and a new pod), the Job itself shows the pod
    active, and a count of 0 in between would be a write the next transition undoes."""
    running = sum(1 for p in pods if phase(p) == "Running")
    st = launcher.get("status") or {}
    ended = sum(1 for p in pods if phase(p) in ("Succeeded", "Failed"))
    uncounted = max(0, ended - _count(st.get("succeeded")) - _count(st.get("failed")))
    return running + min(uncounted, _count(st.get("active")))


def replica_statuses(job: MPIJob, v: JobView, old: Any, finished: bool) -> dict[str, Any]:
    """Upstream's `replicaStatuses`, zero counts omitted and no `selector` (upstream never sets one):

    - Launcher, while our launcher Job exists: `failed` from the Job, `succeeded: 1` once it is Complete,
      else (not Failed) `active` = its Running pods, and ended pods the Job has not counted yet. Without
      the Job the previous entry stays as it was.
    - Worker, always present: the phases of workers 0..replicas-1, or `{}` while suspended and once the
      launcher Job has finished (upstream lists no workers then).
    - A finished job keeps its previous map; Worker is reset to `{}` if cleanPodPolicy deletes workers
      (and by `_compute` in the call that finishes the job).
    """
    out: dict[str, Any] = clone(old) if isinstance(old, Mapping) else {}
    if finished:
        if job.spec.run_policy.clean_pod_policy in ("Running", "All"):
            out[names.WORKER] = {}
        return out
    launcher = v.launcher
    done = launcher is not None and any(condition_true(launcher, c) for c in ("Complete", "Failed"))
    if launcher is not None:
        failed = (launcher.get("status") or {}).get("failed") or 0
        entry: dict[str, Any] = {}
        if isinstance(failed, int) and not isinstance(failed, bool) and failed:
            entry["failed"] = failed
        if condition_true(launcher, "Complete"):
            entry["succeeded"] = 1
        elif not condition_true(launcher, "Failed"):
            active = _launcher_active(launcher, v.launcher_pods)
            if active:
                entry["active"] = active
        out[names.LAUNCHER] = entry
    worker: dict[str, Any] = {}
    if not job.suspended and not done:
        phases = [phase(p) for i, p in v.workers.items() if i < job.worker_replicas]
        for key, ph in (("active", "Running"), ("failed", "Failed"), ("succeeded", "Succeeded")):
            if phases.count(ph):
                worker[key] = phases.count(ph)
    out[names.WORKER] = worker
    return out
