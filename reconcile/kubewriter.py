"""The engine's Writer (reconcile.engine.writer) over the runtime's ``Kube``, the one bridge between the two
(neither imports the other): a request value becomes one request on the known kinds' paths, through the
same door (rate limit, fence, metrics) as every other request.

A kind outside the table, a refused write and a write without an answer raise ``WriteFailed``; the fence's
``NotLeader`` goes through untouched, so the sync stops.
"""

from __future__ import annotations

from typing import Any

from urllib3.exceptions import HTTPError

from reconcile.engine.writer import WriteFailed, WriteRequest
from reconcile.runtime.kube import APPLY_PATCH, JSON_PATCH, MERGE_PATCH, ApiError, Kube, resource_for

_METHODS: dict[str, tuple[str, str | None]] = {
    "create": ("POST", None),
    "update": ("PUT", None),
    "apply": ("PATCH", APPLY_PATCH),
    "json-patch": ("PATCH", JSON_PATCH),
    "merge-patch": ("PATCH", MERGE_PATCH),
    "delete": ("DELETE", None),
}


class KubeWriter:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def send(self, request: WriteRequest) -> dict[str, Any] | None:
        try:
            res = resource_for(request.api_version, request.kind)
        except KeyError:
            raise WriteFailed(
                None, f"no matches for {request.api_version} {request.kind}", unknown_kind=True
            ) from None
        method, content_type = _METHODS[request.verb]
        name = None if request.verb == "create" else request.name
        query = {
            "fieldManager": request.field_manager or None,
            "force": "true" if request.verb == "apply" else None,
            "dryRun": "All" if request.dry_run else None,
        }
        path = res.path(request.namespace or None, name, request.subresource or None)
        try:
            return self.kube.request(method, path, query=query, body=request.body, content_type=content_type)
        except ApiError as err:
            raise WriteFailed.from_answer(err.status or 0, err.reason or "", err.body) from err
        except (HTTPError, OSError) as err:
            raise WriteFailed(None, f"{type(err).__name__}: {err}") from err
