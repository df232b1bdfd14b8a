"""The README's field-by-field list of differences from upstream is complete and has no stale entry.

Every golden case's children and status are compared with what upstream v0.8.2 has for the same MPIJob
(tests/unit/upstream_model.py); each differing field becomes a key such as `Job spec.template.spec.dnsConfig`
or `MPIJob status.conditions[Restarting]`. A key the README table does not list fails the test, so a new
difference in the goldens must be documented before it lands.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from render import quantity
from render.yamlio import load_objects
from tests.unit.golden_cases import GOLDEN, cases, load_case
from tests.unit.upstream_model import Model

README = Path(__file__).resolve().parents[2] / "README.md"
KEYED = ("name", "type")  # list items keyed like the API server's list-maps


def _keyed(items: list[Any]) -> str | None:
    for key in KEYED:
        if items and all(isinstance(i, Mapping) and isinstance(i.get(key), str) for i in items):
            return key
    return None


def _same_quantity(a: Any, b: Any) -> bool:
    try:
        return quantity.parse(a)[0] == quantity.parse(b)[0]
    except Exception:
        return False


def diff(ours: Any, theirs: Any, path: str, out: set[str]) -> None:
    """Adds the path of every field that differs; list items keyed by name or type, containers generic."""
    if isinstance(ours, Mapping) and isinstance(theirs, Mapping):
        for key in sorted(set(ours) | set(theirs)):
            sub = f"{path}.{key}" if path else key
            if key not in ours or key not in theirs:
                out.add(sub)
            else:
                diff(ours[key], theirs[key], sub, out)
        return
    if isinstance(ours, list) and isinstance(theirs, list):
        key = _keyed(ours + theirs)
        if key is not None and (ours or theirs):
            generic = path.endswith("containers")
            mine = {i[key]: i for i in ours}
            other = {i[key]: i for i in theirs}
            for k in sorted(set(mine) | set(other)):
                sub = f"{path}[{'' if generic else k}]"
                if k not in mine or k not in other:
                    out.add(sub)
                else:
                    diff(mine[k], other[k], sub, out)
            common = [k for k in mine if k in other]
            if common != [k for k in other if k in mine]:
                out.add(f"{path} (order)")
            return
    if ours != theirs and not _same_quantity(ours, theirs):
        out.add(path)


@functools.cache
def case_differences(case: str) -> frozenset[str]:
    mpijob, objects, config, now = load_case(case)
    model = Model(mpijob, objects, config.cluster_domain, config.gang_scheduling)
    d = GOLDEN / case
    out: set[str] = set()
    ours_children = load_objects((d / "children.yaml").read_text()) if (d / "children.yaml").exists() else []
    theirs_children = model.children(now) if (d / "children.yaml").exists() else []
    for obj in ours_children:
        if obj["kind"] == "Secret":
            obj["data"] = "<key>"
    mine = {(o["kind"], o["metadata"]["name"]): o for o in ours_children}
    other = {(o["kind"], o["metadata"]["name"]): o for o in theirs_children}
    for ident in sorted(set(mine) | set(other)):
        kind = ident[0]
        if ident not in other:
            out.add(f"{kind} (only ours)")
        elif ident not in mine:
            out.add(f"{kind} (only upstream)")
        else:
            found: set[str] = set()
            diff(mine[ident], other[ident], "", found)
            out |= {f"{kind} {p}" for p in found}
    ours_status = load_objects("- " + (d / "status.yaml").read_text().replace("\n", "\n  "))[0]
    found = set()
    diff({"status": ours_status}, {"status": model.status(now)}, "", found)
    return frozenset(out | {f"MPIJob {p}" for p in found})


def all_differences() -> dict[str, list[str]]:
    """Difference key -> the golden cases that show it."""
    found: dict[str, list[str]] = {}
    for case in cases():
        for key in case_differences(case):
            found.setdefault(key, []).append(case)
    return found


def readme_keys() -> set[str]:
    """The keys in the first column of the table under "Field by field" in "What differs from upstream"."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## What differs from upstream", 1)[1].split("\n## ", 1)[0]
    table = section.split("### Field by field", 1)[1]
    keys: set[str] = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            keys |= set(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return keys


def test_readme_lists_every_difference_the_goldens_show():
    found = all_differences()
    missing = {k: v for k, v in found.items() if k not in readme_keys()}
    assert not missing, "differences from upstream not in the README table (key: cases):\n" + "\n".join(
        f"  {k}: {', '.join(v)}" for k, v in sorted(missing.items())
    )


def test_readme_lists_no_difference_the_goldens_do_not_show():
    stale = readme_keys() - set(all_differences())
    assert not stale, f"README lists differences no golden case shows: {sorted(stale)}"


# The model itself follows the reference on facts the goldens rely on.
@pytest.mark.parametrize(
    ("case", "key"),
    [
        ("openmpi-pi", "Job spec.template.spec.dnsConfig"),  # upstream: no DNS search for the launcher
        ("openmpi-pi", "Job spec.template.spec.containers[].env[PRTE_MCA_prte_default_hostfile]"),
        ("openmpi-pi", "Service metadata.labels.training.kubeflow.org/job-name"),  # upstream: `app` only
        ("cluster-domain", "Pod spec.dnsConfig.searches"),  # upstream hard-codes cluster.local
        ("evicted-worker", "MPIJob status.conditions[Failed]"),  # upstream: eviction fails the job
    ],
)
def test_known_differences_are_found(case, key):
    assert key in case_differences(case)


def test_same_where_upstream_is_the_same():
    found = case_differences("openmpi-pi")
    # The hostfile and discover_hosts.sh as upstream's; the wait script and early DNS names are ours.
    same = found - {"ConfigMap data.wait_for_workers.sh", "Service spec.publishNotReadyAddresses"}
    assert not any(k.startswith("Service spec") for k in same), found
    assert not any(k.startswith("ConfigMap data") for k in same), found
    assert "Pod spec.containers[].env[K_MPI_JOB_ROLE]" not in found
