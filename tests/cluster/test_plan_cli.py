"""L1: `mpijob plan` prints what the operator would do for a live MPIJob and writes nothing; the
`kubectl diff` one-liner of docs/cli.md shows no difference once the operator converged, and drift after."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from localcluster.e2e import condition_is
from localcluster.jobs import pi_job
from localcluster.wait import wait_for
from reconcile.mpijob.kinds import MPIJOB
from reconcile.runtime.kube import CONFIGMAP, JOB, MERGE_PATCH, POD, SECRET, SERVICE
from tests.cluster.support import plan
from tests.utils import REPO

pytestmark = pytest.mark.l1

# docs/cli.md's one-liner, with $JOB and $NS.
DIFF_ONE_LINER = (
    "kubectl diff --server-side --field-manager=mpijob-operator --force-conflicts -f <(mpijob-render "
    '--show-secrets <(kubectl get mpijob "$JOB" -n "$NS" -o yaml) --observed '
    '<(kubectl get pods,jobs,services,configmaps,secrets -n "$NS" '
    '-l training.kubeflow.org/job-name="$JOB" -o yaml))'
)


def children(kube, ns: str) -> list[str]:
    out = []
    for res in (SERVICE, CONFIGMAP, SECRET, JOB, POD):
        out += [f"{res.kind}/{o['metadata']['name']}" for o in kube.list(res, ns)["items"]]
    return sorted(n for n in out if n != "ConfigMap/kube-root-ca.crt")


def test_plan_of_a_new_job_lists_every_create_and_writes_nothing(l1_cluster, namespace, mpijob_crd, kube):
    job = kube.create(MPIJOB, namespace, pi_job("pi"))
    code, report = plan(l1_cluster.kubeconfig, f"{namespace}/pi")
    assert code == 1 and report["mpijob"] == f"{namespace}/pi"
    created = sorted(c["object"] for c in report["plan"]["creates"])
    assert created == sorted(
        f"{kind} {namespace}/{name}"
        for kind, name in [
            ("Service", "pi"),
            ("ConfigMap", "pi-config"),
            ("Secret", "pi-ssh"),
            ("Job.batch", "pi-launcher"),
            ("Pod", "pi-worker-0"),
            ("Pod", "pi-worker-1"),
        ]
    ), report
    assert any(op["path"] == "/conditions" for op in report["status"])
    assert children(kube, namespace) == []  # read-only
    assert (
        kube.get(MPIJOB, namespace, "pi")["metadata"]["resourceVersion"] == job["metadata"]["resourceVersion"]
    )


def test_plan_and_kubectl_diff_after_convergence_and_drift(
    l1_cluster, namespace, mpijob_crd, kube, start_operator
):
    op = start_operator()
    kube.create(MPIJOB, namespace, pi_job("pi"))
    wait_for(lambda: len(children(kube, namespace)) == 6, "children")
    wait_for(lambda: condition_is(kube.get(MPIJOB, namespace, "pi"), "Created"), "Created")
    op.stop()

    code, report = plan(l1_cluster.kubeconfig, "pi", "-n", namespace)
    assert (code, report["writes"], report["summary"]) == (0, 0, "plan: no changes"), report

    env = {**l1_cluster.env(), "JOB": "pi", "NS": namespace}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # mpijob-render from the venv
    diff = subprocess.run(
        ["bash", "-c", DIFF_ONE_LINER], capture_output=True, text=True, env=env, timeout=120
    )
    assert (diff.returncode, diff.stdout) == (0, ""), diff.stderr + diff.stdout

    # Someone else changes a field the operator owns: both show it, nothing is written.
    kube.patch(
        SERVICE, namespace, "pi", {"spec": {"publishNotReadyAddresses": False}}, content_type=MERGE_PATCH
    )
    code, report = plan(l1_cluster.kubeconfig, f"{namespace}/pi", "-o", "yaml")
    (patch,) = report["plan"]["patches"]
    assert code == 1 and patch["object"] == f"Service {namespace}/pi"
    # false is the field's zero value, so the server leaves it out: the patch adds it back.
    assert {"op": "add", "path": "/spec/publishNotReadyAddresses", "value": True} in patch["jsonPatch"]
    diff = subprocess.run(
        ["bash", "-c", DIFF_ONE_LINER], capture_output=True, text=True, env=env, timeout=120
    )
    assert diff.returncode == 1 and "publishNotReadyAddresses" in diff.stdout, diff.stderr
    assert not kube.get(SERVICE, namespace, "pi")["spec"].get("publishNotReadyAddresses")


def test_plan_reports_a_name_held_by_another_object(l1_cluster, namespace, mpijob_crd, kube):
    kube.create(CONFIGMAP, namespace, {"metadata": {"name": "held-config"}, "data": {"x": "y"}})
    kube.create(MPIJOB, namespace, pi_job("held"))
    code, report = plan(l1_cluster.kubeconfig, f"{namespace}/held")
    assert code == 1
    assert [c["object"] for c in report["plan"]["conflicts"]] == [f"ConfigMap {namespace}/held-config"]


def _plan_proc(kubeconfig: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "reconcile.cli", "plan", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        cwd=REPO,
    )


def test_plan_takes_kubectls_file_namespace_and_output_flags(
    l1_cluster, namespace, mpijob_crd, kube, tmp_path
):
    kube.create(MPIJOB, namespace, pi_job("one"))
    kube.create(MPIJOB, namespace, pi_job("two"))
    manifest = tmp_path / "jobs.yaml"
    manifest.write_text(yaml.safe_dump_all([pi_job("one"), pi_job("two")]))  # no namespace in the file
    proc = _plan_proc(l1_cluster.kubeconfig, "-f", str(manifest), "-n", namespace, "-o", "json")
    assert proc.returncode == 1, proc.stderr
    reports = json.loads(proc.stdout)
    assert [r["mpijob"] for r in reports] == [f"{namespace}/one", f"{namespace}/two"]
    assert all(r["writes"] > 0 for r in reports)
    proc = _plan_proc(l1_cluster.kubeconfig, "-f", "-", "-n", namespace, stdin=yaml.safe_dump(pi_job("one")))
    assert proc.returncode == 1 and yaml.safe_load(proc.stdout)["mpijob"] == f"{namespace}/one"
    elsewhere = {**pi_job("one"), "metadata": {"name": "one", "namespace": "other"}}
    proc = _plan_proc(l1_cluster.kubeconfig, "-f", "-", "-n", namespace, stdin=yaml.safe_dump(elsewhere))
    assert proc.returncode == 2 and "You must pass '--namespace=other'" in proc.stderr


def test_plan_exit_codes_tell_bad_input_from_no_answer(l1_cluster, namespace, mpijob_crd, tmp_path):
    missing = _plan_proc(l1_cluster.kubeconfig, f"{namespace}/nobody")
    assert missing.returncode == 2 and "not found" in missing.stderr
    assert _plan_proc(l1_cluster.kubeconfig).returncode == 2  # neither NAME nor -f
    # a kubeconfig whose server nobody answers: port 1 on loopback refuses at once
    config = yaml.safe_load(Path(l1_cluster.kubeconfig).read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = "https://127.0.0.1:1"
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(yaml.safe_dump(config))
    unreachable = _plan_proc(dead, f"{namespace}/pi")
    assert unreachable.returncode == 3, unreachable.stderr
    assert unreachable.stderr.startswith("error: ") and "Traceback" not in unreachable.stderr
