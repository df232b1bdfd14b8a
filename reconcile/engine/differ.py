"""plan(desired, live, policy, owner_uid) -> Plan: the generic differ. Pure; knows Kubernetes only.

Rules (docs/architecture.md, "reconcile"):

1. Identity is (API group, kind, namespace, name); the version is not part of it.
2. Only objects whose controller ownerReference has ``owner_uid`` are patched or deleted. A wanted name
   held by any other object is a ``Conflict``, never touched.
3. An owned live object that is not desired is deleted, with its UID as precondition, unless its kind's
   policy leaves such objects to the garbage collector; one that is already being deleted is left alone
   (and a desired one becomes a ``Wait``).
4. No patch when live already holds what we render (``semantics.holds``), compared only on the paths the
   kind's policy lets us change now. The apply body is what render returns on those paths, plus, on
   every other path, live's value of the fields our earlier applies own (``managedFields``): never the
   whole live map, so ownership never extends to keys we did not render, and never the removal of a
   field the server will not let us change (an apply removes an applied field it leaves out).
5. A field, map key or list item that our field manager set (``metadata.managedFields``), that live
   still has and desired no longer renders, on those same paths, is removed (``semantics_removals``):
   the patch carries RFC 6902 ``remove`` ops guarded by a ``test`` of live's resourceVersion. Server-side
   apply cannot be trusted to remove them: fields our create (a POST) set belong to an ``Update`` entry,
   which an apply never clears (kubernetes#99003).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import jsonpatch
import orjson

from reconcile.engine import redact
from reconcile.engine.managedfields import NOTHING, owned_by, select, without
from reconcile.engine.plan import Conflict, Converged, Create, Delete, ObjectKey, Patch, Plan, Wait
from reconcile.engine.policy import METADATA_PATHS, KindPolicy, Policy
from reconcile.engine.semantics import (
    MISSING,
    mask,
    normalise_desired,
    project,
    strict_equal,
)
from reconcile.engine.semantics_removals import Removal, find_removals, whole_object_scopes

log = logging.getLogger(__name__)

_IDENTITY = ("apiVersion", "kind", "metadata.name", "metadata.namespace")
# Never carried from live: status is written through its subresource.
_UNOWNED_TOP = ("status",)


def controller_uid(obj: Mapping[str, Any]) -> str:
    """UID of the object's controller ownerReference, "" if it has none."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller") is True:
            return str(ref.get("uid", ""))
    return ""


def digest(obj: Mapping[str, Any]) -> bytes:
    """A digest of a desired object as rendered (JSON, keys sorted: the same object gives the same digest)."""
    try:
        text = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS, default=str)
    except TypeError:  # what orjson refuses (an integer beyond 64 bits): the standard library's form
        text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.blake2b(text, digest_size=16).digest()


def plan(
    desired: Iterable[Mapping[str, Any]],
    live: Iterable[Mapping[str, Any]],
    policy: Policy,
    owner_uid: str,
    *,
    field_manager: str | None = None,
    converged: frozenset[Converged] = frozenset(),
) -> Plan:
    """``field_manager`` (default: the policy's) is the executor's: its managedFields entries say what
    we set before. ``converged`` is an earlier plan's ``Plan.converged``: a live object whose uid and
    resourceVersion are unchanged, desired as before, is not compared again (the comparison is pure, so
    its answer is the same); the returned plan's ``converged`` carries the pairs found converged now."""
    if not owner_uid:
        raise ValueError("owner_uid is required: without it every object would look foreign or ours")
    manager = field_manager or policy.field_manager
    live_by_key: dict[ObjectKey, Mapping[str, Any]] = {}
    for obj in live:
        live_by_key.setdefault(ObjectKey.of(obj), obj)

    creates: list[tuple[int, int, Create]] = []
    patches: list[Patch] = []
    conflicts: list[Conflict] = []
    waits: list[Wait] = []
    wanted: set[ObjectKey] = set()
    now_converged: set[Converged] = set()
    for index, raw in enumerate(desired):
        key = ObjectKey.of(raw)
        if key in wanted:
            raise ValueError(f"desired objects hold {key} twice")
        wanted.add(key)
        have = live_by_key.get(key)
        if have is None:
            want = normalise_desired(raw)
            creates.append((policy.rank(key.kind), index, Create(key, want["apiVersion"], want)))
            continue
        meta = have.get("metadata") or {}
        holder = controller_uid(have)
        if holder != owner_uid:
            conflicts.append(Conflict(key, str(have.get("apiVersion", "")), str(meta.get("uid", "")), holder))
        elif meta.get("deletionTimestamp"):
            waits.append(Wait(key, str(meta.get("uid", ""))))
        else:
            version = str(meta.get("resourceVersion") or "")
            mark = (str(meta.get("uid", "")), version, digest(raw)) if version else None
            if mark is not None and mark in converged:
                now_converged.add(mark)
                continue
            patch = _patch(key, normalise_desired(raw), have, policy.for_kind(key.group, key.kind), manager)
            if patch is not None:
                patches.append(patch)
            elif mark is not None:
                now_converged.add(mark)

    deletes = [
        Delete(key, str(obj.get("apiVersion", "")), str(obj["metadata"].get("uid", "")))
        for key, obj in live_by_key.items()
        if key not in wanted
        and controller_uid(obj) == owner_uid
        and not obj["metadata"].get("deletionTimestamp")
        and policy.for_kind(key.group, key.kind).deletes
    ]
    deletes.sort(key=lambda d: (-policy.rank(d.key.kind), d.key))
    creates.sort(key=lambda c: (c[0], c[1]))
    return Plan(
        creates=tuple(c for _, _, c in creates),
        patches=tuple(patches),
        deletes=tuple(deletes),
        conflicts=tuple(conflicts),
        waits=tuple(waits),
        converged=frozenset(now_converged),
    )


