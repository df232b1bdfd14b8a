"""What a sync tells the job's owner besides the status render computes: the events and metrics of a
status transition, and the SyncFailed condition and event of syncs that keep failing."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import render
from reconcile.engine.writer import WriteFailed
from reconcile.mpijob.metrics import Metrics
from reconcile.mpijob.syncstate import condition_true, status_changed
from reconcile.runtime import events as ev
from reconcile.runtime.events import EventRecorder
from reconcile.runtime.kube import ApiError
from render import conditions as rcond
from render import phases
from render.errors import one_line
from render.status import MAX_MESSAGE
from render.timeutil import format_time

# A job whose sync fails this many times in a row gets condition SYNC_FAILED (an event every time).
SYNC_FAILURES_FOR_CONDITION = 3
SYNC_FAILED = "SyncFailed"


class SyncError(Exception):
    """A sync that did its part but must be retried (e.g. a wanted name is held by someone else)."""


def error_reason(err: Exception) -> str:
    """The reason a failed sync is counted and shown under."""
    if isinstance(err, (ApiError, WriteFailed)) and err.status is not None:
        return f"ApiError{err.status}"
    if isinstance(err, WriteFailed) and err.__cause__ is not None:
        return type(err.__cause__).__name__
    return type(err).__name__


def record_transition(
    recorder: EventRecorder,
    metrics: Metrics,
    obj: dict[str, Any],
    old: dict[str, Any],
    new: dict[str, Any],
    children: Sequence[Mapping[str, Any]],
    now: datetime,
) -> None:
    """Events and metrics of the transition old -> new, which the job now shows (written, or it had it):
    observed once per transition, so a restarted operator that finds it written counts nothing.
    ``children``: the world the status was computed from (the phases' pod start times)."""
    transition = old.get("conditions") != new.get("conditions")
    observed = render.Observed.from_objects(children, now=now) if transition else None
    job: dict[str, Any] | render.MPIJob = obj
    if observed is not None:
        with contextlib.suppress(render.ValidationError):  # an invalid job has no phases
            job = render.parse_mpijob(obj)
    for e in render.events(job, old, new, observed):
        recorder.event(obj, e.type, e.reason, e.message)
    if isinstance(job, render.MPIJob):
        assert observed is not None
        metrics.observe_phases(phases.samples(job, old, new, observed))
    if not condition_true(old, "Created") and condition_true(new, "Created"):
        metrics.jobs_created.inc()
    if not condition_true(old, "Succeeded") and condition_true(new, "Succeeded"):
        metrics.jobs_successful.inc()
    if (
        not condition_true(old, "Failed")
        and condition_true(new, "Failed")
        and _condition_reason(new, "Failed") != "MPIJobEvicted"
    ):
        metrics.jobs_failed.inc()


def sync_failed(
    recorder: EventRecorder, obj: dict[str, Any], err: Exception, failures: int, now: datetime
) -> dict[str, Any] | None:
    """Tell the job's owner that its sync failed: a Warning event, and from the third failure in a row the
    SyncFailed condition (the status to write, or None). A SyncError is a retry the job's status and
    events already explain; a 409 is an ordinary stale write."""
    if isinstance(err, SyncError) or (isinstance(err, (ApiError, WriteFailed)) and err.status == 409):
        return None
    reason = error_reason(err)
    message = one_line(f"sync failed, retried with back-off: {reason}: {err}")
    recorder.event(obj, ev.WARNING, SYNC_FAILED, message[:MAX_MESSAGE])
    if failures < SYNC_FAILURES_FOR_CONDITION:
        return None
    return _with_condition(obj, rcond.TRUE, reason, message, now)


def sync_recovered(obj: dict[str, Any], failures: int, now: datetime) -> dict[str, Any] | None:
    """The status that clears a SyncFailed condition after a sync succeeded, or None."""
    if failures < SYNC_FAILURES_FOR_CONDITION:
        return None
    return _with_condition(obj, rcond.FALSE, "Synced", "the last sync succeeded", now)


def _with_condition(
    obj: Mapping[str, Any], status: str, reason: str, message: str, now: datetime
) -> dict[str, Any] | None:
    old = obj.get("status") or {}
    conds = rcond.clean(old.get("conditions"))
    if status == rcond.FALSE and rcond.find(conds, SYNC_FAILED) is None:
        return None
    conds = rcond.set_condition(conds, SYNC_FAILED, status, reason, message[:MAX_MESSAGE], format_time(now))
    # The job's state stays last: `kubectl get mpijobs` reads its State column there.
    new = {**old, "conditions": rcond.state_last(conds)}
    return new if status_changed(old, new) else None


def _condition_reason(status: Mapping[str, Any], ctype: str) -> str:
    for c in status.get("conditions") or ():
        if c.get("type") == ctype:
            return str(c.get("reason") or "")
    return ""
