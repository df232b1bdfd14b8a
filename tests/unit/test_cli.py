"""The CLI (`mpijob render`, console script `mpijob-render`) prints exactly what the goldens hold."""

import subprocess
import sys

import pytest

from reconcile.mpijob.render_command import PLACEHOLDER_UID
from tests.unit.golden_cases import GOLDEN, KEY_FILE, load_case
from tests.unit.render_helpers import run_cli


def case_args(case):
    d = GOLDEN / case
    _, _, config, now = load_case(case)
    # the goldens hold the test key: only --show-secrets prints it
    args = [str(d / "mpijob.yaml"), "--now", now, "--ssh-key", str(KEY_FILE), "--show-secrets"]
    if (d / "observed.yaml").exists():
        args += ["--observed", str(d / "observed.yaml")]
    if config.cluster_domain:
        args += ["--cluster-domain", config.cluster_domain]
    if config.gang_scheduling:
        args += ["--gang-scheduling", config.gang_scheduling]
    return args


@pytest.mark.parametrize(
    "case", ["openmpi-pi", "scheduler-plugins", "cluster-domain", "launcher-failed-oomkilled"]
)
def test_children_and_status_match_golden(case):
    code, out, err = run_cli(case_args(case))
    assert (code, err) == (0, "")
    assert out == (GOLDEN / case / "children.yaml").read_text()
    code, out, _ = run_cli([*case_args(case), "--status"])
    assert code == 0
    assert out == (GOLDEN / case / "status.yaml").read_text()


def test_invalid_exits_2_with_one_line_per_error():
    """First what the API server would refuse (its words: tests/cluster/test_render_admission.py holds them
    to the real one), then what only the operator judges, each field once."""
    code, out, err = run_cli(case_args("invalid"))
    assert code == 2 and out == ""
    launcher, worker = "spec.mpiReplicaSpecs.Launcher", "spec.mpiReplicaSpecs.Worker"
    assert err.splitlines() == [
        'spec.launcherCreationPolicy: Unsupported value: "Sometimes": supported values: "AtStartup", '
        '"WaitForWorkersReady"',
        f'{launcher}.restartPolicy: Unsupported value: "Always": supported values: "Never", "OnFailure"',
        f'{launcher}.template.metadata.labels: Invalid value: "array": {launcher}.template.metadata.labels'
        ' in body must be of type object: "array"',
        f"{launcher}.template.spec.containers: Invalid value: 0: {launcher}.template.spec.containers in body "
        "should have at least 1 items",
        f'{worker}.template.spec.containers[0].command: Invalid value: "string": '
        f'{worker}.template.spec.containers[0].command in body must be of type array: "string"',
        'spec.runPolicy.backoffLimit: Invalid value: "string": spec.runPolicy.backoffLimit in body must be'
        ' of type integer: "string"',
        'spec.runPolicy.cleanPodPolicy: Unsupported value: "Sometimes": supported values: "All", "Running", '
        '"None"',
        "spec.slotsPerWorker: Invalid value: -1: spec.slotsPerWorker in body should be greater than or equal "
        "to 0",
        'metadata.name: Invalid value: "1-bad": must be a DNS-1035 label (lower case alphanumerics or'
        " '-', starting with a letter, ending with an alphanumeric)",
        "spec.mpiReplicaSpecs[Launcher].replicas: Invalid value: 2: must be 1",
        "spec.mpiReplicaSpecs[Worker].replicas: Invalid value: 0: must be greater than or equal to 1",
    ]
    # the operator's own judgement of the same fields, which the controller writes into the condition
    operator = (GOLDEN / "invalid" / "errors.txt").read_text().splitlines()
    assert "spec.runPolicy.backoffLimit: Invalid value: string: must be an integer" in operator


def test_stdin_and_cli_defaults():
    text = (GOLDEN / "openmpi-pi" / "mpijob.yaml").read_text()
    text = text.replace("  namespace: default\n", "").replace(
        "  uid: 7c5d1e7a-0000-4000-8000-000000000001\n", ""
    )
    code, out, _ = run_cli(["-", "--now", "2025-06-01T12:00:00Z", "--ssh-key", str(KEY_FILE)], stdin=text)
    assert code == 0
    assert PLACEHOLDER_UID in out and "namespace: default" in out


def test_bad_now_and_fresh_key():
    code, _, err = run_cli([str(GOLDEN / "openmpi-pi" / "mpijob.yaml"), "--now", "yesterday"])
    assert code == 2 and err.startswith("--now: ")
    code, out, _ = run_cli([str(GOLDEN / "openmpi-pi" / "mpijob.yaml")])
    assert code == 0 and "ssh-privatekey: " in out


def test_python_dash_m():
    proc = subprocess.run(
        [sys.executable, "-m", "reconcile.cli", "render", *case_args("suspended")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (GOLDEN / "suspended" / "children.yaml").read_text()


STREAM_CASES = ["openmpi-pi", "intel-pi", "mpich-pi"]


def _stream(separator: str = "---\n") -> str:
    return separator.join((GOLDEN / c / "mpijob.yaml").read_text() for c in STREAM_CASES)


def _fixed(*extra):
    return ["-", "--now", "2025-06-01T12:00:00Z", "--ssh-key", str(KEY_FILE), "--show-secrets", *extra]


def test_a_stream_of_mpijobs_renders_all_of_them():
    code, out, err = run_cli(_fixed(), stdin=_stream())
    assert (code, err) == (0, "")
    assert out == "---\n".join(
        (GOLDEN / c / "children.yaml").read_text().removeprefix("---\n") for c in STREAM_CASES
    )


def test_a_kind_list_renders_every_item_and_status_gives_one_document_each():
    import yaml

    items = [yaml.safe_load((GOLDEN / c / "mpijob.yaml").read_text()) for c in STREAM_CASES]
    code, out, _ = run_cli(
        _fixed("--status"), stdin=yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})
    )
    assert code == 0
    statuses = list(yaml.safe_load_all(out))
    # one status per job; with nothing observed no child exists yet, so none is Created
    assert len(statuses) == 3 and all(s["conditions"] == [] and "replicaStatuses" in s for s in statuses)


def test_errors_in_a_stream_name_their_job():
    bad = (GOLDEN / "invalid" / "mpijob.yaml").read_text()
    code, out, err = run_cli(_fixed(), stdin=_stream() + "---\n" + bad)
    assert code == 2 and out == ""
    assert err and all(line.startswith("default/") for line in err.splitlines())


def _mpijob(*args: str, argv0: str = "mpijob") -> subprocess.CompletedProcess:
    code = (
        f"import sys; sys.argv[0] = {argv0!r}\nfrom reconcile.cli import main\nsys.exit(main(sys.argv[1:]))"
    )
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60)


def test_one_cli_lists_render_and_plan():
    proc = _mpijob("--help")
    assert proc.returncode == 0
    assert "render FILE" in proc.stdout and "plan NAME" in proc.stdout
    plugin = _mpijob("--help", argv0="/usr/local/bin/kubectl-mpijob")
    assert plugin.stdout.startswith("usage: kubectl mpijob {render,plan}")
    assert "kubectl mpijob plan" in _mpijob("plan", "--help", argv0="kubectl-mpijob").stdout
    unknown = _mpijob("diff")
    assert unknown.returncode == 2 and "unknown command 'diff'" in unknown.stderr


def test_mpijob_render_prints_the_golden_children():
    proc = _mpijob("render", *case_args("openmpi-pi"))
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == (GOLDEN / "openmpi-pi" / "children.yaml").read_text()
    assert "usage: mpijob render" in _mpijob("render", "--help").stdout
