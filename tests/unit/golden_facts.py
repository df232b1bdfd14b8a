"""Each golden case's key facts (golden/<case>/facts.yaml), written by hand from upstream's behaviour and
checked beside the snapshot, so a regenerated snapshot cannot make a wrong answer right.

A facts file holds any of:

- `children`: every child `render()` returns, as `Kind/name`, in any order.
- `errors`: for invalid input, the field paths that must be named (each a prefix of an error line).
- `conditions`: condition type -> `"True"`/`"False"`, or `{status, reason}`; `absent` means not set.
- `replicaStatuses`: replica type -> the counts `status()` must report (exactly these keys).
- `fields`: `Kind/name path` -> value, where path is dotted with `[N]` for a list index and
  `[key=value]` for the list item with that key (`spec.containers[name=worker].image`), `["k"]` for a
  key with dots (`metadata.labels["training.kubeflow.org/job-role"]`); `status path`
  reads the computed status. The value `absent` means the field is not there.
- `contains`: like `fields`, but the value is a substring (or a list of them) of the field's text.
- `events`: the reasons of the events emitted, in order.
- `ttl_expired`, `next_wakeup`: as lifecycle.yaml has them.
- `upstream`: one line on where the facts come from (upstream's code path or docs/differences.yaml id).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from render.yamlio import load_objects
from tests.unit.golden_cases import GOLDEN

FACTS = "facts.yaml"
ABSENT = "absent"
KEYS = frozenset(
    {"children", "errors", "conditions", "replicaStatuses", "fields", "contains", "events"}
    | {"ttl_expired", "next_wakeup", "upstream"}
)
_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]|\[\"([^\"]*)\"\]|\[([^=\]]+)=([^\]]*)\]")
_MISSING = object()


def facts_cases() -> list[str]:
    return sorted(p.parent.name for p in GOLDEN.glob(f"*/{FACTS}"))


def load_facts(case: str) -> dict[str, Any]:
    facts = yaml.safe_load((GOLDEN / case / FACTS).read_text())
    assert isinstance(facts, dict), f"{case}/{FACTS}: not a mapping"
    unknown = set(facts) - KEYS
    assert not unknown, f"{case}/{FACTS}: unknown keys {sorted(unknown)}"
    return facts


def at(obj: Any, path: str) -> Any:
    """The value at `path` in obj, or _MISSING."""
    for name, index, quoted, key, value in _STEP.findall(path):
        if name or quoted:
            obj = obj.get(name or quoted, _MISSING) if isinstance(obj, dict) else _MISSING
        elif index:
            obj = obj[int(index)] if isinstance(obj, list) and int(index) < len(obj) else _MISSING
        else:
            found = (
                [o for o in obj if isinstance(o, dict) and str(o.get(key)) == value]
                if isinstance(obj, list)
                else []
            )
            obj = found[0] if len(found) == 1 else _MISSING
        if obj is _MISSING:
            return _MISSING
    return obj


def problems(case: str, files: dict[str, str]) -> list[str]:
    """Every fact of `case` that the produced files (golden_cases.produce) contradict."""
    facts = load_facts(case)
    children = load_objects(files["children.yaml"]) if "children.yaml" in files else []
    by_name = {f"{o['kind']}/{o['metadata']['name']}": o for o in children}
    status = yaml.safe_load(files["status.yaml"]) or {}
    lifecycle = yaml.safe_load(files["lifecycle.yaml"])
    found: list[str] = []

    def check(what: str, got: Any, want: Any) -> None:
        if got != want:
            found.append(f"{what}: want {want!r}, got {got!r}")

    if "children" in facts:
        check("children", sorted(by_name), sorted(facts["children"]))
    if "errors" in facts:
        lines = files.get("errors.txt", "").splitlines()
        for path in facts["errors"]:
            if not any(line.startswith(f"{path}: ") for line in lines):
                found.append(f"errors: no error for {path} in {lines}")
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    for ctype, want in (facts.get("conditions") or {}).items():
        got = conditions.get(ctype)
        if want == ABSENT:
            check(f"condition {ctype}", got and got["status"], None)
            continue
        want = want if isinstance(want, dict) else {"status": want}
        check(f"condition {ctype}", got and {k: got.get(k) for k in want}, want)
    if "replicaStatuses" in facts:
        check("replicaStatuses", status.get("replicaStatuses"), facts["replicaStatuses"])
    for key, want in (facts.get("fields") or {}).items():
        got = _field(key, by_name, status)
        check(key, ABSENT if got is _MISSING else got, want)
    for key, want in (facts.get("contains") or {}).items():
        got = _field(key, by_name, status)
        text = "" if got is _MISSING else got if isinstance(got, str) else yaml.safe_dump(got)
        for part in [want] if isinstance(want, str) else want:
            if part not in text:
                found.append(f"{key}: {part!r} not in {text!r}")
    if "events" in facts:
        check("events", [e["reason"] for e in lifecycle["events"]], facts["events"])
    for key in ("ttl_expired", "next_wakeup"):
        if key in facts:
            check(key, lifecycle[key], facts[key])
    return found


def _field(key: str, by_name: dict[str, Any], status: dict[str, Any]) -> Any:
    target, _, path = key.partition(" ")
    if target == "status":
        return at(status, path)
    if target not in by_name:
        return _MISSING
    return at(by_name[target], path)
