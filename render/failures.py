"""Failed workers: counted per replica index, replaced after an exponential back-off, bounded.

A Failed worker pod is kept (rendered as desired, so it is not deleted) until its back-off expires:
BACKOFF_BASE_SECONDS after an index's first failure, doubling with each further failure, at most
BACKOFF_CAP_SECONDS (the delays of Kubernetes' Job controller). Then render leaves it out, so it is deleted
and created anew. The failures of all indexes count against `runPolicy.backoffLimit` (DEFAULT_BACKOFF_LIMIT
when unset, the Job's default, which the launcher Job gets too); past it the MPIJob fails.

An index's count starts afresh when its pod has run HEALTHY_SECONDS: a pod that ran that long before it
failed, or is running that long now. Ten minutes is the kubelet's reset for a crash-looping container, and
longer than the cap, so a worker that fails at the slowest pace the back-off allows still counts up.

The counts must outlive the pods they are about (a replaced pod is gone), so they are the controller's
memory: it keeps what `count()` returns and hands it back as `Observed.worker_failures`. `count()` is
idempotent (each failed pod is counted once, by uid), so render applies it to what it observes, and a
failure the memory has not seen yet still gets its back-off.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from render import names
from render.api import MPIJob
from render.evictions import is_disrupted
from render.observed import (
    KIND_POD,
    FailureEvidence,
    Observed,
    WorkerFailure,
    controller_uid,
    phase,
)
from render.timeutil import add_seconds, parse_time

BACKOFF_BASE_SECONDS = 10
BACKOFF_CAP_SECONDS = 360
HEALTHY_SECONDS = 600
DEFAULT_BACKOFF_LIMIT = 6
MAX_EVIDENCE = 512  # of a termination message; the kubelet keeps up to 4096 bytes (or 80 lines of log)


def backoff_seconds(count: int) -> int:
    """The wait before an index that has failed `count` times is replaced."""
    if count <= 0:
        return 0
    if count > 10:  # 10 * 2**9 is past the cap already; no huge powers
        return BACKOFF_CAP_SECONDS
    return min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS << (count - 1))


def replace_at(record: WorkerFailure) -> datetime:
    return add_seconds(record.failed_at, backoff_seconds(record.count))


def limit(job: MPIJob) -> int:
    value = job.spec.run_policy.backoff_limit
    return DEFAULT_BACKOFF_LIMIT if value is None else value


def total(records: Iterable[WorkerFailure]) -> int:
    return sum(r.count for r in records)


def exceeded(job: MPIJob, records: Iterable[WorkerFailure]) -> bool:
    return total(records) > limit(job)


def worker_pods(job: MPIJob, observed: Observed) -> dict[int, dict[str, Any]]:
    """Our worker pods by index, for the indexes the job has now (shared: read-only)."""
    key = ("failures.worker_pods", job.namespace, job.name, job.uid, job.worker_replicas)
    return observed.memo(key, lambda: _worker_pods(job, observed))


def _worker_pods(job: MPIJob, observed: Observed) -> dict[int, dict[str, Any]]:
    prefix = names.worker_name(job.name, 0)[:-1]
    out: dict[int, dict[str, Any]] = {}
    for pod in observed.of_kind(KIND_POD):
        meta = pod.get("metadata") or {}
        ns = meta.get("namespace")
        if (ns and ns != job.namespace) or controller_uid(pod) != job.uid:
            continue
        suffix = (
            str(meta.get("name", ""))[len(prefix) :] if str(meta.get("name", "")).startswith(prefix) else ""
        )
        if suffix.isdigit() and str(int(suffix)) == suffix and int(suffix) < job.worker_replicas:
            out[int(suffix)] = pod
    return out


def count(job: MPIJob, observed: Observed) -> tuple[WorkerFailure, ...]:
    """`observed.worker_failures` with the failed worker pods in `observed` counted, each pod once.

    Indexes the job no longer has are dropped; so is the record of an index whose pod has been running
    HEALTHY_SECONDS."""
    key = ("failures.count", job.namespace, job.name, job.uid, job.worker_replicas)
    return observed.memo(key, lambda: _count(job, observed))


def _count(job: MPIJob, observed: Observed) -> tuple[WorkerFailure, ...]:
    previous = {r.index: r for r in observed.worker_failures}
    out: dict[int, WorkerFailure] = {}
    pods = worker_pods(job, observed)
    for index, record in previous.items():
        if index < job.worker_replicas:
            out[index] = record
    for index, pod in pods.items():
        if phase(pod) == "Running" and _running_since(pod, observed.now):
            out.pop(index, None)
            continue
        if phase(pod) != "Failed" or is_disrupted(pod):
            continue  # a drain's or a taint's deletion is not the worker failing
        uid = pod_identity(pod)
        before = out.get(index)
        if before is not None and before.pod_uid == uid:
            continue
        started, finished = _run_times(pod)
        if before is None and (earlier := _annotated_count(pod)):
            # counted before the operator restarted: the replacement carries the count
            before = WorkerFailure(index, earlier, "", observed.now, FailureEvidence(pod=""))
        fresh = before is None or (
            started is not None
            and finished is not None
            and (finished - started).total_seconds() >= HEALTHY_SECONDS
        )
        out[index] = WorkerFailure(
            index=index,
            count=1 if fresh or before is None else before.count + 1,
            pod_uid=uid,
            failed_at=finished or _failed_since(pod) or observed.now,
            evidence=evidence(pod),
        )
    return tuple(out[i] for i in sorted(out))


def _annotated_count(pod: Mapping[str, Any]) -> int:
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(names.WORKER_FAILURES_ANNOTATION)
    if isinstance(value, str) and value.isdigit() and len(value) <= 6:
        return int(value)
    return 0


def pod_identity(pod: Mapping[str, Any]) -> str:
    """The uid; without one (hand-written input), the name and creation time, which a new pod changes."""
    meta = pod.get("metadata") or {}
    uid = meta.get("uid")
    if isinstance(uid, str) and uid:
        return uid
    return f"{meta.get('name', '')}@{meta.get('creationTimestamp', '')}"


def _statuses(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    st = pod.get("status") or {}
    out = []
    for key in ("initContainerStatuses", "containerStatuses"):
        group = st.get(key)
        out += [cs for cs in group if isinstance(cs, Mapping)] if isinstance(group, list) else []
    return out


def _terminated(cs: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for state in (cs.get("state"), cs.get("lastState")):
        term = state.get("terminated") if isinstance(state, Mapping) else None
        if isinstance(term, Mapping):
            return term
    return None


def _run_times(pod: Mapping[str, Any]) -> tuple[datetime | None, datetime | None]:
    """When the failed container started and finished, in the API's clock (the kubelet's)."""
    failed = _failed_container(pod)
    term = _terminated(failed) if failed is not None else None
    if term is None:
        finished = [parse_time((_terminated(cs) or {}).get("finishedAt")) for cs in _statuses(pod)]
        latest = max((f for f in finished if f is not None), default=None)
        return None, latest
    return parse_time(term.get("startedAt")), parse_time(term.get("finishedAt"))


def _failed_since(pod: Mapping[str, Any]) -> datetime | None:
    """Without a container's finish (an eviction before any started): when the pod stopped being Ready."""
    for c in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") != "True":
            return parse_time(c.get("lastTransitionTime"))
    return None


