"""Small pure decisions the sync makes about live objects and statuses (unit-tested on their own)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from render import names
from render.observed import is_terminating

# Condition timestamps that render may move without the condition changing.
_CONDITION_TIMES = ("lastUpdateTime", "lastTransitionTime")


def _comparable(status: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(status or {})  # a shallow copy: nothing below writes into the values it shares
    conditions = [
        {k: v for k, v in c.items() if k not in _CONDITION_TIMES} for c in out.get("conditions") or ()
    ]
    if conditions:
        out["conditions"] = sorted(conditions, key=lambda c: str(c.get("type")))
    else:
        out.pop("conditions", None)
    out.pop("lastReconcileTime", None)
    return _drop_empty(out)


def _drop_empty(value: Any) -> Any:
    # The server drops nothing from status, but {} and [] and absent mean the same to us.
    if isinstance(value, dict):
        cleaned = {k: _drop_empty(v) for k, v in value.items()}
        return {k: v for k, v in cleaned.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_drop_empty(v) for v in value]
    return value


def status_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """True when a status write is needed: anything but a condition timestamp that only moved differs."""
    return _comparable(old) != _comparable(new)


def worth_writing(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """A status write is due: it changed, and it reports something beyond what the spec says. A new
    MPIJob whose children are not all there yet (no condition) gets no write, so a client's create
    then update of it does not conflict with us."""
    if not old and not new.get("conditions"):
        return False
    return status_changed(old, new)


def only_counts_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """The change is in ``replicaStatuses`` alone (pods starting one by one), on a status that already has
    conditions: a write that can wait for the next ones (one write per transition)."""
    if not (old or {}).get("conditions"):
        return False
    a, b = _comparable(old), _comparable(new)
    a.pop("replicaStatuses", None)
    b.pop("replicaStatuses", None)
    return a == b


def condition_true(status: Mapping[str, Any], ctype: str) -> bool:
    for c in (status or {}).get("conditions") or ():
        if c.get("type") == ctype:
            return c.get("status") == "True"
    return False


def moot_child_event(
    job_status: Mapping[str, Any], old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
) -> bool:
    """A pod of a finished job that is going away (terminating, or gone after it was): nothing a sync of
    the job could do about it (render keeps a finished job's pods only while they exist). The cleanup's
    deletes otherwise cost three syncs a pod (deletion started, grace period over, gone) that change
    nothing."""
    going = new if new is not None else old
    if going is None or going.get("kind") != "Pod" or not is_terminating(going):
        return False
    return condition_true(job_status, "Succeeded") or condition_true(job_status, "Failed")


def is_managed_externally(obj: Mapping[str, Any]) -> bool:
    """runPolicy.managedBy names another controller (e.g. MultiKueue): hands off, before any parsing."""
    managed_by = (((obj.get("spec") or {}).get("runPolicy")) or {}).get("managedBy")
    return managed_by not in (None, "", names.MANAGED_BY_SELF)


def _controller_uid(obj: Mapping[str, Any]) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return ref.get("uid")
    return None


def launcher_resume_needs_start_time_cleared(
    desired: Sequence[Mapping[str, Any]], live: Sequence[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The live launcher Job to clear ``.status.startTime`` on, when the job is being resumed.

    Kubernetes keeps a Job's template immutable once startTime is set, even while suspended, so the
    scheduling directives of a resumed job could not be applied (upstream #772, KEP-2926).
    """
    for want in desired:
        if want.get("kind") != "Job":
            continue
        if (want.get("spec") or {}).get("suspend"):
            return None
        name = want["metadata"]["name"]
        owner = _controller_uid(want)
        for obj in live:
            if obj.get("kind") != "Job" or (obj.get("metadata") or {}).get("name") != name:
                continue
            if owner is None or _controller_uid(obj) != owner:
                return None
            if (obj.get("spec") or {}).get("suspend") and (obj.get("status") or {}).get("startTime"):
                return obj
            return None
    return None
