"""What the API server would say of an MPIJob manifest before the operator ever reads it, offline.

A create with strict field validation (kubectl's default): the manifest's type, then the CRD's schema
(render.schema), then what the API server refuses later when the operator creates the pods: a container
without an image. The CEL rules and what only the controller judges are render.validation's, which
`mpijob render` runs next; the operator itself reads objects the API server has already admitted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from render import names
from render.errors import FieldError
from render.schema import Findings, Schema, check, mpijob_schema

_CONTAINER_LISTS = ("initContainers", "containers")
_MAP_KEY = re.compile(r"\[([^\]]*[^\]0-9][^\]]*)\]")  # a bracketed key that is not an index


@attrs.frozen
class Admission:
    unknown: list[str]  # unknown fields, as `unknown field "PATH"` names them
    errors: list[FieldError]  # everything else the API server would refuse
    pruned: dict[str, Any]  # the manifest as the API server would store it

    @property
    def paths(self) -> set[str]:
        return {normal_path(e.path) for e in self.errors}


def admit(obj: Mapping[str, Any], schema: Schema | None = None) -> Admission:
    """The API server's verdict on creating `obj`, plus the pods' missing images."""
    findings: Findings = check(obj, mpijob_schema() if schema is None else schema)
    errors = [FieldError(key, "Required value") for key in ("apiVersion", "kind") if not obj.get(key)]
    errors += findings.errors
    errors += _images(obj)
    return Admission(unknown=findings.unknown, errors=errors, pruned=findings.pruned)


def normal_path(path: str) -> str:
    """`spec.mpiReplicaSpecs[Worker].replicas` and `spec.mpiReplicaSpecs.Worker.replicas` are one field."""
    return _MAP_KEY.sub(r".\1", path)


def _images(obj: Mapping[str, Any]) -> list[FieldError]:
    """Pod validation requires an image in every container: the operator's pods would be refused."""
    spec = obj.get("spec")
    specs = spec.get("mpiReplicaSpecs") if isinstance(spec, Mapping) else None
    if not isinstance(specs, Mapping):
        return []
    errors = []
    for rtype in (names.LAUNCHER, names.WORKER):
        replica = specs.get(rtype)
        template = replica.get("template") if isinstance(replica, Mapping) else None
        pod = template.get("spec") if isinstance(template, Mapping) else None
        if not isinstance(pod, Mapping):
            continue
        for field in _CONTAINER_LISTS:
            containers = pod.get(field)
            if not isinstance(containers, list):
                continue
            for i, c in enumerate(containers):
                if isinstance(c, Mapping) and not c.get("image"):
                    errors.append(
                        FieldError(
                            f"spec.mpiReplicaSpecs[{rtype}].template.spec.{field}[{i}].image",
                            "Required value: the API server refuses a pod whose container has no image",
                        )
                    )
    return errors
