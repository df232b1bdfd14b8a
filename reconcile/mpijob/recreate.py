"""Children someone else keeps deleting (the Service, ConfigMap, Secret, PodGroup, the launcher Job):
without a bound, the operator and that other party would write as fast as they can, one create for each
delete. The first re-create goes at once; each further one within RESET_SECONDS of the previous create
waits 10 s, doubling, at most 6 min (the delays of failed workers, render/failures.py). So a child that
is deleted again and again costs at most one create every 6 minutes. A child the operator deleted itself
(the PodGroup of a suspended job) starts afresh. Worker pods are not held here: their replacement has its
own back-off."""

from __future__ import annotations

import attrs

from reconcile.engine.executor import ExecResult
from reconcile.engine.plan import ObjectKey, Plan
from render.failures import BACKOFF_CAP_SECONDS, backoff_seconds

HELD_KINDS = frozenset({"Service", "ConfigMap", "Secret", "PodGroup", "Job"})
RESET_SECONDS = 600.0


@attrs.define
class Recreates:
    """job key -> (its uid, child -> (creates so far, when the last was sent: the monotonic clock))."""

    made: dict[str, tuple[str, dict[ObjectKey, tuple[int, float]]]] = attrs.field(factory=dict)

    def _of(self, job: str, uid: str) -> dict[ObjectKey, tuple[int, float]]:
        entry = self.made.get(job)
        if entry is None or entry[0] != uid:  # another MPIJob of the same name: a fresh start
            entry = self.made[job] = (uid, {})
        return entry[1]

    def delay(self, job: str, uid: str, key: ObjectKey, now: float) -> float:
        """Seconds until `key` may be created again (0: now)."""
        if key.kind not in HELD_KINDS:
            return 0.0
        made = self._of(job, uid).get(key)
        if made is None:
            return 0.0
        count, last = made
        if now - last >= RESET_SECONDS:
            return 0.0
        # the 1st re-create (count 1) at once, then 10 s, 20 s, ... up to the cap
        wait = min(BACKOFF_CAP_SECONDS, backoff_seconds(count - 1))
        return max(0.0, last + wait - now)

    def hold(self, job: str, uid: str, plan: Plan, now: float) -> tuple[Plan, float | None]:
        """The plan without the creates that must wait, and the shortest wait among them (None: none)."""
        waits = {c.key: self.delay(job, uid, c.key, now) for c in plan.creates}
        held = {k: w for k, w in waits.items() if w > 0}
        if not held:
            return plan, None
        kept = tuple(c for c in plan.creates if c.key not in held)
        return attrs.evolve(plan, creates=kept), min(held.values())

    def record(self, job: str, uid: str, result: ExecResult, now: float) -> None:
        for outcome in result.done:
            if outcome.key.kind not in HELD_KINDS:
                continue
            made = self._of(job, uid)
            if outcome.result in ("deleted", "gone"):
                made.pop(outcome.key, None)  # we deleted it (a PodGroup on suspend): not someone else
            elif outcome.result == "created":
                count, last = made.get(outcome.key, (0, now))
                made[outcome.key] = (1 if now - last >= RESET_SECONDS else count + 1, now)

    def forget(self, job: str) -> None:
        self.made.pop(job, None)
