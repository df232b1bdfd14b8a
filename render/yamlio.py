"""Deterministic YAML: sorted keys, multi-line strings as literal blocks (readable hostfiles in goldens).

Loading is bounded: aliases may add at most MAX_ALIAS_NODES nodes to a stream (a 12-line alias bomb
expands to ~10^8), an alias may not contain itself, and a mapping may not repeat a key (kubectl rejects
those too; the last one would otherwise win silently).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    pass


# Far more than any object the API server stores (its request limit is 3 MiB, at least 2 bytes a node),
# and few enough that render walks the expanded objects in seconds.
MAX_ALIAS_NODES = 1_000_000

_MERGE = "tag:yaml.org,2002:merge"


class InputError(yaml.YAMLError):
    """A YAML stream that parses but that we refuse to load; the message names the line."""


class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """SafeLoader (libyaml's parser when PyYAML has it: several times faster, and not recursive) that
    keeps timestamps as strings, as Kubernetes' JSON does, and checks each document's node graph before
    building it (see the module's docstring)."""

    alias_nodes = 0  # nodes aliases added so far in this stream (one Loader reads one stream)

    def construct_document(self, node: yaml.Node) -> Any:
        self.alias_nodes += _check_graph(self, node)
        if self.alias_nodes > MAX_ALIAS_NODES:
            raise InputError(
                f"aliases expand the input by more than {MAX_ALIAS_NODES:,} nodes (an alias bomb?)"
            )
        return super().construct_document(node)


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_duplicates(loader: Any, node: yaml.MappingNode) -> None:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE:
            continue  # keys a merge (<<) brings in may be overridden: that is what merging is for
        key = loader.construct_object(key_node)
        try:
            first = seen.setdefault(key, key_node)
        except TypeError:
            continue  # unhashable: the constructor reports it
        if first is not key_node:
            raise InputError(
                f"line {_line(key_node)}: duplicate key {json.dumps(str(key_node.value))}"
                f" (first at line {_line(first)})"
            )


def _check_graph(loader: Any, root: yaml.Node) -> int:
    """How many nodes aliases add to the document (each node's expanded size computed once, so this is
    linear in the text); raises InputError for a duplicate key or an alias inside its own anchor."""
    size: dict[int, int] = {}  # expanded size of each finished node
    on_path: set[int] = set()
    unique = 0
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            on_path.discard(id(node))
            size[id(node)] = 1 + sum(size[id(c)] for c in _children(node))
            continue
        if id(node) in size:
            continue
        if id(node) in on_path:
            raise InputError(f"line {_line(node)}: an alias refers to a node that contains it")
        unique += 1
        on_path.add(id(node))
        if isinstance(node, yaml.MappingNode):
            _check_duplicates(loader, node)
        stack.append((node, True))
        stack += [(c, False) for c in _children(node)]
    return size[id(root)] - unique


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
