"""The differential tier's inputs: every golden input (golden/*/mpijob.yaml), upstream's v2beta1 examples
(from its released module), and a seeded set from tests/strategies.py. Each gets its own name; inputs
with the same spec are run once."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, given, seed, settings

from tests.strategies import mpijobs
from tests.upstream_source import upstream_dir

REPO = Path(__file__).resolve().parents[2]
SEED = 20260601
SEEDED = 6  # sized for CI: the whole tier stays within a few minutes
MAX_WORKERS = 3


def _clean(job: dict[str, Any], name: str) -> dict[str, Any]:
    job = copy.deepcopy(job)
    job.pop("status", None)
    job["metadata"] = {k: v for k, v in (job.get("metadata") or {}).items() if k in ("labels", "annotations")}
    job["metadata"]["name"] = name
    return job


def golden_inputs() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted((REPO / "golden").glob("*/mpijob.yaml")):
        out[f"g-{path.parent.name}"[:40]] = _clean(yaml.safe_load(path.read_text()), f"g-{path.parent.name}")
    return out


def upstream_examples() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted((upstream_dir() / "examples" / "v2beta1").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "MPIJob":
                name = f"x-{path.stem}"
                out[name] = _clean(doc, name)
    return out


def seeded_inputs(count: int = SEEDED) -> dict[str, dict[str, Any]]:
    """`count` MPIJobs drawn with a fixed seed. Deadlines are pushed past the tier's run so no timer fires
    mid-step (a race between the two sides, not a difference); worker counts are kept small."""
    drawn: list[dict[str, Any]] = []

    @seed(SEED)
    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(mpijobs(max_workers=MAX_WORKERS))
    def draw(job: dict[str, Any]) -> None:
        drawn.append(job)

    draw()
    out = {}
    for i, job in enumerate(drawn[:count]):
        rp = job["spec"].get("runPolicy") or {}
        if "activeDeadlineSeconds" in rp:
            rp["activeDeadlineSeconds"] = 3600
        name = f"s-{i}"
        out[name] = _clean(job, name)
    return out


def all_inputs() -> dict[str, dict[str, Any]]:
    """name -> MPIJob; the first of inputs with the same spec and metadata kept."""
    out: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    for name, job in {**golden_inputs(), **upstream_examples(), **seeded_inputs()}.items():
        key = json.dumps({**job, "metadata": {**job["metadata"], "name": ""}}, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out[name] = job
    return out
