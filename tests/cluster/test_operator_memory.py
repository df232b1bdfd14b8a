"""L1: the operator's memory with 200 MPIJobs of 4 workers each stays under 150 MiB (RSS).

The caches hold plain JSON dicts without managedFields; this is the number that shows whether that holds.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from localcluster.jobs import pi_job
from localcluster.wait import wait_for
from reconcile.mpijob.kinds import MPIJOB
from reconcile.runtime.kube import POD

JOBS = 200
WORKERS = 4
LIMIT_MIB = 150


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.l1
def test_memory_for_200_jobs_with_4_workers(kube, namespace, start_operator):
    op = start_operator(
        "--kube-api-qps",
        "300",
        "--kube-api-burst",
        "300",
        "--controller-queue-rate-limit",
        "300",
        "--threadiness",
        "4",
    )
    began = time.monotonic()
    for i in range(JOBS):
        kube.create(MPIJOB, namespace, pi_job(f"job{i:03d}", workers=WORKERS))

    def all_built() -> bool:
        pods = kube.list(POD, namespace, labelSelector="training.kubeflow.org/job-role=worker", limit=5000)
        return len(pods["items"]) == JOBS * WORKERS

    wait_for(all_built, f"{JOBS * WORKERS} worker pods", timeout=600, interval=2)

    def all_created() -> bool:
        jobs = kube.list(MPIJOB, namespace)["items"]
        return (
            sum(
                any(c["type"] == "Created" for c in (j.get("status") or {}).get("conditions") or [])
                for j in jobs
            )
            == JOBS
        )

    wait_for(all_created, "every job Created", timeout=300, interval=2)
    built = time.monotonic() - began
    # measured once its backlog is done (the status writes after the last create), not after a pause
    wait_for(lambda: op.metric("mpi_operator_workqueue_depth") == 0, "an empty work queue", timeout=300)
    rss = rss_mib(op.pid)
    print(f"\n[memory] {JOBS} jobs x {WORKERS} workers built in {built:.0f}s; operator RSS {rss:.1f} MiB")
    assert rss < LIMIT_MIB, f"operator RSS {rss:.1f} MiB >= {LIMIT_MIB} MiB"
