"""`mpijob render` judges a manifest as the API server would (strict field validation, the CRD's schema),
names the file of every parse error, tells bad input (2) from its own failure (3), and takes kubectl's
flags: -f FILE/-f -/directories, -o yaml|json, -n, --validate, --version, bundles with other kinds."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
import yaml

from reconcile.mpijob import render_command
from render.schema import check, mpijob_schema, strip_descriptions
from tests.unit.golden_cases import GOLDEN, KEY_FILE
from tests.unit.render_helpers import job, run_cli
from tools.crdgen.build import CRD_PATH, SCHEMA_PATH, render_schema_json

FIXED = ["--now", "2025-06-01T12:00:00Z", "--ssh-key", str(KEY_FILE), "--show-secrets"]  # as the goldens
PI = GOLDEN / "openmpi-pi" / "mpijob.yaml"


def _render(*args: str, stdin: str = "") -> tuple[int, str, str]:
    return run_cli([*args, *FIXED], stdin=stdin)


def _with_typos() -> dict:
    j = job()
    j["metadata"]["labls"] = {"a": "b"}
    j["spec"]["slotsPerWorkr"] = 2
    j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["imagee"] = "x"
    return j


TYPOS = [
    'unknown field "metadata.labls"',
    'unknown field "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].imagee"',
    'unknown field "spec.slotsPerWorkr"',
]


def test_unknown_fields_are_refused_by_default_with_the_api_servers_paths():
    code, out, err = _render("-", stdin=json.dumps(_with_typos()))
    assert (code, out) == (2, "")
    assert err.splitlines() == TYPOS


def test_warn_and_ignore_drop_unknown_fields_as_the_api_server_would():
    code, clean, err = _render("-", stdin=json.dumps(job()))
    assert (code, err) == (0, "")
    code, out, err = _render("-", "--validate=warn", stdin=json.dumps(_with_typos()))
    assert code == 0
    assert err.splitlines() == [f"Warning: {line}" for line in TYPOS]
    assert out == clean  # the misspelt container field reaches no pod
    for flag in ("--validate=ignore", "--validate=false"):
        assert _render("-", flag, stdin=json.dumps(_with_typos())) == (0, clean, "")


def test_schema_errors_apply_whatever_validate_says():
    j = job()
    j["spec"]["slotsPerWorker"] = "two"
    for flag in ("--validate=strict", "--validate=ignore"):
        code, out, err = _render("-", flag, stdin=json.dumps(j))
        assert (code, out) == (2, "")
        assert err == (
            'spec.slotsPerWorker: Invalid value: "string": spec.slotsPerWorker in body must be of type '
            'integer: "string"\n'
        )


def test_a_container_without_an_image_is_refused():
    j = job()
    del j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"]
    code, out, err = _render("-", stdin=json.dumps(j))
    assert (code, out) == (2, "")
    assert err.startswith("spec.mpiReplicaSpecs[Worker].template.spec.containers[0].image: Required value")


def test_a_manifest_needs_apiversion_and_kind():
    j = job()
    del j["apiVersion"], j["kind"]
    code, _, err = _render("-", stdin=json.dumps(j))
    assert code == 2
    assert err.splitlines() == ["apiVersion: Required value", "kind: Required value"]


def test_every_parse_error_names_its_file(tmp_path):
    bad = tmp_path / "pi.yaml"
    bad.write_text("apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata:\n  name: [pi\n")
    code, _, err = _render("-f", str(bad))
    assert code == 2
    assert err.startswith(f"{bad}: line ") and err[-1] == "\n" and err.count("\n") == 1
    code, _, err = _render("-f", "-", stdin="a: b\n  c: d\n")
    assert code == 2 and err.startswith("STDIN: line 2, column ")
    code, _, err = _render("-f", str(tmp_path / "missing.yaml"))
    assert (code, err) == (2, f"error: {tmp_path / 'missing.yaml'}: No such file or directory\n")


def test_junk_in_observed_is_an_error_not_nothing(tmp_path):
    (tmp_path / "obs.yaml").write_text("- just a string\n- {kind: Pod}\n")
    code, out, err = _render(str(PI), "--observed", str(tmp_path / "obs.yaml"))
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "--observed[0]: Invalid value: must be an object",
        "--observed[1].metadata.name: Required value",
    ]


def test_an_internal_error_exits_3_without_a_traceback(monkeypatch):
    def broken(*_args, **_kwargs):
        raise KeyError("bug")

    monkeypatch.setattr(render_command, "render", broken)
    code, out, err = _render(str(PI))
    assert (code, out) == (3, "")
    assert err == "error: internal error, please report it: KeyError: 'bug'\n"


def test_dash_f_stdin_files_and_directories(tmp_path):
    expected = (GOLDEN / "openmpi-pi" / "children.yaml").read_text()
    assert _render("-f", str(PI)) == (0, expected, "")
    assert _render("-f", "-", stdin=PI.read_text()) == (0, expected, "")
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    (nested / "pi.yaml").write_text(PI.read_text())
    (tmp_path / "a" / "notes.txt").write_text("not a manifest")
    code, _, err = _render("-f", str(tmp_path / "a"))
    assert code == 2 and "no .yaml, .yml or .json file" in err
    assert _render("-f", str(tmp_path / "a"), "-R") == (0, expected, "")
    code, out, _ = _render("-f", str(PI), "-f", str(GOLDEN / "intel-pi" / "mpijob.yaml"))
    intel = (GOLDEN / "intel-pi" / "children.yaml").read_text()
    assert code == 0 and out == expected + "---\n" + intel.removeprefix("---\n")


def test_output_json_is_the_yaml_as_json():
    code, out, _ = _render(str(PI), "-o", "json")
    assert code == 0
    as_yaml = [d for d in yaml.safe_load_all((GOLDEN / "openmpi-pi" / "children.yaml").read_text()) if d]
    doc = json.loads(out)
    assert doc == {"apiVersion": "v1", "kind": "List", "items": as_yaml}
    code, out, _ = _render(str(PI), "-o", "json", "--status")
    assert code == 0 and json.loads(out) == yaml.safe_load(
        (GOLDEN / "openmpi-pi" / "status.yaml").read_text()
    )


def test_namespace_flag_fills_in_and_must_agree():
    j = job()
    del j["metadata"]["namespace"]
    code, out, _ = _render("-", "-n", "team-a", stdin=json.dumps(j))
    assert code == 0
    assert {d["metadata"]["namespace"] for d in yaml.safe_load_all(out) if d} == {"team-a"}
    code, out, err = _render("-", "-n", "team-b", stdin=json.dumps(job()))  # job() is in namespace ns
    assert (code, out) == (2, "")
    assert err == (
        'error: the namespace from the provided object "ns" does not match the namespace "team-b". '
        "You must pass '--namespace=ns' to perform this operation.\n"
    )


def test_a_bundle_renders_its_mpijobs_and_says_in_one_line_what_it_skipped():
    bundle = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pi-input"}},
        yaml.safe_load(PI.read_text()),
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}},
    ]
    code, out, err = _render("-", stdin=yaml.safe_dump_all(bundle))
    assert code == 0
    assert out == (GOLDEN / "openmpi-pi" / "children.yaml").read_text()
    assert (
        err
        == "skipped 3 objects that are not MPIJobs: namespace/demo, configmap/pi-input, deployment.apps/web\n"
    )
    code, out, err = _render("-", stdin=yaml.safe_dump_all([bundle[0], bundle[1]]))
    assert (code, out) == (2, "")
    assert err.startswith("error: no MPIJob in the input; skipped 2 objects")
    code, _, err = _render("-", stdin=yaml.safe_dump(bundle[1]))  # one object alone is judged, not skipped
    assert code == 2
    assert err == 'kind: Unsupported value: "ConfigMap": supported values: "MPIJob"\n'
    training_operator = {**bundle[2], "apiVersion": "kubeflow.org/v1"}
    code, _, err = _render("-", stdin=yaml.safe_dump(training_operator))
    assert code == 2
    assert (
        err == 'apiVersion: Unsupported value: "kubeflow.org/v1": supported values: "kubeflow.org/v2beta1"\n'
    )


def test_version_on_every_command():
    for argv in (["render", "--version"], ["plan", "--version"], ["--version"]):
        proc = subprocess.run(
            [sys.executable, "-m", "reconcile.cli", *argv], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("mpijob") and "kubeflow.org/v2beta1" in proc.stdout
        assert render_command.version() in proc.stdout


def test_shipped_schema_is_the_crds():
    """render/mpijob.schema.json is deploy/crd's schema without descriptions (python deploy/gen_crd.py)."""
    assert SCHEMA_PATH.read_text(encoding="utf-8") == render_schema_json(CRD_PATH.read_text(encoding="utf-8"))
    assert mpijob_schema() == json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------------- the schema walker
