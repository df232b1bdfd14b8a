"""API resources without discovery: the operator knows every kind it writes (``runtime.kube.KNOWN``).

The executor's ``kubernetes`` DynamicClient discovers lazily by default: ~20 requests under the client's
rate limit (and a cache file in /tmp) the first time a leader writes, which once put 8.8 s between a new
leader's acquisition and its first write. With this discoverer it builds each path from the table at once,
as client-go's typed clients do. A kind whose CRD is not installed answers its request with 404, which the
executor reports like any failed write (retried with back-off).
"""

from __future__ import annotations

from typing import Any

from kubernetes.client import ApiClient
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError
from kubernetes.dynamic.resource import Resource as DynamicResource

from reconcile.runtime.kube import KNOWN, Resource


class StaticDiscoverer:
    """The DynamicClient's discoverer interface (``get(api_version=, kind=)``) over a fixed table."""

    def __init__(self, client: DynamicClient, resources: tuple[Resource, ...] = KNOWN) -> None:
        self._by_type: dict[tuple[str, str], DynamicResource] = {}
        for res in resources:
            group, _, version = res.api_version.rpartition("/")
            self._by_type[(res.api_version, res.kind)] = DynamicResource(
                prefix="apis" if group else "api",
                group=group,
                api_version=version,
                kind=res.kind,
                namespaced=res.namespaced,
                name=res.plural,
                verbs=["create", "delete", "get", "list", "patch", "update", "watch"],
                client=client,
            )

    def get(self, *, api_version: str, kind: str, **_: Any) -> DynamicResource:
        try:
            return self._by_type[(api_version, kind)]
        except KeyError:
            raise ResourceNotFoundError(f"unknown resource {api_version} {kind}") from None

    def search(self, **kwargs: Any) -> list[DynamicResource]:
        try:
            return [self.get(**kwargs)]
        except (ResourceNotFoundError, TypeError):
            return []


def static_client(api_client: ApiClient, resources: tuple[Resource, ...] = KNOWN) -> DynamicClient:
    """A DynamicClient that never sends a discovery request."""
    return DynamicClient(api_client, discoverer=lambda client, _cache: StaticDiscoverer(client, resources))
