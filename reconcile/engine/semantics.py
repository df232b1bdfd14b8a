"""Does the live object already hold what we render? Kubernetes comparison semantics on plain dicts.

The central function is ``mask(desired, live)``: the live object seen through the shape of the desired
one. Where live holds a value equal to ours under Kubernetes semantics, the mask carries *our* value;
where it differs it carries live's; where live lacks it the key is left out. So
``strict_equal(mask(d, l), d)`` decides "no write needed", and ``jsonpatch.make_patch(mask(d, l), d)``
describes exactly the drift. The rules:

* maps are subsets: keys only live has (server defaults, webhooks, other writers) are ignored;
* a desired zero value (``None``, ``False``, ``0``, ``""``, ``[]``, ``{}``) equals an absent live field,
  because the API server drops them;
* lists follow their merge type (``semantics_lists``): list-maps by key and in any order, sets as sets,
  atomic lists whole and in order (items compared as subsets, as the server may default inside them);
* quantities compare by value (``1000m == 1``, ``1Gi == 1073741824``, ``0.5 == 500m``), parsed by
  apimachinery's grammar (``quantity``);
* numbers compare by value across int/float (``420 == 420.0``: JSON has one number type), but never
  across types otherwise: ``True != 1`` and an int-or-string ``8080 != "8080"`` (the API keeps both).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Final

import orjson

from reconcile.engine.quantity import parse_quantity
from reconcile.engine.semantics_lists import item_key, list_type


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()

# Scalars directly under a map with one of these names are quantities (ResourceList and friends).
_QUANTITY_MAPS: Final = frozenset(
    {"limits", "requests", "overhead", "minResources", "hard", "capacity", "allocatable"}
)
_QUANTITY_FIELDS: Final = frozenset({"sizeLimit"})


def is_zero(value: Any) -> bool:
    """True for values the API server stores as "absent" (recursively for maps)."""
    if value is None or value is False or value == "" or value == []:
        return True
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value == 0
    if isinstance(value, Mapping):
        return all(is_zero(v) for v in value.values())
    return False


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _quantity(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    try:
        return parse_quantity(value)
    except ValueError:
        return None


def is_quantity_path(path: Sequence[str]) -> bool:
    if not path:
        return False
    return path[-1] in _QUANTITY_FIELDS or (len(path) > 1 and path[-2] in _QUANTITY_MAPS)


def scalar_equal(desired: Any, live: Any, path: Sequence[str] = ()) -> bool:
    """Equality of two leaf values at ``path`` under Kubernetes semantics."""
    if is_quantity_path(path):
        d, l_ = _quantity(desired), _quantity(live)
        if d is not None and l_ is not None:
            return d == l_
    if _is_number(desired) and _is_number(live):
        return bool(desired == live)
    return type(desired) is type(live) and desired == live


def strict_equal(a: Any, b: Any) -> bool:
    """Structural equality that, unlike ``==``, tells ``True`` from ``1`` and ``1`` from ``1.0``."""
    ta, tb = type(a), type(b)
    if ta is str or ta is bool or ta is int or ta is float or ta is type(None):  # the common leaves first
        return ta is tb and a == b
    if ta is dict and tb is dict:
        return a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def mask(desired: Any, live: Any, path: tuple[str, ...] = ()) -> Any:
    """Live seen through desired's shape (see the module docstring); MISSING where live lacks it."""
    if live is None or live is MISSING:
        return desired if is_zero(desired) else MISSING
    kind = type(desired)
    if kind is str or kind is int or kind is bool or kind is float:  # the common leaves: no ABC check
        return desired if scalar_equal(desired, live, path) else live
    if kind is dict or isinstance(desired, Mapping):
        if not (type(live) is dict or isinstance(live, Mapping)):
            return live
        out: dict[str, Any] = {}
        for key, want in desired.items():
            got = mask(want, live.get(key), (*path, key))
            if got is not MISSING:
                out[key] = got
        return out
    if isinstance(desired, list):
        if not isinstance(live, list):
            return live
        return _mask_list(desired, live, path)
    return desired if scalar_equal(desired, live, path) else live


