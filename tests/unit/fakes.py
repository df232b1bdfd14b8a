"""In-memory fakes of the API for L0 tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kubernetes.dynamic.exceptions import ResourceNotFoundError

from reconcile.runtime.kube import ApiError, Kube, Resource


class FakeKube:
    """Objects by (plural, namespace, name); resourceVersion checked on replace like the server."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.calls: list[tuple[str, str, str]] = []
        self.rv = 0
        self.fail: dict[str, ApiError] = {}

    def _bump(self, obj: dict) -> dict:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return obj

    def _check(self, verb: str) -> None:
        if verb in self.fail:
            raise self.fail[verb]

    def get(self, res: Resource, namespace, name):
        self.calls.append(("get", res.kind, name))
        self._check("get")
        try:
            return json.loads(json.dumps(self.objects[(res.plural, namespace or "", name)]))
        except KeyError:
            raise ApiError(404, "Not Found", json.dumps({"code": 404})) from None

    def create(self, res: Resource, namespace, body):
        self.calls.append(("create", res.kind, body["metadata"]["name"]))
        self._check("create")
        key = (res.plural, namespace or "", body["metadata"]["name"])
        if key in self.objects:
            raise ApiError(409, "Conflict", json.dumps({"reason": "AlreadyExists"}))
        obj = self._bump(json.loads(json.dumps(body)))
        self.objects[key] = obj
        return json.loads(json.dumps(obj))

    def replace(self, res: Resource, body, subresource=None):
        meta = body["metadata"]
        self.calls.append(("update", res.kind, meta["name"]))
        self._check("update")
        key = (res.plural, meta.get("namespace", ""), meta["name"])
        cur = self.objects.get(key)
        if cur is None:
            raise ApiError(404, "Not Found", "{}")
        if meta.get("resourceVersion") != cur["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", json.dumps({"reason": "Conflict"}))
        obj = self._bump(json.loads(json.dumps(body)))
        self.objects[key] = obj
        return json.loads(json.dumps(obj))

    def delete(self, res: Resource, namespace, name, *, uid=None):
        self.calls.append(("delete", res.kind, name))
        self._check("delete")
        if self.objects.pop((res.plural, namespace or "", name), None) is None:
            raise ApiError(404, "Not Found", json.dumps({"code": 404}))

    def patch(self, res: Resource, namespace, name, body, *, content_type="", subresource=None, **query):
        self.calls.append(("patch", res.kind, name))
        self._check("patch")
        key = (res.plural, namespace or "", name)
        if key not in self.objects:
            raise ApiError(404, "Not Found", "{}")
        self.objects[key].update(body)
        return self._bump(self.objects[key])


class Clock:
    """A monotonic clock the test moves by hand (``clock.t += 5``)."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeResources:
    def __init__(self, known: set[str]) -> None:
        self.known = known

    def get(self, api_version: str, kind: str) -> tuple[str, str]:
        if kind not in self.known:
            raise ResourceNotFoundError(f"No matches found for {api_version} {kind}")
        return (api_version, kind)


class FakeDynamic:
    """Records calls; ``fail`` maps (verb, name) to an exception to raise."""

    def __init__(self, fail: dict[tuple[str, str], BaseException] | None = None) -> None:
        self.resources = FakeResources({"ConfigMap", "Pod"})
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail = fail or {}

    def _do(self, verb: str, name: str, kwargs: dict[str, Any], answer: Callable[[], dict[str, Any]]) -> Any:
        self.calls.append((verb, kwargs))
        if (verb, name) in self.fail:
            raise self.fail[(verb, name)]
        return answer()

    def create(self, **kw: Any) -> dict[str, Any]:
        return self._do("create", kw["body"]["metadata"]["name"], kw, lambda: {**kw["body"], "uid": "new"})

    def patch(self, **kw: Any) -> dict[str, Any]:
        return self._do("patch", kw["name"], kw, lambda: {"patched": kw["body"]})

    def server_side_apply(self, **kw: Any) -> dict[str, Any]:
        return self._do("apply", kw["name"], kw, lambda: dict(kw["body"]))

    def delete(self, **kw: Any) -> dict[str, Any]:
        return self._do("delete", kw["name"], kw, lambda: {"kind": "Status"})


class NoKube(Kube):
    """A Kube that never talks to a server (Controller builds informers but we never start them)."""

    def __init__(self) -> None:
        self.api_client = None
