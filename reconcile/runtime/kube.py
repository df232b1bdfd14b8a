"""The operator's one door to the API server: JSON dicts in and out, throttled and counted.

Objects stay plain dicts (``_preload_content=False`` style: raw bytes and ``json.loads``), never the
client's typed models, which cost several times the memory and drop unknown fields.

Requests of ``Kube`` skip the ``ApiClient``'s REST layer, with orjson bodies: the REST client's
``json.dumps``, its pool manager's URL parse and pool lookup, and the classification of a URL it already
knew cost a quarter of the client's CPU per write. They go on kept-alive connections of the ``ApiClient``'s
urllib3 pool for the API server, framed and parsed by ``wire``.
``Kube`` also wraps the ``ApiClient``'s REST layer, so every request (ours, and anything else sent through
that client) passes one ``AdaptiveLimiter`` (no fixed limit by default, or
``--kube-api-qps``/``--kube-api-burst``; it backs off on 429/``Retry-After`` and rising latency), a 429 is
retried after its ``Retry-After`` (as client-go does: APF refused it before any handler ran), and every
request is counted in ``mpi_operator_api_requests_total{verb,kind,code}``. Given a ``Fence``, every
write (anything but GET) passes it first: one the fence refuses is never sent (raises ``NotLeader``,
counted with code ``fenced``).
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import attrs
import orjson
import urllib3
from kubernetes import config as kubeconfig
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException

from reconcile.runtime.fence import Fence, NotLeader
from reconcile.runtime.ratelimit import AdaptiveLimiter, retry_after_seconds
from reconcile.runtime.wire import Connections, Stream

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
READS = frozenset({"GET", "HEAD", "OPTIONS"})
DISCOVERY_BURST = 100
MAX_RETRIES = 5  # retries of one request the server throttled (429, or a 5xx with Retry-After)
# urllib3 retries a failed connection; a throttled answer comes back to Kube, which counts it and waits
# on its limiter (urllib3 would sleep out Retry-After itself, unseen).
_TRANSPORT_RETRIES = urllib3.Retry(total=3, redirect=False, respect_retry_after_header=False)


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


MPIJOB = Resource("kubeflow.org/v2beta1", "MPIJob", "mpijobs")
POD = Resource("v1", "Pod", "pods")
SERVICE = Resource("v1", "Service", "services")
CONFIGMAP = Resource("v1", "ConfigMap", "configmaps")
SECRET = Resource("v1", "Secret", "secrets")
EVENT = Resource("v1", "Event", "events")
JOB = Resource("batch/v1", "Job", "jobs")
LEASE = Resource("coordination.k8s.io/v1", "Lease", "leases")
NODE = Resource("v1", "Node", "nodes", namespaced=False)
PRIORITY_CLASS = Resource("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", namespaced=False)
VOLCANO_PODGROUP = Resource("scheduling.volcano.sh/v1beta1", "PodGroup", "podgroups")
SCHED_PLUGINS_PODGROUP = Resource("scheduling.x-k8s.io/v1alpha1", "PodGroup", "podgroups")
# Kubernetes' own gang scheduling, by served version (render/children/workload.py)
WORKLOAD_V1ALPHA1 = Resource("scheduling.k8s.io/v1alpha1", "Workload", "workloads")
WORKLOAD_V1ALPHA2 = Resource("scheduling.k8s.io/v1alpha2", "Workload", "workloads")
PODGROUP_V1ALPHA2 = Resource("scheduling.k8s.io/v1alpha2", "PodGroup", "podgroups")
WORKLOAD_V1BETA1 = Resource("scheduling.k8s.io/v1beta1", "Workload", "workloads")
PODGROUP_V1BETA1 = Resource("scheduling.k8s.io/v1beta1", "PodGroup", "podgroups")

# For tests and tools that install CRDs; the operator itself never requests it (RBAC grants no CRD access).
CRD = Resource("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False)

KNOWN = (
    MPIJOB,
    POD,
    SERVICE,
    CONFIGMAP,
    SECRET,
    EVENT,
    JOB,
    LEASE,
    PRIORITY_CLASS,
    VOLCANO_PODGROUP,
    SCHED_PLUGINS_PODGROUP,
    WORKLOAD_V1ALPHA1,
    WORKLOAD_V1ALPHA2,
    PODGROUP_V1ALPHA2,
    WORKLOAD_V1BETA1,
    PODGROUP_V1BETA1,
)
_BY_TYPE = {(r.api_version, r.kind): r for r in KNOWN}
_KIND_BY_PLURAL = {r.plural: r.kind for r in KNOWN}


def resource_for(obj_or_api_version: Mapping[str, Any] | str, kind: str | None = None) -> Resource:
    if isinstance(obj_or_api_version, Mapping):
        api_version, kind = obj_or_api_version["apiVersion"], obj_or_api_version["kind"]
    else:
        api_version = obj_or_api_version
    try:
        return _BY_TYPE[(api_version, kind or "")]
    except KeyError:
        raise KeyError(f"unknown resource {api_version} {kind}") from None


class ApiError(ApiException):
    """A non-2xx answer, with the Status object decoded when the server sent one."""

    def __init__(self, status: int, reason: str, body: str) -> None:
        super().__init__(status=status, reason=reason, body=body)
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


def classify(method: str, url: str) -> tuple[str, str]:
    """(verb, kind) of a request URL, as the request metric labels it."""
    parts = urlsplit(url)
    return classify_path(method, parts.path, _is_watch(parse_qs(parts.query).get("watch", [""])[0]))


def _is_watch(value: Any) -> bool:
    """A ``watch`` query parameter that asks for a watch, as the API server reads it."""
    return _query_value(value) in ("1", "true")


def classify_path(method: str, path: str, watch: bool = False) -> tuple[str, str]:
    """(verb, kind) of a request path without its query."""
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
        api_client: ApiClient,
        *,
        qps: float = 0,
        burst: int = 10,
        on_request: Callable[[str, str, str], None] | None = None,
        user_agent: str = "mpi-operator",
        fence: Fence | None = None,
    ) -> None:
        """``qps`` > 0 pins a fixed limit (a token bucket with ``burst``); 0 leaves the pace to the server,
        whose 429s and latency the limiter follows."""
        self.api_client = api_client
        api_client.user_agent = user_agent
        self.limiter = AdaptiveLimiter(qps if qps > 0 else None, burst)
        # API discovery (the dynamic client's /api, /apis, /apis/<group>/<version>, about 20 requests on a
        # first start) waits on a limiter of its own with a larger burst: spending the main burst on it made
        # the first job after a start wait seconds for tokens (client-go's typed clients need no discovery).
        self._discovery_limiter = AdaptiveLimiter(qps if qps > 0 else None, max(burst, DISCOVERY_BURST))
        self._on_request = on_request
        self.fence = fence
        self._timeouts: dict[Any, urllib3.Timeout] = {}
        self._instrument()

    # -- throttle and count every request ----------------------------------------------------------
    def _throttled(self, method: str, verb: str, kind: str, send: Callable[[], Any]) -> Any:
        """One request through the limiter (and, for a write, the fence); counted; a 429 (or a 5xx with
        Retry-After) sent again after the wait the server asked for."""
        limiter = self._discovery_limiter if kind == "discovery" else self.limiter
        on_request, fence = self._on_request, self.fence
        attempt = 0
        while True:
            limiter.wait()
            started = time.monotonic()
            try:
                if fence is None or method.upper() in READS:
                    resp = send()
                else:
                    # checked after the rate limiter's wait: the fence may have closed meanwhile
                    with fence.write(f"{verb} {kind}"):
                        resp = send()
            except NotLeader:
                if on_request is not None:
                    on_request(verb, kind, "fenced")
                raise
            except Exception:
                if on_request is not None:
                    on_request(verb, kind, "error")
                raise
            code = int(getattr(resp, "status", 200) or 200)
            retry_after = retry_after_seconds(_header(resp, "Retry-After"))
            # a watch's latency is its whole life: only its answer code counts
            latency = None if verb == "watch" else time.monotonic() - started
            limiter.observe(latency, code, retry_after)
            if on_request is not None:
                on_request(verb, kind, str(code))
            throttled = code == 429 or (code >= 500 and retry_after is not None)
            if not throttled or verb == "watch" or attempt >= MAX_RETRIES:
                return resp
            attempt += 1
            _drain(resp)

    def _instrument(self) -> None:
        """Requests sent through the ApiClient's REST layer by anyone else pass the same door."""
        rest = self.api_client.rest_client
        if getattr(rest, "_mpi_operator_wrapped", False):
            return
        inner = rest.request

        def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            verb, kind = classify(method, url)
            return self._throttled(method, verb, kind, lambda: inner(method, url, *args, **kwargs))

        rest.request = request
        rest._mpi_operator_wrapped = True

    # -- raw requests ------------------------------------------------------------------------------
    def _call(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None,
        body: Any,
        content_type: str | None,
        timeout: float | tuple[float, float] | None,
        *,
        stream: bool = False,
    ) -> Any:
        """The answer: ``wire.Answer`` read whole, ``wire.Stream`` (``stream``: its body read as it comes),
        or urllib3's response with its body not read yet (through a proxy). The generated ApiClient is
        skipped: its param_serialize walks and copies every body (sanitize_for_serialization), CPU spent on
        plain dicts that are already JSON-ready."""
        api = self.api_client
        headers = {"Accept": "application/json", **api.default_headers}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        api.update_params_for_auth(headers, None, ["BearerToken"], path, method, None)
        params = [(k, _query_value(v)) for k, v in (query or {}).items() if v is not None and v != ""]
        target = path + ("?" + "&".join(f"{k}={quote(v)}" for k, v in params) if params else "")
        direct = self._direct
        if direct is None:
            url = api.configuration.host + target
            resp = api.rest_client.request(method, url, headers=headers, body=body, _request_timeout=timeout)
            return resp.response
        pool, prefix = direct
        data = None if body is None else orjson.dumps(body)
        verb, kind = classify_path(method, path, _is_watch((query or {}).get("watch", "")))
        wire = self._wire
        if wire is not None and stream:
            return self._throttled(method, verb, kind, lambda: wire.stream(method, target, headers, timeout))
        if wire is not None:
            return self._throttled(
                method, verb, kind, lambda: wire.request(method, target, data, headers, timeout)
            )
        return self._throttled(
            method,
            verb,
            kind,
            lambda: pool.urlopen(
                method,
                prefix + target,
                body=data,
                headers=headers,
                timeout=self._timeout(timeout),
                preload_content=False,
                retries=_TRANSPORT_RETRIES,
                assert_same_host=False,
            ),
        )

    @functools.cached_property
    def _direct(self) -> tuple[urllib3.HTTPConnectionPool, str] | None:
        return _direct_pool(self.api_client)

    @functools.cached_property
    def _wire(self) -> Connections | None:
        """Kept-alive connections of the direct pool for every request, watches included; not through a
        proxy (urllib3 sets up its tunnel)."""
        direct = self._direct
        if direct is None or getattr(direct[0], "proxy", None) is not None:
            return None
        return Connections(*direct)

    def _timeout(self, timeout: float | tuple[float, float] | None) -> urllib3.Timeout:
        found = self._timeouts.get(timeout)
        if found is None:
            if isinstance(timeout, tuple):
                found = urllib3.Timeout(connect=timeout[0], read=timeout[1])
            else:
                found = urllib3.Timeout(total=timeout)
            self._timeouts[timeout] = found
        return found

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
        resp = self._call(method, path, query, body, content_type, timeout)
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
        raw = self._call("GET", path, query, None, None, timeout, stream=True)
        if not 200 <= raw.status <= 299:
            data = raw.data
            raise ApiError(raw.status, raw.reason or "", data.decode("utf-8", "replace") if data else "")
        if on_open is not None:
            on_open(raw)
        buf = b""
        try:
            chunks = raw.chunks() if isinstance(raw, Stream) else raw.stream(amt=None, decode_content=True)
            for chunk in chunks:
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


