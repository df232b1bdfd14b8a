"""Where the control-plane binaries are: the cache dir deploy/local/build.sh fills."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO_ROOT / "deploy" / "local" / "build.sh"
STAGES_DIR = REPO_ROOT / "deploy" / "local" / "stages"
REQUIRED = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")


class BinariesMissing(RuntimeError):
    """The control-plane binaries are not built (run deploy/local/build.sh)."""


def built_dir(flag: str, what: str, required: tuple[str, ...], build_args: str = "") -> Path:
    """The dir ``build.sh FLAG`` prints for a finished build, holding every path in ``required``; raises
    BinariesMissing rather than building (a cold build takes many minutes)."""
    proc = subprocess.run(
        [str(BUILD_SCRIPT), flag], capture_output=True, text=True, check=False, env=os.environ
    )
    build = f"{BUILD_SCRIPT}{' ' + build_args if build_args else ''}"
    if proc.returncode != 0:
        raise BinariesMissing(f"{what} not built ({proc.stderr.strip()}); run {build} first")
    out = Path(proc.stdout.strip())
    # Programs must be executable; data files (install.yaml) readable.
    missing = [n for n in required if not os.access(out / n, os.R_OK if Path(n).suffix else os.X_OK)]
    if missing:
        raise BinariesMissing(f"{out} lacks {', '.join(missing)}; rerun {build}")
    return out


def find_bin_dir() -> Path:
    """The control plane's bin dir."""
    return built_dir("--print-bin-dir", "control-plane binaries", REQUIRED)


def find_kwok_bin() -> Path:
    """kwok, from `build.sh --kwok` (its own dir: a real node's cluster runs without it)."""
    return built_dir("--print-kwok-dir", "kwok", ("kwok",), "--kwok") / "kwok"


NODE_REQUIRED = ("kubelet", "coredns")


def find_node_bin_dir() -> Path:
    """The real node's binaries (kubelet, CoreDNS) from `build.sh --node`."""
    return built_dir("--print-node-bin-dir", "node binaries", NODE_REQUIRED, "--node")
