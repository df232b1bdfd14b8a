"""The kustomize overlays under deploy/overlays, built by the Go-built kubectl."""

from __future__ import annotations

import pytest

from tools.manifests import DEPLOY

pytestmark = pytest.mark.tools

NAMESPACE = "mpi-operator"


def test_standalone_overlay_is_deploy(kustomize):
    assert kustomize(DEPLOY / "overlays" / "standalone") == kustomize(DEPLOY)


def test_kubeflow_overlay_moves_everything_to_kubeflow_and_leaves_its_namespace_alone(kustomize):
    objs = kustomize(DEPLOY / "overlays" / "kubeflow")
    full = kustomize(DEPLOY)
    assert {(o["kind"], o["metadata"]["name"]) for o in full} - {
        (o["kind"], o["metadata"]["name"]) for o in objs
    } == {("Namespace", NAMESPACE)}
    for o in objs:
        if "namespace" in o["metadata"]:
            assert o["metadata"]["namespace"] == "kubeflow", o["metadata"]["name"]
        for subject in o.get("subjects", []):
            assert subject["namespace"] == "kubeflow"
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--lock-namespace=kubeflow" in args and "--lock-namespace=mpi-operator" not in args
