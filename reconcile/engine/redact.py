"""Secret values kept out of what people read: log lines, events, printed plans and manifests.

Generic: it knows the core ``v1`` Secret (its ``data`` and ``stringData`` maps, and JSON patches that write
under them) and nothing of what a Secret is for. Every value is masked, public ones too: which key of a
Secret is harmless to show is its owner's knowledge, not this module's, and the key names stay visible,
so what a Secret holds and what changed in it still show.

The mask (``HIDDEN``) is not base64 (spaces, ``<``, ``;``): a masked manifest applied by mistake is refused
by the API server rather than storing a value nobody chose.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

HIDDEN: Final = "<hidden; --show-secrets shows it>"
VALUE_MAPS: Final = ("data", "stringData")
_POINTERS: Final = tuple(f"/{name}" for name in VALUE_MAPS)
# Shorter values are left in text: masking them would mangle ordinary words of a message.
MIN_SCRUBBED: Final = 4
# Keys the tags of one process with: equal values get equal tags, and a tag cannot be checked against a
# guessed value by anyone who reads the log.
_TAG_KEY: Final = os.urandom(16)


def is_secret(api_version_or_group: str, kind: str) -> bool:
    """The core Secret kind, by apiVersion ("v1") or API group ("")."""
    return kind == "Secret" and api_version_or_group in ("", "v1")


def object_is_secret(obj: Mapping[str, Any]) -> bool:
    return is_secret(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))


def _mask(value: Any, tag: bool) -> str:
    if not tag:
        return HIDDEN
    digest = hashlib.blake2b(repr(value).encode(), key=_TAG_KEY, digest_size=4).hexdigest()
    return f"{HIDDEN} #{digest}"


def _masked_map(values: Any, tag: bool) -> Any:
    if isinstance(values, Mapping):
        return {k: None if v is None else _mask(v, tag) for k, v in values.items()}
    return None if values is None else _mask(values, tag)


def hide_values(obj: Mapping[str, Any], *, tag: bool = False) -> dict[str, Any]:
    """A copy of ``obj`` with the values of its ``data`` and ``stringData`` masked, whatever its kind (for
    callers that know it is a Secret). ``tag``: each mask ends with a keyed digest of its value, so a
    comparison of two masked objects (a drift report) still tells equal values from different ones."""
    out = dict(obj)
    for name in VALUE_MAPS:
        if name in out:
            out[name] = _masked_map(out[name], tag)
    return out


def hide_object(obj: Mapping[str, Any], *, tag: bool = False) -> Mapping[str, Any]:
    """``obj`` with its values masked if it is a Secret, else ``obj`` itself."""
    return hide_values(obj, tag=tag) if object_is_secret(obj) else obj


def hide_json_patch(ops: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A Secret's RFC 6902 patch with the values its ops write or test under data or stringData masked
    (and those of an op on the whole object)."""
    out = []
    for op in ops:
        new = dict(op)
        path = str(op.get("path", ""))
        if "value" in op:
            if path == "":
                new["value"] = hide_values(op["value"]) if isinstance(op["value"], Mapping) else HIDDEN
            elif path in _POINTERS:
                new["value"] = _masked_map(op["value"], False)
            elif path.startswith(tuple(f"{p}/" for p in _POINTERS)):
                new["value"] = None if op["value"] is None else HIDDEN
        out.append(new)
    return out


def secret_values(body: Any) -> list[str]:
    """The values a request body carries into a Secret, in every form a message could quote them: as sent,
    base64-decoded, and each line of a decoded multi-line value (a PEM body)."""
    raw: list[Any] = []
    if isinstance(body, Mapping):
        for name in VALUE_MAPS:
            values = body.get(name)
            raw += list(values.values()) if isinstance(values, Mapping) else [values]
    elif isinstance(body, Sequence) and not isinstance(body, str):
        for op in body:
            if isinstance(op, Mapping) and str(op.get("path", "")).startswith(_POINTERS):
                value = op.get("value")
                raw += list(value.values()) if isinstance(value, Mapping) else [value]
    found: set[str] = set()
    for value in raw:
        if not isinstance(value, str):
            continue
        found.add(value)
        try:
            decoded = base64.b64decode(value, validate=True).decode()
        except (binascii.Error, ValueError):  # stringData, or bytes that are no text
            decoded = value
        found.add(decoded)
        found.update(line.strip() for line in decoded.splitlines())
    return sorted((v for v in found if len(v) >= MIN_SCRUBBED), key=len, reverse=True)


def hide_in_text(text: str, body: Any) -> str:
    """``text`` (a server's error message, say) without the Secret values of ``body`` (a Secret, or a JSON
    patch of one); longest first, so a value never survives in part around a shorter one."""
    for value in secret_values(body):
        text = text.replace(value, HIDDEN)
    return text
