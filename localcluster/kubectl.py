"""The one way to run kubectl against a local cluster, for the tests and the benchmarks: the cluster's
Go-built binary, as admin unless told otherwise; a non-zero exit raises ``KubectlFailed``."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any


class KubectlFailed(AssertionError):
    def __init__(self, args: tuple[str, ...], proc: subprocess.CompletedProcess[str]) -> None:
        super().__init__(f"kubectl {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        self.proc = proc


def kubectl(
    cluster: Any, *args: str, stdin: str | None = None, kubeconfig: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The cluster's Go-built kubectl, as admin unless `kubeconfig` is given. A non-zero exit raises
    KubectlFailed; read `.stdout` (and `.stderr` for warnings) of what it returns."""
    env = cluster.env()
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    argv = [str(cluster.bin_dir / "kubectl"), *args]
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env, timeout=180)
    if proc.returncode != 0:
        raise KubectlFailed(args, proc)
    return proc
