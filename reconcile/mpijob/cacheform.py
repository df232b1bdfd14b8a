"""What the informer caches keep of a child: the fields render, status and the differ read, nothing else.

Most of a cached Pod is a spec nothing reads (Pods are create-only: the differ compares labels and
annotations only) and status the kubelet writes; most of a launcher Job is its pod template. What this
saves per object is measured in docs/performance.md (Memory).

Kept, by kind (what is not listed is dropped):

* every kind: all of ``metadata`` (labels, annotations, ownerReferences, uid, resourceVersion,
  deletionTimestamp, creationTimestamp...), except the subresource entries of ``managedFields``;
* create-only kinds of the controller's ``Policy`` (Pods, the launcher Job): in ``spec``, only the paths the
  policy may change (mutable and conditional ones, and the paths its conditions test) and those render
  reads; ``managedFields`` trees pruned to the same paths (the differ looks for removals and applied
  fields within them only);
* Pods' ``spec.nodeName`` (render/nodes.py) and ``status``: phase, reason, message, the conditions' type
  and status (and the Ready condition's ``lastTransitionTime``: when an evicted pod stopped being ready;
  the DisruptionTarget condition's ``reason``: who takes the pod away, render/evictions.py),
  and each container and init container status's name, terminated states and running state's
  ``startedAt`` (render's readiness, eviction and failure messages; the launcher gate's exit and reported
  wait; render.phases' start times);
* Jobs' ``status``: conditions, startTime, completionTime and the active, succeeded and failed counts
  (the launcher's state); a change of any other field (ready, terminating, uncountedTerminatedPods) then
  makes no watch event, so no sync;
* MPIJobs: without ``managedFields`` (nothing diffs an MPIJob; its status is written with a PUT, for
  which a body without managedFields keeps the server's);
* Nodes (read, never written): name, taints, ``spec.unschedulable`` (cordoned) and the Ready condition
  (``node_form``);
* other kinds (ConfigMap, Service, Secret, PodGroups): whole, as patch-mode kinds are compared whole.

``tests/unit/test_cacheform.py`` checks that every path the policy names survives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from reconcile.engine.policy import KindPolicy, Policy
from reconcile.mpijob.policy import POLICY
from reconcile.runtime.informer import slim

Obj = dict[str, Any]

# Spec paths render reads of a live child (render/observed.py, render/core.py, reconcile/mpijob/syncstate.py).
RENDER_SPEC_READS: Final[Mapping[tuple[str, str], tuple[str, ...]]] = {
    ("batch", "Job"): ("spec.suspend",),
    ("", "Pod"): ("spec.nodeName", "spec.workloadRef", "spec.schedulingGroup"),
}
OWNER: Final = ("kubeflow.org", "MPIJob")


def _without_managed_fields(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


def kept_spec_paths(policy: Policy, group: str, kind: str) -> tuple[str, ...] | None:
    """Dotted ``spec`` paths a create-only kind keeps; None: the kind is kept whole."""
    kp: KindPolicy = policy.for_kind(group, kind)
    if kp.mode != "create-only" or (group, kind) not in RENDER_SPEC_READS:
        return None
    paths = [*kp.mutable_paths, *RENDER_SPEC_READS[(group, kind)]]
    for rule in kp.conditional:
        paths += rule.paths
        paths += [p.path for p in rule.when]
    return tuple(dict.fromkeys(p for p in paths if p.startswith("spec.")))


def _split(paths: Iterable[str]) -> list[list[str]]:
    return [p.split(".") for p in paths]


def _project(node: Mapping[str, Any], paths: list[list[str]]) -> dict[str, Any]:
    """``node`` holding only the given key paths (below ``spec``)."""
    out: dict[str, Any] = {}
    for parts in paths:
        src: Any = node
        for part in parts:
            if not isinstance(src, Mapping) or part not in src:
                break
            src = src[part]
        else:
            dst = out
            for part in parts[:-1]:
                dst = dst.setdefault(part, {})
            dst[parts[-1]] = src
    return out


def _prune_tree(tree: Mapping[str, Any], paths: list[list[str]]) -> dict[str, Any]:
    """A fieldsV1 tree below ``f:spec`` holding only the given field paths (and the ``.`` markers on the
    way)."""
    out: dict[str, Any] = {}
    for parts in paths:
        src: Any = tree
        dst_chain: list[tuple[Mapping[str, Any], str]] = []
        for part in parts:
            key = f"f:{part}"
            if not isinstance(src, Mapping) or key not in src:
                break
            dst_chain.append((src, key))
            src = src[key]
        else:
            dst = out
            for parent, key in dst_chain[:-1]:
                dst = dst.setdefault(key, {})
                if "." in parent[key]:
                    dst["."] = {}
            dst[dst_chain[-1][1]] = src
    return out


def _prune_managed_fields(meta: dict[str, Any], spec_paths: list[list[str]]) -> None:
    entries = meta.get("managedFields")
    if not entries:
        return
    kept = []
    for entry in entries:
        tree = entry.get("fieldsV1")
        if isinstance(tree, Mapping):
            pruned: dict[str, Any] = {}
            if "f:metadata" in tree:
                pruned["f:metadata"] = tree["f:metadata"]
            spec = tree.get("f:spec")
            if isinstance(spec, Mapping) and spec_paths:
                in_spec = _prune_tree(spec, spec_paths)
                if in_spec:
                    pruned["f:spec"] = in_spec
            entry = {**entry, "fieldsV1": pruned}
        kept.append(entry)
    meta["managedFields"] = kept


_JOB_STATUS: Final = ("conditions", "startTime", "completionTime", "active", "succeeded", "failed")


_POD_CONDITION: Final[Mapping[Any, tuple[str, ...]]] = {
    "Ready": ("type", "status", "lastTransitionTime"),
    "DisruptionTarget": ("type", "status", "reason"),
    "PodScheduled": ("type", "status", "reason", "message"),
}


def _pod_condition(c: Any) -> Any:
    if not isinstance(c, Mapping):
        return c
    return {k: c[k] for k in _POD_CONDITION.get(c.get("type"), ("type", "status")) if k in c}


def _pod_status(status: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: status[k] for k in ("phase", "reason", "message") if k in status}
    conds = status.get("conditions")
    if isinstance(conds, list):
        out["conditions"] = [_pod_condition(c) for c in conds]
    for key in ("containerStatuses", "initContainerStatuses"):
        statuses = status.get(key)
        if isinstance(statuses, list):
            out[key] = [_container_status(cs) for cs in statuses]
    return out


def _container_status(cs: Any) -> Any:
    if not isinstance(cs, Mapping):
        return cs
    out: dict[str, Any] = {"name": cs.get("name", "")}
    for which in ("state", "lastState"):
        state = cs.get(which)
        if isinstance(state, Mapping) and isinstance(state.get("terminated"), Mapping):
            out[which] = {"terminated": state["terminated"]}
    state = cs.get("state")
    running = state.get("running") if isinstance(state, Mapping) else None
    if isinstance(running, Mapping) and "startedAt" in running:
        out["state"] = {"running": {"startedAt": running["startedAt"]}}
    return out


_NODE_META: Final = ("name", "uid", "resourceVersion", "deletionTimestamp")
_NODE_READY: Final = ("type", "status", "reason", "lastTransitionTime")


def node_form(obj: Obj) -> Obj:
    """A Node as render reads it (render/nodes.py, render/evictions.py): its name, taints, whether it is
    cordoned, and its Ready condition. Without the
    rest (images, heartbeats, addresses) a Node's watch event that changes none of these syncs nothing."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    conditions = (obj.get("status") or {}).get("conditions") or ()
    ready = [
        {k: c[k] for k in _NODE_READY if k in c}
        for c in conditions
        if isinstance(c, Mapping) and c.get("type") == "Ready"
    ]
    out: Obj = {
        "apiVersion": obj.get("apiVersion", "v1"),
        "kind": obj.get("kind", "Node"),
        "metadata": {k: meta[k] for k in _NODE_META if k in meta},
        "status": {"conditions": ready},
    }
    if isinstance(spec, Mapping):
        kept = {k: spec[k] for k in ("taints", "unschedulable") if spec.get(k)}
        if kept:
            out["spec"] = kept
    return out


