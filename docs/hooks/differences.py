"""MkDocs hook: the page differences.md, generated from docs/differences.yaml at build time.

The YAML list is the one the differential tier (tests/oracle) reads, so the page cannot drift from what it
checks. Each entry has an `id`, a `kind` and a field `path` (each a pattern or a list of them), the `steps`
where it shows, optionally the `jobs` it shows for and `timing`, and `upstream`, `ours`, `why`.
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
build time from `docs/differences.yaml`, the list the differential tier (`tests/oracle`) reads: it runs
upstream v0.8.2 and this operator side by side on one local cluster with the same MPIJobs and fails on a
difference no entry holds, and on an entry it never observes. So this page is what the tier checks.
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


def _patterns(value: Any, every: str) -> str:
    """Patterns as code, `*` alone as words."""
    items = value if isinstance(value, list) else [value]
    return every if items == ["*"] else _code_list(items)


def render(entries: list[Mapping[str, Any]]) -> str:
    """The page: one section per kind (in first-seen order), one entry per difference."""
    kinds: dict[str, list[Mapping[str, Any]]] = {}
    for e in entries:
        kinds.setdefault(_text(e["kind"]), []).append(e)
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
                out.append(f"- **Shows at:** {_patterns(steps, 'every step')}")
            if e.get("jobs"):
                out.append(f"- **For jobs:** {_patterns(e['jobs'], 'every job')}")
            if e.get("timing"):
                out.append("- **Timing:** which of two close moments comes first")
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
