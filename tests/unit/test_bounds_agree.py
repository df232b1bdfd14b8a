"""The CRD's numeric bounds and render's validation say the same: walk every integer field of ours in the
generated CRD and check render accepts its minimum and maximum and rejects one step beyond each; the
worker-count rule's table is render's bound for every name length."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import pytest

from render import ValidationError, bounds, parse_mpijob
from tests.unit.render_helpers import BASE
from tests.unit.test_manifests import CRD_FILE
from tools.manifests import load_yaml_documents

# CRD path (".spec.x.*.y") -> where a render test puts the value; "*" is the Worker replica spec (the
# Launcher's replicas have their own rule: exactly 1).
_REPLICA = "Worker"


def _schema() -> dict[str, Any]:
    (doc,) = load_yaml_documents(CRD_FILE)
    (version,) = doc["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def _integers(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if node.get("type") == "integer":
        yield path, node
    for name, child in node.get("properties", {}).items():
        if path.endswith(".template") or path.startswith(".status") or path.startswith(".metadata"):
            continue  # Kubernetes' own pod template; status is ours to write
        yield from _integers(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _integers(node["additionalProperties"], f"{path}.*")


SCHEMA = _schema()
FIELDS = sorted(_integers(SCHEMA))


def test_every_integer_of_ours_is_bounded_in_the_crd():
    paths = [p for p, _ in FIELDS]
    assert ".spec.runPolicy.activeDeadlineSeconds" in paths and ".spec.mpiReplicaSpecs.*.replicas" in paths
    assert len(paths) == 7  # slotsPerWorker, replicas, 3 in runPolicy, 2 in schedulingPolicy
    for path, node in FIELDS:
        assert "minimum" in node and "maximum" in node, path
        type_max = bounds.INT64_MAX if node["format"] == "int64" else bounds.INT32_MAX
        assert node["maximum"] <= type_max, path


def _job_with(path: str, value: int) -> tuple[dict[str, Any], str]:
    """A job with `value` at the CRD path, and the field path render reports for it."""
    j = copy.deepcopy(BASE)
    j["metadata"]["name"] = "p"  # short: the worker-count rule is tested on its own
    steps = path.strip(".").split(".")
    target: Any = j
    render_path = []
    for step in steps[:-1]:
        key = _REPLICA if step == "*" else step
        target = target.setdefault(key, {})
        render_path.append(f"[{key}]" if step == "*" else f".{key}")
    target[steps[-1]] = value
    render_path.append(f".{steps[-1]}")
    return j, "".join(render_path).lstrip(".")


def _render_errors(j: dict[str, Any], field: str) -> list[str]:
    try:
        parse_mpijob(j)
    except ValidationError as exc:
        return [e.message for e in exc.errors if e.path == field]
    return []


@pytest.mark.parametrize(("path", "node"), FIELDS, ids=[p for p, _ in FIELDS])
def test_render_agrees_with_the_crd_at_both_ends(path, node):
    low, high = node["minimum"], node["maximum"]
    if path == ".spec.mpiReplicaSpecs.*.replicas":
        low, high = 1, bounds.max_workers(1)  # the CEL rules narrow it for Workers; checked below
    for value, ok in ((low, True), (high, True), (low - 1, False), (high + 1, False)):
        j, field = _job_with(path, value)
        errors = _render_errors(j, field)
        assert (not errors) == ok, (path, value, errors)


def _rule_table() -> list[int]:
    """The CRD's worker limit per name length, read from its rules (0 where no rule allows a worker)."""
    table = [0] * bounds.DNS_LABEL_MAX
    for r in SCHEMA["x-kubernetes-validations"]:
        found = re.search(r"size\(self\.metadata\.name\) != ([0-9]+) \|\| .* <= ([0-9]+)$", r["rule"])
        if found:
            length, limit = int(found.group(1)), int(found.group(2))
            assert r["message"] == bounds.worker_limit_message(length)
            assert r["fieldPath"] == ".spec.mpiReplicaSpecs.Worker.replicas"
            table[length - 1] = limit
    return table


def test_the_crd_worker_rule_is_renders_bound_for_every_name_length():
    table = _rule_table()
    assert table[:54] == bounds.max_workers_table()[:54]  # names of 55+ characters fail the name rule
    for length, limit in enumerate(table, start=1):
        j = copy.deepcopy(BASE)
        j["metadata"]["name"] = "a" * length
        field = "spec.mpiReplicaSpecs[Worker].replicas"
        if limit > 0:
            j["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = limit
            assert not _render_errors(j, field), length
            name_errors = _render_errors(j, "metadata.name")
            assert not name_errors or length + len("-launcher") > 63, (length, name_errors)
        j["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = limit + 1
        # beyond the bound render rejects it, on the replicas or (worker name too long) on the name
        with pytest.raises(ValidationError):
            parse_mpijob(j)
