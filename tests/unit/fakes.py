"""In-memory fakes of the API for L0 tests."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

import jsonpatch

from reconcile.engine.writer import WriteFailed, WriteRequest
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

    def list(self, res: Resource, namespace=None, **query):
        """Every object of the kind (in ``namespace``); label selectors are not applied."""
        self.calls.append(("list", res.kind, namespace or ""))
        self._check("list")
        items = [
            json.loads(json.dumps(o))
            for (plural, ns, _), o in self.objects.items()
            if plural == res.plural and (not namespace or ns == namespace)
        ]
        return {"items": items}

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


class RecordingWriter:
    """The Writer fake of every unit test: objects in memory by (kind, namespace, name), each request
    recorded in ``sent``. ``refuse`` may fail a request (a WriteFailed, raised before it is carried out);
    ``kinds`` limits the kinds it knows, as a server without a CRD."""

    def __init__(
        self,
        kinds: set[str] | None = None,
        refuse: Callable[[WriteRequest], WriteFailed | None] | None = None,
    ) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.sent: list[WriteRequest] = []
        self.kinds = kinds
        self.refuse = refuse
        self.rv = 0

    def lines(self) -> list[str]:
        return [str(r) for r in self.sent]

    def put(self, obj: dict[str, Any]) -> None:
        """An object the world already holds (not a request)."""
        meta = obj["metadata"]
        self.objects[(obj["kind"], meta.get("namespace", ""), meta["name"])] = obj
        version = str(meta.get("resourceVersion", ""))
        if version.isdigit():  # the versions it writes come after those it holds
            self.rv = max(self.rv, int(version))

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind, namespace, name))

    def send(self, request: WriteRequest) -> dict[str, Any] | None:
        self.sent.append(request)
        if self.kinds is not None and request.kind not in self.kinds:
            raise WriteFailed(None, f"no matches for {request.api_version} {request.kind}", unknown_kind=True)
        failure = self.refuse(request) if self.refuse is not None else None
        if failure is not None:
            raise failure
        key = (request.kind, request.namespace, request.name)
        if request.verb == "create":
            if key in self.objects:
                raise WriteFailed(
                    409, f"{request.kind} {request.name} already exists", reason="AlreadyExists"
                )
            created = copy.deepcopy(dict(request.body))
            created["metadata"].setdefault("uid", f"uid-{request.name}")
            return self._store(key, created, request.dry_run)
        live = self.objects.get(key)
        if live is None:
            raise WriteFailed(404, f"{request.kind} {request.name} not found", reason="NotFound")
        if request.verb == "delete":
            want = ((request.body or {}).get("preconditions") or {}).get("uid")
            if want and want != live["metadata"].get("uid"):
                raise WriteFailed(409, "precondition failed: uid", reason="Conflict")
            if not request.dry_run:
                del self.objects[key]
            return {"kind": "Status", "status": "Success"}
        return self._store(key, self._changed(request, live), request.dry_run)

    def _changed(self, request: WriteRequest, live: dict[str, Any]) -> dict[str, Any]:
        if request.verb == "update":
            sent = request.body["metadata"].get("resourceVersion")
            if sent is not None and sent != live["metadata"].get("resourceVersion"):
                raise WriteFailed(409, "the object has been modified", reason="Conflict")
            if request.subresource == "status":
                return {**copy.deepcopy(live), "status": copy.deepcopy(request.body.get("status"))}
            return copy.deepcopy(dict(request.body))
        if request.verb == "json-patch":
            try:
                return jsonpatch.apply_patch(live, list(request.body))
            except jsonpatch.JsonPatchTestFailed as err:
                raise WriteFailed(422, str(err), reason="Invalid") from None
        if request.verb == "merge-patch":
            return _merge(copy.deepcopy(live), request.body)
        applied = copy.deepcopy(dict(request.body))  # apply: the fields we render, on the live object
        return _merge(copy.deepcopy(live), {k: v for k, v in applied.items() if k != "metadata"}) | {
            "metadata": {
                **live["metadata"],
                **applied.get("metadata", {}),
                "uid": live["metadata"].get("uid"),
            }
        }

    def _store(self, key: tuple[str, str, str], obj: dict[str, Any], dry_run: bool) -> dict[str, Any]:
        if not dry_run:
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.objects[key] = obj
        return copy.deepcopy(obj)


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386: null removes, objects merge, anything else replaces."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(target.get(k), dict):
            target[k] = _merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)
    return target


class NoKube(Kube):
    """A Kube that never talks to a server (Controller builds informers but we never start them)."""

    def __init__(self) -> None:
        self.api_client = None
