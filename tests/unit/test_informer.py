"""L0: the informer's store and indexes, list/watch/relist, bookmarks, 403, read-your-writes."""

from __future__ import annotations

import json
import threading

import pytest

from reconcile.runtime.informer import Informer, Store, controller_uid_index, key_of, same_but_version
from reconcile.runtime.kube import POD, ApiError


def pod(name, rv, owner=None, ns="ns", labels=None):
    meta = {"name": name, "namespace": ns, "resourceVersion": str(rv), "uid": f"uid-{name}"}
    if labels:
        meta["labels"] = labels
    if owner:
        meta["ownerReferences"] = [{"uid": owner, "controller": True, "kind": "MPIJob", "name": "pi"}]
    meta["managedFields"] = [
        {"manager": "x", "operation": "Apply"},
        {"manager": "kubelet", "operation": "Update", "subresource": "status"},
    ]
    return {"metadata": meta}


def test_store_indexes_follow_updates_and_deletes():
    store = Store({"controller": controller_uid_index})
    store.upsert(pod("a", 1, "u1"))
    store.upsert(pod("b", 1, "u1"))
    assert [key_of(o) for o in store.by_index("controller", "u1")] == ["ns/a", "ns/b"]
    store.upsert(pod("a", 2, "u2"))
    assert [key_of(o) for o in store.by_index("controller", "u1")] == ["ns/b"]
    store.delete("ns/b")
    assert store.by_index("controller", "u1") == []
    assert [key_of(o) for o in store.by_index("controller", "u2")] == ["ns/a"]


class ListWatchKube:
    def __init__(self, pages, streams):
        self.pages = list(pages)
        self.streams = list(streams)
        self.watch_queries = []

    def list(self, res, namespace=None, **query):
        return self.pages.pop(0)

    def stream_lines(self, path, query, timeout, on_open=None):
        self.watch_queries.append(dict(query))
        item = self.streams.pop(0) if self.streams else None
        if isinstance(item, Exception):
            raise item
        if item is None:
            threading.Event().wait(0.05)
            return iter(())
        return iter(json.dumps(e).encode() for e in item)


def run_informer(kube, until, **kw):
    inf = Informer(kube, POD, backoff=(0.01, 0.02), **kw)
    events = []
    inf.add_handler(lambda e, old, new: events.append((e, key_of(new or old))))
    inf.start()
    for _ in range(200):
        if until(inf, events):
            break
        threading.Event().wait(0.01)
    inf.stop()
    return inf, events


def test_informer_lists_watches_and_relists_on_410():
    kube = ListWatchKube(
        pages=[
            {"metadata": {"resourceVersion": "10"}, "items": [pod("a", 5), pod("b", 6)]},
            {"metadata": {"resourceVersion": "30"}, "items": [pod("a", 21)]},
        ],
        streams=[
            [
                {"type": "MODIFIED", "object": pod("a", 11, labels={"x": "1"})},
                {"type": "MODIFIED", "object": pod("a", 11, labels={"x": "1"})},  # same RV: not delivered
                {"type": "MODIFIED", "object": pod("a", 12, labels={"x": "1"})},  # only the RV: not either
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
                {"type": "ERROR", "object": {"code": 410, "reason": "Expired"}},
            ]
        ],
    )
    inf, events = run_informer(kube, lambda inf, ev: len(ev) >= 5)
    assert kube.watch_queries and not kube.streams
    assert events == [
        ("ADDED", "ns/a"),
        ("ADDED", "ns/b"),
        ("MODIFIED", "ns/a"),
        ("DELETED", "ns/b"),  # gone in the relist
        ("MODIFIED", "ns/a"),
    ]
    assert kube.watch_queries[0]["resourceVersion"] == "10"
    assert kube.watch_queries[0]["allowWatchBookmarks"] == "true"
    assert kube.watch_queries[1]["resourceVersion"] == "30"
    assert inf.has_synced()
    # Main-resource entries stay for the differ's removals; subresource entries are dropped.
    assert inf.store.get("ns/a")["metadata"]["managedFields"] == [{"manager": "x", "operation": "Apply"}]
    assert inf.store.get("ns/a")["kind"] == "Pod"


def test_every_watch_event_is_counted_with_its_size():
    stream = [
        {"type": "MODIFIED", "object": pod("a", 11)},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
    ]
    kube = ListWatchKube(pages=[{"metadata": {"resourceVersion": "10"}, "items": []}], streams=[stream])
    seen: list[int] = []
    run_informer(kube, lambda inf, ev: len(seen) >= 2, on_event=seen.append)
    assert seen == [len(json.dumps(e).encode()) for e in stream]


def test_informer_resumes_from_bookmark_after_error():
    kube = ListWatchKube(
        pages=[{"metadata": {"resourceVersion": "10"}, "items": []}],
        streams=[
            [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}}],
            ApiError(500, "Internal", "{}"),
        ],
    )
    run_informer(kube, lambda inf, ev: len(kube.watch_queries) >= 3)
    assert [q["resourceVersion"] for q in kube.watch_queries[:3]] == ["10", "42", "42"]


@pytest.mark.parametrize("status", [401, 403, 429, 500, 503, None])
def test_informer_retries_transient_list_errors_and_counts_them(status):
    """A restarting kube-apiserver answers 403 until its RBAC cache syncs: retried, never fatal."""
    errors = []
    kube = ListWatchKube(pages=[{"metadata": {"resourceVersion": "10"}, "items": [pod("a", 5)]}], streams=[])
    real_list, calls = kube.list, []

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) <= 3:
            raise ApiError(status, "Err", "{}") if status else ConnectionResetError("reset")
        return real_list(*a, **k)

    kube.list = flaky
    inf, events = run_informer(kube, lambda inf, ev: inf.has_synced(), on_error=lambda *a: errors.append(a))
    assert inf.has_synced()
    assert events[0] == ("ADDED", "ns/a")
    assert errors == [("pods.core", str(status) if status else "error")] * 3


def test_observe_keeps_newer_cached_object():
    inf = Informer(ListWatchKube([], []), POD)
    inf.store.upsert(pod("a", 9))
    inf.observe(pod("a", 8))
    assert inf.store.get("ns/a")["metadata"]["resourceVersion"] == "9"
    inf.observe(pod("a", 10))
    assert inf.store.get("ns/a")["metadata"]["resourceVersion"] == "10"


def test_updates_that_change_only_the_version_are_not_delivered():
    """What the cache form drops (a Pod's spec.nodeName, its IPs) changes the version and nothing else;
    a sync woken for it would read the same objects."""
    base = pod("a", 5)
    base["status"] = {"phase": "Pending"}
    moved = json.loads(json.dumps(base))
    moved["metadata"]["resourceVersion"] = "6"
    moved["metadata"]["managedFields"][0]["time"] = "2026-12-03T10:00:00Z"
    assert same_but_version(base, moved)
    for change in (
        lambda o: o["status"].update(phase="Running"),
        lambda o: o["metadata"].setdefault("labels", {}).update(x="1"),
        lambda o: o["metadata"].update(deletionTimestamp="2026-12-03T10:00:00Z"),
        lambda o: o["metadata"]["managedFields"][0].update(manager="y"),
        lambda o: o.update(spec={"nodeName": "n"}),
    ):
        other = json.loads(json.dumps(moved))
        change(other)
        assert not same_but_version(base, other)
