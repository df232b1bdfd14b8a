"""The heart of a sync, pure: from an MPIJob, its live children and the job's memory, what to do now.

A sync is observe -> decide -> execute -> remember (reconcile.mpijob.controller); ``mpijob plan`` calls the
same ``decide`` on state read from the API server, so it prints exactly what the operator would do. No I/O,
no clock (``now`` is an input), no randomness (fresh key material comes in through the memory).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import attrs

import render
from reconcile.engine.differ import plan
from reconcile.engine.executor import ExecResult
from reconcile.engine.plan import Delete, ObjectKey, Plan
from reconcile.mpijob import recreate
from reconcile.mpijob.memory import JobMemory
from reconcile.mpijob.policy import FIELD_MANAGER, POLICY
from reconcile.mpijob.syncstate import (
    condition_true,
    is_managed_externally,
    launcher_resume_needs_start_time_cleared,
    only_counts_changed,
    status_changed,
    worth_writing,
)
from render import conditions as rcond
from render import failures, names, nodes
from render.children.sshwait import discovers_hosts
from render.observed import CreateFailure, view

# A job's first status, and a discover_hosts.sh rewrite of a job whose launcher discovers hosts (it reads
# the list as it runs), wait this long for more (pods start one by one), then are written.
COALESCE_SECONDS = 1.0
# A change in replica counts alone rides on the next transition's write, or is written after this long:
# the counts shown lag at most this much, and a job that starts and ends within it costs no write for them.
QUIET_SECONDS = 10.0
# A discover_hosts.sh rewrite for a launcher that does not discover hosts: no process reads the list, so it
# is kept current within this long for whoever looks, and a job that starts and ends within it costs no
# write for it.
UNREAD_HOSTS_SECONDS = 60.0
# A job held by an object someone else made under a child's name is looked at again this often: that
# object's deletion wakes nothing (the child watches see only labelled objects and map events by their
# controller), and a held job's plan may have no conflict to retry with back-off (no worker or launcher is
# rendered for it).
HELD_RECHECK_SECONDS = 5.0
# A deadline or TTL further away than this is looked at again then (the queue's timer takes no years).
MAX_WAKEUP_SECONDS = 24 * 3600.0
# Slack past a moment, so the sync it wakes sees the moment passed.
_SLACK = 0.01
# Objects render reads but the job never owns: never planned against.
READ_ONLY_KINDS = frozenset({"PriorityClass", "Node"})


class Action(enum.Enum):
    IGNORE = "ignore"  # gone, being deleted, or managed by another controller
    DELETE_JOB = "delete-job"  # ttlSecondsAfterFinished expired: the MPIJob itself goes
    INVALID = "invalid"  # the spec cannot be rendered: only the status says why
    SYNC = "sync"


@attrs.frozen
class StatusDecision:
    old: dict[str, Any]
    new: dict[str, Any]  # what the status should be
    write: bool  # write ``new`` now
    held: bool  # a change held back to be written with the next ones
    wake_after: float | None  # seconds until this job must be synced again, if it must

    @property
    def shown(self) -> dict[str, Any]:
        """The status the job carries after this sync."""
        return self.new if self.write else self.old


@attrs.frozen
class Decision:
    action: Action
    memory: JobMemory
    plan: Plan = attrs.field(factory=Plan)
    # The live launcher Job whose status.startTime must be cleared before the plan (a resume: the template
    # of a Job that ever started is immutable).
    clear_start_time: Mapping[str, Any] | None = None
    # A plan that only rewrites the hostfile, held back: written by the sync at the hold's end.
    hostfile_held: bool = False
    hostfile_wake: float | None = None
    # Creates of children someone else keeps deleting, held back: the sync after this wait sends them.
    recreate_wake: float | None = None
    # A wanted name held by someone else's object: the sync after this wait looks whether it is gone.
    held_wake: float | None = None
    # The status as the world stands before the plan, and the verdict on it; ``finish`` applies the
    # verdict to the status the world shows after the plan's writes.
    status: StatusDecision | None = None

    def actions(self) -> list[str]:
        """The decision as a list of lines, in the order the controller carries them out (tests and logs;
        the status written after writes is the one they leave, by ``finish``)."""
        out: list[str] = []
        if self.action is Action.DELETE_JOB:
            out.append("delete MPIJob (ttlSecondsAfterFinished expired)")
        if self.clear_start_time is not None:
            out.append(f"clear status.startTime of Job {self.clear_start_time['metadata'].get('name')}")
        out += [str(e) for e in self.plan.entries]
        if self.hostfile_held:
            out.append("hold the hostfile patch")
        if self.recreate_wake is not None:
            out.append("hold the creates of children deleted again")
        if self.status is not None and (self.status.write or self.status.held):
            verb = "write" if self.status.write else "hold"
            state = rcond.current_state(rcond.clean(self.status.new.get("conditions")))
            out.append(f"{verb} status ({state})")
        wake = self.wake_after
        if wake is not None:
            out.append(f"wake after {wake:.2f} s")
        return out

    @property
    def wake_after(self) -> float | None:
        """Seconds until this job must be synced again by time alone, if it must."""
        status_wake = self.status.wake_after if self.status else None
        waits = [
            w for w in (status_wake, self.hostfile_wake, self.recreate_wake, self.held_wake) if w is not None
        ]
        return min(waits) if waits else None


def owns_secret(children: Sequence[Mapping[str, Any]], job_name: str, uid: str) -> bool:
    return any(
        o.get("kind") == "Secret"
        and (o.get("metadata") or {}).get("name") == names.ssh_secret_name(job_name)
        and _controller_uid(o) == uid
        for o in children
    )


def needs_fresh_key(
    mpijob: Mapping[str, Any], children: Sequence[Mapping[str, Any]], memory: JobMemory
) -> bool:
    """The observe step generates key material when this is True (decide itself has no randomness)."""
    meta = mpijob.get("metadata") or {}
    return memory.fresh_ssh_key is None and not owns_secret(
        children, str(meta.get("name", "")), str(meta.get("uid", ""))
    )


def decide(
    mpijob: Mapping[str, Any],
    children: Sequence[Mapping[str, Any]],
    memory: JobMemory,
    now: datetime,
    config: render.Config,
    *,
    field_manager: str = FIELD_MANAGER,
) -> Decision:
    """``children``: the job's live children (and its launcher's pods, objects holding names it wants,
    PriorityClasses with gang scheduling, and the Nodes its pods are bound to), as the caches hold them."""
    meta = mpijob.get("metadata") or {}
    memory = memory.for_job(str(meta.get("uid", "")))
    if meta.get("deletionTimestamp") or is_managed_externally(mpijob):
        return Decision(Action.IGNORE, memory)
    try:
        job, memory = memory.job(mpijob)
    except render.ValidationError:
        new = render.status(mpijob, render.Observed.from_objects((), now=now), config)
        old = dict(mpijob.get("status") or {})
        write = status_changed(old, new)
        return Decision(Action.INVALID, memory, status=StatusDecision(old, new, write, False, None))

    if owns_secret(children, job.name, job.uid):
        memory = attrs.evolve(memory, fresh_ssh_key=None)
    observed = _observed(children, memory, now)
    desired, known = render.render_with_status(job, observed, config)
    memory = attrs.evolve(memory, worker_failures=failures.count(job, observed))
    if render.ttl_expired(job, known, now):
        return Decision(Action.DELETE_JOB, memory)

    # Children first, status last (upstream's order): Created=True then means the children exist.
    live = [o for o in children if o.get("kind") not in READ_ONLY_KINDS]
    clear = launcher_resume_needs_start_time_cleared(desired, live)
    if clear is not None:
        cleared = {
            **clear,
            "status": {k: v for k, v in (clear.get("status") or {}).items() if k != "startTime"},
        }
        live = [cleared if o is clear else o for o in live]
    the_plan = plan(desired, live, POLICY, job.uid, field_manager=field_manager, converged=memory.converged)
    memory = attrs.evolve(memory, converged=the_plan.converged)

    window = COALESCE_SECONDS if discovers_hosts(job) else UNREAD_HOSTS_SECONDS
    hostfile_held, since = _hold(memory.hostfile_held_since, _only_host_list(the_plan), now, window)
    memory = attrs.evolve(memory, hostfile_held_since=since)
    hostfile_wake = None
    if hostfile_held:
        assert since is not None
        the_plan = Plan()  # the sync the queue hands out at the hold's end writes it
        hostfile_wake = window - (now - since).total_seconds() + _SLACK
    the_plan, held_for = recreate.hold(memory.created, the_plan, now, _failed_uids(memory))
    recreate_wake = None if held_for is None else held_for + _SLACK
    the_plan = _force_deletes(the_plan, nodes.force_deletions(job, known, observed, config))
    status, memory = settle_status(job, mpijob, known, memory, now, observed, config)
    return Decision(
        Action.SYNC,
        memory,
        plan=the_plan,
        clear_start_time=clear,
        hostfile_held=hostfile_held,
        hostfile_wake=hostfile_wake,
        recreate_wake=recreate_wake,
        held_wake=HELD_RECHECK_SECONDS if _held(job, known, observed, config) else None,
        status=status,
    )


def finish(
    mpijob: Mapping[str, Any],
    decision: Decision,
    children: Sequence[Mapping[str, Any]],
    result: ExecResult,
    answers: Sequence[Mapping[str, Any]],
    now: datetime,
    config: render.Config,
) -> tuple[StatusDecision, JobMemory]:
    """The status this sync ends with, after the plan's writes: decide's verdict (write, hold, or
    nothing) on the status as the world stands once the write results are in. ``children``: what decide
    saw; ``answers``, the objects the server returned for the writes, replace or join them. The verdict
    is decide's alone: a change the writes make that decide had not seen (children just created) is the
    next sync's to judge, which this one asks for at once.

    The status builds on the one decide computed, so what only the world before the writes showed still
    shows: a failed worker this sync replaced leaves Restarting=True (Running no longer True, which Kueue
    reads as PodsReady=False) until the replacement runs."""
    memory = remember(decision.memory, decision.plan, result, now)
    status = decision.status
    assert status is not None
    if not decision.plan.writes and memory.create_failure == decision.memory.create_failure:
        return status, memory
    job, memory = memory.job(mpijob)
    base = attrs.evolve(job, status=dict(status.new), raw={**job.raw, "status": dict(status.new)})
    observed = _observed(after(children, answers), memory, now)
    new = render.status(base, observed, config)
    memory = attrs.evolve(memory, worker_failures=failures.count(job, observed))
    write = status.write and status_changed(status.old, new)
    wakes = [w for w in (status.wake_after, _wakeup(job, new, now, observed, config)) if w is not None]
    if not status.write and not status.held and worth_writing(status.old, new):
        # A change only the writes made: the next sync judges it, at once. Their watch events may never
        # come: the answers are in the caches already, and an echo that changes nothing wakes no one.
        wakes.append(_SLACK)
    return StatusDecision(status.old, new, write, status.held, min(wakes) if wakes else None), memory


def after(
    children: Sequence[Mapping[str, Any]], answers: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The world once the write answers are in: each answer replaces the object it names, or joins."""
    by_identity = {_identity(o): o for o in answers}
    out: list[Mapping[str, Any]] = [by_identity.pop(_identity(o), o) for o in children]
    return out + list(by_identity.values())


