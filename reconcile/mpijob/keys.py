"""Which MPIJobs a watch event concerns: the event handlers' only job is to name their keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from reconcile.mpijob.syncstate import moot_child_event
from reconcile.runtime.informer import Store, controller_ref
from render import names

Obj = Mapping[str, Any]


@attrs.frozen
class JobKeys:
    mpijobs: Store
    jobs: Store  # the launcher Jobs: their pods map through them
    pods: Store

    def owner_key(self, obj: Obj) -> str | None:
        """The MPIJob key of a child; launcher pods are mapped through their Job's controller reference."""
        ref = controller_ref(obj)
        if ref is None:
            return None
        ns = (obj.get("metadata") or {}).get("namespace", "")
        if ref.get("kind") == "Job" and ref.get("apiVersion", "").startswith("batch/"):
            job = self.jobs.get(f"{ns}/{ref.get('name')}")
            ref = controller_ref(job) if job is not None else None
            if ref is None:
                return None
        if ref.get("kind") == names.KIND and ref.get("apiVersion") == names.API_VERSION:
            return f"{ns}/{ref.get('name')}"
        return None

    def of_child(self, old: Obj | None, new: Obj | None) -> list[str]:
        """The MPIJob of a changed child, unless nothing a sync could do follows from the change."""
        keys = {self.owner_key(o) for o in (old, new) if o is not None}
        return [k for k in sorted(k for k in keys if k is not None) if not self._moot(k, old, new)]

    def of_node(self, old: Obj | None, new: Obj | None) -> list[str]:
        """The jobs with pods on the node: its readiness or taints changed, or it is gone."""
        name = str(((new or old) or {}).get("metadata", {}).get("name", ""))
        keys = {self.owner_key(pod) for pod in self.pods.by_index("node", name)}
        return sorted(k for k in keys if k is not None)

    def _moot(self, key: str, old: Obj | None, new: Obj | None) -> bool:
        job = self.mpijobs.get(key)
        return job is not None and moot_child_event(job.get("status") or {}, old, new)
