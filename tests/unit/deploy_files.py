"""The manifests under deploy/ as the L0 tests read them (test_manifests, test_rbac, test_bounds_agree)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from tools.manifests import DEPLOY, build

CRD_FILE = DEPLOY / "crd" / "kubeflow.org_mpijobs.yaml"


@functools.cache
def _objects(root: Path = DEPLOY) -> list[dict[str, Any]]:
    return build(root)  # shared between tests: treat as read-only


def _one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


# --------------------------------------------------------------------------------------------- RBAC
def _grants(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for r in rules:
        for group in r["apiGroups"]:
            for resource in r["resources"]:
                out.setdefault((group, resource), set()).update(r["verbs"])
    return out
