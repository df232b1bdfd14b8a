"""The writes of the objects a sync holds rather than renders: the MPIJob's status and its deletion after
the TTL, and the launcher Job's startTime cleared on resume. Each goes through the controller's one Writer,
and its answer into the cache at once."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs

from reconcile.engine.writer import WriteFailed, Writer, WriteRequest, WriteVerb, delete_options
from reconcile.runtime.informer import Informer

log = logging.getLogger(__name__)


@attrs.frozen
class HeldWrites:
    writer: Writer
    mpijobs: Informer
    jobs: Informer

    def status(self, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        body = {**obj, "status": status}  # serialized as it is sent: no copy of the rest needed
        updated = self._write(obj, "update", body, subresource="status")
        self.mpijobs.observe(updated)
        return updated

    def delete_expired(self, key: str, obj: dict[str, Any]) -> None:
        log.info("TTL after finish expired, deleting the MPIJob", extra={"key": key})
        try:
            self._write(obj, "delete", delete_options(str(obj["metadata"].get("uid", ""))))
        except WriteFailed as err:
            if err.status not in (404, 409):
                raise

    def clear_start_time(self, launcher: Mapping[str, Any]) -> None:
        """On resume, clear the suspended launcher Job's startTime first: else its template is immutable."""
        log.info(
            "clearing the launcher Job's startTime to resume", extra={"job": launcher["metadata"]["name"]}
        )
        updated = self._write(launcher, "merge-patch", {"status": {"startTime": None}}, subresource="status")
        self.jobs.observe(updated)

    def _write(
        self, target: Mapping[str, Any], verb: WriteVerb, body: Any, subresource: str = ""
    ) -> dict[str, Any]:
        meta = target["metadata"]
        request = WriteRequest(
            verb,
            str(target["apiVersion"]),
            str(target["kind"]),
            str(meta.get("namespace", "")),
            str(meta["name"]),
            body,
            subresource=subresource,
        )
        answer = self.writer.send(request) or {}
        answer.setdefault("apiVersion", target["apiVersion"])
        answer.setdefault("kind", target["kind"])
        return answer
