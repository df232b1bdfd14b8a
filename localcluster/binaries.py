"""Where the control-plane binaries are: the cache dir deploy/local/build.sh fills."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO_ROOT / "deploy" / "local" / "build.sh"
STAGES_DIR = REPO_ROOT / "deploy" / "local" / "stages"
REQUIRED = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")


class BinariesMissing(RuntimeError):
    """The control-plane binaries are not built (run deploy/local/build.sh)."""


def find_bin_dir() -> Path:
    """The finished build's bin dir; raises BinariesMissing rather than building (that takes ~30 min)."""
    proc = subprocess.run(
        [str(BUILD_SCRIPT), "--print-bin-dir"], capture_output=True, text=True, check=False, env=os.environ
    )
    if proc.returncode != 0:
        raise BinariesMissing(
            f"control-plane binaries not built ({proc.stderr.strip()}); run {BUILD_SCRIPT} first"
        )
    bin_dir = Path(proc.stdout.strip())
    missing = [name for name in REQUIRED if not os.access(bin_dir / name, os.X_OK)]
    if missing:
        raise BinariesMissing(f"{bin_dir} lacks {', '.join(missing)}; rerun {BUILD_SCRIPT}")
    return bin_dir


NODE_REQUIRED = ("kubelet", "coredns")


def find_node_bin_dir() -> Path:
    """The real node's binaries (kubelet, CoreDNS) from `build.sh --node`; raises BinariesMissing."""
    proc = subprocess.run(
        [str(BUILD_SCRIPT), "--print-node-bin-dir"],
        capture_output=True,
        text=True,
        check=False,
        env=os.environ,
    )
    if proc.returncode != 0:
        raise BinariesMissing(f"node binaries not built ({proc.stderr.strip()}); run {BUILD_SCRIPT} --node")
    bin_dir = Path(proc.stdout.strip())
    missing = [name for name in NODE_REQUIRED if not os.access(bin_dir / name, os.X_OK)]
    if missing:
        raise BinariesMissing(f"{bin_dir} lacks {', '.join(missing)}; rerun {BUILD_SCRIPT} --node")
    return bin_dir
