"""Time-driven behaviour: the MPIJob-level deadline and TTL."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from render import conditions as cond
from render import failures, gang, nodes
from render.api import Config, MPIJob
from render.errors import ValidationError
from render.observed import Observed
from render.parse import parse_mpijob
from render.status import deadline
from render.timeutil import add_seconds, parse_time


def _job(mpijob: Mapping[str, Any] | MPIJob) -> MPIJob | None:
    try:
        return parse_mpijob(mpijob)
    except ValidationError:
        return None


def _ttl_moment(job: MPIJob, status: Mapping[str, Any]) -> datetime | None:
    ttl = job.spec.run_policy.ttl_seconds_after_finished
    if ttl is None or not cond.is_finished(cond.clean(status.get("conditions"))):
        return None
    done = parse_time(status.get("completionTime"))
    return add_seconds(done, ttl) if done is not None else None


def ttl_expired(mpijob: Mapping[str, Any] | MPIJob, status: Mapping[str, Any], now: datetime) -> bool:
    """True once `completionTime + ttlSecondsAfterFinished <= now`: the MPIJob itself must be deleted."""
    job = _job(mpijob)
    moment = _ttl_moment(job, status or {}) if job is not None else None
    return moment is not None and moment <= now


def next_wakeup(
    mpijob: Mapping[str, Any] | MPIJob,
    status: Mapping[str, Any],
    now: datetime,
    observed: Observed | None = None,
    config: Config | None = None,
) -> datetime | None:
    """The earliest future moment at which the job changes by time alone (deadline, TTL, or with
    `observed` the end of a failed worker's back-off, and with `config` too a lost node's workers due to
    be force-deleted, and when the operator speaks for a scheduler silent about a gang), else None."""
    job = _job(mpijob)
    if job is None or job.managed_externally:
        return None
    status = status or {}
    moments = []
    ttl = _ttl_moment(job, status)
    if ttl is not None:
        moments.append(ttl)
    if not cond.is_finished(cond.clean(status.get("conditions"))) and not job.suspended:
        dl = deadline(job, status)
        if dl is not None:
            moments.append(dl)
        replace = failures.next_replacement(job, observed) if observed is not None else None
        if replace is not None:
            moments.append(replace)
    if observed is not None and config is not None:
        for moment in (
            nodes.next_force_deletion(job, status, observed, config),
            gang.next_word(job, status, observed, config),
        ):
            if moment is not None:
                moments.append(moment)
    future = [m for m in moments if m > now]
    return min(future) if future else None
