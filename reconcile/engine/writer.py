"""The executor's view of the API server: ``Writer``, the few writes it sends.

Bodies go in and answers come back as plain dicts. A refused or failed request raises what the
kubernetes client raises (``ApiException`` with the server's status and body, urllib3's ``HTTPError``,
``OSError``); ``resource`` raises ``ResourceNotFoundError`` for a kind the server (or the caller's
table of kinds) does not know. The operator's Writer is ``reconcile.runtime.kubewriter.KubeWriter``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

JSON_PATCH = "application/json-patch+json"


class Writer(Protocol):
    def prepare(self) -> None:
        """Whatever must happen before the first request (e.g. API discovery); raises as a request does."""

    def resource(self, api_version: str, kind: str) -> object:
        """The handle of a kind that the calls below take."""

    def create(
        self,
        resource: object,
        body: Mapping[str, Any],
        *,
        namespace: str | None,
        field_manager: str,
        dry_run: str | None,
    ) -> dict[str, Any] | None:
        """POST: the object as created."""

    def json_patch(
        self,
        resource: object,
        name: str,
        ops: Sequence[Mapping[str, Any]],
        *,
        namespace: str | None,
        field_manager: str,
        dry_run: str | None,
    ) -> dict[str, Any] | None:
        """An RFC 6902 patch: the object after it."""

    def apply(
        self,
        resource: object,
        name: str,
        body: Mapping[str, Any],
        *,
        namespace: str | None,
        field_manager: str,
        dry_run: str | None,
    ) -> dict[str, Any] | None:
        """A server-side apply that forces conflicts: the object after it."""

    def delete(
        self,
        resource: object,
        name: str,
        options: Mapping[str, Any],
        *,
        namespace: str | None,
        dry_run: str | None,
    ) -> dict[str, Any] | None:
        """DELETE with ``options`` (a DeleteOptions body): the server's answer."""
