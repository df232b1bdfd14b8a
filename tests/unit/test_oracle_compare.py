"""L0: the differential tier's normalization, diff and difference list (tests/oracle/compare.py), and
that docs/differences.yaml is well formed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.oracle.compare import ABSENT, Difference, Ledger, diff, flatten, load_entries, normalize

NS = ("up-ns", "our-ns")


def pod(ns: str, uid: str, started: str, ready: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "pi-launcher-x7k2p",
            "namespace": ns,
            "uid": uid,
            "resourceVersion": "17",
            "creationTimestamp": started,
            "managedFields": [{"manager": "x"}],
            "ownerReferences": [{"kind": "Job", "name": "pi-launcher", "uid": uid}],
            "labels": {"batch.kubernetes.io/controller-uid": uid},
        },
        "spec": {"nodeName": "kwok-node-0", "hostname": f"pi.{ns}.svc"},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "lastTransitionTime": ready}, {"type": "Init", "x": started}],
        },
    }


def test_normalize_removes_identity_and_clock_but_keeps_order() -> None:
    a = normalize(pod("up-ns", "0d1f7c3a-1111-4222-8333-444455556666", "2025-01-01T00:00:00Z", "x"), NS)
    b = normalize(pod("our-ns", "9d1f7c3a-1111-4222-8333-444455556666", "2026-02-02T00:00:00Z", "y"), NS)
    assert a == b
    assert a["metadata"]["name"] == "pi-launcher-*"
    assert a["metadata"]["labels"] == {"batch.kubernetes.io/controller-uid": "<uid>"}
    assert a["spec"] == {"hostname": "pi.NS.svc"}
    assert a["status"] == {"phase": "Running"}


def test_timestamps_become_their_rank_within_the_object() -> None:
    job = {
        "kind": "MPIJob",
        "metadata": {"name": "pi"},
        "status": {"startTime": "2025-01-01T00:00:05Z", "completionTime": "2025-01-01T00:00:09Z"},
    }
    assert normalize(job, NS)["status"] == {"startTime": "t0", "completionTime": "t1"}
    job["status"]["completionTime"] = "2025-01-01T00:00:01Z"
    assert normalize(job, NS)["status"] == {"startTime": "t1", "completionTime": "t0"}
    job["status"]["completionTime"] = "2025-01-01T00:00:06Z"  # within a tick of each other: one rank
    assert normalize(job, NS)["status"] == {"startTime": "t0", "completionTime": "t0"}


def test_flatten_keys_lists_by_name_or_type() -> None:
    obj = {
        "env": [{"name": "A", "value": "1"}],
        "conditions": [{"type": "Ready", "status": "True"}],
        "x": [3],
    }
    assert flatten(obj) == {
        "env[A].name": "A",
        "env[A].value": "1",
        "conditions(order)": ["Ready"],
        "conditions[Ready].type": "Ready",
        "conditions[Ready].status": "True",
        "x[0]": 3,
    }


def test_diff_reports_fields_and_one_sided_objects() -> None:
    up = {("ConfigMap", "pi-config"): {"data": {"a": "1"}}, ("Pod", "pi-worker-0"): {"x": 1}}
    ours = {("ConfigMap", "pi-config"): {"data": {"a": "2", "b": "3"}}}
    got = diff("s/t", up, ours, ["pi"])
    assert got == [
        Difference("s/t", "pi", "ConfigMap", "pi-config", "data.a", "1", "2"),
        Difference("s/t", "pi", "ConfigMap", "pi-config", "data.b", ABSENT, "3"),
        Difference("s/t", "pi", "Pod", "pi-worker-0", "(object)", "present", ABSENT),
    ]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "differences.yaml"
    path.write_text(text)
    return path


ENTRY = """
differences:
- id: cm-data
  kind: ConfigMap
  path: data.*
  steps: ["s/*"]
  upstream: one
  ours: other
  why: because
"""


def test_ledger_explains_matches_and_finds_stale_entries(tmp_path: Path) -> None:
    ledger = Ledger(load_entries(write(tmp_path, ENTRY)))
    d = Difference("s/t", "pi", "ConfigMap", "pi-config", "data.a", "1", "2")
    other = Difference("s/t", "pi", "Service", "pi", "spec.x", 1, 2)
    assert ledger.check([d, other], ["s/t"]) == [other]
    assert ledger.stale() == []
    fresh = Ledger(load_entries(write(tmp_path, ENTRY)))
    assert fresh.check([], ["s/t"]) == []
    assert [e.id for e in fresh.stale()] == ["cm-data"]
    assert Ledger(load_entries(write(tmp_path, ENTRY))).stale() == []  # its step never ran: not judged


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("differences: {}", "a list `differences`"),
        (ENTRY.replace("  why: because\n", ""), "cm-data): missing why"),
        (ENTRY + ENTRY.split("differences:\n")[1], "duplicate id cm-data"),
        (ENTRY.replace('["s/*"]', '"s/*"'), "(cm-data).steps"),
        (ENTRY.replace("kind: ConfigMap", "kind: [1]"), "(cm-data).kind"),
        (ENTRY + "  colour: red\n", "unknown fields ['colour']"),
    ],
)
def test_bad_list_is_an_error_naming_the_entry(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=None) as err:
        load_entries(write(tmp_path, text))
    assert message in str(err.value)


def test_the_projects_difference_list_is_well_formed() -> None:
    entries = load_entries()
    assert entries, "docs/differences.yaml lists no difference"
    assert len({e.id for e in entries}) == len(entries)
