"""L0: every request of ``Kube`` goes through the wire layer to a loopback API server, set up from what
the kubeconfig loader finds (TLS, client certificate, token and its refresh, proxy), through the limiter,
the fence, the request metric and the 429 retry."""

from __future__ import annotations

import json
import ssl
import time

import pytest
from kubernetes.client import ApiClient, Configuration

from reconcile.runtime.fence import Fence, NotLeader
from reconcile.runtime.kube import POD, ApiError, Kube, api_client
from tests.unit.loopback import ApiServer, ConnectProxy, Pki, client


def never_through_rest(api: ApiClient) -> ApiClient:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a request went through the ApiClient's REST layer")

    api.rest_client.request = refuse
    return api


def test_requests_go_to_the_server_with_auth_query_and_body(server: ApiServer) -> None:
    api = never_through_rest(client(server.url))
    seen: list[tuple[str, str, str]] = []
    kube = Kube(api, on_request=lambda *r: seen.append(r), user_agent="ua/1")
    out = kube.create(POD, "ns", {"metadata": {"name": "p", "labels": {"a": "é"}}})
    assert out["sent"] == {"metadata": {"name": "p", "labels": {"a": "é"}}}
    kube.list(POD, "ns", labelSelector="a in (b,c)", watch=False)
    first, second = server.seen
    assert first["method"] == "POST" and first["path"] == "/api/v1/namespaces/ns/pods"
    assert first["headers"]["authorization"] == "Bearer t0k3n"
    assert first["headers"]["content-type"] == "application/json"
    assert first["headers"]["user-agent"] == "ua/1"
    assert second["path"] == "/api/v1/namespaces/ns/pods?labelSelector=a%20in%20%28b%2Cc%29&watch=false"
    assert "content-type" not in second["headers"]
    assert seen == [("create", "Pod", "200"), ("list", "Pod", "200")]


def test_a_host_with_a_path_prefix_keeps_it(server: ApiServer) -> None:
    Kube(client(server.url + "/k8s/")).get(POD, "ns", "p")
    assert server.seen[0]["path"] == "/k8s/api/v1/namespaces/ns/pods/p"


def test_a_server_url_without_a_scheme_is_plain_http(server: ApiServer) -> None:
    Kube(client(f"127.0.0.1:{server.port}")).get(POD, "ns", "p")
    assert server.seen[0]["path"] == "/api/v1/namespaces/ns/pods/p"


def test_a_server_url_that_is_not_http_is_refused_at_start(pki: Pki) -> None:
    with pytest.raises(ValueError, match="not http"):
        Kube(client("unix:///run/apiserver.sock"))
    with pytest.raises(ValueError, match="not http"):
        api_client(str(pki.kubeconfig("https://127.0.0.1:6443")), "unix:///run/apiserver.sock")


def test_a_429_is_sent_again_after_retry_after_and_an_error_keeps_its_status(server: ApiServer) -> None:
    seen: list[tuple[str, str, str]] = []
    kube = Kube(client(server.url), on_request=lambda *r: seen.append(r))
    slept: list[float] = []
    kube.limiter._sleep = slept.append
    server.answers = [(429, {"Retry-After": "1"}, b"{}")]
    kube.delete(POD, "ns", "p", uid="u1")
    assert [code for _, _, code in seen] == ["429", "200"]
    assert len(slept) == 1 and slept[0] == pytest.approx(1.0, abs=0.1)
    assert json.loads(server.seen[1]["body"])["preconditions"] == {"uid": "u1"}
    server.answers = [(409, {}, json.dumps({"kind": "Status", "message": "taken"}).encode())]
    with pytest.raises(ApiError) as err:
        kube.create(POD, "ns", {"metadata": {"name": "p"}})
    assert err.value.status == 409 and err.value.message == "taken"
    assert err.value.reason == "Conflict" and err.value.details["kind"] == "Status"
    kube.get(POD, "ns", "p")  # the connection went back to the stack in a usable state
    assert len(server.seen) == 4


def test_a_write_the_fence_refuses_is_never_sent(server: ApiServer) -> None:
    seen: list[tuple[str, str, str]] = []
    fence = Fence()
    kube = Kube(client(server.url), fence=fence, on_request=lambda *r: seen.append(r))
    kube.get(POD, "ns", "p")  # reads need no lease
    for write in (
        lambda: kube.create(POD, "ns", {"metadata": {"name": "p"}}),
        lambda: kube.replace(POD, {"metadata": {"namespace": "ns", "name": "p"}}),
        lambda: kube.patch(POD, "ns", "p", {"metadata": {"labels": {"a": "b"}}}),
        lambda: kube.delete(POD, "ns", "p"),
    ):
        with pytest.raises(NotLeader):
            write()
    assert [s["method"] for s in server.seen] == ["GET"]
    assert [code for _, _, code in seen] == ["200", "fenced", "fenced", "fenced", "fenced"]
    assert seen[3] == ("patch", "Pod", "fenced")
    fence.grant(time.monotonic() + 60)
    kube.patch(POD, "ns", "p", {"metadata": {"labels": {"a": "b"}}})
    assert server.seen[-1]["headers"]["content-type"] == "application/merge-patch+json"


