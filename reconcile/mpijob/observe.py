"""The observe step of a sync: an MPIJob's live children, read through a small ``Reader``.

The operator reads its informers' caches (``CacheReader``); ``mpijob plan`` reads the API server with GET
and LIST (``ApiReader``). Both go through ``observe``, so the plan command shows the decision on exactly
the world the operator would see.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import attrs

import render
from reconcile.mpijob.decide import needs_fresh_key
from reconcile.mpijob.memory import JobMemory
from reconcile.mpijob.policy import CHILD_SELECTOR, child_resources
from reconcile.runtime.informer import Informer, controller_ref, node_name_index, slim
from reconcile.runtime.kube import JOB, NODE, POD, PRIORITY_CLASS, ApiError, Kube, Resource


class Reader(Protocol):
    def owned(self, namespace: str, uid: str) -> list[dict[str, Any]]:
        """Objects of the child kinds in ``namespace`` whose controller has ``uid``."""

    def named(self, res: Resource, namespace: str, name: str, *, cached_only: bool) -> dict[str, Any] | None:
        """The object of that name, if any (``cached_only``: only if a watch has seen it)."""

    def priority_classes(self) -> list[dict[str, Any]] | None:
        """Every PriorityClass, or None when they are not read."""

    def node(self, name: str) -> dict[str, Any] | None:
        """The Node of that name, if nodes are read and it exists."""


@attrs.frozen
class CacheReader:
    """The operator's caches; a name held by an object our label-filtered watches cannot see is read from
    the API server."""

    kube: Kube
    children: Mapping[Resource, Informer]
    priority: Informer | None = None
    nodes: Informer | None = None

    def owned(self, namespace: str, uid: str) -> list[dict[str, Any]]:
        return [o for inf in self.children.values() for o in inf.store.by_index("controller", uid)]

    def named(self, res: Resource, namespace: str, name: str, *, cached_only: bool) -> dict[str, Any] | None:
        cached = self.children[res].store.get(f"{namespace}/{name}")
        if cached is not None or cached_only:
            return cached
        return _get(self.kube, res, namespace, name)

    def priority_classes(self) -> list[dict[str, Any]] | None:
        return None if self.priority is None else self.priority.store.list()

    def node(self, name: str) -> dict[str, Any] | None:
        return None if self.nodes is None else self.nodes.store.get(name)


@attrs.define
class ApiReader:
    """GET and LIST only, for ``mpijob plan`` (each kind listed once per namespace)."""

    kube: Kube
    resources: list[Resource]
    read_priority: bool = False
    read_nodes: bool = False
    _listed: dict[tuple[Resource, str], list[dict[str, Any]]] = attrs.field(factory=dict)

    def _list(self, res: Resource, namespace: str | None, selector: str | None) -> list[dict[str, Any]]:
        key = (res, namespace or "")
        if key not in self._listed:
            items = self.kube.list(res, namespace, labelSelector=selector)["items"]
            self._listed[key] = [slim(o) for o in items]
        return self._listed[key]

    def owned(self, namespace: str, uid: str) -> list[dict[str, Any]]:
        return [
            o
            for res in self.resources
            for o in self._list(res, namespace, CHILD_SELECTOR)
            if (controller_ref(o) or {}).get("uid") == uid
        ]

    def named(self, res: Resource, namespace: str, name: str, *, cached_only: bool) -> dict[str, Any] | None:
        return _get(self.kube, res, namespace, name)  # the API server is this reader's cache

    def priority_classes(self) -> list[dict[str, Any]] | None:
        return self._list(PRIORITY_CLASS, None, None) if self.read_priority else None

    def node(self, name: str) -> dict[str, Any] | None:
        if not self.read_nodes:
            return None
        try:
            return _get(self.kube, NODE, "", name)
        except ApiError as err:
            if err.status == 403:  # a user who may not read Nodes: planned as without --watch-nodes
                return None
            raise


def observe(
    obj: Mapping[str, Any], memory: JobMemory, reader: Reader, config: render.Config
) -> tuple[list[dict[str, Any]], JobMemory]:
    """The job's live children (plus objects holding names it wants) and, for a Secret not created yet,
    fresh key material in the memory."""
    try:
        job, memory = memory.job(obj)
    except render.ValidationError:
        return [], memory
    children = children_of(job, reader)
    held, taken = held_names(job, children, memory.taken, reader, config)
    children += held
    memory = attrs.evolve(memory, taken=taken)
    if needs_fresh_key(obj, children, memory):
        memory = attrs.evolve(memory, fresh_ssh_key=render.generate_ssh_key())
    return children, memory


def children_of(job: render.MPIJob, reader: Reader) -> list[dict[str, Any]]:
    """Ours, launcher pods (through our Job), PriorityClasses, and the Nodes those pods are bound to."""
    out: list[dict[str, Any]] = []
    seen: set[object] = set()

    def add(objs: Iterable[dict[str, Any]]) -> None:
        for o in objs:
            meta = o.get("metadata") or {}
            identity = meta.get("uid") or (o.get("kind"), meta.get("namespace"), meta.get("name"))
            if identity not in seen:
                seen.add(identity)
                out.append(o)

    add(reader.owned(job.namespace, job.uid))
    for launcher in [o for o in out if o.get("kind") == JOB.kind]:
        add(reader.owned(job.namespace, str(launcher["metadata"].get("uid", ""))))
    add(reader.priority_classes() or ())
    bound = {node for o in out if o.get("kind") == POD.kind for node in node_name_index(o)}
    add(n for n in map(reader.node, sorted(bound)) if n is not None)
    return out


def wanted(job: render.MPIJob, config: render.Config) -> list[tuple[Resource, str]]:
    """Every name the job's children may take (render's list); any object holding one must be seen."""
    by_kind = {res.kind: res for res in child_resources(config)}
    return [(by_kind[kind], name) for kind, name in render.wanted_names(job, config)]


def held_names(
    job: render.MPIJob,
    children: list[dict[str, Any]],
    taken: frozenset[tuple[str, str]],
    reader: Reader,
    config: render.Config,
) -> tuple[list[dict[str, Any]], frozenset[tuple[str, str]]]:
    """Objects holding wanted names that are not our children: seen by a watch, or, for objects without
    our labels, from the names a create of ours found taken earlier (read on every sync of this job,
    forgotten once gone). Returns them and the names still to read."""
    have = {(o.get("kind"), o["metadata"].get("name")) for o in children}
    out: list[dict[str, Any]] = []
    still: set[tuple[str, str]] = set()
    for res, name in wanted(job, config):
        if (res.kind, name) in have:
            continue
        found = reader.named(res, job.namespace, name, cached_only=True)
        if found is None and (res.kind, name) in taken:
            found = reader.named(res, job.namespace, name, cached_only=False)
            if found is not None:
                still.add((res.kind, name))
        if found is not None:
            out.append(found)
    return out, frozenset(still)


def _get(kube: Kube, res: Resource, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found = kube.get(res, namespace, name)
    except ApiError as err:
        if err.status == 404:
            return None
        raise
    found.setdefault("apiVersion", res.api_version)
    found.setdefault("kind", res.kind)
    return slim(found)
