"""The client-side rate limit: every request ``Kube`` sends (reads, writes, watches, discovery paths) waits
on its one limiter, which a pinned ``--kube-api-qps``/``--kube-api-burst`` holds to its bucket."""

from __future__ import annotations

import pytest

from reconcile.runtime.kube import POD, Kube, classify_path
from tests.unit.loopback import ApiServer, client


def test_discovery_paths_are_labelled_discovery():
    for path in ("/api", "/apis", "/api/v1", "/apis/batch/v1", "/version"):
        assert classify_path("GET", path)[1] == "discovery", path
    assert classify_path("GET", "/api/v1/namespaces/a/pods") == ("list", "Pod")


def test_a_pinned_limit_holds_every_request_to_one_bucket(server: ApiServer):
    seen: list[tuple[str, str, str]] = []
    kube = Kube(client(server.url), qps=0.01, burst=3, on_request=lambda *r: seen.append(r))  # no refill
    slept: list[float] = []
    kube.limiter._sleep = slept.append
    kube.request("GET", "/apis/scheduling.k8s.io")
    kube.list(POD, "a")
    kube.create(POD, "a", {"metadata": {"name": "p"}})
    assert slept == []  # the burst
    server.answers = [(200, {}, b'{"type":"ADDED"}\n')]
    assert list(kube.stream_lines(POD.path(None), {"watch": True}, (1, 5))) == [b'{"type":"ADDED"}']
    assert len(slept) == 1 and slept[0] == pytest.approx(100, rel=0.01)  # a token at 0.01 per second
    assert [(verb, kind) for verb, kind, _ in seen] == [
        ("list", "discovery"),
        ("list", "Pod"),
        ("create", "Pod"),
        ("watch", "Pod"),
    ]
