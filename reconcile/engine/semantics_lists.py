"""How Kubernetes merges each list field: list-map keys, sets, atomic lists.

The table mirrors the ``x-kubernetes-list-type`` / ``x-kubernetes-list-map-keys`` markers of the
Kubernetes OpenAPI spec for the fields operators render (PodSpec, Container, ServiceSpec, ObjectMeta,
conditions). A field is looked up by its name and the name of the field that holds it (list indices
are not part of the lookup path), so the same rule covers a Pod's ``spec`` and a Job's
``spec.template.spec``. Lists not in the table are atomic: compared whole, in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import attrs

ListKind = Literal["map", "set", "atomic"]

_CONTAINERS: Final = ("containers", "initContainers", "ephemeralContainers")


@attrs.frozen
class ListType:
    kind: ListKind
    keys: tuple[str, ...] = ()


ATOMIC: Final = ListType("atomic")
SET: Final = ListType("set")

# (holder field or "*", field) -> list type. The holder is the nearest enclosing field name.
_TABLE: Final[dict[tuple[str, str], ListType]] = {
    ("*", "containers"): ListType("map", ("name",)),
    ("*", "initContainers"): ListType("map", ("name",)),
    ("*", "ephemeralContainers"): ListType("map", ("name",)),
    ("*", "env"): ListType("map", ("name",)),
    ("*", "volumes"): ListType("map", ("name",)),
    ("*", "volumeMounts"): ListType("map", ("mountPath",)),
    ("*", "volumeDevices"): ListType("map", ("devicePath",)),
    ("*", "resizePolicy"): ListType("map", ("resourceName",)),
    ("*", "imagePullSecrets"): ListType("map", ("name",)),
    ("*", "hostAliases"): ListType("map", ("ip",)),
    ("*", "topologySpreadConstraints"): ListType("map", ("topologyKey", "whenUnsatisfiable")),
    ("*", "schedulingGates"): ListType("map", ("name",)),
    ("*", "resourceClaims"): ListType("map", ("name",)),
    ("resources", "claims"): ListType("map", ("name",)),
    ("*", "conditions"): ListType("map", ("type",)),
    ("metadata", "ownerReferences"): ListType("map", ("uid",)),
    ("metadata", "finalizers"): SET,
    # Service ports; container ports are set below for every container list.
    ("spec", "ports"): ListType("map", ("port", "protocol")),
    ("spec", "tolerations"): ATOMIC,
}
for _holder in _CONTAINERS:
    _TABLE[(_holder, "ports")] = ListType("map", ("containerPort", "protocol"))

# Defaults the API server fills into list-map key fields; keys compare with the default applied.
KEY_DEFAULTS: Final[Mapping[str, Any]] = {"protocol": "TCP"}


def list_type(path: Sequence[str]) -> ListType:
    """The list type of the list at ``path`` (field names only, no indices)."""
    if not path:
        return ATOMIC
    field = path[-1]
    holder = path[-2] if len(path) > 1 else ""
    return _TABLE.get((holder, field)) or _TABLE.get(("*", field)) or ATOMIC


def item_key(item: Any, keys: Sequence[str]) -> tuple[Any, ...] | None:
    """The list-map key of one item, with server defaults for key fields; None if not a map item."""
    if not isinstance(item, Mapping):
        return None
    return tuple(item.get(k, KEY_DEFAULTS.get(k)) for k in keys)
