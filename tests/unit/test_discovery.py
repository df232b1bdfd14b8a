"""The executor's client needs no API discovery: paths come from the operator's own table of kinds."""

from __future__ import annotations

from kubernetes.client import ApiClient, Configuration

from reconcile.runtime.discovery import static_client
from reconcile.runtime.kube import KNOWN


def test_static_client_builds_every_known_path_without_a_request():
    api = ApiClient(Configuration(host="https://127.0.0.1:1"))  # nothing listens: a request would fail
    sent = []
    api.rest_client.request = lambda *a, **k: sent.append(a)  # type: ignore[method-assign]
    dyn = static_client(api)
    for res in KNOWN:
        got = dyn.resources.get(api_version=res.api_version, kind=res.kind)
        assert got.path(name="x", namespace="ns") == res.path("ns", "x")
        assert got.namespaced == res.namespaced
    assert sent == []
