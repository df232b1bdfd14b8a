"""Upstream Kubeflow mpi-operator (the released binary deploy/local/build.sh builds) as a process against a
local cluster: the oracle of the differential tier and the other side of benchmarks/side_by_side.py.

Its health server listens on :8080 on every interface whatever its flags say, so two upstream processes
cannot run on one host at once: `UpstreamOperator.start()` holds an exclusive flock on `PORT_LOCK` for the
process's lifetime (a second caller waits for it).
"""

from __future__ import annotations

import copy
import fcntl
import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

import yaml

from localcluster.binaries import BUILD_SCRIPT, BinariesMissing, built_dir
from localcluster.processes import Proc, spawn

MODULE = "github.com/kubeflow/mpi-operator"
USER = "system:serviceaccount:up-system:upstream-mpi-operator"
ROLE = "upstream-mpi-operator"  # its ClusterRole, renamed: ours is "mpi-operator" too
HEALTH_PORT = 8080  # hard-coded upstream
PORT_LOCK = Path("/tmp/mpijob-upstream-operator-8080.lock")
READY_LINE = "Started workers"  # logged once the leader's caches are synced and its workers run


def find_upstream_dir() -> Path:
    """The finished build of upstream's operator (bin/mpi-operator)."""
    return built_dir("--print-upstream-dir", "upstream mpi-operator", ("bin/mpi-operator",), "--upstream")


def version() -> str:
    for line in (BUILD_SCRIPT.parent / "versions.env").read_text().splitlines():
        if line.startswith("UPSTREAM_MPI_OPERATOR_VERSION="):
            return line.split("=", 1)[1].strip()
    raise RuntimeError("deploy/local/versions.env has no UPSTREAM_MPI_OPERATOR_VERSION")


def module_dir() -> Path:
    """Upstream's released module in the Go module cache (the build downloaded it: no network then)."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{version()}"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd="/",
        check=False,
    )
    info = json.loads(out.stdout or "{}")
    if out.returncode != 0 or "Dir" not in info:
        raise BinariesMissing(f"go mod download {MODULE} failed: {info.get('Error') or out.stderr.strip()}")
    return Path(info["Dir"])


def rbac(user: str = USER) -> list[dict[str, Any]]:
    """Upstream's own ClusterRole (manifests/base) as `ROLE`, bound to `user`: what its install grants."""
    docs = yaml.safe_load_all((module_dir() / "manifests/base/cluster-role.yaml").read_text())
    role = copy.deepcopy(next(d for d in docs if d and d["metadata"]["name"] == "mpi-operator"))
    role["metadata"] = {"name": ROLE}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    return [role, binding]


class UpstreamOperator:
    """One upstream mpi-operator process. `namespace` scopes it (``--namespace``, its Lease there too);
    `flags` are further flags of upstream's own (e.g. ``--kube-api-qps=50``)."""

    def __init__(
        self, kubeconfig: Path, log_path: Path, namespace: str = "", *flags: str, binary: Path | None = None
    ) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.log_path = Path(log_path)
        self.namespace = namespace
        self.flags = tuple(flags)
        self.binary = binary
        self.proc: Proc | None = None
        self._lock: IO[bytes] | None = None

    def argv(self) -> list[str]:
        if self.binary is None:
            self.binary = find_upstream_dir() / "bin" / "mpi-operator"
        argv = [str(self.binary), f"--kubeConfig={self.kubeconfig}"]
        if self.namespace:
            argv += [f"--namespace={self.namespace}", f"--lock-namespace={self.namespace}"]
        return [*argv, *self.flags]

    def start(self, timeout: float = 60.0, lock_timeout: float = 900.0) -> UpstreamOperator:
        argv = self.argv()
        self._acquire_port(lock_timeout)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = spawn("upstream-mpi-operator", argv, self.log_path, detached=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.proc.alive():
                self._release_port()
                raise RuntimeError(f"upstream mpi-operator exited during startup:\n{self.log_tail()}")
            if READY_LINE in self._log_text() and self.healthy():
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"upstream mpi-operator not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{HEALTH_PORT}/healthz", timeout=2) as resp:
                return int(resp.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def rss_bytes(self) -> int:
        return self.proc.rss_bytes() if self.proc else 0

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None
        self._release_port()

    def __enter__(self) -> UpstreamOperator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, limit: int = 8000) -> str:
        return self._log_text()[-limit:]

    def _log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def _acquire_port(self, timeout: float) -> None:
        lock = PORT_LOCK.open("ab")
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as err:
                if time.monotonic() > deadline:
                    lock.close()
                    raise RuntimeError(
                        f"{PORT_LOCK} held for {timeout:.0f}s: another upstream operator runs"
                    ) from err
                time.sleep(0.5)
        self._lock = lock

    def _release_port(self) -> None:
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None
