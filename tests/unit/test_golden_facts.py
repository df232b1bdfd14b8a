"""Every golden case states its key facts by hand (golden/<case>/facts.yaml), and the snapshot agrees."""

from __future__ import annotations

import pytest

from tests.unit.golden_cases import cases, produce
from tests.unit.golden_facts import _MISSING, at, facts_cases, problems


def test_every_case_has_facts():
    assert facts_cases() == cases()


@pytest.mark.parametrize("case", facts_cases())
def test_the_snapshot_keeps_the_facts(case):
    assert problems(case, produce(case)) == []


def test_paths():
    obj = {"spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]}, {"name": "b"}]}}
    assert at(obj, "spec.containers[0].name") == "a"
    assert at(obj, "spec.containers[name=a].env[name=X].value") == "1"
    assert at(obj, "spec.containers[name=c]") is _MISSING
    assert at(obj, "spec.containers[5]") is _MISSING
    assert at(obj, "spec.volumes") is _MISSING
    assert at({"labels": {"a.b/c": "x"}}, 'labels["a.b/c"]') == "x"


def test_a_wrong_snapshot_breaks_a_fact():
    files = produce("running")
    wrong = {**files, "children.yaml": files["children.yaml"].replace("slots=1", "slots=2")}
    assert [p for p in problems("running", wrong) if p.startswith("ConfigMap/pi-config data.hostfile")]
    no_launcher = {**files, "status.yaml": files["status.yaml"].replace("Launcher:\n    active: 1\n", "")}
    assert [p for p in problems("running", no_launcher) if p.startswith("replicaStatuses")]
