"""Upstream mpi-operator's released source, for the parity tests: its manifests and its flag definitions.

Fetched as Go modules from the Go module proxy (`go mod download`, cached in the Go module cache, so later
runs need no network); `scripts/setup` fetches them once. Nothing of it is copied into this repository.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

UPSTREAM = "github.com/kubeflow/mpi-operator@v0.8.2"
KLOG = "k8s.io/klog/v2@v2.140.0"  # the klog upstream v0.8.2's go.mod pins
MODULES = (UPSTREAM, KLOG)


@cache
def module_dir(module: str) -> Path:
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("go is not on PATH (the project needs Go >= 1.25; see README)")
    out = subprocess.run(
        [go, "mod", "download", "-json", module], capture_output=True, text=True, timeout=600, cwd="/"
    )
    info = json.loads(out.stdout or "{}")
    if out.returncode != 0 or "Dir" not in info:
        raise RuntimeError(f"go mod download {module} failed: {info.get('Error') or out.stderr.strip()}")
    return Path(info["Dir"])


def upstream_dir() -> Path:
    return module_dir(UPSTREAM)


# `fs.StringVar(&s.X, "name", ...)` in options.go, `commandLine.BoolVar(&..., "name", ...)` in klog.go
_FLAG = re.compile(r'\.(String|Int|Bool|Uint64|Float64|Duration)?Var\(\s*&?[\w.]+,\s*"([^"]+)"')


def flag_definitions(text: str) -> dict[str, str]:
    """Go flag name -> its kind ("String", "Int", "Bool", "Uint64", or "" for a flag.Value)."""
    return {name: kind or "" for kind, name in _FLAG.findall(text)}


def upstream_flags() -> dict[str, str]:
    """Every flag upstream's binary has: its own (cmd/mpi-operator) and klog's InitFlags."""
    own = (upstream_dir() / "cmd/mpi-operator/app/options/options.go").read_text(encoding="utf-8")
    klog = (module_dir(KLOG) / "klog.go").read_text(encoding="utf-8")
    # InitFlags copies every flag klog's init() defines on its private `commandLine` set.
    defined = "\n".join(line for line in klog.splitlines() if "commandLine." in line)
    return {**flag_definitions(own), **flag_definitions(defined)}


def upstream_manifests(kubectl: Path, variant: str, work: Path) -> list[dict]:
    """`kubectl kustomize` of upstream's manifests/<variant> (base, overlays/standalone, overlays/kubeflow,
    overlays/dev: a template that upstream's e2e fills with the image under test; filled here with ours)."""
    import yaml

    tree = work / "upstream-manifests"
    if not tree.exists():
        shutil.copytree(upstream_dir() / "manifests", tree)
        for p in (tree, *tree.rglob("*")):
            p.chmod(0o755 if p.is_dir() else 0o644)  # the module cache is read-only
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
    return [d for d in yaml.safe_load_all(out) if d]


if __name__ == "__main__":
    for m in MODULES:
        print(f"{m}: {module_dir(m)}")
    sys.exit(0)
