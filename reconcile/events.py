"""core/v1 Events about MPIJobs, aggregated like client-go's recorder: a repeat bumps count/lastTimestamp.

Recording never fails a sync: API errors are logged and dropped (events are best effort upstream too).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from reconcile.kube import EVENT, MERGE_PATCH, ApiError, Kube

log = logging.getLogger(__name__)

COMPONENT = "mpi-job-controller"
NORMAL = "Normal"
WARNING = "Warning"
MAX_MESSAGE = 1024
_CACHE_SIZE = 4096


def _timestamp(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def involved_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    ref = {
        "apiVersion": obj.get("apiVersion", ""),
        "kind": obj.get("kind", ""),
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    return {k: v for k, v in ref.items() if v}


class EventRecorder:
    def __init__(
        self,
        kube: Kube,
        *,
        component: str = COMPONENT,
        host: str = "",
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._kube = kube
        self._component = component
        self._host = host
        self._clock = clock
        # (namespace, uid, type, reason, message) -> (event name, count); oldest evicted first
        self._seen: OrderedDict[tuple[str, ...], tuple[str, int]] = OrderedDict()
        self._lock = threading.Lock()

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        ref = involved_object(obj)
        namespace = ref.get("namespace", "default")
        message = message[:MAX_MESSAGE]
        key = (namespace, ref.get("uid", ref.get("name", "")), type_, reason, message)
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None:
                self._seen.move_to_end(key)
        try:
            if seen is not None:
                name, count = seen
                try:
                    self._kube.patch(
                        EVENT,
                        namespace,
                        name,
                        {"count": count + 1, "lastTimestamp": _timestamp(now)},
                        content_type=MERGE_PATCH,
                    )
                    self._remember(key, name, count + 1)
                    return
                except ApiError as err:
                    if err.status != 404:
                        raise
                    # the Event expired (events have a TTL): start a new one
            name = f"{ref.get('name', 'unknown')}.{time.time_ns():x}"
            body = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": ref,
                "reason": reason,
                "message": message,
                "type": type_,
                "source": {"component": self._component, **({"host": self._host} if self._host else {})},
                "firstTimestamp": _timestamp(now),
                "lastTimestamp": _timestamp(now),
                "count": 1,
                "reportingComponent": self._component,
                "reportingInstance": self._host or self._component,
            }
            self._kube.create(EVENT, namespace, body)
            self._remember(key, name, 1)
        except Exception as err:
            log.warning(
                "event not recorded", extra={"reason": reason, "object": ref.get("name"), "error": str(err)}
            )

    def _remember(self, key: tuple[str, ...], name: str, count: int) -> None:
        with self._lock:
            self._seen[key] = (name, count)
            self._seen.move_to_end(key)
            while len(self._seen) > _CACHE_SIZE:
                self._seen.popitem(last=False)