TOY = strip_descriptions(
    {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["n"],
                "properties": {
                    "n": {"type": "integer", "minimum": 1, "description": "dropped"},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "port": {"x-kubernetes-int-or-string": True},
                    "items": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "properties": {"name": {"type": "string"}}},
                    },
                    "obj": {
                        "type": "object",
                        "x-kubernetes-embedded-resource": True,
                        "properties": {"spec": {"type": "object", "properties": {}}},
                    },
                    "map": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            }
        },
    }
)


def test_walker_prunes_and_judges_as_a_structural_schema():
    obj = {
        "apiVersion": "v",
        "kind": "K",
        "metadata": {"name": "x", "nmae": "y"},
        "spec": {
            "n": 1.0,  # an integral number is an integer
            "port": "http",
            "free": {"anything": {"goes": 1}},
            "items": [{"name": "a", "extra": 1}, {"name": "a"}, None],
            "obj": {"apiVersion": "v1", "kind": "Pod", "metadata": {"q": 1}, "spec": {"x": 1}},
            "map": {"k": "v", "j": None},
            "gone": None,
        },
    }
    found = check(obj, TOY)
    assert found.unknown == [
        "metadata.nmae",
        "spec.gone",
        "spec.items[0].extra",
        "spec.obj.metadata.q",
        "spec.obj.spec.x",
    ]
    assert [str(e) for e in found.errors] == ['spec.items[1]: Duplicate value: {"name":"a"}']
    assert found.pruned["spec"]["items"][0] == {"name": "a"}
    assert (
        "x" not in found.pruned["spec"]["obj"]["spec"] and found.pruned["spec"]["free"] == obj["spec"]["free"]
    )


def test_walker_nulls_are_dropped_not_refused():
    obj = {"spec": {"n": 1, "port": None, "items": None, "map": None}}
    assert check(obj, TOY).errors == []
    missing = check({"spec": {"n": None}}, TOY)
    assert [str(e) for e in missing.errors] == ["spec.n: Required value"]


@pytest.mark.parametrize(
    ("spec", "line"),
    [
        ({"n": 0}, "spec.n: Invalid value: 0: spec.n in body should be greater than or equal to 1"),
        ({"n": 1.5}, 'spec.n: Invalid value: "number": spec.n in body must be of type integer: "number"'),
        ({"n": True}, 'spec.n: Invalid value: "boolean": spec.n in body must be of type integer: "boolean"'),
        (
            {"n": 1, "port": [1]},
            'spec.port: Invalid value: "array": spec.port in body must be of type integer,string: "array"',
        ),
        (
            {"n": 1, "map": {"k": 1}},
            'spec.map.k: Invalid value: "integer": spec.map.k in body must be of type string: "integer"',
        ),
    ],
)
def test_walker_messages(spec, line):
    assert [str(e) for e in check({"spec": copy.deepcopy(spec)}, TOY).errors] == [line]
