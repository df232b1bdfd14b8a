"""L1: `mpijob plan` prints what the operator would do for a live MPIJob and writes nothing; the
README's `kubectl diff` one-liner shows no difference once the operator converged, and drift after."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from reconcile.runtime.kube import CONFIGMAP, JOB, MERGE_PATCH, MPIJOB, POD, SECRET, SERVICE
from tests.utils import REPO, has_condition, pi_job, wait_for

pytestmark = pytest.mark.l1

# The README's one-liner ("The render CLI"), with $JOB and $NS.
DIFF_ONE_LINER = (
    "kubectl diff --server-side --field-manager=mpijob-operator --force-conflicts -f <(mpijob-render "
    '<(kubectl get mpijob "$JOB" -n "$NS" -o yaml) --observed '
    '<(kubectl get pods,jobs,services,configmaps,secrets -n "$NS" '
    '-l training.kubeflow.org/job-name="$JOB" -o yaml))'
)


def plan(kubeconfig: Path, *args: str) -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "reconcile.cli", "plan", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, yaml.safe_load(proc.stdout)


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
    wait_for(lambda: has_condition(kube.get(MPIJOB, namespace, "pi"), "Created"), "Created")
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
