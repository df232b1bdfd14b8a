"""List+watch informers over plain dicts, with indexers (client-go's reflector, store and indexer).

* list (paged) then watch from the list's resourceVersion, with bookmarks; a 410 Gone (on the request or as
  an ERROR event) relists; every other error -- 5xx, 429, connection errors and 401/403 too (a restarting
  kube-apiserver answers 403 until its RBAC cache has synced) -- backs off exponentially (0.8 s → 30 s,
  jittered), is counted through ``on_error(informer, code)`` and resumed, as client-go's reflectors do;
* objects are the raw JSON dicts; the subresource entries of ``metadata.managedFields`` are dropped on entry
  (often the biggest part of an object), the main-resource entries stay: the differ reads ours to find
  fields we no longer render; a ``transform`` given by the controller may keep less;
* handlers get (event, old, new); an update is not delivered when the cached form did not change apart
  from ``resourceVersion`` and the managedFields' times (the kubelet's, the scheduler's and kwok's writes
  to what the transform drops: each woke a sync that read the same thing).
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import random
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from reconcile.runtime.kube import ApiError, Kube, Resource

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Handler = Callable[[str, Obj | None, Obj | None], None]
IndexFunc = Callable[[Obj], Iterable[str]]

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


def key_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def namespace_index(obj: Obj) -> list[str]:
    return [(obj.get("metadata") or {}).get("namespace", "")]


def controller_uid_index(obj: Obj) -> list[str]:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return [ref.get("uid", "")]
    return []


def node_name_index(obj: Obj) -> list[str]:
    """A pod's node (``spec.nodeName``), once it is bound."""
    node = (obj.get("spec") or {}).get("nodeName")
    return [node] if isinstance(node, str) and node else []


def controller_ref(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


class Store:
    """A thread-safe map key -> object with secondary indexes."""

    def __init__(self, indexers: Mapping[str, IndexFunc] | None = None) -> None:
        self._items: dict[str, Obj] = {}
        self._indexers = dict(indexers or {})
        self._indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}
        self._lock = threading.RLock()

    def get(self, key: str) -> Obj | None:
        with self._lock:
            return self._items.get(key)

    # builtins.list: the method shadows the name in this class's annotations
    def list(self) -> builtins.list[Obj]:
        with self._lock:
            return list(self._items.values())

    def key_list(self) -> builtins.list[str]:
        with self._lock:
            return list(self._items)

    def by_index(self, index: str, value: str) -> builtins.list[Obj]:
        with self._lock:
            return [self._items[k] for k in sorted(self._indices[index].get(value, ()))]

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def upsert(self, obj: Obj) -> Obj | None:
        key = key_of(obj)
        with self._lock:
            old = self._items.get(key)
            if old is not None:
                self._unindex(key, old)
            self._items[key] = obj
            self._index(key, obj)
            return old

    def delete(self, key: str) -> Obj | None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._unindex(key, old)
            return old

    def _index(self, key: str, obj: Obj) -> None:
        for name, fn in self._indexers.items():
            for value in fn(obj):
                self._indices[name].setdefault(value, set()).add(key)

    def _unindex(self, key: str, obj: Obj) -> None:
        for name, fn in self._indexers.items():
            for value in fn(obj):
                keys = self._indices[name].get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._indices[name][value]


def _slim(obj: Obj, res: Resource) -> Obj:
    obj.setdefault("apiVersion", res.api_version)
    obj.setdefault("kind", res.kind)
    return slim(obj)


def slim(obj: Obj) -> Obj:
    """The object without the managedFields entries of subresources (e.g. the kubelet's pod status, the
    bulk of a pod): a differ reads only main-resource entries, ours to find fields we no longer render and
    the others' to leave co-owned fields alone."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and meta.get("managedFields"):
        meta["managedFields"] = [e for e in meta["managedFields"] if not e.get("subresource")]
    return obj


def _meta_but_version(meta: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in meta.items() if k not in ("resourceVersion", "managedFields")}
    out["managedFields"] = [
        {k: v for k, v in e.items() if k != "time"} if isinstance(e, Mapping) else e
        for e in meta.get("managedFields") or ()
    ]
    return out


def same_but_version(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether two versions of an object differ in nothing but ``resourceVersion`` and managedFields'
    ``time``."""
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    if om.get("resourceVersion") == nm.get("resourceVersion"):
        return True  # the same version (our own write, seen again on the watch): nothing to compare
    if old.keys() != new.keys() or any(old[k] != new[k] for k in old if k != "metadata"):
        return False
    return _meta_but_version(om) == _meta_but_version(nm)


class _Gone(Exception):
    pass