def _identity(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return str(obj.get("kind", "")), str(meta.get("namespace", "")), str(meta.get("name", ""))


def settle_status(
    job: render.MPIJob,
    mpijob: Mapping[str, Any],
    new: dict[str, Any],
    memory: JobMemory,
    now: datetime,
    observed: render.Observed | None = None,
    config: render.Config | None = None,
) -> tuple[StatusDecision, JobMemory]:
    """``observed``: the world ``new`` was computed from (a failed worker's back-off ends by time; with
    ``config``, a lost node's workers are due to be force-deleted)."""
    old = dict(mpijob.get("status") or {})
    wake = _wakeup(job, new, now, observed, config)
    if not worth_writing(old, new):
        return StatusDecision(old, new, False, False, wake), attrs.evolve(memory, status_held_since=None)
    # Replica counts alone changed: hold the write up to QUIET_SECONDS from the first such change (a
    # transition writes them at once), so pods starting and stopping cost no writes of their own. A job's
    # first status waits COALESCE_SECONDS: a client that updates the MPIJob it just created (with the
    # create's resourceVersion) must not meet a conflict of ours. A failure is written at once.
    first = not old.get("conditions") and not condition_true(new, "Failed")
    window = COALESCE_SECONDS if first else QUIET_SECONDS
    held, since = _hold(memory.status_held_since, first or only_counts_changed(old, new), now, window)
    memory = attrs.evolve(memory, status_held_since=since)
    if held:
        assert since is not None
        until = window - (now - since).total_seconds() + _SLACK
        shown_wake = _wakeup(job, old, now, observed, config)
        wake = min(w for w in (until, shown_wake) if w is not None)
        return StatusDecision(old, new, False, True, wake), memory
    return StatusDecision(old, new, True, False, wake), memory


def remember(memory: JobMemory, the_plan: Plan, result: ExecResult, now: datetime) -> JobMemory:
    """What this sync's writes taught: the create the server refused, the names a create found taken,
    the children created (and deleted) and when."""
    failed = next((f for f in result.failures if f.verb == "create"), None)
    refused = None
    if failed is not None:
        refused = CreateFailure(
            kind=failed.key.kind,
            name=failed.key.name,
            code=failed.code,
            message=failed.message,
            permanent=failed.permanent,
            causes=failed.causes,
        )
    taken = memory.taken
    if result.replan:
        # A create met an existing object: the next syncs read who holds the name.
        settled = {o.key for o in result.done} | {f.key for f in result.failures}
        taken = taken | {(c.key.kind, c.key.name) for c in the_plan.creates if c.key not in settled}
    created = recreate.record(memory.created, result, now, _failed_uids(memory))
    return attrs.evolve(memory, create_failure=refused, taken=taken, created=created)


def _held(
    job: render.MPIJob, status: Mapping[str, Any], observed: render.Observed, config: render.Config
) -> bool:
    """An active job some of whose wanted names are held by objects it does not control."""
    if job.suspended or rcond.is_finished(rcond.clean(status.get("conditions"))):
        return False
    return bool(view(observed, job, render.wanted_names(job, config)).conflicts)


def _force_deletes(the_plan: Plan, pods: Sequence[Mapping[str, Any]]) -> Plan:
    """The plan with these pods force-deleted (grace period 0) instead of waited for or deleted."""
    if not pods:
        return the_plan
    forced = {ObjectKey.of(p): p for p in pods}
    deletes = [d for d in the_plan.deletes if d.key not in forced]
    deletes += [
        Delete(key, str(p.get("apiVersion", "v1")), str(p["metadata"].get("uid", "")), grace_period_seconds=0)
        for key, p in sorted(forced.items())
    ]
    waits = tuple(w for w in the_plan.waits if w.key not in forced)
    return attrs.evolve(the_plan, deletes=tuple(deletes), waits=waits)


def _failed_uids(memory: JobMemory) -> frozenset[str]:
    """The failed worker pods counted: their replacements wait out the failure back-off instead."""
    return frozenset(r.pod_uid for r in memory.worker_failures if r.pod_uid)


def _observed(children: Sequence[Mapping[str, Any]], memory: JobMemory, now: datetime) -> render.Observed:
    return render.Observed.from_objects(
        children,
        now=now,
        fresh_ssh_key=memory.fresh_ssh_key,
        create_failure=memory.create_failure,
        worker_failures=memory.worker_failures,
    )


_HOST_LIST_PATH = "/data/" + names.DISCOVER_HOSTS_KEY


def _only_host_list(the_plan: Plan) -> bool:
    """The plan only rewrites the ConfigMap's discover_hosts.sh (it lists the Running workers, which start
    one by one): held as a counts-only status change is. Any other drift of the ConfigMap (the hostfile
    mpirun reads) is mended at once."""
    return (
        bool(the_plan.patches)
        and the_plan.writes == len(the_plan.patches)
        and not the_plan.conflicts
        and not the_plan.waits
        and all(
            p.key.kind == "ConfigMap"
            and p.json_patch
            and all(op.get("path") == _HOST_LIST_PATH for op in p.json_patch)
            for p in the_plan.patches
        )
    )


def _hold(
    since: datetime | None, holdable: bool, now: datetime, window: float
) -> tuple[bool, datetime | None]:
    """(hold now?, the hold's start to remember)."""
    if not holdable:
        return False, None
    since = since or now
    if (now - since).total_seconds() >= window:
        return False, None
    return True, since


def _wakeup(
    job: render.MPIJob,
    status: Mapping[str, Any],
    now: datetime,
    observed: render.Observed | None,
    config: render.Config | None,
) -> float | None:
    wake = render.next_wakeup(job, status, now, observed, config)
    if wake is None:
        return None
    return min(MAX_WAKEUP_SECONDS, max(0.0, (wake - now).total_seconds()) + _SLACK)


def _controller_uid(obj: Mapping[str, Any]) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None