def _mask_list(desired: list[Any], live: list[Any], path: tuple[str, ...]) -> list[Any]:
    ltype = list_type(path)
    if ltype.kind == "map":
        by_key: dict[tuple[Any, ...] | None, Any] = {}
        for item in live:
            by_key.setdefault(item_key(item, ltype.keys), item)
        out = []
        for want in desired:
            got = by_key.get(item_key(want, ltype.keys), MISSING)
            if got is not MISSING:
                out.append(mask(want, got, path))
        return out
    if ltype.kind == "set":
        return [want for want in desired if any(scalar_equal(want, got, path) for got in live)]
    if len(desired) != len(live):
        return live
    items = [mask(want, got, path) for want, got in zip(desired, live, strict=True)]
    return live if any(item is MISSING for item in items) else items


def holds(desired: Any, live: Any) -> bool:
    """True when ``live`` already holds everything ``desired`` renders."""
    return strict_equal(mask(desired, live), desired)


def drop_nulls(value: Any) -> Any:
    """A deep copy without ``None`` map values: the API server never stores them."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or kind is float:  # immutable: no copy, no ABC check
        return value
    if kind is dict:
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if kind is list:
        return [drop_nulls(v) for v in value]
    if isinstance(value, Mapping):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    if isinstance(value, (str, int, float)):  # immutable (bool is an int): deepcopy's dispatch cost a lot
        return value
    return copy.deepcopy(value)


# Anything but plain JSON (a datetime, a subclass, a dataclass) makes orjson refuse: drop_nulls copies it.
_PLAIN_JSON = (
    orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS
)
# Compact JSON has a null token only after one of these (a NaN or an infinity is written as null too).
_NULL_TOKENS = (b":null", b"[null", b",null")


def _copy_without_nulls(obj: Mapping[str, Any]) -> dict[str, Any]:
    """drop_nulls(obj); through orjson (C speed) when obj is plain JSON holding no null, the common case."""
    try:
        text = orjson.dumps(obj, option=_PLAIN_JSON)
    except TypeError:
        return dict(drop_nulls(obj))
    if any(token in text for token in _NULL_TOKENS):  # or those characters in a string: the walk is exact
        return dict(drop_nulls(obj))
    return orjson.loads(text)  # type: ignore[no-any-return]


def normalise_desired(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Desired object in the form the server stores: no nulls, Secret ``stringData`` folded into ``data``."""
    out = _copy_without_nulls(obj)
    if out.get("kind") == "Secret" and out.get("apiVersion") == "v1" and out.get("stringData"):
        data = dict(out.get("data") or {})
        for key, text in out.pop("stringData").items():
            data[key] = base64.b64encode(str(text).encode()).decode()
        out["data"] = data
    return out


# Dotted paths ("spec.template.spec.nodeSelector") address fields in policy rules.


def split_path(dotted: str) -> tuple[str, ...]:
    return tuple(dotted.split(".")) if dotted else ()


def get_path(obj: Mapping[str, Any], dotted: str) -> Any:
    node: Any = obj
    for part in split_path(dotted):
        if not (type(node) is dict or isinstance(node, Mapping)) or part not in node:
            return MISSING
        node = node[part]
    return node


def set_path(obj: dict[str, Any], dotted: str, value: Any) -> None:
    parts = split_path(dotted)
    node = obj
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = copy.deepcopy(value)


def project(obj: Mapping[str, Any], paths: Iterable[str]) -> dict[str, Any]:
    """A copy of ``obj`` holding only the given dotted paths (those it has)."""
    out: dict[str, Any] = {}
    for dotted in paths:
        value = get_path(obj, dotted)
        if value is not MISSING:
            set_path(out, dotted, value)
    return out
