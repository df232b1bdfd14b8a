"""Children someone else keeps deleting (the Service, ConfigMap, Secret, PodGroup, the launcher Job, a
worker pod): without a bound, the operator and that other party would write as fast as they can, one
create for each delete. The first re-create goes at once; each further one within RESET_SECONDS of the
previous create waits 10 s, doubling, at most 6 min (the delays of failed workers, render/failures.py). So
a child that is deleted again and again costs at most one create every 6 minutes. A child the operator
deleted itself (the PodGroup of a suspended job, its workers) starts afresh.

A failed worker's replacement is not held here: its own back-off (render/failures.py) is longer, since
it starts from the failure, after the create. Its create still counts, and the operator's delete of the
failed pod does not start afresh: a replacement deleted by someone else before it fails waits at least
10 s, so a party deleting worker pods by name (kwok replays a delete meant for the pod just replaced)
cannot turn each replacement into several creates. Pure: the counts live in the job's memory
(JobMemory.created)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

import attrs

from reconcile.engine.executor import ExecResult
from reconcile.engine.plan import Plan
from render.failures import BACKOFF_CAP_SECONDS, backoff_seconds

HELD_KINDS = frozenset({"Service", "ConfigMap", "Secret", "PodGroup", "Job", "Pod"})
RESET_SECONDS = 600.0


@attrs.frozen
class Created:
    """One child of the job: how often this operator created it, when last (its clock), and the uid the
    last create got."""

    kind: str
    name: str
    count: int
    last: datetime
    uid: str = ""


def delay(
    made: tuple[Created, ...], kind: str, name: str, now: datetime, failed: Collection[str] = ()
) -> float:
    """Seconds until the child may be created again (0: now). ``failed``: uids of failed worker pods
    counted (render/failures.py): replacing one of them is the failure back-off's business."""
    if kind not in HELD_KINDS:
        return 0.0
    entry = next((c for c in made if c.kind == kind and c.name == name), None)
    if entry is None or (entry.uid and entry.uid in failed):
        return 0.0
    since = (now - entry.last).total_seconds()
    if since >= RESET_SECONDS:
        return 0.0
    # the 1st re-create (count 1) at once, then 10 s, 20 s, ... up to the cap
    wait = min(BACKOFF_CAP_SECONDS, backoff_seconds(entry.count - 1))
    return max(0.0, wait - since)


def hold(
    made: tuple[Created, ...], plan: Plan, now: datetime, failed: Collection[str] = ()
) -> tuple[Plan, float | None]:
    """The plan without the creates that must wait, and the shortest wait among them (None: none)."""
    waits = {c.key: delay(made, c.key.kind, c.key.name, now, failed) for c in plan.creates}
    held = {k: w for k, w in waits.items() if w > 0}
    if not held:
        return plan, None
    kept = tuple(c for c in plan.creates if c.key not in held)
    return attrs.evolve(plan, creates=kept), min(held.values())


def record(
    made: tuple[Created, ...], result: ExecResult, now: datetime, failed: Collection[str] = ()
) -> tuple[Created, ...]:
    """`made` after this sync's writes. ``failed``: as for ``delay``; our delete of such a pod (the end
    of its back-off) keeps the count."""
    by_child = {(c.kind, c.name): c for c in made}
    for outcome in result.done:
        kind, name = outcome.key.kind, outcome.key.name
        if kind not in HELD_KINDS:
            continue
        if outcome.result in ("deleted", "gone"):
            before = by_child.get((kind, name))
            if before is None or not (before.uid and before.uid in failed):
                # we deleted it (a PodGroup or the workers on suspend): not someone else
                by_child.pop((kind, name), None)
        elif outcome.result == "created":
            before = by_child.get((kind, name))
            count = 1
            if before is not None and (now - before.last).total_seconds() < RESET_SECONDS:
                count = before.count + 1
            uid = outcome.uid or str(((outcome.object or {}).get("metadata") or {}).get("uid") or "")
            by_child[(kind, name)] = Created(kind, name, count, now, uid)
    return tuple(by_child[k] for k in sorted(by_child))
