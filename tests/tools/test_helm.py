"""The Helm chart (deploy/helm/mpi-operator) renders exactly what the kustomize manifests install.

`helm template` with the chart's defaults must equal `kubectl kustomize deploy/` object for object (less
the Namespace, which a Helm release's namespace cannot be part of), and its crds/ must be deploy/crd's
file: a change to deploy/ that the chart does not follow fails here. helm is built from the Go module proxy
by deploy/helm/build.sh (scripts/setup runs it; cached per machine); the dashboard ships off by default.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reconcile import flags
from tests.tools.support import Objects, documents
from tests.utils import REPO

pytestmark = pytest.mark.tools

CHART = REPO / "deploy" / "helm" / "mpi-operator"
DASHBOARD = REPO / "deploy" / "grafana" / "mpijob-operator.json"


@pytest.fixture
def helm_template(helm: Path) -> Callable[..., Objects]:
    def template(*args: str, namespace: str = "mpi-operator") -> Objects:
        return documents(
            [
                str(helm),
                "template",
                "mpi-operator",
                str(CHART),
                "--namespace",
                namespace,
                "--include-crds",
                *args,
            ]
        )

    return template


def by_key(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def deployment(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return by_key(objs)[("Deployment", "mpi-operator")]


def test_defaults_render_what_kustomize_installs(helm_template, kustomize):
    chart = by_key(helm_template())
    kust = by_key(kustomize(REPO / "deploy"))
    del kust[("Namespace", "mpi-operator")]
    assert sorted(chart) == sorted(kust)
    for key, want in kust.items():
        assert chart[key] == want, key


def test_kubeflow_namespace_matches_the_kubeflow_overlay(helm_template, kustomize):
    chart = by_key(helm_template(namespace="kubeflow"))
    kust = by_key(kustomize(REPO / "deploy" / "overlays" / "kubeflow"))
    # kustomize's namespace transformer does not know FlowSchema is cluster-scoped; the API server drops
    # the field
    del kust[("FlowSchema", "mpi-operator-leader-election")]["metadata"]["namespace"]
    assert chart == kust


def test_values(helm_template):
    objs = helm_template(
        "--set",
        "image.repository=registry.example/mpijob-operator,image.tag=1.2.3,image.pullPolicy=Always",
        "--set",
        "watchNamespace=team-a,kubeApiQps=50,kubeApiBurst=100,gangScheduling=volcano,clusterDomain=corp.example",
        "--set",
        "monitoring.port=0,replicas=2,lockNamespace=locks,resources.limits.memory=1Gi,extraArgs[0]=-v=4",
    )
    spec = deployment(objs)["spec"]
    (c,) = spec["template"]["spec"]["containers"]
    assert spec["replicas"] == 2
    assert (c["image"], c["imagePullPolicy"]) == ("registry.example/mpijob-operator:1.2.3", "Always")
    assert c["args"] == [
        "--lock-namespace=locks",
        "--monitoring-port=0",
        "--threadiness=4",
        "--log-format=json",
        "--namespace=team-a",
        "--kube-api-qps=50",
        "--kube-api-burst=100",
        "--gang-scheduling=volcano",
        "--cluster-domain=corp.example",
        "-v=4",
    ]
    assert c["ports"][0]["containerPort"] == 8080  # the probes stay on 8080 with metrics off
    assert c["resources"]["limits"]["memory"] == "1Gi"
    a = flags.parse(c["args"])  # the operator accepts them
    assert (a.kube_api_qps, a.gang_scheduling, a.log_level) == (50, "volcano", "debug")
    role = by_key(objs)[("Role", "mpi-operator-leader-election")]
    assert role["metadata"]["namespace"] == "locks"


@pytest.mark.parametrize("port", [9090])
def test_monitoring_port(port, helm_template):
    (c,) = deployment(helm_template("--set", f"monitoring.port={port}"))["spec"]["template"]["spec"][
        "containers"
    ]
    assert f"--monitoring-port={port}" in c["args"] and c["ports"][0]["containerPort"] == port


def test_the_dashboard_ships_off_by_default(helm_template):
    assert not [o for o in helm_template() if o["kind"] == "ConfigMap"]
    objs = helm_template("--set", "grafanaDashboard.enabled=true", namespace="monitoring")
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "monitoring"
    assert json.loads(cm["data"]["mpijob-operator.json"]) == json.loads(DASHBOARD.read_text())
