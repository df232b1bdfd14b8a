"""Kubernetes OpenAPI v3 component schemas, converted to CRD structural schemas.

The CRD embeds `PodTemplateSpec` in full. Its schema comes from the pinned Kubernetes release's published
OpenAPI v3 document, with `$ref`s inlined and the few constructs a CRD cannot carry rewritten, so that the
API server validates and prunes pod templates exactly as it would for a built-in workload.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SPEC_RELPATH = Path("api/openapi-spec/v3/api__v1_openapi.json")
REF_PREFIX = "#/components/schemas/"

QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
POD_TEMPLATE_SPEC = "io.k8s.api.core.v1.PodTemplateSpec"
LABEL_SELECTOR = "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"

# Same grammar as resource.Quantity's parser; the API server checks it before the type-specific parse.
_DECIMAL = r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
QUANTITY_PATTERN = rf"^(\+|-)?{_DECIMAL}(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?{_DECIMAL}))?$"

# An ObjectMeta inside a template keeps only what a template may set (like generateEmbeddedObjectMeta).
EMBEDDED_META_FIELDS = ("annotations", "finalizers", "labels", "name", "namespace")

# Keys copied as they are. Anything not listed here or handled below stops the generator, so a new
# construct in a future Kubernetes spec is noticed instead of silently emitted into the CRD.
COPIED_KEYS = frozenset(
    {
        "description",
        "type",
        "format",
        "required",
        "enum",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
    }
)
# Strategic-merge-patch and union hints: meaningful only to built-in types, rejected in a CRD schema.
DROPPED_KEYS = frozenset(
    {"x-kubernetes-patch-strategy", "x-kubernetes-patch-merge-key", "x-kubernetes-unions"}
)
# Formats a CRD understands; openapi-gen's "int-or-string" is expressed by x-kubernetes-int-or-string.
CRD_FORMATS = frozenset({"int32", "int64", "date-time", "byte", "double", "float"})


def load_schemas(spec_path: Path) -> dict[str, Any]:
    """The `components.schemas` table of a Kubernetes OpenAPI v3 document."""
    with spec_path.open(encoding="utf-8") as f:
        return json.load(f)["components"]["schemas"]


def _ref_name(ref: str) -> str:
    if not ref.startswith(REF_PREFIX):
        raise ValueError(f"unsupported $ref {ref!r}")
    return ref[len(REF_PREFIX) :]


def _is_meaningful_default(value: object, optional: bool) -> bool:
    # openapi-gen writes the Go zero value as "default" on every required field and {} on every embedded
    # struct; neither is a real default. Explicit `+default=` markers are kept: non-zero ones (TCP, ext4)
    # and zero scalars on optional fields (LocalObjectReference.name: "", a list-map key that the API
    # server requires to be required or defaulted).
    if value in ({}, []):
        return False
    return optional or not (value in ("", 0) or value is False)


class Converter:
    """Resolves named Kubernetes schemas into self-contained structural schemas."""

    def __init__(self, schemas: Mapping[str, Any]) -> None:
        self._schemas = schemas
        self._done: dict[str, dict[str, Any]] = {}
        self._in_progress: set[str] = set()

    def named(self, name: str) -> dict[str, Any]:
        """A fresh copy of the structural schema of component `name`."""
        if name not in self._done:
            if name in self._in_progress:
                raise ValueError(f"recursive schema {name}: a CRD schema cannot express it")
            self._in_progress.add(name)
            try:
                self._done[name] = self._convert_named(name)
            finally:
                self._in_progress.discard(name)
        return copy.deepcopy(self._done[name])

    def _convert_named(self, name: str) -> dict[str, Any]:
        source = self._schemas[name]
        if name == QUANTITY:
            return {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "pattern": QUANTITY_PATTERN,
                "x-kubernetes-int-or-string": True,
            }
        if name == INT_OR_STRING:
            return {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
        out = self.convert(source, name)
        if name == OBJECT_META:
            props = out["properties"]
            out["properties"] = {k: props[k] for k in EMBEDDED_META_FIELDS}
            out.pop("required", None)
        return out

    def convert(self, node: Mapping[str, Any], path: str, *, optional: bool = False) -> dict[str, Any]:
        """Converts one schema node; `path` only serves error messages.

        `optional`: the node is a property its parent does not list as required.
        """
        if "$ref" in node:
            return self.named(_ref_name(node["$ref"]))
        if "allOf" in node:
            (only,) = node["allOf"]  # openapi-gen wraps a single $ref to attach a description
            out = self.convert(only, path)
            # The field's own description is more specific than its type's.
            if "description" in node:
                out["description"] = node["description"]
            rest = {k: v for k, v in node.items() if k not in ("allOf", "description")}
            out.update(self.convert(rest, path, optional=optional) if rest else {})
            return out
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in DROPPED_KEYS:
                continue
            if key == "default":
                if _is_meaningful_default(value, optional):
                    out["default"] = value
            elif key == "format":
                if value in CRD_FORMATS:
                    out["format"] = value
            elif key == "properties":
                required = set(node.get("required", []))
                out["properties"] = {
                    p: self.convert(value[p], f"{path}.{p}", optional=p not in required)
                    for p in sorted(value, key=str)
                }
            elif key == "items":
                out["items"] = self.convert(value, f"{path}[]")
            elif key == "additionalProperties":
                if not isinstance(value, Mapping):
                    raise ValueError(f"{path}: boolean additionalProperties is not structural")
                out["additionalProperties"] = self.convert(value, f"{path}.*")
            elif key in COPIED_KEYS:
                out[key] = copy.deepcopy(value)
            else:
                raise ValueError(f"{path}: unsupported OpenAPI key {key!r}")
        if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
            # A free-form object (e.g. FieldsV1) would be pruned to {} without this.
            out["x-kubernetes-preserve-unknown-fields"] = True
        return out


def pod_template_spec(converter: Converter) -> dict[str, Any]:
    """`PodTemplateSpec` whose `spec.containers` is required and non-empty (upstream validates both)."""
    schema = converter.named(POD_TEMPLATE_SPEC)
    schema["required"] = ["spec"]
    pod_spec = schema["properties"]["spec"]
    if "containers" not in pod_spec.get("required", []):
        raise ValueError("PodSpec no longer requires containers; review the CRD's container rule")
    pod_spec["properties"]["containers"]["minItems"] = 1
    # Newer Kubernetes (1.36 on) puts a pod in a gang with spec.schedulingGroup; kept in the templates so
    # the API server does not prune it from an MPIJob (spec.workloadRef, 1.35's, comes from the schema).
    pod_spec["properties"].setdefault(
        "schedulingGroup",
        {
            "description": "The PodGroup this pod belongs to (Kubernetes 1.36 and later, Workload API).",
            "properties": {
                "podGroupName": {"description": "The name of the PodGroup object.", "type": "string"}
            },
            "type": "object",
        },
    )
    return schema
