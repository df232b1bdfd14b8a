"""Files generated from the pinned Kubernetes sources are what the generator writes today."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.crdgen import build as crdbuild
from tools.manifests import DEPLOY

pytestmark = pytest.mark.tools

CRD_FILE = DEPLOY / "crd" / "kubeflow.org_mpijobs.yaml"


def test_crd_file_is_what_the_generator_writes_for_the_pinned_kubernetes(kubernetes_src: Path):
    assert crdbuild.render_crd_yaml(kubernetes_src) == CRD_FILE.read_text(encoding="utf-8"), (
        "deploy/crd/kubeflow.org_mpijobs.yaml is stale: run python deploy/gen_crd.py"
    )
