"""A Writer over kubernetes' DynamicClient, for the unit fakes that stand in for a DynamicClient (the
operator writes through ``KubeWriter``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.dynamic import DynamicClient

from reconcile.engine.writer import JSON_PATCH


def _plain(_client: Any, data: Any) -> Any:
    return data


def _as_dict(answer: Any) -> dict[str, Any] | None:
    # The plain dict the answer was decoded into (see _plain); to_dict() for anything that wraps it.
    out: dict[str, Any] | None = answer.to_dict() if hasattr(answer, "to_dict") else answer
    return out


class DynamicWriter:
    """The Writer over a DynamicClient, or over one made from an ApiClient in ``prepare`` (which then
    runs the client's API discovery)."""

    def __init__(self, client: DynamicClient | ApiClient) -> None:
        self._api = client if isinstance(client, ApiClient) else None
        self._dyn: Any = None if isinstance(client, ApiClient) else client

    def prepare(self) -> None:
        if self._dyn is None:
            self._dyn = DynamicClient(self._api)

    def resource(self, api_version: str, kind: str) -> object:
        self.prepare()
        res: object = self._dyn.resources.get(api_version=api_version, kind=kind)
        return res

    # serializer: the answer as the plain dict it was decoded into; the default ResourceInstance wraps
    # every field in an object and to_dict() walks them all again, CPU spent for nothing.
    def create(
        self,
        resource: object,
        body: Mapping[str, Any],
        *,
        namespace: str | None,
        field_manager: str,
        dry_run: str | None,
    ) -> dict[str, Any] | None:
        return _as_dict(
            self._dyn.create(
                resource=resource,
                body=body,
                namespace=namespace,
                field_manager=field_manager,
                dry_run=dry_run,
                serializer=_plain,
            )
        )

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
        return _as_dict(
            self._dyn.patch(
                resource=resource,
                body=list(ops),
                name=name,
                namespace=namespace,
                content_type=JSON_PATCH,
                field_manager=field_manager,
                dry_run=dry_run,
                serializer=_plain,
            )
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
        return _as_dict(
            self._dyn.server_side_apply(
                resource=resource,
                body=body,
                name=name,
                namespace=namespace,
                field_manager=field_manager,
                force_conflicts=True,
                dry_run=dry_run,
                serializer=_plain,
            )
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
        return _as_dict(
            self._dyn.delete(
                resource=resource,
                name=name,
                namespace=namespace,
                body=options,
                dry_run=dry_run,
                serializer=_plain,
            )
        )
