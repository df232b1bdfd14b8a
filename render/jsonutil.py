"""Small helpers for plain JSON-like data."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def clone(value: Any) -> Any:
    """A deep copy of dicts and lists (much faster than copy.deepcopy for wire-form objects).

    Map entries that are null are dropped: the API server treats `key: null` as an absent key."""
    if isinstance(value, Mapping):
        return {k: clone(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [clone(v) for v in value]
    return value
