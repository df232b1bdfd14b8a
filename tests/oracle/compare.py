"""The differential tier's one normalization, its per-field diff, and the difference list
(docs/differences.yaml) every observed difference must match.

Normalization (`normalize`), the same for both operators' objects:
- dropped: uid, resourceVersion, managedFields, creationTimestamp, generation, selfLink and every
  ownerReference's uid; a Pod's nodeName and all of its status but the phase; a Job's status but its
  counts and its conditions' type/status/reason; the values of a Secret's data (random keys);
- every string: each namespace name becomes `NS`, a UUID `<uid>`, a generated suffix `-*` (launcher pod
  names, the service-account token volume's name);
- timestamps within one object are replaced by their rank in that object (`t0` earliest), so order
  survives and clock values do not; timestamps less than TIE seconds apart (chained) share a rank, as
  the two operators' clocks tick through the same second boundaries at different moments; a
  deletionTimestamp is only `set`.

Paths (`flatten`): dotted map keys; a list of maps that all carry `name` (or `type`, for conditions) is
keyed `[that]` (their order is then not compared, except for conditions: `conditions(order)` lists the
types in order), other lists by index; an object only one side has is the path `(object)`.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import yaml

REPO = Path(__file__).resolve().parents[2]
DIFFERENCES = REPO / "docs" / "differences.yaml"
ENTRY_FIELDS = ("id", "kind", "path", "steps", "upstream", "ours", "why")

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
# A pod name the Job controller generated: <launcher job name>-<5 characters of its alphabet>.
_POD_SUFFIX = re.compile(r"(-launcher|kube-api-access)-[bcdfghjklmnpqrstvwxz2456789]{5}\b")
ABSENT = "<absent>"
TIE = 2.0


def _strings(value: Any, fn: Any) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, Mapping):
        return {fn(k) if isinstance(k, str) else k: _strings(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_strings(v, fn) for v in value]
    return value


def _times(value: Any, out: set[str]) -> None:
    if isinstance(value, str) and _TIME.match(value):
        out.add(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            _times(v, out)
    elif isinstance(value, list):
        for v in value:
            _times(v, out)


def normalize(obj: Mapping[str, Any], namespaces: Iterable[str]) -> dict[str, Any]:
    """One object of either side, reduced to what the two operators are compared on."""
    obj = copy.deepcopy(dict(obj))
    kind = obj.get("kind", "")
    meta = obj.setdefault("metadata", {})
    for key in ("uid", "resourceVersion", "managedFields", "creationTimestamp", "generation", "selfLink"):
        meta.pop(key, None)
    if "deletionTimestamp" in meta:
        meta["deletionTimestamp"] = "set"
    meta.pop("deletionGracePeriodSeconds", None)
    for ref in meta.get("ownerReferences") or []:
        ref.pop("uid", None)
    if kind == "Pod":
        obj.get("spec", {}).pop("nodeName", None)
        obj["status"] = {"phase": (obj.get("status") or {}).get("phase")}
    elif kind == "Job":
        st = obj.get("status") or {}
        kept: dict[str, Any] = {k: st[k] for k in ("active", "succeeded", "failed") if k in st}
        if st.get("conditions"):
            kept["conditions"] = [
                {k: c.get(k) for k in ("type", "status", "reason")} for c in st["conditions"]
            ]
        obj["status"] = kept
    elif kind == "Secret":
        obj["data"] = {k: "<data>" for k in obj.get("data") or {}}
    elif kind == "MPIJob":
        obj = {"kind": kind, "metadata": {"name": meta.get("name")}, "status": obj.get("status") or {}}
    names = sorted(namespaces, key=len, reverse=True)

    def scrub(s: str) -> str:
        s = _UUID.sub("<uid>", s)
        s = _POD_SUFFIX.sub(r"\1-*", s)
        for ns in names:
            s = re.sub(rf"(?<![a-z0-9-]){re.escape(ns)}(?![a-z0-9-])", "NS", s)
        return s

    stamps: set[str] = set()
    _times(obj, stamps)
    rank: dict[str, str] = {}
    i, prev = -1, None
    for when, text in sorted((_parse(t), t) for t in stamps):
        if prev is None or (when - prev).total_seconds() >= TIE:
            i += 1
        rank[text], prev = f"t{i}", when
    obj = _strings(obj, lambda s: rank.get(s, s))
    return dict(_strings(obj, scrub))


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _list_key(items: list[Any]) -> str | None:
    for key in ("name", "type"):
        keyed = items and all(isinstance(i, Mapping) and isinstance(i.get(key), str) for i in items)
        if keyed and len({i[key] for i in items}) == len(items):
            return key
    return None


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf path -> value; empty maps and lists are leaves."""
    out: dict[str, Any] = {}
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(value, list) and value:
        key = _list_key(value)
        if key == "type":
            out[f"{prefix}(order)"] = [item["type"] for item in value]
        for i, item in enumerate(value):
            out.update(flatten(item, f"{prefix}[{item[key] if key else i}]"))
    else:
        out[prefix] = value
    return out


@attrs.frozen
class Difference:
    step: str
    job: str
    kind: str
    name: str
    path: str
    upstream: Any
    ours: Any

    def line(self) -> str:
        return (
            f"  {self.step}  {self.kind} {self.name}  {self.path}\n"
            f"      upstream: {_show(self.upstream)}\n      ours:     {_show(self.ours)}"
        )


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True).strip()
    return text if len(text) <= 300 else text[:300] + " ..."


