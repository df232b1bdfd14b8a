"""YAML input the CLI must refuse quickly and clearly: alias bombs, recursive aliases, duplicate keys; and
type errors that name JSON's types."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from render import ValidationError
from render.parse import load_yaml, parse_mpijob
from render.yamlio import MAX_ALIAS_NODES, InputError, Loader, load_objects
from tests.unit.golden_cases import GOLDEN, KEY_FILE
from tests.unit.render_helpers import job, run_cli

PI = (GOLDEN / "openmpi-pi" / "mpijob.yaml").read_text()
NOW = ["--now", "2025-06-01T12:00:00Z", "--ssh-key", str(KEY_FILE)]


def bomb(levels: int, width: int = 9) -> str:
    """An MPIJob whose annotations hold `levels` lines of aliases, each `width` times the last."""
    lines = ["metadata:", "  name: bomb", "  annotations:", "    l0: &a0 [lol, lol, lol, lol, lol]"]
    for k in range(1, levels + 1):
        lines.append(f"    l{k}: &a{k} [" + ", ".join([f"*a{k - 1}"] * width) + "]")
    return "apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\n" + "\n".join(lines) + "\nspec: {}\n"


def test_a_12_line_alias_bomb_is_refused_at_once():
    text = bomb(8)
    start = time.thread_time()  # this thread's CPU: how busy the machine is does not count
    code, out, err = run_cli(["-", *NOW], stdin=text)
    spent = time.thread_time() - start
    assert code == 2 and out == ""
    limit = f"{MAX_ALIAS_NODES:,}"
    assert err == f"STDIN: aliases expand the input by more than {limit} nodes (an alias bomb?)\n"
    assert spent < 5, spent  # expanding 5 * 9**8 leaves would take minutes


def test_the_alias_budget_is_for_the_whole_stream():
    # each document alone is under the budget; together they are not
    one = bomb(5)  # 5 * 9**5 = 295,245 leaves
    assert yaml.load(one, Loader=Loader)
    with pytest.raises(InputError, match="aliases expand the input"):
        list(yaml.load_all("---\n".join([one] * 4), Loader=Loader))


def test_ordinary_anchors_and_merges_still_load():
    text = PI.replace("    Launcher:\n", "    Launcher: &spec\n", 1)
    anchored = yaml.load(text, Loader=Loader)
    assert anchored == yaml.safe_load(text)
    merged = load_yaml("base: &b {a: 1, b: 2}\nderived:\n  <<: *b\n  b: 3\n")
    assert merged == {"base": {"a": 1, "b": 2}, "derived": {"a": 1, "b": 3}}


def test_an_alias_inside_its_own_anchor_is_refused():
    with pytest.raises(ValidationError) as info:
        load_yaml("a: 1\nb: &x [1, *x]\n")
    assert info.value.lines() == ["<yaml>: line 2: an alias refers to a node that contains it"]


def test_duplicate_keys_name_the_key_and_both_lines():
    text = PI.replace("  name: pi\n", "  name: pi\n  labels: {a: b}\n  name: pie\n", 1)
    code, out, err = run_cli(["-", *NOW], stdin=text)
    assert code == 2 and out == ""
    assert err == 'STDIN: line 7: duplicate key "name" (first at line 5)\n'


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a: {x: 1, y: 2, x: 3}\n", 1),  # flow mapping
        ("a:\n  - k: 1\n    k: 2\n", 3),  # in a list
        ("'1': a\n\"1\": b\n", 2),  # the same string, quoted two ways
        ("yes: a\ntrue: b\n", 2),  # the same boolean in YAML 1.1, as kubectl reads it
    ],
)
def test_duplicate_keys_anywhere(text, line):
    with pytest.raises(ValidationError) as info:
        load_yaml(text)
    [message] = info.value.lines()
    assert message.startswith(f"<yaml>: line {line}: duplicate key ")


def test_duplicate_keys_in_observed_objects(tmp_path):
    (tmp_path / "obs.yaml").write_text("- kind: Pod\n  kind: Pod\n")
    (tmp_path / "job.yaml").write_text(json.dumps(job()))
    code, _, err = run_cli([str(tmp_path / "job.yaml"), "--observed", str(tmp_path / "obs.yaml")])
    assert code == 2 and err == f'{tmp_path / "obs.yaml"}: line 2: duplicate key "kind" (first at line 1)\n'
    with pytest.raises(InputError):
        load_objects("a: 1\na: 2\n")


def test_numbers_and_strings_are_different_keys():
    assert load_yaml("1: a\n'1': b\n") == {1: "a", "1": "b"}


@pytest.mark.parametrize(
    ("value", "name"),
    [(None, "null"), ([], "array"), ("s", "string"), (1, "number"), (1.5, "number"), (True, "boolean")],
)
def test_type_errors_name_json_types(value, name):
    with pytest.raises(ValidationError) as info:
        parse_mpijob(value)
    assert info.value.lines() == [f"<root>: Invalid value: {name}: must be an object"]
    if value is None:
        return  # a null replica spec is an absent one
    j = job()
    j["spec"]["mpiReplicaSpecs"]["Worker"] = value
    with pytest.raises(ValidationError) as info:
        parse_mpijob(j)
    assert f"spec.mpiReplicaSpecs[Worker]: Invalid value: {name}: must be an object" in info.value.lines()


def test_a_null_item_in_a_list_is_named_null():
    code, _, err = run_cli(["-", *NOW], stdin="- null\n- {}\n")
    assert code == 2
    assert "item 0: <root>: Invalid value: null: must be an object" in err.splitlines()


def test_pod_field_types_are_json_names():
    j = job()
    j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["hostNetwork"] = "yes please"
    j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] = 3
    with pytest.raises(ValidationError) as info:
        parse_mpijob(j)
    lines = info.value.lines()
    pod = "spec.mpiReplicaSpecs[Worker].template.spec"
    assert f"{pod}.hostNetwork: Invalid value: must be a boolean" in lines
    assert f"{pod}.schedulerName: Invalid value: must be a string" in lines
