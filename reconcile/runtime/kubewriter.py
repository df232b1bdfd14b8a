"""The executor's Writer (reconcile.engine.writer) over ``Kube``: the known kinds' paths, plain dicts in and
out, no dynamic client.

The dynamic client resolves every request through its discovered resource objects and wraps answers; here
a write is one request through the same instrumented client (rate limit, fence, metrics) as every other.
A kind outside the table raises ``ResourceNotFoundError``, as the dynamic client's discovery does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes.dynamic.exceptions import ResourceNotFoundError

from reconcile.runtime.kube import APPLY_PATCH, JSON_PATCH, Kube, Resource, resource_for


class KubeWriter:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def prepare(self) -> None:
        """Nothing to discover: every path comes from the table of kinds."""

    def resource(self, api_version: str, kind: str) -> object:
        try:
            return resource_for(api_version, kind)
        except KeyError:
            raise ResourceNotFoundError(f"No matches found for {api_version} {kind}") from None

    def create(
        self,
        resource: object,
        body: Mapping[str, Any],
        *,
        namespace: str | None,
        field_manager: str,
        dry_run: str | None,
    ) -> dict[str, Any] | None:
        res = _res(resource)
        query = {"fieldManager": field_manager, "dryRun": dry_run}
        return self.kube.request("POST", res.path(namespace), query=query, body=dict(body))

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
        res = _res(resource)
        query = {"fieldManager": field_manager, "dryRun": dry_run}
        return self.kube.request(
            "PATCH", res.path(namespace, name), query=query, body=list(ops), content_type=JSON_PATCH
        )

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
        res = _res(resource)
        query = {"fieldManager": field_manager, "force": "true", "dryRun": dry_run}
        return self.kube.request(
            "PATCH", res.path(namespace, name), query=query, body=dict(body), content_type=APPLY_PATCH
        )

    def delete(
        self,
        resource: object,
        name: str,
        options: Mapping[str, Any],
        *,
        namespace: str | None,
        dry_run: str | None,
    ) -> dict[str, Any] | None:
        res = _res(resource)
        return self.kube.request(
            "DELETE", res.path(namespace, name), query={"dryRun": dry_run}, body=dict(options)
        )


def _res(resource: object) -> Resource:
    if not isinstance(resource, Resource):
        raise TypeError(f"not a resource of the kinds table: {resource!r}")
    return resource
