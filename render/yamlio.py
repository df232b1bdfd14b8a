"""Deterministic YAML: sorted keys, multi-line strings as literal blocks (readable hostfiles in goldens)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    pass


class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """SafeLoader (libyaml's parser when PyYAML has it: several times faster, and not recursive) that
    keeps timestamps as strings, as Kubernetes' JSON does."""


Loader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value and all(line == line.rstrip() for line in value.split("\n")):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str)


def dump(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=1000)


def dump_all(objs: Iterable[Any]) -> str:
    return yaml.dump_all(list(objs), Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=1000)


def load_objects(text: str) -> list[dict[str, Any]]:
    """Objects from a YAML list, a `kind: List`, or a multi-document stream."""
    out: list[dict[str, Any]] = []
    for doc in yaml.load_all(text, Loader=Loader):
        if doc is None:
            continue
        if isinstance(doc, list):
            out += [d for d in doc if isinstance(d, dict)]
        elif isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            out += [d for d in doc["items"] if isinstance(d, dict)]
        elif isinstance(doc, dict):
            out.append(doc)
    return out
