"""L1: the operator runs with exactly the args of upstream v0.8.2's Deployment, base and every overlay.

The args come from upstream's own manifests (the released module from the Go module proxy, built with
`kubectl kustomize`), so `-alsologtostderr` and `--lock-namespace=...` are what an upstream install passes.
The environment stands in for the Pod's: KUBECONFIG for the in-cluster config, KUBEFLOW_NAMESPACE to keep
this operator to the test's namespace, and the probe port (upstream's Deployment sets none).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client

import tests.cluster.test_operator as base
from tests.cluster.test_operator import Operator, create_mpijob, has_condition, mpijob, wait_for
from tests.upstream_source import upstream_dir

kube = base.kube
mpijob_crd = base.mpijob_crd

VARIANTS = ("base", "overlays/standalone", "overlays/kubeflow", "overlays/dev")


def upstream_deployment_args(kubectl: Path, variant: str, work: Path) -> list[str]:
    tree = work / "manifests"
    shutil.copytree(upstream_dir() / "manifests", tree)
    tree.chmod(0o755)
    for p in tree.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    if variant == "overlays/dev":  # a template upstream's e2e fills in with the image under test
        template = tree / "overlays/dev/kustomization.yaml.template"
        text = template.read_text().replace("%IMAGE_NAME%", "mpijob-operator").replace("%IMAGE_TAG%", "0.1.0")
        (tree / "overlays/dev/kustomization.yaml").write_text(text)
    out = subprocess.run(
        [str(kubectl), "kustomize", str(tree / variant)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    (deployment,) = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


@pytest.mark.l1
@pytest.mark.parametrize("variant", VARIANTS)
def test_operator_runs_with_upstream_deployment_args(
    variant, l1_cluster, namespace, mpijob_crd, kube, tmp_path
):
    args = upstream_deployment_args(l1_cluster.bin_dir / "kubectl", variant, tmp_path)
    assert args[0] == "-alsologtostderr"
    lock = next((a.split("=", 1)[1] for a in args if a.startswith("--lock-namespace=")), "mpi-operator")
    core = client.CoreV1Api(l1_cluster.api_client())
    try:
        core.create_namespace({"metadata": {"name": lock}})
    except client.ApiException as exc:
        assert exc.status == 409, exc.body
    op = Operator(l1_cluster.kubeconfig, namespace, tmp_path)
    op.argv = [sys.executable, "-m", "reconcile", *args]
    op.env = {
        "KUBECONFIG": str(l1_cluster.kubeconfig),
        "KUBEFLOW_NAMESPACE": namespace,
        "MPIJOB_OPERATOR_MONITORING_PORT": str(op.port),
        "MPIJOB_OPERATOR_BIND_ADDRESS": "127.0.0.1",
    }
    op.start()
    try:
        op.wait_leading()
        lease = client.CoordinationV1Api(core.api_client).read_namespaced_lease("mpi-operator", lock)
        assert lease.spec.holder_identity
        create_mpijob(kube, namespace, mpijob("args"))
        wait_for(
            lambda: has_condition(base.get_job(kube, namespace, "args"), "Created"), "Created", timeout=30
        )
        lines = [line for line in op.log().splitlines() if line.strip()]
        assert lines and all(json.loads(line)["msg"] for line in lines), op.log()
    finally:
        code = op.terminate()
        core.api_client.close()
    assert code == 0, op.log()
