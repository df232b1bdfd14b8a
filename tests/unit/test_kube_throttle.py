"""The client-side rate limit: API discovery does not spend the tokens the first job's writes need."""

from __future__ import annotations

from types import SimpleNamespace

from kubernetes.client import ApiClient, Configuration

from reconcile.runtime.kube import Kube, classify


def test_discovery_paths_are_classified_as_discovery():
    for path in ("/api", "/apis", "/api/v1", "/apis/batch/v1", "/version"):
        assert classify("GET", f"https://h{path}")[1] == "discovery", path
    assert classify("GET", "https://h/api/v1/namespaces/a/pods") == ("list", "Pod")


def test_discovery_waits_on_its_own_bucket():
    slept: list[float] = []
    api = ApiClient(Configuration())
    calls: list[str] = []
    api.rest_client.request = lambda method, url, *a, **k: calls.append(url) or SimpleNamespace(status=200)
    seen: list[tuple[str, str, str]] = []
    kube = Kube(api, qps=0.01, burst=3, on_request=lambda *r: seen.append(r))  # no refill during the test
    kube.limiter._sleep = kube._discovery_limiter._sleep = slept.append
    for path in ("/version", "/api", "/apis", *(f"/apis/g{i}.example/v1" for i in range(30))):
        api.rest_client.request("GET", f"https://h{path}")
    assert len(calls) == 33 and {kind for _, kind, _ in seen} == {"discovery"}
    assert slept == []  # a start's discovery fits its own burst
    # The main bucket still holds its whole burst for the first job's writes.
    assert [kube.limiter.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert kube.limiter.reserve() > 0
