"""Locates the pinned Kubernetes sources and renders the CRD file's text."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

from render.schema import strip_descriptions
from tools.crdgen.crd import crd, to_yaml
from tools.crdgen.k8s_schema import SPEC_RELPATH, Converter, load_schemas

REPO = Path(__file__).resolve().parents[2]
CRD_PATH = REPO / "deploy" / "crd" / "kubeflow.org_mpijobs.yaml"
VERSIONS_ENV = REPO / "deploy" / "local" / "versions.env"
BUILD_SH = REPO / "deploy" / "local" / "build.sh"
K8S_SRC_ENV = "MPIJOB_K8S_SRC"


def k8s_version() -> str:
    """K8S_VERSION pinned in deploy/local/versions.env (the control plane uses the same)."""
    for line in VERSIONS_ENV.read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "K8S_VERSION":
            return value.strip()
    raise ValueError(f"K8S_VERSION not found in {VERSIONS_ENV}")


def k8s_src_dir() -> Path:
    """The k8s.io/kubernetes module directory: $MPIJOB_K8S_SRC, else what build.sh reports.

    build.sh runs `go mod download`, which fetches the module from the Go module proxy when the
    module cache does not have it yet.
    """
    if os.environ.get(K8S_SRC_ENV):
        return Path(os.environ[K8S_SRC_ENV])
    out = subprocess.run(
        [str(BUILD_SH), "--print-k8s-src"], check=True, capture_output=True, text=True, timeout=600
    )
    return Path(out.stdout.strip().splitlines()[-1])


def spec_path(src: Path) -> Path:
    return src / SPEC_RELPATH


def render_crd_yaml(src: Path) -> str:
    """The CRD file's exact text for the Kubernetes sources at `src`."""
    return to_yaml(crd(Converter(load_schemas(spec_path(src)))), k8s_version())


SCHEMA_PATH = REPO / "render" / "mpijob.schema.json"


def render_schema_json(crd_text: str) -> str:
    """render/mpijob.schema.json for a CRD file's text: its one version's schema, without descriptions,
    one key per line (readable diffs)."""
    (version,) = yaml.safe_load(crd_text)["spec"]["versions"]
    schema = strip_descriptions(version["schema"]["openAPIV3Schema"])
    return json.dumps(schema, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
