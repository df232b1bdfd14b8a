"""The executor's view of the API server: a ``Writer`` sends one ``WriteRequest`` and returns the answer.

Bodies go in and answers come back as plain dicts. A write the server refused, or one that got no answer,
raises ``WriteFailed``; anything else a Writer raises (e.g. a fence that refuses every write once
leadership is lost) is not the executor's to judge and goes to its caller. The operator's Writer is
``reconcile.kubewriter.KubeWriter``; the unit tests record requests with an in-memory fake.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

import attrs

# create: POST; update: PUT (optimistic, by resourceVersion); apply: a server-side apply that forces
# conflicts; json-patch: RFC 6902; merge-patch: RFC 7386; delete: DELETE with a DeleteOptions body.
WriteVerb = Literal["create", "update", "apply", "json-patch", "merge-patch", "delete"]


@attrs.frozen
class WriteRequest:
    verb: WriteVerb
    api_version: str
    kind: str
    namespace: str  # "" for a cluster-scoped kind
    name: str  # the object's name (a create's comes from its body)
    body: Any = attrs.field(eq=False, repr=False)  # the object, the patch, or the DeleteOptions
    field_manager: str = ""
    subresource: str = ""
    dry_run: bool = False

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        sub = f"/{self.subresource}" if self.subresource else ""
        return f"{self.verb} {self.kind}{sub} {where}"


def delete_options(uid: str, grace_period_seconds: int | None = None) -> dict[str, Any]:
    """A DELETE's body: background propagation, and a uid precondition, so a same-named successor is never
    hit; a grace period when one is given (0: a force delete)."""
    options: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "propagationPolicy": "Background",
        "preconditions": {"uid": uid},
    }
    if grace_period_seconds is not None:
        options["gracePeriodSeconds"] = grace_period_seconds
    return options


class WriteFailed(Exception):
    """A write the server refused (``status``: its HTTP code) or that got no answer (``status`` None), or
    of a kind the Writer does not know (``unknown_kind``)."""

    def __init__(
        self,
        status: int | None,
        message: str,
        *,
        reason: str = "",
        causes: Sequence[Mapping[str, Any]] = (),
        unknown_kind: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason  # the Status object's reason, e.g. AlreadyExists, Conflict, Invalid
        self.causes = tuple(causes)  # an Invalid answer's field causes
        self.unknown_kind = unknown_kind

    @classmethod
    def from_answer(cls, status: int, http_reason: str, body: str | bytes | None) -> WriteFailed:
        """From a non-2xx answer and its body (a Status object, when the server sent one)."""
        try:
            decoded = json.loads(body) if body else {}
        except ValueError:
            decoded = {}
        details = decoded if isinstance(decoded, dict) else {}
        message = str(details.get("message") or f"{status} {http_reason}")
        causes = (details.get("details") or {}).get("causes") or ()
        return cls(
            status,
            message,
            reason=str(details.get("reason") or ""),
            causes=[c for c in causes if isinstance(c, Mapping)],
        )

    @property
    def code(self) -> str:
        """The request metric's code: the HTTP status, or why there was none."""
        if self.unknown_kind:
            return "discovery"
        return str(self.status) if self.status is not None else "error"

    def __str__(self) -> str:
        return self.message


class Writer(Protocol):
    def send(self, request: WriteRequest) -> dict[str, Any] | None:
        """The server's answer to ``request`` (the object as written, or a Status for a delete); raises
        ``WriteFailed`` when the write was refused or got no answer."""
