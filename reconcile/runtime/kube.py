"""The operator's one door to the API server: JSON dicts in and out, throttled and counted.

Objects stay plain dicts (raw bytes, orjson), never the client's typed models, which cost several times the
memory and drop unknown fields.

Every request (reads, lists, writes, watches) goes through ``wire``: HTTP/1.1 framed by hand on kept-alive
connections of the urllib3 pool the ``Endpoint``'s pool manager holds for the API server
(``kubeconfig``: the server's URL, the CA, the client certificate and key, the TLS verify flag, and the
proxy: an HTTPS server behind one through a CONNECT tunnel, a plain-HTTP one through the proxy's
forwarding). The ``Authorization`` header is asked of the endpoint on every request, so a rotated or
renewed token is sent as soon as it is read.

Every request passes one ``AdaptiveLimiter`` (no fixed limit by default, or
``--kube-api-qps``/``--kube-api-burst``; it backs off on 429/``Retry-After`` and rising latency), a 429 is
retried after its ``Retry-After`` (as client-go does: APF refused it before any handler ran), and every
request is reported to ``on_request(verb, kind, code)`` (the operator's request metric). Given a
``Fence``, every write (anything but GET) passes it first: one the fence refuses is never sent (raises
``NotLeader``, counted with code ``fenced``), and one it lets out is given up on (its connection reset)
when the time the fence gives it has passed, before a standby may lead.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

import attrs
import orjson

from reconcile.runtime import kubeconfig
from reconcile.runtime.fence import Fence, NotLeader
from reconcile.runtime.kubeconfig import ApiClientLike, Endpoint
from reconcile.runtime.ratelimit import AdaptiveLimiter, retry_after_seconds
from reconcile.runtime.wire import Answer, Connections, Stream, server_url

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
READS = frozenset({"GET", "HEAD", "OPTIONS"})
MAX_RETRIES = 5  # retries of one request the server throttled (429, or a 5xx with Retry-After)
_Answer = TypeVar("_Answer", Answer, Stream)


@attrs.frozen
class Resource:
    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        base = f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


POD = Resource("v1", "Pod", "pods")
SERVICE = Resource("v1", "Service", "services")
CONFIGMAP = Resource("v1", "ConfigMap", "configmaps")
SECRET = Resource("v1", "Secret", "secrets")
EVENT = Resource("v1", "Event", "events")
JOB = Resource("batch/v1", "Job", "jobs")
LEASE = Resource("coordination.k8s.io/v1", "Lease", "leases")
NODE = Resource("v1", "Node", "nodes", namespaced=False)
PRIORITY_CLASS = Resource("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", namespaced=False)
# Kubernetes' own gang scheduling, by served version (render/children/workload.py)
WORKLOAD_V1ALPHA1 = Resource("scheduling.k8s.io/v1alpha1", "Workload", "workloads")
WORKLOAD_V1ALPHA2 = Resource("scheduling.k8s.io/v1alpha2", "Workload", "workloads")
PODGROUP_V1ALPHA2 = Resource("scheduling.k8s.io/v1alpha2", "PodGroup", "podgroups")
WORKLOAD_V1BETA1 = Resource("scheduling.k8s.io/v1beta1", "Workload", "workloads")
PODGROUP_V1BETA1 = Resource("scheduling.k8s.io/v1beta1", "PodGroup", "podgroups")

# For tests and tools that install CRDs; the operator itself never requests it (RBAC grants no CRD access).
CRD = Resource("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False)

# Kubernetes' own kinds; a package that owns more adds them with ``register``.
KNOWN = (
    POD,
    SERVICE,
    CONFIGMAP,
    SECRET,
    EVENT,
    JOB,
    LEASE,
    PRIORITY_CLASS,
    WORKLOAD_V1ALPHA1,
    WORKLOAD_V1ALPHA2,
    PODGROUP_V1ALPHA2,
    WORKLOAD_V1BETA1,
    PODGROUP_V1BETA1,
)
_BY_TYPE: dict[tuple[str, str], Resource] = {}
_KIND_BY_PLURAL: dict[str, str] = {}


def register(*resources: Resource) -> None:
    """Add kinds to the table that request paths (``resource_for``) and metric labels are read from."""
    for r in resources:
        _BY_TYPE[(r.api_version, r.kind)] = r
        _KIND_BY_PLURAL.setdefault(r.plural, r.kind)


register(*KNOWN)


def resource_for(obj_or_api_version: Mapping[str, Any] | str, kind: str | None = None) -> Resource:
    if isinstance(obj_or_api_version, Mapping):
        api_version, kind = obj_or_api_version["apiVersion"], obj_or_api_version["kind"]
    else:
        api_version = obj_or_api_version
    try:
        return _BY_TYPE[(api_version, kind or "")]
    except KeyError:
        raise KeyError(f"unknown resource {api_version} {kind}") from None


class ApiError(Exception):
    """A non-2xx answer, with the Status object decoded when the server sent one."""

    def __init__(self, status: int, reason: str, body: str) -> None:
        super().__init__(status, reason, body)
        self.status, self.reason, self.body = status, reason, body
        try:
            decoded = json.loads(body) if body else {}
        except ValueError:
            decoded = {}
        self.details: dict[str, Any] = decoded if isinstance(decoded, dict) else {}

    @property
    def message(self) -> str:
        return str(self.details.get("message") or self.reason or "")

    def __str__(self) -> str:
        return f"{self.status} {self.reason}: {self.message}"


def _is_watch(value: Any) -> bool:
    """A ``watch`` query parameter that asks for a watch, as the API server reads it."""
    return _query_value(value) in ("1", "true")


def classify_path(method: str, path: str, watch: bool = False) -> tuple[str, str]:
    """(verb, kind) of a request path without its query, as the request metric labels it."""
    segs = [s for s in path.split("/") if s]
    if segs[:1] == ["api"]:
        rest = segs[2:]
    elif segs[:1] == ["apis"]:
        rest = segs[3:]
    elif segs == ["version"]:
        return "get", "discovery"
    else:
        return method.lower(), "other"
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        rest = rest[2:]
    plural = rest[0] if rest else ""
    named = len(rest) >= 2
    sub = rest[2] if len(rest) >= 3 else ""
    kind = _KIND_BY_PLURAL.get(plural, plural or "discovery")
    if sub:
        kind = f"{kind}/{sub}"
    m = method.upper()
    if m == "GET":
        verb = "watch" if watch else ("get" if named else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(m, m.lower())
        if m == "DELETE" and not named:
            verb = "deletecollection"
    return verb, kind


class Kube:
    def __init__(
        self,
        endpoint: Endpoint | ApiClientLike,
        *,
        qps: float = 0,
        burst: int = 10,
        on_request: Callable[[str, str, str], None] | None = None,
        user_agent: str = "kube-runtime (python)",
        fence: Fence | None = None,
    ) -> None:
        """``endpoint`` (or a ``kubernetes`` ``ApiClient``, as tests build them) sets up the connections; a
        server URL that is not http(s) raises ``ValueError`` here. ``qps`` > 0 pins a fixed limit (a token
        bucket with ``burst``); 0 leaves the pace to the server, whose 429s and latency the limiter
        follows."""
        # the ApiClient it was built from, if any: tests and tools make typed calls with it
        self.api_client: ApiClientLike | None = None
        if not isinstance(endpoint, Endpoint):
            self.api_client, endpoint = endpoint, Endpoint.of(endpoint)
        self.endpoint = endpoint
        self.limiter = AdaptiveLimiter(qps if qps > 0 else None, burst)
        self._on_request = on_request
        self.fence = fence
        self._authorization = endpoint.authorization
        self._accept = {"Accept": "application/json", "User-Agent": user_agent}
        self._wire = Connections.to(endpoint.pool, endpoint.host)

    # -- throttle and count every request ----------------------------------------------------------
    def _throttled(
        self, method: str, verb: str, kind: str, send: Callable[[float | None], _Answer]
    ) -> _Answer:
        """One request through the limiter (and, for a write, the fence); counted; a 429 (or a 5xx with
        Retry-After) sent again after the wait the server asked for. ``send(limit)`` sends it, within
        ``limit`` seconds if that is not None (a fenced write: the time left before a standby may lead)."""
        limiter, on_request, fence = self.limiter, self._on_request, self.fence
        attempt = 0
        while True:
            limiter.wait()
            started = time.monotonic()
            try:
                if fence is None or method.upper() in READS:
                    resp = send(None)
                else:
                    # checked after the rate limiter's wait: the fence may have closed meanwhile
                    with fence.write(f"{verb} {kind}") as limit:
                        resp = send(limit)
            except NotLeader:
                if on_request is not None:
                    on_request(verb, kind, "fenced")
                raise
            except Exception:
                if on_request is not None:
                    on_request(verb, kind, "error")
                raise
            code = resp.status
            retry_after = retry_after_seconds(resp.headers.get("Retry-After"))
            # a watch's latency is its whole life: only its answer code counts
            latency = None if verb == "watch" else time.monotonic() - started
            limiter.observe(latency, code, retry_after)
            if on_request is not None:
                on_request(verb, kind, str(code))
            throttled = code == 429 or (code >= 500 and retry_after is not None)
            if not throttled or verb == "watch" or attempt >= MAX_RETRIES:
                return resp
            attempt += 1
            resp.release_conn()

    # -- raw requests ------------------------------------------------------------------------------
    def _headers(self, body: Any, content_type: str | None) -> dict[str, str]:
        headers = dict(self._accept)
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        # asked on every request: an expiring token is renewed, a rotated one read again, here
        auth = self._authorization()
        if auth:
            headers["Authorization"] = auth
        return headers

    def _target(self, path: str, query: Mapping[str, Any] | None) -> str:
        params = [(k, _query_value(v)) for k, v in (query or {}).items() if v is not None and v != ""]
        return path + ("?" + "&".join(f"{k}={quote(v)}" for k, v in params) if params else "")

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | tuple[float, float] | None = 30,
    ) -> dict[str, Any]:
        headers = self._headers(body, content_type)
        target = self._target(path, query)
        sent = None if body is None else orjson.dumps(body)
        verb, kind = classify_path(method, path, _is_watch((query or {}).get("watch", "")))
        wire = self._wire
        resp = self._throttled(
            method,
            verb,
            kind,
            lambda limit: wire.request(method, target, sent, headers, _bounded(timeout, limit)),
        )
        data = resp.data
        if not 200 <= resp.status <= 299:
            raise ApiError(resp.status, resp.reason or "", data.decode("utf-8", "replace") if data else "")
        return orjson.loads(data) if data else {}

    def stream_lines(
        self,
        path: str,
        query: Mapping[str, Any],
        timeout: tuple[float, float],
        on_open: Callable[[Any], None] | None = None,
    ) -> Iterator[bytes]:
        """A watch: yields one JSON line per event until the server ends the stream."""
        raw = self._open_stream(path, query, timeout)
        if not 200 <= raw.status <= 299:
            data = raw.data
            raise ApiError(raw.status, raw.reason or "", data.decode("utf-8", "replace") if data else "")
        if on_open is not None:
            on_open(raw)
        buf = b""
        try:
            for chunk in raw.chunks():
                if b"\n" not in chunk:
                    buf += chunk
                    continue
                # one split per chunk: a chunk of a burst holds many events
                *lines, rest = (buf + chunk).split(b"\n")
                buf = rest
                for line in lines:
                    if line.strip():
                        yield line
            if buf.strip():
                yield buf
        finally:
            raw.release_conn()

    def _open_stream(self, path: str, query: Mapping[str, Any], timeout: tuple[float, float]) -> Stream:
        headers = self._headers(None, None)
        target = self._target(path, query)
        wire = self._wire
        verb, kind = classify_path("GET", path, _is_watch(query.get("watch", "")))
        return self._throttled("GET", verb, kind, lambda _: wire.stream("GET", target, headers, timeout))

    # -- verbs on known resources ------------------------------------------------------------------
    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        return self.request("GET", res.path(namespace, name))

    def list(self, res: Resource, namespace: str | None = None, **query: Any) -> dict[str, Any]:
        out = self.request("GET", res.path(namespace), query=query)
        for item in out.get("items") or []:
            item.setdefault("apiVersion", res.api_version)
            item.setdefault("kind", res.kind)
        return out

    def create(self, res: Resource, namespace: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("POST", res.path(namespace), body=dict(body))

    def replace(
        self, res: Resource, body: Mapping[str, Any], subresource: str | None = None
    ) -> dict[str, Any]:
        meta = body["metadata"]
        return self.request(
            "PUT", res.path(meta.get("namespace"), meta["name"], subresource), body=dict(body)
        )

    def patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        content_type: str = MERGE_PATCH,
        subresource: str | None = None,
        **query: Any,
    ) -> dict[str, Any]:
        return self.request(
            "PATCH", res.path(namespace, name, subresource), query=query, body=body, content_type=content_type
        )

    def apply(
        self, obj: Mapping[str, Any], field_manager: str, *, subresource: str | None = None
    ) -> dict[str, Any]:
        meta = obj["metadata"]
        return self.patch(
            resource_for(obj),
            meta.get("namespace"),
            meta["name"],
            dict(obj),
            content_type=APPLY_PATCH,
            subresource=subresource,
            fieldManager=field_manager,
            force="true",
        )

    def delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        *,
        uid: str | None = None,
        propagation: str = "Background",
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        if uid:
            body["preconditions"] = {"uid": uid}
        return self.request("DELETE", res.path(namespace, name), body=body)


def _bounded(
    timeout: float | tuple[float, float] | None, limit: float | None
) -> float | tuple[float, float] | None:
    """``timeout`` with its whole-request part cut to ``limit``."""
    if limit is None:
        return timeout
    if isinstance(timeout, tuple):
        return (min(timeout[0], limit), min(timeout[1], limit))
    return limit if timeout is None else min(timeout, limit)


def _query_value(value: Any) -> str:
    # As the generated client encodes a query parameter: booleans in lower case.
    return str(value).lower() if isinstance(value, bool) else str(value)


def api_client(kubeconfig_path: str, master: str) -> Endpoint:
    """The endpoint ``kubeconfig.load`` finds; a URL the wire layer cannot reach fails here, at start."""
    endpoint = kubeconfig.load(kubeconfig_path, master)
    server_url(endpoint.host)
    return endpoint