def _query_value(value: Any) -> str:
    # As the generated client encodes a query parameter: booleans in lower case.
    return str(value).lower() if isinstance(value, bool) else str(value)


def _header(resp: Any, name: str) -> str | None:
    headers = getattr(resp, "headers", None)
    try:
        value = headers.get(name) if headers is not None else None
    except Exception:
        return None
    return value if isinstance(value, str) else None


def _drain(resp: Any) -> None:
    """Read a response we retry, so its connection goes back to the pool."""
    try:
        resp.read()
        raw = getattr(resp, "response", resp)  # the REST client's wrapper, or urllib3's own
        release = getattr(raw, "release_conn", None)
        if release is not None:
            release()
    except Exception:
        pass


def _direct_pool(api: ApiClient) -> tuple[urllib3.HTTPConnectionPool, str] | None:
    """The ApiClient's connection pool for its API server (TLS settings, proxy tunnel and all) and the
    server URL's path prefix, or None
    when requests must go through its REST layer: a plain-HTTP server behind a proxy takes absolute URLs,
    and a stand-in REST layer has no pool."""
    manager = getattr(getattr(api, "rest_client", None), "pool_manager", None)
    if not isinstance(manager, urllib3.PoolManager):
        return None
    host = urllib3.util.parse_url(api.configuration.host)
    if not host.host:
        return None
    if isinstance(manager, urllib3.ProxyManager) and host.scheme != "https":
        return None
    return manager.connection_from_url(api.configuration.host), (host.path or "").rstrip("/")


def is_status(err: BaseException, *codes: int) -> bool:
    return isinstance(err, ApiException) and err.status in codes


def api_client(kubeconfig_path: str, master: str) -> ApiClient:
    cfg = Configuration()
    path = kubeconfig_path or os.environ.get("KUBECONFIG", "")
    if path:
        kubeconfig.load_kube_config(config_file=path, client_configuration=cfg)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        kubeconfig.load_incluster_config(client_configuration=cfg)
    else:
        kubeconfig.load_kube_config(client_configuration=cfg)
    if master:
        cfg.host = master
    # enough connections for the workers, the informers' watches and the lease
    cfg.connection_pool_maxsize = 32
    return ApiClient(cfg)
