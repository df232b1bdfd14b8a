"""What kube-apiserver says of a custom resource against its CRD's structural schema, offline.

Strict field validation (`unknown field "spec.foo"`), then the schema's types, enums, bounds, patterns,
required fields and list-map keys, with the API server's paths and wording:
`PATH: Invalid value: "string": PATH in body must be of type integer: "string"`.

Hand-written rather than a JSON Schema library: a Kubernetes structural schema is not JSON Schema
(fields the schema does not name are pruned, not refused; nulls of non-nullable fields are dropped;
`x-kubernetes-int-or-string`, `-preserve-unknown-fields`, `-embedded-resource` and list-map keys have no
JSON Schema keyword), and the point is the API server's own paths and messages, which no library prints.
This covers the keywords a CRD built by tools/crdgen uses; CEL rules are render.validation's business.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

import attrs

from render.errors import FieldError

Schema = Mapping[str, Any]

# The root of a custom resource: the API server reads these three itself (TypeMeta and ObjectMeta).
_META_FIELDS = frozenset({"apiVersion", "kind", "metadata"})

_STRINGS: Schema = {"type": "object", "additionalProperties": {"type": "string"}}
_STRING_LIST: Schema = {"type": "array", "items": {"type": "string"}}
_TIME: Schema = {"type": "string"}
# ObjectMeta's JSON fields (meta/v1, unchanged since 1.x but for managedFields' subresource): the API server
# decodes metadata strictly into that Go struct, so anything else is an unknown field.
OBJECT_META: Schema = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "selfLink": {"type": "string"},
        "uid": {"type": "string"},
        "resourceVersion": {"type": "string"},
        "generation": {"type": "integer"},
        "creationTimestamp": _TIME,
        "deletionTimestamp": _TIME,
        "deletionGracePeriodSeconds": {"type": "integer"},
        "labels": _STRINGS,
        "annotations": _STRINGS,
        "ownerReferences": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "name": {"type": "string"},
                    "uid": {"type": "string"},
                    "controller": {"type": "boolean"},
                    "blockOwnerDeletion": {"type": "boolean"},
                },
            },
        },
        "finalizers": _STRING_LIST,
        "managedFields": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "manager": {"type": "string"},
                    "operation": {"type": "string"},
                    "apiVersion": {"type": "string"},
                    "time": _TIME,
                    "fieldsType": {"type": "string"},
                    "fieldsV1": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "subresource": {"type": "string"},
                },
            },
        },
    },
}

_SCHEMA_FILE = "mpijob.schema.json"


@cache
def mpijob_schema() -> Schema:
    """The CRD's `openAPIV3Schema` for kubeflow.org/v2beta1 MPIJob, without descriptions: data shipped in
    this package (tests/unit/test_manifests.py keeps it equal to deploy/crd/), read once like a module."""
    text = resources.files("render").joinpath(_SCHEMA_FILE).read_text(encoding="utf-8")
    schema: Schema = json.loads(text)
    return schema


def strip_descriptions(schema: object) -> object:
    """A schema without its `description`s: what validation reads of it."""
    if isinstance(schema, Mapping):
        return {k: strip_descriptions(v) for k, v in schema.items() if k != "description"}
    if isinstance(schema, list):
        return [strip_descriptions(v) for v in schema]
    return schema


@attrs.frozen
class Findings:
    """Fields the schema does not know (the API server's paths), what the schema refuses, and the object
    as the API server would keep it (unknown fields pruned)."""

    unknown: list[str]
    errors: list[FieldError]
    pruned: dict[str, Any]


def check(obj: Mapping[str, Any], schema: Schema) -> Findings:
    """The API server's verdict on a new custom resource `obj` (a create with fieldValidation=Strict)."""
    walk = _Walk()
    pruned: dict[str, Any] = {}
    for key, value in obj.items():
        if key == "metadata":
            pruned[key] = walk.visit(value, OBJECT_META, (("metadata", False),), validate=True)
        elif key in ("apiVersion", "kind"):
            pruned[key] = value
        elif key in schema.get("properties", {}):
            # status is taken from the status subresource, not from a create: only pruned, never judged
            pruned[key] = walk.visit(
                value, schema["properties"][key], ((key, False),), validate=key != "status"
            )
        else:
            walk.unknown.append(key)
    walk.required(obj, schema, ())
    return Findings(unknown=sorted(walk.unknown), errors=walk.errors, pruned=pruned)


Path = tuple[tuple[str | int, bool], ...]  # (field or index, is a map key)


def dotted(path: Path) -> str:
    """kube-openapi's form: `spec.mpiReplicaSpecs.Worker.template.spec.containers[0].name`."""
    out = ""
    for part, _ in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def keyed(path: Path) -> str:
    """field.Path's form, map keys in brackets: `spec.mpiReplicaSpecs[Worker].template.spec.containers[0]`."""
    out = ""
    for part, is_key in path:
        if isinstance(part, int) or is_key:
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def json_type(value: object) -> str:
    """The JSON type kube-openapi names for a decoded value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _go_value(value: object) -> str:
    """A bad value as field.Error prints it: numbers and booleans bare, strings quoted, the rest JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
    return json.dumps(value, separators=(",", ":"), default=str)


def _matches_type(value: object, wanted: str) -> bool:
    kind = json_type(value)
    if kind == wanted:
        return True
    if wanted == "integer":
        return kind == "number" and float(value).is_integer()  # type: ignore[arg-type]
    return wanted == "number" and kind == "integer"


class _Walk:
    def __init__(self) -> None:
        self.unknown: list[str] = []
        self.errors: list[FieldError] = []

    def invalid(self, path: Path, value: object, detail: str) -> None:
        self.errors.append(FieldError(dotted(path), f"Invalid value: {_go_value(value)}: {detail}"))

    def visit(self, value: object, schema: Schema, path: Path, *, validate: bool) -> Any:
        """Records what the schema says of `value`; returns it without the fields the schema does not know."""
        if value is None:
            return None  # the API server drops nulls of non-nullable fields before it validates
        if validate and not self.scalar_checks(value, schema, path):
            return value
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        if isinstance(value, Mapping):
            props = schema.get("properties") or {}
            extra = schema.get("additionalProperties")
            embedded = bool(schema.get("x-kubernetes-embedded-resource"))
            kept: dict[Any, Any] = {}
            for key, item in value.items():
                if embedded and key == "metadata":
                    kept[key] = self.visit(item, OBJECT_META, (*path, (key, False)), validate=validate)
                elif embedded and key in _META_FIELDS:
                    kept[key] = item
                elif key in props:
                    kept[key] = self.visit(item, props[key], (*path, (str(key), False)), validate=validate)
                elif isinstance(extra, Mapping):
                    kept[key] = self.visit(item, extra, (*path, (str(key), True)), validate=validate)
                elif preserve or extra is True:
                    kept[key] = item
                else:
                    self.unknown.append(dotted((*path, (str(key), False))))
            if validate:
                self.required(value, schema, path)
            return kept
        if isinstance(value, list):
            items = schema.get("items")
            out = [
                self.visit(item, items, (*path, (i, False)), validate=validate)
                if isinstance(items, Mapping)
                else item
                for i, item in enumerate(value)
            ]
            if validate:
                self.list_keys(value, schema, path)
            return out
        return value

    def required(self, value: Mapping[str, Any], schema: Schema, path: Path) -> None:
        for name in schema.get("required") or ():
            if value.get(name) is None:
                self.errors.append(FieldError(dotted((*path, (name, False))), "Required value"))

    def scalar_checks(self, value: object, schema: Schema, path: Path) -> bool:
        """Type, enum, bounds, length and pattern; False when the type is wrong (nothing else applies)."""
        name = dotted(path)
        if schema.get("x-kubernetes-int-or-string"):
            if json_type(value) not in ("integer", "string"):
                kind = json_type(value)
                self.errors.append(
                    FieldError(
                        name,
                        f"Invalid value: {json.dumps(kind)}: {name} in body must be of type "
                        f'integer,string: "{kind}"',
                    )
                )
                return False
        elif "type" in schema and not _matches_type(value, schema["type"]):
            kind = json_type(value)
            self.errors.append(
                FieldError(
                    name,
                    f"Invalid value: {json.dumps(kind)}: {name} in body must be of type "
                    f'{schema["type"]}: "{kind}"',
                )
            )
            return False
        enum = schema.get("enum")
        if enum is not None and value not in enum:
            allowed = ", ".join(json.dumps(v if isinstance(v, str) else json.dumps(v)) for v in enum)
            self.errors.append(
                FieldError(name, f"Unsupported value: {_go_value(value)}: supported values: {allowed}")
            )
        if isinstance(value, int | float) and not isinstance(value, bool):
            low, high = schema.get("minimum"), schema.get("maximum")
            if low is not None and value < low:
                self.invalid(path, value, f"{name} in body should be greater than or equal to {low}")
            if high is not None and value > high:
                self.invalid(path, value, f"{name} in body should be less than or equal to {high}")
        if isinstance(value, str):
            longest = schema.get("maxLength")
            if longest is not None and len(value) > longest:
                unit = "byte" if longest == 1 else "bytes"
                self.errors.append(FieldError(name, f"Too long: may not be more than {longest} {unit}"))
            pattern = schema.get("pattern")
            if pattern is not None and not re.search(pattern, value):
                self.invalid(path, value, f"{name} in body should match '{pattern}'")
        if isinstance(value, list):
            fewest = schema.get("minItems")
            if fewest is not None and len(value) < fewest:
                self.invalid(path, len(value), f"{name} in body should have at least {fewest} items")
        return True

    def list_keys(self, value: list[Any], schema: Schema, path: Path) -> None:
        """x-kubernetes-list-type map and set: the second of equal keys (or items) is a Duplicate value."""
        kind = schema.get("x-kubernetes-list-type")
        if kind == "map":
            if not all(item is None or isinstance(item, Mapping) for item in value):
                return  # the item's own type error says it
            fields = schema.get("x-kubernetes-list-map-keys") or []
            keys = [{f: item[f] for f in fields if item and f in item} for item in value]
        elif kind == "set":
            keys = list(value)
        else:
            return
        seen: dict[str, int] = {}
        for i, key in enumerate(keys):
            text = json.dumps(key, sort_keys=True, default=str)
            seen[text] = seen.get(text, 0) + 1
            if seen[text] == 2:
                self.errors.append(
                    FieldError(keyed((*path, (i, False))), f"Duplicate value: {_go_value(key)}")
                )