Snapshot = dict[tuple[str, str], dict[str, Any]]  # (kind, name) -> normalized object


def job_of(name: str, jobs: Iterable[str]) -> str:
    """The MPIJob an object belongs to: the longest job name that is the object's name or its prefix."""
    best = ""
    for job in jobs:
        if (name == job or name.startswith(job + "-")) and len(job) > len(best):
            best = job
    return best


def diff(step: str, upstream: Snapshot, ours: Snapshot, jobs: Iterable[str]) -> list[Difference]:
    jobs = list(jobs)
    out: list[Difference] = []
    for key in sorted(set(upstream) | set(ours)):
        kind, name = key
        job = job_of(name, jobs)
        up, our = upstream.get(key), ours.get(key)
        if up is None or our is None:
            out.append(
                Difference(
                    step,
                    job,
                    kind,
                    name,
                    "(object)",
                    "present" if up else ABSENT,
                    "present" if our else ABSENT,
                )
            )
            continue
        fu, fo = flatten(up), flatten(our)
        for path in sorted(set(fu) | set(fo)):
            a, b = fu.get(path, ABSENT), fo.get(path, ABSENT)
            if a != b:
                out.append(Difference(step, job, kind, name, path, a, b))
    return out


# -- the difference list ---------------------------------------------------------------------------------
def glob(pattern: str, text: str) -> bool:
    """`*` matches anything (also dots and brackets); every other character only itself."""
    return _glob(pattern).fullmatch(text) is not None


@functools.cache
def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


@attrs.frozen
class Entry:
    id: str
    kinds: tuple[str, ...]
    paths: tuple[str, ...]
    steps: tuple[str, ...]
    jobs: tuple[str, ...]
    upstream: str
    ours: str
    why: str
    # A difference of timing (which of two moments less than a tick apart came first): explained when
    # seen, never stale when a run happens not to show it.
    timing: bool = False

    def matches(self, d: Difference) -> bool:
        return (
            any(glob(k, d.kind) for k in self.kinds)
            and any(glob(p, d.path) for p in self.paths)
            and any(glob(s, d.step) for s in self.steps)
            and any(glob(j, d.job) for j in self.jobs)
        )

    def could_match_step(self, step: str) -> bool:
        return any(glob(s, step) for s in self.steps)


def load_entries(path: Path = DIFFERENCES) -> list[Entry]:
    """docs/differences.yaml: a list of entries; errors name the entry and the field."""
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, Mapping) or not isinstance(data.get("differences"), list):
        raise ValueError(f"{path}: expected a map with a list `differences`")
    entries: list[Entry] = []
    seen: set[str] = set()
    for i, raw in enumerate(data["differences"]):
        where = f"{path.name}: differences[{i}]"
        if not isinstance(raw, Mapping):
            raise ValueError(f"{where}: not a map")
        missing = [f for f in ENTRY_FIELDS if not raw.get(f)]
        if missing:
            raise ValueError(f"{where} ({raw.get('id', '?')}): missing {', '.join(missing)}")
        unknown = set(raw) - {*ENTRY_FIELDS, "jobs", "timing"}
        if unknown:
            raise ValueError(f"{where} ({raw['id']}): unknown fields {sorted(unknown)}")
        if raw["id"] in seen:
            raise ValueError(f"{where}: duplicate id {raw['id']}")
        seen.add(raw["id"])
        patterns = {}
        for field in ("kind", "path", "steps", "jobs"):
            value = raw.get(field, ["*"])
            value = [value] if isinstance(value, str) and field in ("kind", "path") else value
            if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
                raise ValueError(f"{where} ({raw['id']}).{field}: a pattern or a list of patterns")
            patterns[field] = tuple(value)
        entries.append(
            Entry(
                id=str(raw["id"]),
                kinds=patterns["kind"],
                paths=patterns["path"],
                steps=patterns["steps"],
                jobs=patterns["jobs"],
                upstream=str(raw["upstream"]).strip(),
                ours=str(raw["ours"]).strip(),
                why=str(raw["why"]).strip(),
                timing=bool(raw.get("timing", False)),
            )
        )
    return entries


@attrs.define
class Ledger:
    """What the run compared and which entries it used; unmatched differences fail their step."""

    entries: list[Entry]
    steps_run: set[str] = attrs.field(factory=set)
    used: set[str] = attrs.field(factory=set)

    def check(self, differences: list[Difference], steps: Iterable[str]) -> list[Difference]:
        """Records the steps and the entries they use; returns the differences no entry explains."""
        self.steps_run.update(steps)
        unexplained = []
        for d in differences:
            hits = [e.id for e in self.entries if e.matches(d)]
            self.used.update(hits)
            if not hits:
                unexplained.append(d)
        return unexplained

    def stale(self) -> list[Entry]:
        """Entries no difference used although a step they name ran."""
        return [
            e
            for e in self.entries
            if not e.timing and e.id not in self.used and any(e.could_match_step(s) for s in self.steps_run)
        ]


def report(unexplained: list[Difference], limit: int = 120) -> str:
    lines = [f"{len(unexplained)} difference(s) from upstream that docs/differences.yaml does not list:"]
    lines += [d.line() for d in unexplained[:limit]]
    if len(unexplained) > limit:
        lines.append(f"  ... and {len(unexplained) - limit} more")
    return "\n".join(lines)
