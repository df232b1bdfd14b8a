"""Fields we set before and render no longer: found from our managedFields, sent as RFC 6902 removes.

``plan`` compares desired against live as a subset, so a field, map key or list item that we stopped
rendering never looks like drift. Our field manager's ``managedFields`` entries record what we set
(the create's ``Update`` entry and the patches' ``Apply`` entry); a path recorded there, still present
in live, and absent from desired was ours and is no longer wanted. Rules:

* only paths inside ``scopes`` (the dotted field paths the kind's policy lets us change) are removed;
  a path above a scope is walked into, never removed whole;
* a path another manager owns too (itself or anything below it) is not removed whole: only our parts
  below it, as server-side apply would do;
* a map we own whole (an atomic map: no ``f:`` keys below it, e.g. ``nodeSelector``) loses the keys
  desired no longer has: the subset compare in ``semantics`` cannot see those;
* the create's ``Update`` entry also holds the fields the API server defaulted on decoding (a Service's
  ``spec.type``, a Job's ``spec.suspend``...). Removing those would only make the server default them
  again, one write per sync forever, so a path whose live value is the kind's known server default
  (``defaults``, dotted field names with list items skipped) or a structural zero (``false``, ``{}``,
  ``[]``: absent means the same) is left alone.

The JSON pointers address live's list items by their index; the caller sends them with a ``test`` on
``metadata.resourceVersion``, so the indices are those of the object the server holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

import attrs

from reconcile.engine.managedfields import SELF, Tree, parse_step
from reconcile.engine.semantics import MISSING, scalar_equal, split_path

Token = str | int
_Where = Literal["in", "above", "out"]

# Never removed: identity and server-owned metadata, status (written through its own subresource).
_TOP_EXCLUDED: Final = frozenset({"apiVersion", "kind", "metadata", "status"})


@attrs.frozen
class Removal:
    pointer: tuple[Token, ...]  # JSON-pointer tokens into live
    value: Any = attrs.field(eq=False, repr=False)  # live's value there, for logs

    @property
    def path(self) -> str:
        return "".join("/" + _escape(t) for t in self.pointer)

    def op(self) -> dict[str, Any]:
        return {"op": "remove", "path": self.path}


def _escape(token: Token) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


def whole_object_scopes(owned: Tree, metadata_paths: Iterable[str]) -> tuple[str, ...]:
    """Scopes for a kind patched whole: every top-level field we own but identity/metadata/status,
    plus the given metadata paths (labels, annotations)."""
    top = [k[2:] for k in owned if k.startswith("f:") and k[2:] not in _TOP_EXCLUDED]
    return (*metadata_paths, *top)


def find_removals(
    desired: Mapping[str, Any],
    live: Mapping[str, Any],
    owned: Tree,
    others: Tree,
    scopes: Iterable[str],
    defaults: Mapping[str, Any] | None = None,
) -> tuple[Removal, ...]:
    """The removals that take from ``live`` what ``owned`` says we set and ``desired`` no longer holds.

    Ordered so they can be applied one after another: later items of a list before earlier ones.
    """
    walk = _Walk(tuple(split_path(s) for s in scopes), defaults or {})
    walk.tree(owned, desired, live, others, (), ())
    return tuple(sorted(walk.out, key=lambda r: tuple(_order(t) for t in r.pointer), reverse=True))


def _order(token: Token) -> tuple[int, Any]:
    return (1, token) if isinstance(token, int) else (0, token)


def _structural_zero(value: Any) -> bool:
    return value is None or value is False or value == {} or value == []


class _Walk:
    def __init__(self, scopes: tuple[tuple[str, ...], ...], defaults: Mapping[str, Any]) -> None:
        self.scopes = scopes
        self.defaults = defaults
        self.out: list[Removal] = []

    def where(self, names: tuple[str, ...]) -> _Where:
        if any(names[: len(s)] == s for s in self.scopes):
            return "in"
        if any(s[: len(names)] == names for s in self.scopes):
            return "above"
        return "out"

    def is_default(self, names: tuple[str, ...], value: Any) -> bool:
        dotted = ".".join(names)
        return dotted in self.defaults and scalar_equal(self.defaults[dotted], value, names)

    def tree(
        self,
        owned: Tree,
        want: Any,
        have: Any,
        others: Tree | None,
        names: tuple[str, ...],
        pointer: tuple[Token, ...],
    ) -> None:
        for key, sub in owned.items():
            if key == SELF:
                continue
            step = parse_step(key)
            found = step.find(have)
            if found is None:
                continue  # gone from live already
            got, token = found
            child_names = (*names, step.value) if step.kind == "f" else names
            where = self.where(child_names)
            if where == "out":
                continue
            wanted = step.find(want) if want is not MISSING else None
            theirs = None if others is None else others.get(key)
            child_pointer = (*pointer, token)
            if wanted is None and where == "in" and theirs is None:
                if not _structural_zero(got) and not self.is_default(child_names, got):
                    self.out.append(Removal(child_pointer, got))
                continue
            if theirs == {}:
                continue  # another manager owns this value whole
            if not sub and where == "in" and theirs is None and wanted is not None:
                self.atomic_map(wanted[0], got, child_pointer)
            elif sub:
                self.tree(
                    sub, MISSING if wanted is None else wanted[0], got, theirs, child_names, child_pointer
                )

    def atomic_map(self, want: Any, have: Any, pointer: tuple[Token, ...]) -> None:
        """A map we own whole (atomic: ``nodeSelector``, a Service's ``selector``): keys live has and
        desired has not are removed, like any value of ours that changed."""
        if isinstance(want, Mapping) and isinstance(have, Mapping):
            self.out.extend(Removal((*pointer, k), v) for k, v in have.items() if k not in want)