def _patch(
    key: ObjectKey, want: dict[str, Any], have: Mapping[str, Any], kind_policy: KindPolicy, manager: str
) -> Patch | None:
    if kind_policy.mode == "patch":
        paths: tuple[str, ...] = ()
        compared = want
    else:
        paths = _mutable_paths(kind_policy, want, have)
        compared = project(want, (*_IDENTITY, *paths))
    # The version is not compared: identity is by group, and the caller may read another version.
    compared_fields = {k: v for k, v in compared.items() if k != "apiVersion"}
    seen = mask(compared_fields, have)
    drift = not strict_equal(seen, compared_fields)
    removals = _removals(want, have, kind_policy, paths, manager)
    if not drift and not removals:
        return None
    ops = (
        tuple(jsonpatch.make_patch(seen if seen is not MISSING else {}, compared_fields).patch)
        if drift
        else ()
    )
    ops += tuple(r.op() for r in removals)
    if log.isEnabledFor(logging.DEBUG):
        from deepdiff import DeepDiff  # only for the explanation

        before, after = seen, compared_fields
        if redact.is_secret(key.group, key.kind):  # tagged: a changed value still shows as changed
            after = redact.hide_values(after, tag=True)
            before = redact.hide_values(seen, tag=True) if isinstance(seen, Mapping) else seen
        log.debug("drift in %s: %s", key, DeepDiff(before, after, verbose_level=2).to_json())
    body = None
    if drift:
        body = compared if kind_policy.mode == "patch" else _apply_body(compared, have, paths, manager)
    meta = have.get("metadata") or {}
    uid = str(meta.get("uid", ""))
    guarded = tuple(r.op() for r in removals)
    if guarded and meta.get("resourceVersion"):
        # Optimistic concurrency: the pointers index live's lists as we saw them.
        guarded = (
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
            *guarded,
        )
    return Patch(key, want["apiVersion"], uid, body, ops, paths, guarded)


def _removals(
    want: Mapping[str, Any],
    have: Mapping[str, Any],
    kind_policy: KindPolicy,
    paths: tuple[str, ...],
    manager: str,
) -> tuple[Removal, ...]:
    owned = owned_by(have, manager)
    if not owned:
        return ()  # created by someone else's hand or read without managedFields: nothing to go by
    scopes = whole_object_scopes(owned, METADATA_PATHS) if kind_policy.mode == "patch" else paths
    return find_removals(
        want, have, owned, owned_by(have, manager, others=True), scopes, dict(kind_policy.server_defaults)
    )


def _mutable_paths(
    kind_policy: KindPolicy, want: Mapping[str, Any], have: Mapping[str, Any]
) -> tuple[str, ...]:
    paths = list(kind_policy.mutable_paths)
    for rule in kind_policy.conditional:
        if rule.active(have, want):
            paths.extend(rule.paths)
    return tuple(dict.fromkeys(paths))


def _apply_body(
    compared: dict[str, Any], have: Mapping[str, Any], paths: tuple[str, ...], manager: str
) -> dict[str, Any]:
    """The apply body: ``compared`` (what we render, on the paths mutable now) plus, on every other
    path, live's value of the fields our earlier applies own.

    Server-side apply removes a field our manager applied before and leaves out now. Where the field
    is immutable now (a Job's template scheduling directives we applied while it was suspended), that
    removal is a change the server rejects, failing the whole request: so such fields are sent again,
    unchanged. Only those: fields our manager never applied (the Job controller's template labels)
    stay out, so applying never takes ownership of what we did not render. Fields our create (an
    ``Update`` entry) set are not removed by an apply, and not sent.
    """
    applied = owned_by(have, manager, operation="Apply")
    if not applied:
        return compared
    kept = select(have, without(applied, (*paths, *_UNOWNED_TOP)))
    return compared if kept is NOTHING else _merge(compared, kept)


def _merge(ours: dict[str, Any], kept: Mapping[str, Any]) -> dict[str, Any]:
    """``kept`` under ``ours``, maps merged; where both hold a non-map, ours (rendered) wins. The two
    cover disjoint policy paths, which never run through a list."""
    out = dict(ours)
    for key, value in kept.items():
        mine = out.get(key, MISSING)
        if mine is MISSING:
            out[key] = value
        elif isinstance(mine, dict) and isinstance(value, Mapping):
            out[key] = _merge(mine, value)
    return out
