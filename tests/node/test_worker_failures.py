"""L4: a user's mistake on the real node. Each worker's sshd exits at start (it has no host key): the
workers are replaced after a back-off, the job ends Failed within runPolicy.backoffLimit quoting the
container's own last words, the failed pods stay for `kubectl logs`, and the launcher stops."""

from __future__ import annotations

import time

import pytest

from localcluster.e2e import conditions, name_of
from localcluster.kubectl import kubectl
from localcluster.realnode import NodeE2E, node_job
from reconcile.runtime.kube import EVENT

pytestmark = pytest.mark.l4

DEFAULT_BACKOFF_LIMIT = 6  # render.failures.DEFAULT_BACKOFF_LIMIT: the job sets none


def worker_pods_created(e2e: NodeE2E, job: str) -> int:
    """Distinct worker pods the scheduler placed, from the pods' events (a deleted pod's events stay)."""
    uids = set()
    for e in e2e.kube.list(EVENT, e2e.ns)["items"]:
        obj = e.get("involvedObject") or {}
        if (
            obj.get("kind") == "Pod"
            and str(obj.get("name", "")).startswith(f"{job}-worker-")
            and e.get("reason") == "Scheduled"
        ):
            uids.add(obj.get("uid"))
    return len(uids)


def test_a_worker_that_exits_at_start_fails_the_job_within_the_bound(node_e2e: NodeE2E) -> None:
    body = node_job("openmpi")
    worker = body["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["command"] = ["/usr/sbin/sshd", "-De", "-o", "HostKey=/nonexistent"]
    worker.pop("args", None)
    name = "pi"
    began = time.monotonic()
    node_e2e.submit(body)
    job = node_e2e.wait_finished(name, 240)
    elapsed = time.monotonic() - began
    creates = worker_pods_created(node_e2e, name)
    print(f"\n[l4] crashing workers: Failed after {elapsed:.1f} s, {creates} worker pods created")
    failed = conditions(job).get("Failed")
    assert failed and failed["status"] == "True", node_e2e.describe(name)
    assert failed["reason"] == "WorkerBackoffLimitExceeded", failed
    # the bound is in failures, not seconds: back-offs of 10, 20, 40 s per index before the 7th failure
    assert creates < 2 + DEFAULT_BACKOFF_LIMIT * 2, creates

    # The failed pods stay (cleanPodPolicy Running deletes only a replacement not yet failed): their log
    # is what the job says.
    node_e2e.wait_for(
        lambda: not [p for p in node_e2e.workers(name) if p["metadata"].get("deletionTimestamp")],
        "pending replacements gone",
        60,
        name,
    )
    kept = node_e2e.workers(name)
    assert kept and all((p.get("status") or {}).get("phase") == "Failed" for p in kept), node_e2e.describe(
        name
    )
    quoted = [p for p in kept if f"pod {name_of(p)}:" in failed["message"]]
    assert quoted, failed
    log = kubectl(node_e2e.cluster, "logs", "-n", node_e2e.ns, name_of(quoted[0])).stdout
    last = [line for line in log.splitlines() if line.strip()][-1].strip()
    assert "no hostkeys available" in last, log
    assert last in failed["message"], (last, failed)

    # The launcher's gate does not sit out its timeout: its Job is suspended and its pods go.
    node_e2e.wait_for(lambda: not node_e2e.launcher_pods(name), "launcher pods gone", 60, name)
    time.sleep(15)  # past the longest back-off that could have been running: nothing is created again
    assert worker_pods_created(node_e2e, name) == creates
