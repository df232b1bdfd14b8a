"""Where a job's start-up time goes: its phases, measured from the objects' own timestamps, pure.

Milestones, each from the API objects (the only clock read here is none: every time is a field):

* submitted: the MPIJob's ``metadata.creationTimestamp`` (API server clock);
* children created: the ``Created=True`` condition's ``lastTransitionTime``;
* resumed: the ``Suspended=False`` condition's ``lastTransitionTime`` (a job Kueue admitted, or resumed);
* workers running: the latest worker pod's running start, where a pod's running start is the latest
  ``startedAt`` of its containers (``state.running.startedAt``, or ``state.terminated.startedAt`` of one
  that already exited): the kubelet's clock, the moment the pod's last container started (the pod's
  Ready condition is not used: readiness probes decide it, not the start);
* launcher running: the launcher pod's running start, the same way (its containers start only once
  the gate, an init container, has passed);
* finished: ``status.completionTime``.

Phases are the gaps between consecutive milestones. Each is observed on the status transition that
reveals it (see ``samples``), so a job's phases are counted once however many syncs and operator
restarts it sees. Timestamps have whole-second resolution; a gap that clocks or the status write's
one-second hold make negative counts as 0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs

from render import conditions as cond
from render import names
from render.api import MPIJob
from render.observed import KIND_JOB, KIND_POD, Observed, controller_uid, labels_of
from render.timeutil import parse_time

# The phase label's values, in the order a job passes them.
CREATED = "created"  # submit -> children created
SUSPENDED = "suspended"  # suspended -> resumed (each resume; a queued Kueue job's wait)
WORKERS_RUNNING = "workers_running"  # children created (or resumed) -> every worker running
LAUNCHER_RUNNING = "launcher_running"  # every worker running -> launcher running (the gate passed)
FINISHED = "finished"  # launcher running -> completionTime
PHASES = (CREATED, SUSPENDED, WORKERS_RUNNING, LAUNCHER_RUNNING, FINISHED)
OUTCOMES = (cond.SUCCEEDED, cond.FAILED)

# What the gate writes to its termination message once every host answers.
_GATE_WAIT = re.compile(r"reachable over SSH after ([0-9]+(?:\.[0-9]+)?)s\s*$")


@attrs.frozen
class Samples:
    """What one status transition reveals: phase gaps, the job's duration, the gate's own wait."""

    phases: tuple[tuple[str, float], ...] = ()  # (phase, seconds)
    duration: tuple[str, float] | None = None  # (outcome, seconds from submit to completion)
    gate_wait: float | None = None  # seconds the launcher's gate waited for the workers
    workers: int = 0  # workers counted in WORKERS_RUNNING

    def phase(self, name: str) -> float | None:
        return next((s for p, s in self.phases if p == name), None)

    def __bool__(self) -> bool:
        return bool(self.phases) or self.duration is not None or self.gate_wait is not None


def _conds(status: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return cond.clean((status or {}).get("conditions")) if isinstance(status, Mapping) else []


def _ltt(conds: list[dict[str, Any]], ctype: str, status: str) -> datetime | None:
    c = cond.find(conds, ctype)
    if c is None or c.get("status") != status:
        return None
    return parse_time(c.get("lastTransitionTime"))


def _gap(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds())


def _field(obj: object, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else None


def pod_running_start(pod: Mapping[str, Any]) -> datetime | None:
    """The latest container start of a pod (None while any container has not started)."""
    statuses = _field(_field(pod, "status"), "containerStatuses")
    if not isinstance(statuses, list) or not statuses:
        return None
    latest: datetime | None = None
    for cs in statuses:
        state = cs.get("state") if isinstance(cs, Mapping) else None
        if not isinstance(state, Mapping):
            return None
        started = None
        for which in ("running", "terminated"):
            s = state.get(which)
            if isinstance(s, Mapping):
                started = parse_time(s.get("startedAt"))
                break
        if started is None:
            return None
        latest = started if latest is None or started > latest else latest
    return latest


def gate_wait(pod: Mapping[str, Any]) -> float | None:
    """The seconds the launcher pod's gate reported in its termination message after it passed."""
    statuses = _field(_field(pod, "status"), "initContainerStatuses")
    for cs in statuses if isinstance(statuses, list) else ():
        if not isinstance(cs, Mapping) or cs.get("name") != names.WAIT_CONTAINER:
            continue
        term = _field(cs.get("state"), "terminated")
        if isinstance(term, Mapping) and term.get("exitCode") == 0:
            m = _GATE_WAIT.search(str(term.get("message") or ""))
            if m:
                return float(m.group(1))
    return None