def transform_for(group: str, kind: str, policy: Policy = POLICY) -> Callable[[Obj], Obj] | None:
    """The cache form of a kind, or None to keep it as the server sends it."""
    if (group, kind) == OWNER:
        return _without_managed_fields
    if (group, kind) == ("", "Node"):
        return node_form
    spec_paths = kept_spec_paths(policy, group, kind)
    if spec_paths is None:
        return None
    # paths below spec, as key lists
    below = _split(p[len("spec.") :] for p in spec_paths)

    def transform(obj: Obj) -> Obj:
        out = dict(obj)
        meta = out.get("metadata")
        if isinstance(meta, dict):
            meta = out["metadata"] = dict(meta)
            _prune_managed_fields(meta, below)
        spec = out.get("spec")
        if isinstance(spec, Mapping):
            out["spec"] = _project(spec, below)
        status = out.get("status")
        if kind == "Pod" and isinstance(status, Mapping):
            out["status"] = _pod_status(status)
        elif kind == "Job" and isinstance(status, Mapping):
            out["status"] = {k: status[k] for k in _JOB_STATUS if k in status}
        return out

    return transform


def cache_form(obj: Obj, api_version: str, kind: str, policy: Policy = POLICY) -> Obj:
    """``obj`` as the controller's informers cache it (for the benchmark and the tests)."""
    obj.setdefault("apiVersion", api_version)
    obj.setdefault("kind", kind)
    obj = slim(obj)
    transform = transform_for(api_version.rpartition("/")[0], kind, policy)
    return obj if transform is None else transform(obj)
