"""L0: ``Kube``'s own requests go straight to the ApiClient's connection pool (a loopback HTTP server here),
through the same limiter, fence, metric and 429 retry as everything sent through the REST layer."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator

import pytest
from kubernetes.client import ApiClient, Configuration

from reconcile.runtime.fence import Fence, NotLeader
from reconcile.runtime.kube import POD, ApiError, Kube


class Server:
    """Answers each request with the next (code, headers, body) queued, else 200 and the request echoed."""

    def __init__(self) -> None:
        self.seen: list[dict] = []
        self.answers: list[tuple[int, dict[str, str], bytes]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                outer.seen.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body,
                    }
                )
                if outer.answers:
                    code, headers, data = outer.answers.pop(0)
                else:
                    code, headers = 200, {}
                    sent = json.loads(body) if body else None
                    data = json.dumps({"path": self.path, "sent": sent}).encode()
                self.send_response(code)
                for k, v in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


def client(url: str) -> tuple[ApiClient, list[str]]:
    cfg = Configuration()
    cfg.host = url
    cfg.api_key = {"BearerToken": "Bearer t0k3n"}
    api = ApiClient(cfg)
    through_rest: list[str] = []
    inner = api.rest_client.request

    def spy(method: str, url: str, *a: object, **k: object) -> object:
        through_rest.append(url)
        return inner(method, url, *a, **k)

    api.rest_client.request = spy
    return api, through_rest


def test_requests_go_to_the_pool_with_auth_query_and_body(server: Server) -> None:
    api, through_rest = client(server.url)
    seen: list[tuple[str, str, str]] = []
    kube = Kube(api, on_request=lambda *r: seen.append(r), user_agent="ua/1")
    out = kube.create(POD, "ns", {"metadata": {"name": "p", "labels": {"a": "é"}}})
    assert out["sent"] == {"metadata": {"name": "p", "labels": {"a": "é"}}}
    kube.list(POD, "ns", labelSelector="a in (b,c)", watch=False)
    assert through_rest == []  # the REST layer was skipped
    first, second = server.seen
    assert first["method"] == "POST" and first["path"] == "/api/v1/namespaces/ns/pods"
    assert first["headers"]["authorization"] == "Bearer t0k3n"
    assert first["headers"]["content-type"] == "application/json"
    assert first["headers"]["user-agent"] == "ua/1"
    assert second["path"] == "/api/v1/namespaces/ns/pods?labelSelector=a%20in%20%28b%2Cc%29&watch=false"
    assert seen == [("create", "Pod", "200"), ("list", "Pod", "200")]


def test_a_host_with_a_path_prefix_keeps_it(server: Server) -> None:
    api, _ = client(server.url + "/k8s/")
    Kube(api).get(POD, "ns", "p")
    assert server.seen[0]["path"] == "/k8s/api/v1/namespaces/ns/pods/p"


def test_a_429_is_sent_again_after_retry_after_and_an_error_keeps_its_status(server: Server) -> None:
    api, _ = client(server.url)
    seen: list[tuple[str, str, str]] = []
    kube = Kube(api, on_request=lambda *r: seen.append(r))
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
    kube.get(POD, "ns", "p")  # the connection went back to the pool in a usable state
    assert len(server.seen) == 4


def test_a_write_the_fence_refuses_is_never_sent(server: Server) -> None:
    api, _ = client(server.url)
    seen: list[tuple[str, str, str]] = []
    fence = Fence()
    kube = Kube(api, fence=fence, on_request=lambda *r: seen.append(r))
    kube.get(POD, "ns", "p")  # reads need no lease
    with pytest.raises(NotLeader):
        kube.patch(POD, "ns", "p", {"metadata": {"labels": {"a": "b"}}})
    assert [s["method"] for s in server.seen] == ["GET"]
    assert seen[-1] == ("patch", "Pod", "fenced")
    fence.grant(time.monotonic() + 60)
    kube.patch(POD, "ns", "p", {"metadata": {"labels": {"a": "b"}}})
    assert server.seen[-1]["headers"]["content-type"] == "application/merge-patch+json"


def test_a_watch_streams_lines_from_the_pool(server: Server) -> None:
    api, _ = client(server.url)
    events = b'{"type":"ADDED"}\n{"type":"MODIFIED"}\n'
    server.answers = [(200, {}, events)]
    seen: list[tuple[str, str, str]] = []
    kube = Kube(api, on_request=lambda *r: seen.append(r))
    lines = list(kube.stream_lines(POD.path(None), {"watch": True, "resourceVersion": "5"}, (1, 5)))
    assert lines == [b'{"type":"ADDED"}', b'{"type":"MODIFIED"}']
    assert server.seen[0]["path"] == "/api/v1/pods?watch=true&resourceVersion=5"
    assert seen == [("watch", "Pod", "200")]