def _pods(job: MPIJob, observed: Observed) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(this run's worker pods 0..replicas-1, the launcher Job's pods)."""
    workers = {names.worker_name(job.name, i) for i in range(job.worker_replicas)}
    launcher = observed.get(KIND_JOB, names.launcher_name(job.name))
    launcher_uid = None
    if launcher is not None and controller_uid(launcher) == job.uid:
        launcher_uid = (launcher.get("metadata") or {}).get("uid")
    out_w: list[dict[str, Any]] = []
    out_l: list[dict[str, Any]] = []
    for pod in observed.of_kind(KIND_POD):
        meta = pod.get("metadata")
        if not isinstance(meta, Mapping) or meta.get("namespace") not in (None, "", job.namespace):
            continue
        owner = controller_uid(pod)
        if owner == job.uid and meta.get("name") in workers:
            out_w.append(pod)
        elif (launcher_uid is not None and owner == launcher_uid) or (
            launcher is not None
            and launcher_uid is None
            and labels_of(pod).get(names.LABEL_JOB_ROLE) == names.ROLE_LAUNCHER
        ):
            out_l.append(pod)
    return out_w, out_l


def _started(conds: list[dict[str, Any]]) -> bool:
    """The job is running, or finished (it ran, perhaps without a Running=True write in between)."""
    return cond.is_true(conds, cond.RUNNING) or cond.is_finished(conds)


def _startup_due(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> bool:
    """This transition is a start-up: the first run, or the first after a resume (not a recovery from
    Restarting, and not a job that finished before)."""
    return _started(new) and not _started(old) and cond.find(old, cond.RESTARTING) is None


def samples(
    mpijob: MPIJob,
    old_status: Mapping[str, Any] | None,
    new_status: Mapping[str, Any] | None,
    observed: Observed,
) -> Samples:
    """The phases the transition old -> new reveals (each exactly once per job, or per resume for the
    start-up phases): CREATED when Created turns True; SUSPENDED when a suspended job resumes;
    WORKERS_RUNNING, LAUNCHER_RUNNING and the gate's wait when the job first runs (Running turns True,
    or it finishes without having been written Running); FINISHED and the duration when it finishes.
    A gap whose timestamps are not there (pods already gone, a container not started) is left out."""
    old, new = _conds(old_status), _conds(new_status)
    if old == new:
        return Samples()  # no transition: nothing to observe (most syncs)
    submitted = parse_time(_field(mpijob.raw.get("metadata"), "creationTimestamp"))
    created = _ltt(new, cond.CREATED, cond.TRUE)
    phases: list[tuple[str, float]] = []
    duration = None
    gate = None
    n_workers = 0

    if created is not None and not cond.is_true(old, cond.CREATED):
        gap = _gap(submitted, created)
        if gap is not None:
            phases.append((CREATED, gap))

    resumed = _ltt(new, cond.SUSPENDED, cond.FALSE)
    if resumed is not None and cond.is_true(old, cond.SUSPENDED):
        gap = _gap(_ltt(old, cond.SUSPENDED, cond.TRUE), resumed)
        if gap is not None:
            phases.append((SUSPENDED, gap))

    workers, launchers = _pods(mpijob, observed)
    launcher_start = max((t for p in launchers if (t := pod_running_start(p))), default=None)
    if _startup_due(old, new):
        starts = [pod_running_start(p) for p in workers]
        all_started = len(starts) == mpijob.worker_replicas and all(t is not None for t in starts)
        workers_at = max((t for t in starts if t is not None), default=None) if all_started else None
        begin = max((t for t in (created, resumed) if t is not None), default=None)
        gap = _gap(begin, workers_at)
        if gap is not None:
            phases.append((WORKERS_RUNNING, gap))
            n_workers = len(starts)
        gap = _gap(workers_at, launcher_start)
        if gap is not None:
            phases.append((LAUNCHER_RUNNING, gap))
        gate = next((w for p in launchers if (w := gate_wait(p)) is not None), None)

    if cond.is_finished(new) and not cond.is_finished(old):
        completed = parse_time(_field(new_status, "completionTime"))
        gap = _gap(launcher_start, completed)
        if gap is not None:
            phases.append((FINISHED, gap))
        outcome = cond.SUCCEEDED if cond.is_true(new, cond.SUCCEEDED) else cond.FAILED
        total = _gap(submitted, completed)
        if total is not None:
            duration = (outcome, total)
    return Samples(tuple(phases), duration, gate, n_workers)
