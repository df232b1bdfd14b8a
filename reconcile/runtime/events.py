"""core/v1 Events about the objects a controller reconciles, aggregated like client-go's recorder: a repeat
bumps count/lastTimestamp.

Recording never fails a sync: API errors are logged and dropped (events are best effort upstream too).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from reconcile.runtime.kube import EVENT, MERGE_PATCH, ApiError, Kube

log = logging.getLogger(__name__)

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
        component: str = "",
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
        self._send(involved_object(obj), type_, reason, message[:MAX_MESSAGE], self._clock())

    def _send(self, ref: dict[str, Any], type_: str, reason: str, message: str, now: datetime) -> None:
        namespace = ref.get("namespace", "default")
        key = (namespace, ref.get("uid", ref.get("name", "")), type_, reason, message)
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


class BackgroundEventRecorder(EventRecorder):
    """Events sent by a thread of their own, as client-go's broadcaster does: a sync never waits for an
    Event's round trip (two per job, on the path to its launcher). At most ``capacity`` wait; more are
    dropped with a warning (an API server that slow has better things to do)."""

    def __init__(self, kube: Kube, *, capacity: int = 10_000, **kwargs: Any) -> None:
        super().__init__(kube, **kwargs)
        self._pending: queue.Queue[tuple[dict[str, Any], str, str, str, datetime]] = queue.Queue(capacity)
        self._dropped = 0
        threading.Thread(target=self._run, name="events", daemon=True).start()

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        item = (involved_object(obj), type_, reason, message[:MAX_MESSAGE], self._clock())
        try:
            self._pending.put_nowait(item)
        except queue.Full:
            self._dropped += 1
            if self._dropped in (1, 10, 100) or self._dropped % 1000 == 0:
                log.warning("events dropped: too many waiting", extra={"dropped": self._dropped})

    def _run(self) -> None:
        while True:
            item = self._pending.get()
            try:
                self._send(*item)
            finally:
                self._pending.task_done()

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the waiting events to be sent; True if none is left."""
        deadline = time.monotonic() + timeout
        while self._pending.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self._pending.unfinished_tasks