def _running_since(pod: Mapping[str, Any], now: datetime) -> bool:
    """Every container has been running HEALTHY_SECONDS."""
    statuses = [
        cs for cs in (pod.get("status") or {}).get("containerStatuses") or () if isinstance(cs, Mapping)
    ]
    if not statuses:
        return False
    for cs in statuses:
        running = (cs.get("state") or {}).get("running") if isinstance(cs.get("state"), Mapping) else None
        started = parse_time(running.get("startedAt")) if isinstance(running, Mapping) else None
        if started is None or (now - started).total_seconds() < HEALTHY_SECONDS:
            return False
    return True


def _failed_container(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for cs in _statuses(pod):
        term = _terminated(cs)
        if term is not None and term.get("exitCode", 0) != 0:
            return cs
    return None


def evidence(pod: Mapping[str, Any]) -> FailureEvidence:
    """What the pod says about its failure: its failed container's exit code, reason and termination
    message (the log's tail when the container sets terminationMessagePolicy: FallbackToLogsOnError, as
    render does for workers), or the pod's own reason and message (an eviction)."""
    meta = pod.get("metadata") or {}
    st = pod.get("status") or {}
    cs = _failed_container(pod)
    term = (_terminated(cs) if cs is not None else None) or {}
    exit_code = term.get("exitCode")
    message = str(term.get("message") or "").strip() or str(st.get("message") or "").strip()
    return FailureEvidence(
        pod=str(meta.get("name", "")),
        container=str(cs.get("name", "")) if cs is not None else "",
        exit_code=exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None,
        reason=str(st.get("reason") or term.get("reason") or ""),
        message=_tail(message),
    )


def _tail(message: str) -> str:
    """The end of a long message (where a log's error is), on one line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    text = " | ".join(lines)
    return text if len(text) <= MAX_EVIDENCE else "..." + text[-(MAX_EVIDENCE - 3) :]


def describe(e: FailureEvidence) -> str:
    """`pod p: container c exited with code 1 (Error): <message>`."""
    out = f"pod {e.pod}"
    if e.container:
        out += f": container {e.container} exited with code {e.exit_code}"
    if e.reason:
        out += f" ({e.reason})" if e.container else f": {e.reason}"
    if e.message:
        out += f": {e.message}"
    return out


def in_backoff(record: WorkerFailure | None, now: datetime) -> bool:
    return record is not None and now < replace_at(record)


def next_replacement(job: MPIJob, observed: Observed) -> datetime | None:
    """The earliest moment a failed worker kept now (or gone, deleted by someone else) is to be replaced,
    else None."""
    records = {r.index: r for r in count(job, observed)}
    if exceeded(job, records.values()):
        return None
    pods = worker_pods(job, observed)
    moments = [
        replace_at(r)
        for i, r in records.items()
        if in_backoff(r, observed.now) and (i not in pods or phase(pods[i]) == "Failed")
    ]
    return min(moments) if moments else None
