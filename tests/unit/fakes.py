"""In-memory fakes of the API for L0 tests."""

from __future__ import annotations

import json

from reconcile.kube import ApiError, Resource


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
