"""Which fields a field manager owns: ``metadata.managedFields`` read as path trees. Pure, plain dicts.

A ``fieldsV1`` value is a tree whose keys name one step each:

* ``f:<name>``  a field of a struct or a key of a map;
* ``k:<json>``  the item of a list-map whose key fields hold the values in the JSON object;
* ``v:<json>``  the item of a set-list equal to the JSON value;
* ``i:<index>`` the item of an atomic list at that index (rare: atomic lists are usually owned whole);
* ``.``         the node itself (a map or item that exists because the manager set it).

An empty dict below a step means the manager owns that value whole (a scalar, or an atomic map or list).

No library: PyPI has no maintained Python decoder of this format (the Go one is
structured-merge-diff's ``fieldpath`` package, not callable from Python), and the format is small
and stable, so this module decodes it by hand: the trees are kept as the server sends them (keys are
canonical: the server sorts the JSON of ``k:`` keys) and each key is parsed when a walk meets it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

import attrs

from reconcile.engine.semantics_lists import KEY_DEFAULTS, item_key, list_type

Tree = Mapping[str, Any]  # a fieldsV1 tree: step -> subtree
StepKind = Literal["f", "k", "v", "i"]
SELF: Final = "."


@attrs.frozen
class Step:
    """One decoded path step: ``f`` field name, ``k`` key-field values, ``v`` set value, ``i`` index."""

    kind: StepKind
    value: Any  # str for f, dict for k, any JSON value for v, int for i

    def find(self, node: Any) -> tuple[Any, int | str] | None:
        """(child, JSON-pointer token) of ``node`` this step names, or None if ``node`` has none."""
        if self.kind == "f":
            if isinstance(node, Mapping) and self.value in node:
                return node[self.value], self.value
            return None
        if not isinstance(node, list):
            return None
        for index, item in enumerate(node):
            if self.matches(item, index):
                return item, index
        return None

    def matches(self, item: Any, index: int) -> bool:
        if self.kind == "k":
            if not isinstance(item, Mapping):
                return False
            return all(_same(item.get(k, KEY_DEFAULTS.get(k)), v) for k, v in self.value.items())
        if self.kind == "v":
            return _same(item, self.value)
        return self.kind == "i" and index == self.value


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def parse_step(key: str) -> Step:
    """Decode one fieldsV1 key (not ``.``)."""
    prefix, sep, rest = key.partition(":")
    if not sep or prefix not in ("f", "k", "v", "i"):
        raise ValueError(f"not a fieldsV1 path step: {key!r}")
    if prefix == "f":
        return Step("f", rest)
    if prefix == "i":
        return Step("i", int(rest))
    value = json.loads(rest)
    if prefix == "k" and not isinstance(value, dict):
        raise ValueError(f"list-map key is not a JSON object: {key!r}")
    return Step(prefix, value)  # type: ignore[arg-type]


def entries(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((obj.get("metadata") or {}).get("managedFields") or ())


def merge(trees: Iterable[Tree]) -> dict[str, Any]:
    """The union of several fieldsV1 trees."""
    out: dict[str, Any] = {}
    for tree in trees:
        for key, sub in tree.items():
            out[key] = merge((out.get(key) or {}, sub or {}))
    return out


def owned_by(
    obj: Mapping[str, Any], manager: str, *, others: bool = False, operation: str | None = None
) -> dict[str, Any]:
    """Fields ``manager`` owns in ``obj`` (all its operations, or only ``operation``'s: "Apply",
    "Update"; main resource only); with ``others``, the fields every *other* manager owns."""
    return merge(
        e.get("fieldsV1") or {}
        for e in entries(obj)
        if (e.get("manager") == manager) != others
        and not e.get("subresource")
        and (operation is None or e.get("operation") == operation)
    )


def without(tree: Tree, scopes: Iterable[str], names: tuple[str, ...] = ()) -> dict[str, Any]:
    """``tree`` less every subtree at or below one of ``scopes`` (dotted field paths; list-item steps
    are not part of a path, as in policy rules)."""
    cut = [tuple(s.split(".")) for s in scopes]
    out: dict[str, Any] = {}
    for key, sub in tree.items():
        if key == SELF:
            out[key] = sub
            continue
        step = parse_step(key)
        below = (*names, step.value) if step.kind == "f" else names
        if any(below[: len(c)] == c for c in cut):
            continue
        if not sub:
            out[key] = sub  # owned whole
            continue
        pruned = without(sub, [".".join(c) for c in cut], below)
        if any(k != SELF for k in pruned) or not any(k != SELF for k in sub):
            out[key] = pruned  # what is left; an emptied subtree would read as "owned whole"
    return out


class _Nothing:
    def __repr__(self) -> str:
        return "NOTHING"


NOTHING: Final = _Nothing()


def select(value: Any, tree: Tree) -> Any:
    """The part of ``value`` (an object) that ``tree`` covers: what an apply owning just those fields
    would send (list-map items keep their key fields). ``NOTHING`` when it covers no value in it."""
    return _select(value, tree) if tree else NOTHING  # an empty root owns nothing


def _select(value: Any, tree: Tree) -> Any:
    steps = [(k, sub) for k, sub in tree.items() if k != SELF]
    if not steps:
        return copy.deepcopy(value) if not tree else NOTHING  # {}: owned whole; {".": {}}: no leaf
    if isinstance(value, Mapping):
        out = {}
        for key, sub in steps:
            step = parse_step(key)
            if step.kind == "f" and step.value in value:
                got = _select(value[step.value], sub)
                if got is not NOTHING:
                    out[step.value] = got
        return out or NOTHING
    if isinstance(value, list):
        items: list[tuple[int, Any]] = []
        for key, sub in steps:
            step = parse_step(key)
            found = step.find(value)
            if found is None:
                continue
            item, index = found
            got = copy.deepcopy(item) if step.kind == "v" else _select(item, sub)
            if step.kind == "k" and isinstance(item, Mapping):
                keys = {k: item[k] for k in step.value if k in item}
                got = {**keys, **got} if isinstance(got, Mapping) else keys
            if got is not NOTHING:
                items.append((int(index), got))
        return [got for _, got in sorted(items, key=lambda pair: pair[0])] or NOTHING
    return copy.deepcopy(value)


# The server records no ownership of an object's identity.
_IDENTITY: Final[Mapping[tuple[str, ...], tuple[str, ...]]] = {
    (): ("apiVersion", "kind", "status"),
    ("metadata",): ("name", "namespace", "uid", "resourceVersion", "managedFields", "creationTimestamp"),
}


def encode(obj: Any, path: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fieldsV1 tree of every field set in ``obj`` (what an apply of ``obj`` would own), using the
    list types of ``semantics_lists``. For tests and fakes; the server is the authority."""
    if isinstance(obj, Mapping):
        skip = _IDENTITY.get(path, ())
        out = {
            f"f:{key}": encode(value, (*path, key))
            for key, value in obj.items()
            if value is not None and key not in skip
        }
        return {SELF: {}, **out} if out and path else out
    if isinstance(obj, list):
        ltype = list_type(path)
        if ltype.kind == "map":
            items: dict[str, Any] = {}
            for item in obj:
                key = item_key(item, ltype.keys)
                if key is None:
                    return {}
                as_json = json.dumps(
                    dict(zip(ltype.keys, key, strict=True)), sort_keys=True, separators=(",", ":")
                )
                items[f"k:{as_json}"] = {SELF: {}, **encode(item, path)}
            return {SELF: {}, **items} if items else {}
        if ltype.kind == "set":
            return (
                {SELF: {}, **{f"v:{json.dumps(v, sort_keys=True, separators=(',', ':'))}": {} for v in obj}}
                if obj
                else {}
            )
    return {}
