"""MkDocs hook: the page differences.md, generated from docs/differences.yaml at build time.

The YAML list is the one the tests read, so the page cannot drift from what they check. Each entry has an
`id`, a `kind`, a field `path`, the `steps` (or `step`) where it shows, and `upstream`, `ours`, `why`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from markdown.extensions.toc import slugify
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

SOURCE = "differences.yaml"
PAGE = "differences.md"

INTRO = """# Differences from upstream

Everything upstream's v2 controller creates is created the same way (names, labels, env vars, mounts,
hostfile formats, conditions, events, metrics), except what this page lists. The page is generated at
build time from `docs/differences.yaml`, the list the tests read: they compare what the operator does with
a model of upstream's behaviour and fail on a difference the list does not hold, so this page is the list
they check.
"""


class DifferencesError(Exception):
    """docs/differences.yaml is missing or malformed (the build stops with this message)."""


def load(path: Path) -> list[Mapping[str, Any]]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise DifferencesError(f"{path}: {err}") from err
    if isinstance(data, Mapping):
        data = data.get("differences")
    if not isinstance(data, list) or not all(isinstance(e, Mapping) for e in data):
        raise DifferencesError(f"{path}: expected a list of entries (or a mapping with `differences:`)")
    for i, entry in enumerate(data):
        missing = [k for k in ("id", "kind", "upstream", "ours", "why") if not entry.get(k)]
        if missing:
            name = entry.get("id", "?")
            raise DifferencesError(f"{path}: entry {i} ({name}): missing {', '.join(missing)}")
    return data


def _text(value: Any) -> str:
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, Iterable) and not isinstance(value, Mapping):
        return ", ".join(_text(v) for v in value)
    return " ".join(str(value).split())


def _code_list(value: Any) -> str:
    items = value if isinstance(value, list) else [value]
    return ", ".join(f"`{v}`" for v in items if v not in (None, ""))


def render(entries: list[Mapping[str, Any]]) -> str:
    """The page: one section per kind (in first-seen order), one entry per difference."""
    kinds: dict[str, list[Mapping[str, Any]]] = {}
    for e in entries:
        kinds.setdefault(str(e["kind"]), []).append(e)
    out = [INTRO, f"{len(entries)} differences:\n", "| Kind | Difference | Field |", "|---|---|---|"]
    for kind, group in kinds.items():
        for e in group:
            path = e.get("path", e.get("field"))
            out.append(f"| {kind} | [{e['id']}](#{slugify(str(e['id']), '-')}) | {_code_list(path or '')} |")
    out.append("")
    for kind, group in kinds.items():
        out.append(f"## {kind}\n")
        for e in group:
            out.append(f"### {e['id']}\n")
            path = e.get("path", e.get("field"))
            steps = e.get("steps", e.get("step"))
            if path:
                out.append(f"- **Field:** {_code_list(path)}")
            if steps:
                out.append(f"- **Shows at:** {_text(steps)}")
            out.append(f"- **Upstream:** {_text(e['upstream'])}")
            out.append(f"- **Ours:** {_text(e['ours'])}")
            out.append(f"- **Why:** {_text(e['why'])}\n")
    return "\n".join(out)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    source = Path(config.docs_dir) / SOURCE
    files.append(File.generated(config, PAGE, content=render(load(source))))
    return files


def on_serve(server: Any, config: MkDocsConfig, builder: Any) -> Any:
    server.watch(str(Path(config.docs_dir) / SOURCE))
    return server
