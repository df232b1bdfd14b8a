"""Kubernetes events: one per status transition, as upstream emits them, saying the start-up phases'
durations too."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from render import conditions as cond
from render import gang
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
    (cond.NODE_UNAVAILABLE, cond.TRUE): WARNING,  # NodeNotReady, NodeOutOfService
    (cond.NODE_UNAVAILABLE, cond.FALSE): NORMAL,  # NodesReady, MPIJobFinished
    (gang.GANG_SCHEDULED, cond.FALSE): WARNING,  # GangSchedulingUnavailable, GangUnschedulable
    (gang.GANG_SCHEDULED, cond.TRUE): NORMAL,
}
_ORDER = (
    cond.CREATED,
    cond.SUSPENDED,
    cond.NODE_UNAVAILABLE,
    gang.GANG_SCHEDULED,
    cond.RESTARTING,
    cond.RUNNING,
    cond.SUCCEEDED,
    cond.FAILED,
)


@attrs.frozen
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


# Reasons of the event that says how long the start-up phases took when no condition event of the same
# transition can carry it (render.phases).
REASON_WORKERS_RUNNING = "WorkersRunning"
REASON_DURATION = "JobDuration"


def events(
    mpijob: Mapping[str, Any] | MPIJob,
    old_status: Mapping[str, Any] | None,
    new_status: Mapping[str, Any] | None,
    observed: Observed | None = None,
) -> list[Event]:
    """One event per condition whose status or reason changed between old and new. With ``observed`` (the
    children the transition was computed from), the start-up phases the transition reveals are said in
    the same events: the workers' and the launcher's start in the Running event, the whole duration in
    the Succeeded or Failed one. So a job costs one event write per transition."""
    out = _condition_events(old_status, new_status)
    if observed is None:
        return [e for _, e in out]
    start, end = duration_sentences(mpijob, old_status, new_status, observed)
    for sentence, carriers, reason in (
        # a job that finished before a Running status was written says its start-up when it finishes
        (start, (cond.RUNNING, cond.SUCCEEDED, cond.FAILED), REASON_WORKERS_RUNNING),
        (end, (cond.SUCCEEDED, cond.FAILED), REASON_DURATION),
    ):
        if not sentence:
            continue
        i = next((i for i, (ctype, _) in enumerate(out) if ctype in carriers), None)
        if i is None:
            out.append((None, Event(NORMAL, reason, sentence)))
        else:
            ctype, e = out[i]
            out[i] = (ctype, attrs.evolve(e, message=f"{e.message} {sentence}".strip()))
    return [e for _, e in out]


def _seconds(value: float) -> str:
    return f"{round(value, 1):g} s"


def duration_sentences(
    mpijob: Mapping[str, Any] | MPIJob,
    old_status: Mapping[str, Any] | None,
    new_status: Mapping[str, Any] | None,
    observed: Observed,
) -> tuple[str, str]:
    """The durations of render.phases.samples as two sentences (either may be empty): the workers' and the
    launcher's start at the job's first run (or resume), and the whole duration when it finishes."""
    if cond.clean((old_status or {}).get("conditions")) == cond.clean((new_status or {}).get("conditions")):
        return "", ""  # no transition (most syncs): skip parsing the job
    try:
        job = mpijob if isinstance(mpijob, MPIJob) else parse_mpijob(mpijob)
    except ValidationError:  # an invalid job has no phases; its Failed condition says why
        return "", ""
    s = ph.samples(job, old_status, new_status, observed)
    start = []
    workers = s.phase(ph.WORKERS_RUNNING)
    if workers is not None:
        resumed = cond.find(cond.clean((new_status or {}).get("conditions")), cond.SUSPENDED) is not None
        since = "it resumed" if resumed else "its children were created"
        who = "The worker was" if s.workers == 1 else f"All {s.workers} workers were"
        start.append(f"{who} running {_seconds(workers)} after {since}")
    launcher = s.phase(ph.LAUNCHER_RUNNING)
    if launcher is not None:
        part = f"{_seconds(launcher)} after the last worker"
        if s.gate_wait is not None:
            part += f" (its SSH gate waited {_seconds(s.gate_wait)})"
        start.append(f"the launcher {part}" if start else f"The launcher was running {part}")
    end = ""
    if s.duration is not None:
        outcome, total = s.duration
        end = f"It {outcome.lower()} {_seconds(total)} after it was submitted"
        ran = s.phase(ph.FINISHED)
        if ran is not None:
            end += f"; the launcher ran {_seconds(ran)}"
        end += "."
    return ("; ".join(start) + "." if start else ""), end


def _condition_events(
    old_status: Mapping[str, Any] | None, new_status: Mapping[str, Any] | None
) -> list[tuple[str | None, Event]]:
    old = cond.clean((old_status or {}).get("conditions"))
    new = cond.clean((new_status or {}).get("conditions"))
    out: list[tuple[str | None, Event]] = []
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
        out.append((ctype, Event(etype, str(c.get("reason", "")), str(c.get("message", "")))))
    return out