class Informer:
    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        on_error: Callable[[str, str], None] | None = None,
        page_size: int = 500,
        watch_timeout: tuple[int, int] = (300, 600),
        backoff: tuple[float, float] = (0.8, 30.0),
        transform: Callable[[Obj], Obj] | None = None,
        on_event: Callable[[int], None] | None = None,
    ) -> None:
        """``transform``: what of each object the cache keeps (client-go's SetTransform), applied after
        the subresource managedFields entries are dropped. ``on_event``: told
        the size in bytes of each watch event received."""
        self.kube = kube
        self.resource = resource
        self.namespace = namespace or None
        self.label_selector = label_selector
        self.store = Store(
            {"namespace": namespace_index, "controller": controller_uid_index, **(indexers or {})}
        )
        self._handlers: list[Handler] = []
        self._on_error = on_error
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._backoff = backoff
        self._transform = transform
        self._on_event = on_event
        self._synced = threading.Event()
        self._rv = ""
        self._stream: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _cached(self, obj: Obj) -> Obj:
        obj = _slim(obj, self.resource)
        return obj if self._transform is None else self._transform(obj)

    @property
    def name(self) -> str:
        return f"{self.resource.plural}.{self.resource.group or 'core'}"

    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def has_synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            try:
                stream.shutdown()
            except Exception:
                with contextlib.suppress(Exception):
                    stream.close()

    def run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                if not self._rv:
                    self._list()
                failures = 0
                self._watch()
            except _Gone:
                log.info("watch expired, relisting", extra={"informer": self.name})
                self._rv = ""
                continue
            except ApiError as err:
                if err.status == 410:
                    self._rv = ""
                    continue
                failures += 1
                self._failed(str(err.status), str(err), failures)
            except Exception as err:
                if self._stop.is_set():
                    return
                failures += 1
                self._failed("error", repr(err), failures)
            if failures:
                base, cap = self._backoff
                delay = min(cap, base * 2 ** (failures - 1)) * random.uniform(1.0, 1.5)
                self._stop.wait(delay)

    def _failed(self, code: str, error: str, failures: int) -> None:
        if self._on_error is not None:
            self._on_error(self.name, code)
        # A 401/403 that persists is a broken credential or RBAC: say so louder, keep trying.
        level = logging.ERROR if code in ("401", "403") and failures >= 5 else logging.WARNING
        log.log(
            level,
            "list/watch failed, retrying",
            extra={"informer": self.name, "code": code, "error": error, "failures": failures},
        )

    # -- list and watch -----------------------------------------------------------------------------
    def _query(self) -> dict[str, Any]:
        return {"labelSelector": self.label_selector} if self.label_selector else {}

    def _list(self) -> None:
        items: list[Obj] = []
        cont = ""
        while True:
            page = self.kube.list(
                self.resource, self.namespace, limit=self._page_size, **{"continue": cont}, **self._query()
            )
            items.extend(self._cached(item) for item in page.get("items") or [])
            meta = page.get("metadata") or {}
            cont = meta.get("continue") or ""
            if not cont:
                rv = meta.get("resourceVersion", "")
                break
        self._replace(items)
        self._rv = rv
        self._synced.set()

    def _replace(self, items: list[Obj]) -> None:
        fresh = {key_of(obj) for obj in items}
        for key in self.store.key_list():
            if key not in fresh:
                old = self.store.delete(key)
                self._dispatch(DELETED, old, None)
        for obj in items:
            old = self.store.upsert(obj)
            self._deliver(old, obj)

    def _deliver(self, old: Obj | None, new: Obj) -> None:
        if old is None:
            self._dispatch(ADDED, None, new)
        elif not same_but_version(old, new):
            self._dispatch(MODIFIED, old, new)

    def _watch(self) -> None:
        low, high = self._watch_timeout
        timeout = random.randint(low, high)
        query = {
            "watch": "true",
            "resourceVersion": self._rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout,
            **self._query(),
        }
        try:
            lines = self.kube.stream_lines(
                self.resource.path(self.namespace),
                query,
                timeout=(10, timeout + 30),
                on_open=self._opened,
            )
            on_event = self._on_event
            for line in lines:
                if self._stop.is_set():
                    return
                if on_event is not None:
                    on_event(len(line))
                self._handle(orjson.loads(line))
        finally:
            self._stream = None

    def _opened(self, stream: Any) -> None:
        self._stream = stream

    def _handle(self, event: Mapping[str, Any]) -> None:
        etype = event.get("type")
        obj = event.get("object") or {}
        if etype == "ERROR":
            if obj.get("code") == 410:
                raise _Gone
            raise ApiError(int(obj.get("code") or 500), str(obj.get("reason") or ""), json.dumps(obj))
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if etype == "BOOKMARK":
            if rv:
                self._rv = rv
            return
        obj = self._cached(dict(obj))
        if etype in (ADDED, MODIFIED):
            old = self.store.upsert(obj)
            self._deliver(old, obj)
        elif etype == DELETED:
            old = self.store.delete(key_of(obj))
            self._dispatch(DELETED, old or obj, None)
        if rv:
            self._rv = rv

    def _dispatch(self, event: str, old: Obj | None, new: Obj | None) -> None:
        for handler in self._handlers:
            try:
                handler(event, old, new)
            except Exception:
                log.exception("informer handler failed", extra={"informer": self.name})

    # -- read your writes ---------------------------------------------------------------------------
    def observe(self, obj: Obj) -> None:
        """Put an object we just wrote into the cache, unless the cache already holds a newer one."""
        obj = self._cached(obj)
        current = self.store.get(key_of(obj))
        if current is not None:
            try:
                if int(current["metadata"]["resourceVersion"]) >= int(obj["metadata"]["resourceVersion"]):
                    return
            except (KeyError, ValueError, TypeError):
                return
        self.store.upsert(obj)