def test_a_watch_streams_lines(server: ApiServer) -> None:
    events = b'{"type":"ADDED"}\n{"type":"MODIFIED"}\n'
    server.answers = [(200, {}, events)]
    seen: list[tuple[str, str, str]] = []
    kube = Kube(client(server.url), on_request=lambda *r: seen.append(r))
    lines = list(kube.stream_lines(POD.path(None), {"watch": True, "resourceVersion": "5"}, (1, 5)))
    assert lines == [b'{"type":"ADDED"}', b'{"type":"MODIFIED"}']
    assert server.seen[0]["path"] == "/api/v1/pods?watch=true&resourceVersion=5"
    assert server.seen[0]["headers"]["authorization"] == "Bearer t0k3n"
    assert seen == [("watch", "Pod", "200")]


def test_a_watch_the_server_refuses_raises_its_status(server: ApiServer) -> None:
    server.answers = [(410, {}, json.dumps({"kind": "Status", "message": "too old"}).encode())]
    kube = Kube(client(server.url))
    with pytest.raises(ApiError) as err:
        list(kube.stream_lines(POD.path(None), {"watch": True}, (1, 5)))
    assert err.value.status == 410 and err.value.message == "too old"


# -- set up from a kubeconfig ----------------------------------------------------------
def test_a_kubeconfig_s_ca_and_client_certificate(pki: Pki, tls_server: ApiServer) -> None:
    kube = Kube(api_client(str(pki.kubeconfig(tls_server.url)), ""))
    kube.get(POD, "ns", "p")
    kube.get(POD, "ns", "q")
    assert [s["client"] for s in tls_server.seen] == [{"commonName": "operator"}] * 2


def test_a_server_certificate_no_ca_vouches_for_is_refused(pki: Pki, tls_server: ApiServer) -> None:
    kube = Kube(api_client(str(pki.kubeconfig(tls_server.url, ca=False)), ""))
    with pytest.raises(ssl.SSLError):
        kube.get(POD, "ns", "p")
    assert tls_server.seen == []


def test_insecure_skip_tls_verify_skips_the_check(pki: Pki, tls_server: ApiServer) -> None:
    path = pki.kubeconfig(tls_server.url, ca=False, **{"insecure-skip-tls-verify": True})
    Kube(api_client(str(path), "")).get(POD, "ns", "p")
    assert tls_server.seen[0]["client"] == {"commonName": "operator"}


def test_a_token_is_asked_for_on_every_request_so_its_refresh_hook_renews_it(server: ApiServer) -> None:
    api = client(server.url)
    issued = iter(range(1, 10))
    api.configuration.refresh_api_key_hook = lambda cfg: cfg.api_key.update(BearerToken=f"t{next(issued)}")
    api.configuration.api_key_prefix = {"BearerToken": "Bearer"}
    kube = Kube(api)
    kube.get(POD, "ns", "p")
    list(kube.stream_lines(POD.path(None), {"watch": True}, (1, 5)))
    assert [s["headers"]["authorization"] for s in server.seen] == ["Bearer t1", "Bearer t2"]


# -- proxies ---------------------------------------------------------------------------------------------
def test_an_https_server_behind_a_proxy_is_reached_through_a_tunnel(pki: Pki, tls_server: ApiServer) -> None:
    proxy = ConnectProxy()
    try:
        kube = Kube(api_client(str(pki.kubeconfig(tls_server.url, **{"proxy-url": proxy.url})), ""))
        kube.get(POD, "ns", "p")
        kube.create(POD, "ns", {"metadata": {"name": "p"}})
        assert [s["method"] for s in tls_server.seen] == ["GET", "POST"]
        assert tls_server.seen[0]["client"] == {"commonName": "operator"}  # TLS end to end
        assert len(proxy.connects) == 1  # one tunnel, kept alive for both requests
        assert proxy.connects[0].startswith(f"CONNECT 127.0.0.1:{tls_server.port} ".encode())
    finally:
        proxy.close()


def test_a_plain_http_server_behind_a_proxy_gets_each_request_forwarded(server: ApiServer) -> None:
    cfg = Configuration()
    cfg.host = "http://apiserver.invalid:8080/k8s"
    cfg.proxy = server.url  # the loopback server plays the proxy and records what it is asked to forward
    cfg.proxy_headers = {"Proxy-Authorization": "Basic cDpx"}
    cfg.api_key = {"BearerToken": "Bearer t0k3n"}
    Kube(ApiClient(cfg)).get(POD, "ns", "p")
    (seen,) = server.seen
    assert seen["path"] == "http://apiserver.invalid:8080/k8s/api/v1/namespaces/ns/pods/p"
    assert seen["headers"]["host"] == "apiserver.invalid:8080"
    assert seen["headers"]["proxy-authorization"] == "Basic cDpx"
    assert seen["headers"]["authorization"] == "Bearer t0k3n"
