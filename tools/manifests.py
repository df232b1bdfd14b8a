"""Reads deploy/'s kustomizations offline, for tests that must not need kubectl.

Only what deploy/ uses is supported: `resources` (files and directories) and `images`. Anything else in
a kustomization raises, so a kustomization that grows a feature cannot be read wrongly.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
KUSTOMIZATION = "kustomization.yaml"
SUPPORTED_KEYS = frozenset({"apiVersion", "kind", "resources", "images"})


# libyaml's loader parses the 600 kB CRD about ten times faster than the pure-Python one.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [doc for doc in yaml.load_all(f, Loader=_Loader) if doc is not None]


def kustomization_files(root: Path) -> Iterator[Path]:
    """Every file a kustomization pulls in, recursively, in order."""
    kust = _read_kustomization(root)
    for entry in kust.get("resources", []):
        target = (root / entry).resolve()
        if target.is_dir():
            yield from kustomization_files(target)
        elif target.is_file():
            yield target
        else:
            raise FileNotFoundError(f"{root / KUSTOMIZATION}: resource {entry!r} not found")


def build(root: Path) -> list[dict[str, Any]]:
    """The objects `kubectl kustomize <root>` would print (same content, possibly another order)."""
    objects = [doc for path in kustomization_files(root) for doc in load_yaml_documents(path)]
    for image in _read_kustomization(root).get("images", []):
        _set_image(objects, image)
    return objects


def _read_kustomization(root: Path) -> dict[str, Any]:
    (kust,) = load_yaml_documents(root / KUSTOMIZATION)
    unsupported = set(kust) - SUPPORTED_KEYS
    if unsupported:
        raise ValueError(f"{root / KUSTOMIZATION}: unsupported keys {sorted(unsupported)}")
    return kust


def _set_image(objects: list[dict[str, Any]], image: dict[str, str]) -> None:
    for obj in objects:
        pod_spec = (((obj.get("spec") or {}).get("template") or {}).get("spec")) or {}
        for container in pod_spec.get("containers", []) + pod_spec.get("initContainers", []):
            name, _, tag = container["image"].partition(":")
            if name == image["name"]:
                container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"
