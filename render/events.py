"""Kubernetes events for each status transition, as upstream emits them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from render import conditions as cond
from render.api import MPIJob

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


def events(
    mpijob: Mapping[str, Any] | MPIJob,
    old_status: Mapping[str, Any] | None,
    new_status: Mapping[str, Any] | None,
) -> list[Event]:
    """One event per condition whose status or reason changed between old and new."""
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
