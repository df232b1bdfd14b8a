"""A Plan: the creates, patches and deletes that move live objects to the desired ones. Plain data.

Printable (``str(plan)``), serialisable (``plan.to_dict()``, with a Secret's values masked: it is for
people to read), comparable with ``==`` in tests; an empty plan is falsy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from reconcile.engine import redact


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


@attrs.frozen(order=True)
class ObjectKey:
    """Identity of an object: API group (not version), kind, namespace ("" if cluster-scoped), name."""

    group: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectKey:
        meta = obj.get("metadata") or {}
        return cls(
            _group(str(obj.get("apiVersion", ""))),
            str(obj.get("kind", "")),
            str(meta.get("namespace") or ""),
            str(meta.get("name", "")),
        )

    def __str__(self) -> str:
        kind = f"{self.kind}.{self.group}" if self.group else self.kind
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{kind} {where}"


def _entry(action: str, key: ObjectKey, api_version: str, **fields: Any) -> dict[str, Any]:
    """A plan entry as printed: what, which object, then the entry's own fields."""
    return {"action": action, "object": str(key), "apiVersion": api_version, **fields}


@attrs.frozen
class Create:
    key: ObjectKey
    api_version: str
    body: dict[str, Any] = attrs.field(eq=True, repr=False)

    def to_dict(self) -> dict[str, Any]:
        body = redact.hide_values(self.body) if redact.is_secret(self.key.group, self.key.kind) else self.body
        return _entry("create", self.key, self.api_version, body=body)

    def __str__(self) -> str:
        return f"create {self.key}"


@attrs.frozen
class Patch:
    """Changes to one live object: ``removal_patch`` first, then a server-side apply of ``body``.

    ``body`` is the desired object restricted to the paths we may change, None when only removals are
    due. ``removal_patch`` is an RFC 6902 patch sent as is: a ``test`` of the resourceVersion the plan
    saw, then ``remove`` ops for fields we set before and render no longer (empty if none).
    ``json_patch`` describes all the drift (RFC 6902, from live-as-we-see-it to desired) for logs and
    tests; ``uid`` is the live object's, ``paths`` the policy paths the body covers.
    """

    key: ObjectKey
    api_version: str
    uid: str
    body: dict[str, Any] | None = attrs.field(repr=False)
    json_patch: tuple[dict[str, Any], ...]
    paths: tuple[str, ...] = ()
    removal_patch: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        body, json_patch, removal_patch = self.body, list(self.json_patch), list(self.removal_patch)
        if redact.is_secret(self.key.group, self.key.kind):
            body = None if body is None else redact.hide_values(body)
            json_patch, removal_patch = (
                redact.hide_json_patch(json_patch),
                redact.hide_json_patch(removal_patch),
            )
        return _entry(
            "patch",
            self.key,
            self.api_version,
            uid=self.uid,
            jsonPatch=json_patch,
            body=body,
            removalPatch=removal_patch,
        )

    def __str__(self) -> str:
        ops = ", ".join(f"{op['op']} {op['path']}" for op in self.json_patch)
        return f"patch {self.key}: {ops}"


@attrs.frozen
class Delete:
    """Delete with ``preconditions.uid``: a same-named successor object is never hit. ``grace_period_seconds``
    0 is a force delete: the object goes at once, whether or not whoever runs it has stopped it."""

    key: ObjectKey
    api_version: str
    uid: str
    grace_period_seconds: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out = _entry("delete", self.key, self.api_version, uid=self.uid)
        if self.grace_period_seconds is not None:
            out["gracePeriodSeconds"] = self.grace_period_seconds
        return out

    def __str__(self) -> str:
        if self.grace_period_seconds == 0:
            return f"force-delete {self.key} (uid {self.uid})"
        grace = f", grace {self.grace_period_seconds} s" if self.grace_period_seconds is not None else ""
        return f"delete {self.key} (uid {self.uid}{grace})"


@attrs.frozen
class Conflict:
    """A wanted name held by an object we do not control; never touched."""

    key: ObjectKey
    api_version: str
    holder_uid: str  # the live object's UID
    controller_uid: str  # its controller's UID, "" if it has no controller

    def to_dict(self) -> dict[str, Any]:
        return _entry(
            "conflict", self.key, self.api_version, uid=self.holder_uid, controllerUid=self.controller_uid
        )

    def __str__(self) -> str:
        by = f"controller {self.controller_uid}" if self.controller_uid else "no controller"
        return f"conflict {self.key}: held by uid {self.holder_uid} ({by})"


@attrs.frozen
class Wait:
    """A wanted object of ours that is being deleted: recreate it after it is gone."""

    key: ObjectKey
    uid: str

    def to_dict(self) -> dict[str, Any]:
        return {"action": "wait", "object": str(self.key), "uid": self.uid}

    def __str__(self) -> str:
        return f"wait {self.key}: being deleted (uid {self.uid})"


# (live uid, live resourceVersion, digest of the desired object as rendered)
Converged = tuple[str, str, bytes]


@attrs.frozen
class Plan:
    creates: tuple[Create, ...] = ()
    patches: tuple[Patch, ...] = ()
    deletes: tuple[Delete, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    waits: tuple[Wait, ...] = ()
    # The (uid, resourceVersion, digest of the desired object) of every live object found to hold what
    # is desired: a later plan given them skips comparing those pairs again. Not part of the plan proper.
    converged: frozenset[Converged] = attrs.field(factory=frozenset, eq=False, repr=False)

    @property
    def entries(self) -> tuple[Create | Patch | Delete | Conflict | Wait, ...]:
        return (*self.creates, *self.patches, *self.deletes, *self.conflicts, *self.waits)

    @property
    def writes(self) -> int:
        return len(self.creates) + len(self.patches) + len(self.deletes)

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def to_dict(self) -> dict[str, Any]:
        return {
            "creates": [e.to_dict() for e in self.creates],
            "patches": [e.to_dict() for e in self.patches],
            "deletes": [e.to_dict() for e in self.deletes],
            "conflicts": [e.to_dict() for e in self.conflicts],
            "waits": [e.to_dict() for e in self.waits],
        }

    def __str__(self) -> str:
        if not self:
            return "plan: no changes"
        return "\n".join(["plan:", *(f"  {entry}" for entry in self.entries)])
