"""Everything a sync of one MPIJob remembers for the next one: one explicit value, kept by the controller
per key and handed to ``decide`` as an input. Losing it (a restart, a new leader) costs at most a repeated
write: each field is a hint the world re-establishes, never the only record of a fact."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs

from reconcile.engine.plan import Converged
from reconcile.mpijob.recreate import Created
from render import MPIJob, SSHKey, parse_mpijob
from render.observed import CreateFailure, WorkerFailure


@attrs.frozen
class JobMemory:
    # The MPIJob (uid) this memory belongs to: a job deleted and created again under its name starts afresh.
    uid: str = ""
    # The key material for a Secret not created yet, so a retried sync renders the same Secret.
    fresh_ssh_key: SSHKey | None = None
    # The create the API server refused in the last sync: the status reports it until a create succeeds.
    create_failure: CreateFailure | None = None
    # Wanted names (kind, name) a create found taken by objects our label-filtered watches cannot see:
    # each sync reads who holds them until they are gone.
    taken: frozenset[tuple[str, str]] = frozenset()
    # Since when a status change in replica counts alone (or the job's first status) has been held back,
    # and since when a plan that only rewrites the hostfile has: one write covers pods starting one by one.
    status_held_since: datetime | None = None
    hostfile_held_since: datetime | None = None
    # Each worker index's failures so far (render/failures.py counts them, each failed pod once): the
    # back-off before a failed worker is replaced, and the bound that fails the job. A replacement pod
    # carries its index's count (an annotation), so a restarted operator goes on from it.
    worker_failures: tuple[WorkerFailure, ...] = ()
    # The children this operator created (how often, when last, the last one's uid): those someone else
    # keeps deleting, worker pods among them, are created again with back-off (recreate.py).
    created: tuple[Created, ...] = ()
    # The MPIJob as parsed at its resourceVersion (parsing and validating is pure: the same version parses
    # the same), and the children the last plan found converged (reconcile.engine.plan.Plan.converged).
    parsed: MPIJob | None = attrs.field(default=None, eq=False, repr=False)
    parsed_version: str = ""
    converged: frozenset[Converged] = attrs.field(factory=frozenset, eq=False, repr=False)

    def job(self, mpijob: Mapping[str, Any]) -> tuple[MPIJob, JobMemory]:
        """The parsed MPIJob (raises render.ValidationError), from this memory when its version was parsed."""
        version = str((mpijob.get("metadata") or {}).get("resourceVersion") or "")
        if version and self.parsed is not None and self.parsed_version == version:
            return self.parsed, self
        job = parse_mpijob(mpijob)
        return job, attrs.evolve(self, parsed=job, parsed_version=version) if version else self

    def for_job(self, uid: str) -> JobMemory:
        """This memory if it is the job's, else a fresh one."""
        return self if uid == self.uid else JobMemory(uid=uid)
