"""Per-kind update policy: which fields of an existing object the differ may change. Plain data.

* ``patch``: the whole rendered object is applied in place (ConfigMap, Service, custom resources).
* ``create-only``: after creation only ``mutable_paths`` may be applied; drift anywhere else is
  ignored, never "fixed" by delete and recreate (Pods, Secrets).
* ``conditional`` rules add paths that are mutable only while the *live* object is in some state,
  e.g. a batch/v1 Job's pod-template scheduling directives while it is suspended and not started.

The controller passes a ``Policy`` to ``plan``: its kinds, its field manager, its create order. This
module holds Kubernetes' own rules for the built-in kinds an operator typically owns (``JOB_POLICY``,
``SERVICE_POLICY``...); which kinds a controller manages, and how, is the controller's data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs

from reconcile.engine.semantics import MISSING, get_path, is_zero

Mode = Literal["patch", "create-only"]

METADATA_PATHS: Final = ("metadata.labels", "metadata.annotations")


@attrs.frozen
class PathIs:
    """A predicate on one field: ``value`` given -> equal to it; else true-ish / absent as asked."""

    path: str
    value: Any = True
    absent: bool = False

    def __call__(self, obj: Mapping[str, Any]) -> bool:
        got = get_path(obj, self.path)
        if self.absent:
            return got is MISSING or is_zero(got)
        return got is not MISSING and type(got) is type(self.value) and got == self.value


@attrs.frozen
class MutableWhen:
    """``paths`` are mutable while every predicate holds on the live object.

    ``or_desired``: also when every predicate holds on the desired object (the write itself enters the
    state). Off for Jobs: the API server judges the *old* object, so a patch that suspends a Job and
    changes its template in one request is rejected.
    """

    when: tuple[PathIs, ...]
    paths: tuple[str, ...]
    or_desired: bool = False

    def active(self, live: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
        if all(p(live) for p in self.when):
            return True
        return self.or_desired and all(p(desired) for p in self.when)


@attrs.frozen
class KindPolicy:
    """``server_defaults``: (dotted field path, value) pairs the API server fills in when it decodes a
    create. Our create owns them without having rendered them; a field that holds its default is
    never taken for one we stopped rendering (list items are skipped in the path)."""

    mode: Mode = "patch"
    mutable_paths: tuple[str, ...] = ()
    conditional: tuple[MutableWhen, ...] = ()
    server_defaults: tuple[tuple[str, Any], ...] = ()
    # False: an owned object of this kind that is not desired is left to the garbage collector (it goes
    # with its owner), so the controller needs no right to delete the kind.
    deletes: bool = True

    def __attrs_post_init__(self) -> None:
        if self.mode not in ("patch", "create-only"):
            raise ValueError(f"unknown policy mode {self.mode!r}")


PATCH: Final = KindPolicy("patch")
# core/v1 SetDefaults_Service, for the Service kinds an operator renders (ClusterIP, headless).
SERVICE_POLICY: Final = KindPolicy(
    "patch",
    server_defaults=(
        ("spec.type", "ClusterIP"),
        ("spec.sessionAffinity", "None"),
        ("spec.internalTrafficPolicy", "Cluster"),
        ("spec.ports.protocol", "TCP"),
    ),
)
CREATE_ONLY: Final = KindPolicy("create-only", METADATA_PATHS)


@attrs.frozen
class Policy:
    """Per-kind policies keyed by (API group, kind); ``default`` for kinds not listed.

    ``field_manager`` is the controller's: the plan reads its managedFields entries to know what it
    set before, and the executor writes under it. No default: the engine serves any controller."""

    field_manager: str = attrs.field(kw_only=True)
    kinds: Mapping[tuple[str, str], KindPolicy] = attrs.field(factory=dict)
    default: KindPolicy = PATCH
    # Create order (lower first) by kind; deletes run in the reverse order. Unlisted kinds go last.
    order: tuple[str, ...] = ()

    def __attrs_post_init__(self) -> None:
        if not self.field_manager:
            raise ValueError("a Policy needs the controller's field manager")

    def for_kind(self, group: str, kind: str) -> KindPolicy:
        return self.kinds.get((group, kind), self.default)

    def rank(self, kind: str) -> int:
        return self.order.index(kind) if kind in self.order else len(self.order)


_JOB_TEMPLATE: Final = "spec.template"
JOB_POLICY: Final = KindPolicy(
    "create-only",
    (*METADATA_PATHS, "spec.suspend"),
    (
        MutableWhen(
            # The API server's rule (batch Job strategy): suspended and never started.
            when=(PathIs("spec.suspend", True), PathIs("status.startTime", absent=True)),
            paths=(
                f"{_JOB_TEMPLATE}.metadata.labels",
                f"{_JOB_TEMPLATE}.metadata.annotations",
                f"{_JOB_TEMPLATE}.spec.nodeSelector",
                f"{_JOB_TEMPLATE}.spec.tolerations",
                f"{_JOB_TEMPLATE}.spec.schedulingGates",
            ),
        ),
    ),
)
