"""L1: the operator runs with exactly the args of upstream v0.8.2's Deployment, base and every overlay.

The args come from upstream's own manifests (the released module from the Go module proxy, built with
`kubectl kustomize`), so `-alsologtostderr` and `--lock-namespace=...` are what an upstream install passes.
The environment stands in for the Pod's: KUBECONFIG for the in-cluster config, KUBEFLOW_NAMESPACE to keep
this operator to the test's namespace, and the probe port (upstream's Deployment sets none).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from kubernetes import client

from localcluster.jobs import pi_job
from localcluster.operator import OperatorRunner
from localcluster.wait import wait_for
from reconcile.mpijob.kinds import MPIJOB
from tests.upstream_source import upstream_manifests

VARIANTS = ("base", "overlays/standalone", "overlays/kubeflow", "overlays/dev")


class UpstreamArgsRunner(OperatorRunner):
    """The operator with exactly ``args`` and the environment a Pod would give it."""

    def __init__(self, args: list[str], env: dict[str, str], log_path: Path) -> None:
        super().__init__(Path(env["KUBECONFIG"]), log_path, log_format="json")
        self.args, self.extra_env = args, env

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "reconcile", *self.args]

    def process_env(self) -> dict[str, str]:
        return {
            **super().process_env(),
            **self.extra_env,
            "MPIJOB_OPERATOR_MONITORING_PORT": str(self.port),
            "MPIJOB_OPERATOR_BIND_ADDRESS": "127.0.0.1",
        }


def upstream_deployment_args(kubectl: Path, variant: str, work: Path) -> list[str]:
    docs = upstream_manifests(kubectl, variant, work)
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
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
    env = {"KUBECONFIG": str(l1_cluster.kubeconfig), "KUBEFLOW_NAMESPACE": namespace}
    op = UpstreamArgsRunner(args, env, tmp_path / "operator.log")
    try:
        op.start(timeout=40)
        lease = client.CoordinationV1Api(core.api_client).read_namespaced_lease("mpi-operator", lock)
        assert lease.spec.holder_identity
        kube.create(MPIJOB, namespace, pi_job("args"))

        def created() -> bool:
            conds = (kube.get(MPIJOB, namespace, "args").get("status") or {}).get("conditions") or []
            return any(c["type"] == "Created" and c["status"] == "True" for c in conds)

        wait_for(created, "Created", timeout=30)
        lines = [line for line in op.log_tail(40_000).splitlines() if line.strip()]
        lines = [line for line in lines if not line.startswith("=== starting operator")]
        assert lines and all(json.loads(line)["msg"] for line in lines), op.log_tail()
    finally:
        code = op.stop()
        core.api_client.close()
    assert code == 0, op.log_tail()
