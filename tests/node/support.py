"""L4 helpers (the fixtures are in conftest.py; the jobs and `NodeE2E` in `localcluster.realnode`): the
real nodes' names and the processes running on them."""

from __future__ import annotations

import contextlib
from pathlib import Path

from localcluster import LocalCluster
from localcluster.sandbox import seal

REAL_NODES = 3
NODES = [f"real-node-{i}" for i in range(1, REAL_NODES + 1)]


def processes_named(cluster: LocalCluster, comm: str, node: str | None = None) -> list[int]:
    """Processes called `comm` on the real nodes (or on one), found in the cgroups the sandbox made."""
    pids = []
    for pid in seal.sandbox_pids(cluster.work_dir, node):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == comm:
                pids.append(pid)
    return pids


def sshd_processes(cluster: LocalCluster) -> list[int]:
    """sshd processes running on the real nodes."""
    return processes_named(cluster, "sshd")
