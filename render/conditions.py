"""Condition bookkeeping with upstream's setCondition semantics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CREATED = "Created"
RUNNING = "Running"
RESTARTING = "Restarting"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
SUSPENDED = "Suspended"
# Not a state: True while a node that holds some of the job's pods is not Ready (render/nodes.py).
NODE_UNAVAILABLE = "NodeUnavailable"

TRUE = "True"
FALSE = "False"


def find(conditions: list[dict[str, Any]], ctype: str) -> dict[str, Any] | None:
    for c in conditions:
        if c.get("type") == ctype:
            return c
    return None


def is_true(conditions: list[dict[str, Any]], ctype: str) -> bool:
    c = find(conditions, ctype)
    return c is not None and c.get("status") == TRUE


def is_finished(conditions: list[dict[str, Any]]) -> bool:
    return is_true(conditions, SUCCEEDED) or is_true(conditions, FAILED)


def clean(conditions: object) -> list[dict[str, Any]]:
    """Conditions from a live status; anything malformed is dropped."""
    if not isinstance(conditions, list):
        return []
    return [dict(c) for c in conditions if isinstance(c, Mapping) and isinstance(c.get("type"), str)]


def set_condition(
    conditions: list[dict[str, Any]], ctype: str, status: str, reason: str, message: str, now: str
) -> list[dict[str, Any]]:
    """The new list. No change when status and reason are unchanged; lastTransitionTime is kept when only
    the reason changes; Running and Restarting replace each other; Succeeded or Failed turn Running and
    Failed to False keeping their times, and Restarting to False."""
    current = find(conditions, ctype)
    if current is not None and current.get("status") == status and current.get("reason") == reason:
        return conditions
    new = {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastUpdateTime": now,
        "lastTransitionTime": now,
    }
    if current is not None and current.get("status") == status and current.get("lastTransitionTime"):
        new["lastTransitionTime"] = current["lastTransitionTime"]
    out = []
    for c in conditions:
        t = c.get("type")
        if t == ctype or (ctype in (RUNNING, RESTARTING) and t in (RUNNING, RESTARTING)):
            continue
        if ctype in (SUCCEEDED, FAILED) and t in (RUNNING, FAILED) and c.get("status") == TRUE:
            # Times kept, as upstream: Running's lastTransitionTime stays the moment the job started
            # running, so finish minus it is the run time dashboards show.
            c = {**c, "status": FALSE}
        elif ctype in (SUCCEEDED, FAILED) and t == RESTARTING and c.get("status") == TRUE:
            c = {
                **c,
                "status": FALSE,
                "lastUpdateTime": now,
                "lastTransitionTime": now,
            }  # finished jobs never restart
        out.append(c)
    out.append(new)
    return out


def current_state(conditions: list[dict[str, Any]]) -> str:
    """The job's state: the finish, else Suspended, Restarting or Running when True, else Created."""
    for ctype in (SUCCEEDED, FAILED, SUSPENDED, RESTARTING, RUNNING):
        if is_true(conditions, ctype):
            return ctype
    return CREATED


def state_last(conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The list with the current state's condition last, so `.status.conditions[-1:].type` (the Kubeflow
    printer-column convention) reads the state. Only the order changes; the list is keyed by type."""
    state = current_state(conditions)
    last = [c for c in conditions if c.get("type") == state]
    if not last or conditions[-1] is last[0]:
        return conditions
    return [c for c in conditions if c.get("type") != state] + last
