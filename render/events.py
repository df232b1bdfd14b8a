"""Kubernetes events for each status transition, as upstream emits them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from render import conditions as cond
from render import phases as ph
from render.api import MPIJob
from render.errors import ValidationError
from render.observed import Observed
from render.parse import parse_mpijob

NORMAL = "Normal"
WARNING = "Warning"

# (condition type, status) -> event type; reasons and messages come from the condition.
_EVENT_TYPE = {
    (cond.CREATED, cond.TRUE): NORMAL,
    (cond.CREATED, cond.FALSE): WARNING,  # ErrResourceExists
    (cond.SUSPENDED, cond.TRUE): NORMAL,
    (cond.SUSPENDED, cond.FALSE): NORMAL,  # MPIJobResumed
    (cond.RUNNING, cond.TRUE): NORMAL,
    (cond.RESTARTING, cond.TRUE): WARNING,  # MPIJobEvicted, MPIJobRestarting
    (cond.SUCCEEDED, cond.TRUE): NORMAL,
    (cond.FAILED, cond.TRUE): WARNING,
}
_ORDER = (cond.CREATED, cond.SUSPENDED, cond.RESTARTING, cond.RUNNING, cond.SUCCEEDED, cond.FAILED)


@attrs.frozen
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


# Reasons of the events that say how long a phase took (render.phases).
REASON_WORKERS_RUNNING = "WorkersRunning"
REASON_LAUNCHER_RUNNING = "LauncherRunning"
REASON_DURATION = "JobDuration"


def events(
    mpijob: Mapping[str, Any] | MPIJob,
    old_status: Mapping[str, Any] | None,
    new_status: Mapping[str, Any] | None,
    observed: Observed | None = None,
) -> list[Event]:
    """One event per condition whose status or reason changed between old and new; with ``observed``
    (the children the transition was computed from), then one per start-up phase the transition reveals,
    saying how long it took."""
    out = _condition_events(old_status, new_status)
    if observed is not None:
        out += duration_events(mpijob, old_status, new_status, observed)
    return out


def _seconds(value: float) -> str:
    return f"{round(value, 1):g} s"


def duration_events(
    mpijob: Mapping[str, Any] | MPIJob,
    old_status: Mapping[str, Any] | None,
    new_status: Mapping[str, Any] | None,
    observed: Observed,
) -> list[Event]:
    """Normal events with the durations of render.phases.samples: the workers' and the launcher's start
    at the job's first run (or resume), the whole duration when it finishes."""
    if cond.clean((old_status or {}).get("conditions")) == cond.clean((new_status or {}).get("conditions")):
        return []  # no transition (most syncs): skip parsing the job
    try:
        job = mpijob if isinstance(mpijob, MPIJob) else parse_mpijob(mpijob)
    except ValidationError:  # an invalid job has no phases; its Failed condition says why
        return []
    s = ph.samples(job, old_status, new_status, observed)
    out = []
    workers = s.phase(ph.WORKERS_RUNNING)
    if workers is not None:
        resumed = cond.find(cond.clean((new_status or {}).get("conditions")), cond.SUSPENDED) is not None
        since = "it resumed" if resumed else "its children were created"
        who = "the worker" if s.workers == 1 else f"all {s.workers} workers"
        out.append(Event(NORMAL, REASON_WORKERS_RUNNING, f"{who} running {_seconds(workers)} after {since}"))
    launcher = s.phase(ph.LAUNCHER_RUNNING)
    if launcher is not None:
        message = f"launcher running {_seconds(launcher)} after the last worker"
        if s.gate_wait is not None:
            message += f" (its SSH gate waited {_seconds(s.gate_wait)})"
        out.append(Event(NORMAL, REASON_LAUNCHER_RUNNING, message))
    if s.duration is not None:
        outcome, total = s.duration
        message = f"MPIJob {outcome.lower()} {_seconds(total)} after it was submitted"
        ran = s.phase(ph.FINISHED)
        if ran is not None:
            message += f"; the launcher ran {_seconds(ran)}"
        out.append(Event(NORMAL, REASON_DURATION, message))
    return out


def _condition_events(
    old_status: Mapping[str, Any] | None, new_status: Mapping[str, Any] | None
) -> list[Event]:
    old = cond.clean((old_status or {}).get("conditions"))
    new = cond.clean((new_status or {}).get("conditions"))
    out = []
    for ctype in _ORDER:
        c = cond.find(new, ctype)
        if c is None:
            continue
        before = cond.find(old, ctype)
        if (
            before is not None
            and before.get("status") == c.get("status")
            and before.get("reason") == c.get("reason")
        ):
            continue
        etype = _EVENT_TYPE.get((ctype, str(c.get("status"))))
        if etype is None:
            continue
        out.append(Event(etype, str(c.get("reason", "")), str(c.get("message", ""))))
    return out
